// ProcessGroupTransport: the Transport over a c10d process group type — ProcessGroupGloo
// (gloo_transport.cc) or, in a CUDA build, ProcessGroupNCCL (nccl_transport.cc) — which all
// share send / recv / allreduce / barrier and Work::wait. Sub-groups for all-reduces over rank
// subsets are made by a factory under a store prefix naming the set. Point-to-point messages
// either match by tag on the world group, or, with MessageMatching::kInOrder, travel on one
// two-rank group per direction of each link with tag 0: NCCL has no tags, and one group per
// direction gives each direction its own communicator and stream, so a link's sends one way never
// queue behind receives the other way. Tensors not on the CPU are staged through host memory
// when `stage_through_host` (Gloo's point-to-point reads host memory only). c10d reports
// failures by exceptions; every call into it is wrapped so that only Status values leave.
// Private to the executor; one object per rank, used by one thread.
#pragma once

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <tuple>
#include <utility>
#include <vector>

#include "error_text.h"
#include "motley/core/status.h"
#include "motley/exec/gloo_transport.h"
#include "motley/exec/transport.h"

namespace motley::internal {

// The TCPStore of `options`' world: served by rank 0 at master_addr:master_port, waiting at
// most rendezvous_timeout for it. Throws c10d's exceptions.
c10::intrusive_ptr<c10d::Store> connect_store(const GlooOptions& options);

inline std::chrono::milliseconds to_ms(Seconds s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s.value() * 1000.0 + 0.5));
}

inline std::string ranks_key(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ","));
}

// One posted c10d operation. On success, `finish` (if any) runs once: it copies a staged or
// flattened result into the caller's tensors.
class WorkRequest final : public TransportRequest {
 public:
  WorkRequest(c10::intrusive_ptr<c10d::Work> work, Seconds timeout, std::string description,
              std::function<void()> finish = nullptr)
      : work_(std::move(work)),
        timeout_(timeout),
        description_(std::move(description)),
        finish_(std::move(finish)) {}

  Status wait() override {
    if (finished_) return status_;
    finished_ = true;
    if (!work_) return status_;  // nothing was posted (a one-member set)
    try {
      work_->wait(to_ms(timeout_));
      if (finish_) finish_();
    } catch (const std::exception& e) {
      try {
        work_->abort();
      } catch (const std::exception&) {
        // Already failed; the first error is the one to report.
      }
      status_ = io_error(fmt::format("{} failed or timed out (limit {}): {}", description_,
                                     format_seconds(timeout_), first_line(e.what())));
    }
    return status_;
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  Seconds timeout_;
  std::string description_;
  std::function<void()> finish_;
  bool finished_ = false;
  Status status_;
};

template <class Group>
class ProcessGroupTransport final : public Transport {
 public:
  // Makes the group of `size` ranks in which this one is `position`, meeting through `store`.
  using GroupFactory = std::function<c10::intrusive_ptr<Group>(
      const c10::intrusive_ptr<c10d::Store>& store, int position, int size)>;

  struct Config {
    int rank = 0;
    int world_size = 1;
    TransportOptions transport;
    bool stage_through_host = false;
    c10::Device device = c10::kCPU;  // where this rank's tensors live
    // Bounds the first exchanges of prepare_peers and prepare_collectives, which wait for peers
    // still building their stages (GlooOptions::rendezvous_timeout).
    Seconds setup_timeout = Seconds(300);
  };

  ProcessGroupTransport(Config config, c10::intrusive_ptr<c10d::Store> store,
                        c10::intrusive_ptr<Group> world, GroupFactory factory)
      : config_(std::move(config)),
        store_(std::move(store)),
        world_(std::move(world)),
        factory_(std::move(factory)) {}

  int rank() const override { return config_.rank; }
  int world_size() const override { return config_.world_size; }

