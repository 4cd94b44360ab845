// GlooTransport over c10d. c10d reports failures by exceptions; every call into it is wrapped
// so that only Status values leave this file.
#include "motley/exec/gloo_transport.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "error_text.h"

namespace motley {
namespace {

std::chrono::milliseconds to_ms(Seconds s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s.value() * 1000.0 + 0.5));
}

std::string ranks_key(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ","));
}

class GlooRequest final : public TransportRequest {
 public:
  GlooRequest(c10::intrusive_ptr<c10d::Work> work, Seconds timeout, std::string description)
      : work_(std::move(work)), timeout_(timeout), description_(std::move(description)) {}

  Status wait() override {
    if (finished_) return status_;
    finished_ = true;
    try {
      work_->wait(to_ms(timeout_));
    } catch (const std::exception& e) {
      try {
        work_->abort();
      } catch (const std::exception&) {
        // Already failed; the first error is the one to report.
      }
      status_ =
          io_error(fmt::format("{} failed or timed out (limit {}): {}", description_,
                               internal::format_seconds(timeout_), internal::first_line(e.what())));
    }
    return status_;
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  Seconds timeout_;
  std::string description_;
  bool finished_ = false;
  Status status_;
};

// A posted all-reduce of several tensors as one flat buffer: once the sum arrived, wait() copies
// it back into the tensors.
class FlatAllReduce final : public TransportRequest {
 public:
  explicit FlatAllReduce(std::vector<at::Tensor> tensors) : tensors_(std::move(tensors)) {}
  FlatAllReduce(std::vector<at::Tensor> tensors, at::Tensor buffer,
                std::unique_ptr<GlooRequest> request)
      : tensors_(std::move(tensors)), buffer_(std::move(buffer)), request_(std::move(request)) {}

  Status wait() override {
    if (!request_ || done_) return status_;
    done_ = true;
    status_ = request_->wait();
    if (!status_.is_ok()) return status_;
    int64_t offset = 0;
    for (const at::Tensor& t : tensors_) {
      const int64_t n = t.numel();
      t.copy_(buffer_.narrow(0, offset, n).view(t.sizes()));
      offset += n;
    }
    return status_;
  }

 private:
  std::vector<at::Tensor> tensors_;
  at::Tensor buffer_;
  std::unique_ptr<GlooRequest> request_;
  bool done_ = false;
  Status status_;
};

class GlooTransport final : public Transport {
 public:
  GlooTransport(const GlooOptions& options, c10::intrusive_ptr<c10d::Store> store,
                c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> pg_options,
                c10::intrusive_ptr<c10d::ProcessGroupGloo> world)
      : options_(options),
        store_(std::move(store)),
        pg_options_(std::move(pg_options)),
        world_(std::move(world)) {}

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }

  Result<std::unique_ptr<TransportRequest>> send(const at::Tensor& tensor, int peer, MessageTag tag,
                                                 std::string what) override {
    MOTLEY_RETURN_IF_ERROR(check_peer(peer, tag));
    const std::string description =
        fmt::format("rank {}: sending {} to rank {} (tag {})", rank(), what, peer, tag);
    try {
      std::vector<at::Tensor> tensors = {tensor};
      auto work = world_->send(tensors, peer, static_cast<int>(tag));
      return std::unique_ptr<TransportRequest>(
          new GlooRequest(std::move(work), options_.transport.timeout, description));
    } catch (const std::exception& e) {
      return io_error(fmt::format("{}: {}", description, internal::first_line(e.what())));
    }
  }

  Result<std::unique_ptr<TransportRequest>> recv(const at::Tensor& buffer, int peer, MessageTag tag,
                                                 std::string what) override {
    MOTLEY_RETURN_IF_ERROR(check_peer(peer, tag));
    const std::string description =
        fmt::format("rank {}: receiving {} from rank {} (tag {})", rank(), what, peer, tag);
    try {
      std::vector<at::Tensor> tensors = {buffer};
      auto work = world_->recv(tensors, peer, static_cast<int>(tag));
      return std::unique_ptr<TransportRequest>(
          new GlooRequest(std::move(work), options_.transport.timeout, description));
    } catch (const std::exception& e) {
      return io_error(fmt::format("{}: {}", description, internal::first_line(e.what())));
    }
  }

  // Gloo's allreduce takes one tensor per local device, all of one shape; tensors of several
  // shapes travel as one flat buffer.
  Status all_reduce_sum(const std::vector<at::Tensor>& tensors,
                        const std::vector<int>& ranks) override {
    MOTLEY_ASSIGN_OR_RETURN(auto request, all_reduce_sum_async(tensors, ranks));
    return request->wait();
  }

  Result<std::unique_ptr<TransportRequest>> all_reduce_sum_async(
      const std::vector<at::Tensor>& tensors, const std::vector<int>& ranks) override {
    if (std::find(ranks.begin(), ranks.end(), rank()) == ranks.end() ||
        !std::is_sorted(ranks.begin(), ranks.end()) ||
        std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
      return invalid_argument(
          fmt::format("rank {}: all-reduce over ranks {{{}}}: expected sorted distinct ranks "
                      "including this one",
                      rank(), ranks_key(ranks)));
    }
    if (ranks.size() == 1 || tensors.empty()) {
      return std::unique_ptr<TransportRequest>(new FlatAllReduce(tensors));
    }
    const std::string description =
        fmt::format("rank {}: all-reduce over ranks {{{}}}", rank(), ranks_key(ranks));
    try {
      MOTLEY_ASSIGN_OR_RETURN(c10d::ProcessGroupGloo * group, subgroup(ranks));
      std::vector<at::Tensor> flat_views;
      for (const at::Tensor& t : tensors) flat_views.push_back(t.reshape({-1}));
      std::vector<at::Tensor> buffer = {at::cat(flat_views)};
      auto work = group->allreduce(buffer);
      return std::unique_ptr<TransportRequest>(new FlatAllReduce(
          tensors, buffer[0],
          std::make_unique<GlooRequest>(std::move(work), options_.transport.timeout, description)));
    } catch (const std::exception& e) {
      return io_error(fmt::format("{} failed: {}", description, internal::first_line(e.what())));
    }
  }

  Status prepare_collectives(const std::vector<std::vector<int>>& sets) override {
    for (const std::vector<int>& ranks : sets) {
      if (ranks.size() < 2 || std::find(ranks.begin(), ranks.end(), rank()) == ranks.end()) {
        continue;
      }
      try {
        MOTLEY_RETURN_IF_ERROR(subgroup(ranks).status());
      } catch (const std::exception& e) {
        return io_error(fmt::format("rank {}: setting up collectives over ranks {{{}}}: {}", rank(),
                                    ranks_key(ranks), internal::first_line(e.what())));
      }
    }
    return Status::ok();
  }

  Status barrier() override {
    try {
      world_->barrier()->wait(to_ms(options_.transport.timeout));
      return Status::ok();
    } catch (const std::exception& e) {
      return io_error(fmt::format("rank {}: barrier failed or timed out (limit {}): {}", rank(),
                                  internal::format_seconds(options_.transport.timeout),
                                  internal::first_line(e.what())));
    }
  }

 private:
  Status check_peer(int peer, MessageTag tag) const {
    if (peer < 0 || peer >= world_size() || peer == rank()) {
      return invalid_argument(
          fmt::format("rank {}: no peer rank {} in a world of {}", rank(), peer, world_size()));
    }
    if (tag < 0 || tag >= (int64_t{1} << 31)) {
      return invalid_argument(fmt::format("message tag {} is outside [0, 2^31)", tag));
    }
    return Status::ok();
  }