  Result<std::unique_ptr<TransportRequest>> send(const at::Tensor& tensor, int peer, MessageTag tag,
                                                 std::string what) override {
    MOTLEY_RETURN_IF_ERROR(check_peer(peer, tag));
    const std::string description =
        fmt::format("rank {}: sending {} to rank {} (tag {})", rank(), what, peer, tag);
    try {
      MOTLEY_ASSIGN_OR_RETURN(Link link, link_to(peer, /*sending=*/true));
      // (The work holds the tensor it sends, a staged copy included, until it completes.)
      std::vector<at::Tensor> tensors = {staged(tensor)};
      auto work = link.group->send(tensors, link.peer, link.tag(tag));
      return std::unique_ptr<TransportRequest>(
          new WorkRequest(std::move(work), config_.transport.timeout, description));
    } catch (const std::exception& e) {
      return io_error(fmt::format("{}: {}", description, first_line(e.what())));
    }
  }

  Result<std::unique_ptr<TransportRequest>> recv(const at::Tensor& buffer, int peer, MessageTag tag,
                                                 std::string what) override {
    MOTLEY_RETURN_IF_ERROR(check_peer(peer, tag));
    const std::string description =
        fmt::format("rank {}: receiving {} from rank {} (tag {})", rank(), what, peer, tag);
    try {
      MOTLEY_ASSIGN_OR_RETURN(Link link, link_to(peer, /*sending=*/false));
      const bool stage = needs_staging(buffer);
      std::vector<at::Tensor> tensors = {stage ? at::empty_like(buffer, at::kCPU) : buffer};
      auto work = link.group->recv(tensors, link.peer, link.tag(tag));
      std::function<void()> finish;
      if (stage) finish = [buffer, host = tensors[0]] { buffer.copy_(host); };
      return std::unique_ptr<TransportRequest>(new WorkRequest(
          std::move(work), config_.transport.timeout, description, std::move(finish)));
    } catch (const std::exception& e) {
      return io_error(fmt::format("{}: {}", description, first_line(e.what())));
    }
  }

  // The tensors travel as one flat buffer (Gloo's allreduce takes tensors of one shape); once
  // the sum arrived, wait() copies it back into them.
  Result<std::unique_ptr<TransportRequest>> all_reduce_sum_async(
      const std::vector<at::Tensor>& tensors, const std::vector<int>& ranks) override {
    MOTLEY_RETURN_IF_ERROR(check_rank_set(rank(), ranks));
    const std::string description =
        fmt::format("rank {}: all-reduce over ranks {{{}}}", rank(), ranks_key(ranks));
    if (ranks.size() == 1 || tensors.empty()) {
      return std::unique_ptr<TransportRequest>(new WorkRequest(
          c10::intrusive_ptr<c10d::Work>(), config_.transport.timeout, description));
    }
    try {
      MOTLEY_ASSIGN_OR_RETURN(Group * group, subgroup(ranks));
      std::vector<at::Tensor> flat_views;
      for (const at::Tensor& t : tensors) flat_views.push_back(t.reshape({-1}));
      std::vector<at::Tensor> buffer = {staged(at::cat(flat_views))};
      auto work = group->allreduce(buffer);
      auto finish = [tensors, flat = buffer[0]] {
        int64_t offset = 0;
        for (const at::Tensor& t : tensors) {
          const int64_t n = t.numel();
          t.copy_(flat.narrow(0, offset, n).view(t.sizes()));
          offset += n;
        }
      };
      return std::unique_ptr<TransportRequest>(
          new WorkRequest(std::move(work), config_.transport.timeout, description, finish));
    } catch (const std::exception& e) {
      return io_error(fmt::format("{} failed: {}", description, first_line(e.what())));
    }
  }

  // One c10d all-to-all of the blocks laid end to end, split by their row counts.
  Status all_to_all(const std::vector<at::Tensor>& send, const std::vector<at::Tensor>& recv,
                    const std::vector<int>& ranks) override {
    MOTLEY_RETURN_IF_ERROR(check_all_to_all(rank(), send, recv, ranks));
    const std::string description =
        fmt::format("rank {}: all-to-all over ranks {{{}}}", rank(), ranks_key(ranks));
    try {
      if (ranks.size() == 1) {
        recv[0].copy_(send[0]);
        return Status::ok();
      }
      MOTLEY_ASSIGN_OR_RETURN(Group * group, subgroup(ranks));
      std::vector<int64_t> send_rows, recv_rows;
      std::vector<at::Tensor> flat;
      for (const at::Tensor& t : send) {
        send_rows.push_back(t.size(0));
        flat.push_back(t.contiguous());
      }
      int64_t received = 0;
      for (const at::Tensor& t : recv) {
        recv_rows.push_back(t.size(0));
        received += t.size(0);
      }
      at::Tensor input = staged(at::cat(flat, 0));
      std::vector<int64_t> shape = recv[0].sizes().vec();
      shape[0] = received;
      at::Tensor output = at::empty(shape, input.options());
      auto work = group->alltoall_base(output, input, recv_rows, send_rows);
      auto finish = [recv, output] {
        int64_t offset = 0;
        for (const at::Tensor& t : recv) {
          t.copy_(output.narrow(0, offset, t.size(0)));
          offset += t.size(0);
        }
      };
      return WorkRequest(std::move(work), config_.transport.timeout, description, finish).wait();
    } catch (const std::exception& e) {
      return io_error(fmt::format("{} failed: {}", description, first_line(e.what())));
    }
  }

  Status prepare_collectives(const std::vector<std::vector<int>>& sets) override {
    const SetupTimeout setup(config_);
    for (const std::vector<int>& ranks : sets) {
      if (ranks.size() < 2 || std::find(ranks.begin(), ranks.end(), rank()) == ranks.end()) {
        continue;
      }
      try {
        MOTLEY_RETURN_IF_ERROR(subgroup(ranks).status());
        // A first sum makes a backend that connects on first use (NCCL's communicators)
        // connect here, in the agreed order, rather than when sums are posted in any order.
        MOTLEY_RETURN_IF_ERROR(all_reduce_sum({first_message()}, ranks));
      } catch (const std::exception& e) {
        return io_error(fmt::format("rank {}: setting up collectives over ranks {{{}}}: {}", rank(),
                                    ranks_key(ranks), first_line(e.what())));
      }
    }
    return Status::ok();
  }

  // Matching in order, makes both directions' groups of every link in one global order (by the
  // pair, then the sender) and passes a first message on each, so that a backend whose group
  // creation (Gloo) or first message (NCCL's communicator set-up) waits for the peer cannot
  // deadlock: the least pair any rank waits on has both its ranks waiting on it. (Set up later,
  // when a step posts its receives, two ranks could each wait in a receive's set-up for the
  // other's first send.)
  Status prepare_peers(const std::vector<int>& peers) override {
    if (config_.transport.matching != MessageMatching::kInOrder) return Status::ok();
    std::vector<std::pair<int, int>> directions;  // (sender, receiver)
    for (int peer : peers) {
      MOTLEY_RETURN_IF_ERROR(check_peer(peer, 0));
      directions.emplace_back(rank(), peer);
      directions.emplace_back(peer, rank());
    }
    auto order = [](const std::pair<int, int>& d) {
      return std::make_tuple(std::min(d.first, d.second), std::max(d.first, d.second), d.first);
    };
    std::sort(directions.begin(), directions.end(),
              [&](const auto& a, const auto& b) { return order(a) < order(b); });
    directions.erase(std::unique(directions.begin(), directions.end()), directions.end());
    const SetupTimeout setup(config_);
    for (const auto& [from, to] : directions) {
      try {
        const bool sending = from == rank();
        const int peer = sending ? to : from;
        MOTLEY_RETURN_IF_ERROR(link_to(peer, sending).status());
        const std::string what = "the link's first message";
        MOTLEY_ASSIGN_OR_RETURN(auto request, sending ? send(first_message(), peer, 0, what)
                                                      : recv(first_message(), peer, 0, what));
        MOTLEY_RETURN_IF_ERROR(request->wait());
      } catch (const std::exception& e) {
        return io_error(fmt::format("rank {}: setting up the link from rank {} to rank {}: {}",
                                    rank(), from, to, first_line(e.what())));
      }
    }
    return Status::ok();
  }