  // The process group of `ranks`, created (collectively by its members) on first use under a
  // store prefix that names the set.
  Result<c10d::ProcessGroupGloo*> subgroup(const std::vector<int>& ranks) {
    if (static_cast<int>(ranks.size()) == world_size()) return world_.get();
    auto it = subgroups_.find(ranks);
    if (it == subgroups_.end()) {
      const int position =
          static_cast<int>(std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin());
      auto prefixed =
          c10::make_intrusive<c10d::PrefixStore>("motley/group/" + ranks_key(ranks), store_);
      auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(
          prefixed, position, static_cast<int>(ranks.size()), pg_options_);
      it = subgroups_.emplace(ranks, std::move(group)).first;
    }
    return it->second.get();
  }

  GlooOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> pg_options_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> world_;
  std::map<std::vector<int>, c10::intrusive_ptr<c10d::ProcessGroupGloo>> subgroups_;
};

Result<int> int_variable(const char* name, const char* value, int min, int max) {
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || parsed < min || parsed > max) {
    return invalid_argument(
        fmt::format("environment variable {}: expected an integer in [{}, {}], got '{}'", name, min,
                    max, value));
  }
  return static_cast<int>(parsed);
}

}  // namespace

Result<GlooOptions> gloo_options_from_env(const std::function<const char*(const char*)>& getenv) {
  auto get = [&](const char* name) -> const char* {
    return getenv ? getenv(name) : std::getenv(name);
  };
  GlooOptions options;
  const char* world = get("WORLD_SIZE");
  const char* rank = get("RANK");
  if (world == nullptr || rank == nullptr) {
    return invalid_argument(
        "environment variables RANK and WORLD_SIZE must be set (as torchrun, mpirun wrappers "
        "or Slurm scripts set them)");
  }
  MOTLEY_ASSIGN_OR_RETURN(options.world_size, int_variable("WORLD_SIZE", world, 1, 1 << 20));
  MOTLEY_ASSIGN_OR_RETURN(options.rank, int_variable("RANK", rank, 0, options.world_size - 1));
  if (const char* addr = get("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    options.master_addr = addr;
  }
  if (const char* port = get("MASTER_PORT"); port != nullptr) {
    MOTLEY_ASSIGN_OR_RETURN(options.master_port, int_variable("MASTER_PORT", port, 1, 65535));
  }
  if (const char* ifname = get("GLOO_SOCKET_IFNAME"); ifname != nullptr) options.interface = ifname;
  return options;
}

Result<std::unique_ptr<Transport>> connect_gloo(const GlooOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument(
        fmt::format("gloo: rank {} is not in a world of {}", options.rank, options.world_size));
  }
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(options.master_port);
    store_options.isServer = options.rank == 0;
    store_options.numWorkers = options.world_size;
    store_options.waitWorkers = false;  // the process group's own rendezvous waits
    store_options.timeout = to_ms(options.rendezvous_timeout);
    auto store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);

    // The process group's own timeout bounds its rendezvous; each wait passes transport.timeout.
    auto pg_options = c10d::ProcessGroupGloo::Options::create(to_ms(options.rendezvous_timeout));
    if (!options.interface.empty()) {
      pg_options->devices = {c10d::ProcessGroupGloo::createDeviceForInterface(options.interface)};
    } else if (!options.hostname.empty()) {
      pg_options->devices = {c10d::ProcessGroupGloo::createDeviceForHostname(options.hostname)};
    } else {
      pg_options->devices = {c10d::ProcessGroupGloo::createDefaultDevice()};
    }
    pg_options->threads = 2;
    auto world = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("motley/world", store), options.rank,
        options.world_size, pg_options);
    return std::unique_ptr<Transport>(new GlooTransport(options, store, pg_options, world));
  } catch (const std::exception& e) {
    return io_error(fmt::format("gloo: rank {} could not join the world of {} at {}:{}: {}",
                                options.rank, options.world_size, options.master_addr,
                                options.master_port, internal::first_line(e.what())));
  }
}

}  // namespace motley