  Status barrier() override {
    try {
      world_->barrier()->wait(to_ms(config_.transport.timeout));
      return Status::ok();
    } catch (const std::exception& e) {
      return io_error(fmt::format("rank {}: barrier failed or timed out (limit {}): {}", rank(),
                                  format_seconds(config_.transport.timeout), first_line(e.what())));
    }
  }

 private:
  // While alive, waits are bounded by the set-up timeout instead of the transport's.
  class SetupTimeout {
   public:
    explicit SetupTimeout(Config& config) : config_(config), saved_(config.transport.timeout) {
      config_.transport.timeout = config_.setup_timeout;
    }
    ~SetupTimeout() { config_.transport.timeout = saved_; }
    SetupTimeout(const SetupTimeout&) = delete;
    SetupTimeout& operator=(const SetupTimeout&) = delete;

   private:
    Config& config_;
    Seconds saved_;
  };

  // Where one message goes: the group, the peer's rank in it, and whether tags are kept.
  struct Link {
    Group* group = nullptr;
    int peer = 0;
    bool tagged = true;
    int tag(MessageTag t) const { return tagged ? static_cast<int>(t) : 0; }
  };

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

  // One zero on this rank's device: what a link's or a set's first exchange carries.
  at::Tensor first_message() const {
    return at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(config_.device));
  }

  bool needs_staging(const at::Tensor& t) const {
    return config_.stage_through_host && !t.device().is_cpu();
  }
  at::Tensor staged(const at::Tensor& t) const {
    return needs_staging(t) ? t.to(at::kCPU).contiguous() : t;
  }

  // The world group by tag, or this direction's two-rank group (created on first use: its
  // sender at position 0).
  Result<Link> link_to(int peer, bool sending) {
    if (config_.transport.matching == MessageMatching::kByTag)
      return Link{world_.get(), peer, true};
    const int from = sending ? rank() : peer;
    const int to = sending ? peer : rank();
    auto it = directions_.find({from, to});
    if (it == directions_.end()) {
      auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
          fmt::format("motley/link/{}>{}", from, to), store_);
      it = directions_.emplace(std::make_pair(from, to), factory_(prefixed, sending ? 0 : 1, 2))
               .first;
    }
    return Link{it->second.get(), sending ? 1 : 0, false};
  }

  // The process group of `ranks`, created (collectively by its members) on first use under a
  // store prefix that names the set.
  Result<Group*> subgroup(const std::vector<int>& ranks) {
    if (static_cast<int>(ranks.size()) == world_size()) return world_.get();
    auto it = subgroups_.find(ranks);
    if (it == subgroups_.end()) {
      const int position =
          static_cast<int>(std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin());
      auto prefixed =
          c10::make_intrusive<c10d::PrefixStore>("motley/group/" + ranks_key(ranks), store_);
      it = subgroups_.emplace(ranks, factory_(prefixed, position, static_cast<int>(ranks.size())))
               .first;
    }
    return it->second.get();
  }

  Config config_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<Group> world_;
  GroupFactory factory_;
  std::map<std::vector<int>, c10::intrusive_ptr<Group>> subgroups_;
  std::map<std::pair<int, int>, c10::intrusive_ptr<Group>> directions_;  // (sender, receiver)
};

// The transport of `options`' rank with `transport`'s timeout and matching, its world group made
// by `factory` under the store prefix "motley/world". Throws c10d's exceptions.
template <class Group>
std::unique_ptr<Transport> make_process_group_transport(
    const GlooOptions& options, const TransportOptions& transport, bool stage_through_host,
    c10::Device device, c10::intrusive_ptr<c10d::Store> store,
    typename ProcessGroupTransport<Group>::GroupFactory factory) {
  auto world = factory(c10::make_intrusive<c10d::PrefixStore>("motley/world", store), options.rank,
                       options.world_size);
  typename ProcessGroupTransport<Group>::Config config;
  config.rank = options.rank;
  config.world_size = options.world_size;
  config.transport = transport;
  config.stage_through_host = stage_through_host;
  config.device = device;
  config.setup_timeout = options.rendezvous_timeout;
  return std::make_unique<ProcessGroupTransport<Group>>(config, std::move(store), std::move(world),
                                                        std::move(factory));
}

}  // namespace motley::internal
