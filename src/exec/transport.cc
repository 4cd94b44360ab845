// The in-process transport: one mailbox shared by all ranks of a world, protected by one mutex.
// Sends and receives meet in a slot per (source, destination, tag) — per (source, destination)
// when messages match in order — and the side that arrives second copies the data and completes
// both. Collectives meet in a slot per (rank set, call
// index).
#include "motley/exec/transport.h"

#include <ATen/core/Tensor.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "error_text.h"

namespace motley {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration to_duration(Seconds s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.value()));
}

std::string describe(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << t.scalar_type();
  return os.str();
}

std::string format_ranks(const std::vector<int>& ranks) {
  return fmt::format("{{{}}}", fmt::join(ranks, ", "));
}

}  // namespace

// The in-process network's shared state is made of these; not in the anonymous namespace,
// because InProcessNetwork::State (declared in the public header) holds them.
namespace internal {

// One posted send or receive, shared between its request and the mailbox slot.
struct PendingOp {
  at::Tensor tensor;
  MessageTag tag = 0;
  bool done = false;
  Status status;
};

struct MessageSlot {
  std::deque<std::shared_ptr<PendingOp>> sends;
  std::deque<std::shared_ptr<PendingOp>> recvs;
};

struct CollectiveCall {
  std::vector<std::vector<at::Tensor>> inputs;  // per member position
  // An all-to-all's receive buffers per member position (empty for an all-reduce).
  std::vector<std::vector<at::Tensor>> outputs;
  bool exchange = false;
  std::vector<bool> arrived;
  int num_arrived = 0;
  int num_departed = 0;
  bool done = false;
  Status status;
};

}  // namespace internal

using internal::CollectiveCall;
using internal::MessageSlot;
using internal::PendingOp;

struct InProcessNetwork::State {
  State(int n, TransportOptions o) : world_size(n), options(o), calls_made(n) {}

  const int world_size;
  const TransportOptions options;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::tuple<int, int, MessageTag>, MessageSlot> slots;  // (src, dst, tag)
  std::map<std::pair<std::vector<int>, int64_t>, CollectiveCall> collectives;
  std::vector<std::map<std::vector<int>, int64_t>> calls_made;  // per rank: per set, calls so far
  Status shutdown;  // not ok once shut down: every wait then returns at once
};

namespace {

using State = InProcessNetwork::State;

// Both ends complete together; a shape or type mismatch, or (matching in order) another tag,
// fails both with the same message.
void match(const std::shared_ptr<PendingOp>& send, const std::shared_ptr<PendingOp>& recv, int src,
           int dst) {
  const MessageTag tag = send->tag;
  if (send->tag != recv->tag) {
    Status error = io_error(fmt::format(
        "rank {}'s next message to rank {} has tag {} but rank {}'s next receive from it expects "
        "tag {}: the two ends post these messages in different orders, so a transport that "
        "matches in order (NCCL) would deliver the wrong one",
        src, dst, send->tag, dst, recv->tag));
    send->status = error;
    recv->status = error;
  } else if (send->tensor.sizes() != recv->tensor.sizes() ||
             send->tensor.scalar_type() != recv->tensor.scalar_type()) {
    Status error = invalid_argument(
        fmt::format("rank {} sent a {} tensor with tag {} but rank {} posted a {} buffer", src,
                    describe(send->tensor), tag, dst, describe(recv->tensor)));
    send->status = error;
    recv->status = error;
  } else {
    recv->tensor.copy_(send->tensor);
  }
  send->done = true;
  recv->done = true;
}

class InProcessRequest final : public TransportRequest {
 public:
  // `key` is the op's mailbox slot.
  InProcessRequest(std::shared_ptr<State> state, std::shared_ptr<PendingOp> op,
                   std::tuple<int, int, MessageTag> key, bool is_send, std::string what)
      : state_(std::move(state)),
        op_(std::move(op)),
        key_(key),
        is_send_(is_send),
        what_(std::move(what)) {}

  Status wait() override {
    std::unique_lock<std::mutex> lock(state_->mu);
    const auto deadline = Clock::now() + to_duration(state_->options.timeout);
    const bool woken = state_->cv.wait_until(
        lock, deadline, [&] { return op_->done || !state_->shutdown.is_ok(); });
    if (op_->done) return op_->status;
    // Withdraw the operation so that a late peer does not complete it.
    auto it = state_->slots.find(key_);
    if (it != state_->slots.end()) {
      auto& queue = is_send_ ? it->second.sends : it->second.recvs;
      queue.erase(std::remove(queue.begin(), queue.end(), op_), queue.end());
    }
    op_->done = true;
    const int src = std::get<0>(key_);
    const int dst = std::get<1>(key_);
    const MessageTag tag = op_->tag;
    const std::string why = woken ? "stopped"
                                  : fmt::format("timed out after {}",
                                                internal::format_seconds(state_->options.timeout));
    const std::string transfer = is_send_ ? fmt::format("send {} to rank {}", what_, dst)
                                          : fmt::format("receive {} from rank {}", what_, src);
    const std::string waiting =
        fmt::format("rank {}: {} waiting to {} (tag {})", is_send_ ? src : dst, why, transfer, tag);
    op_->status = io_error(woken ? fmt::format("{}: {}", waiting, state_->shutdown.message())
                                 : fmt::format("{}; the peer never posted the matching {}", waiting,
                                               is_send_ ? "receive" : "send"));
    return op_->status;
  }

 private:
  std::shared_ptr<State> state_;
  std::shared_ptr<PendingOp> op_;
  std::tuple<int, int, MessageTag> key_;
  bool is_send_;
  std::string what_;
};

// A collective this rank posted: done once every member posted; waiting bounded by the timeout
// from the call to wait().
class CollectiveRequest final : public TransportRequest {
 public:
  CollectiveRequest(std::shared_ptr<State> state, std::pair<std::vector<int>, int64_t> key,
                    int rank)
      : state_(std::move(state)), key_(std::move(key)), rank_(rank) {}

  Status wait() override {
    if (waited_) return status_;
    waited_ = true;
    std::unique_lock<std::mutex> lock(state_->mu);
    CollectiveCall& call = state_->collectives[key_];
    const auto deadline = Clock::now() + to_duration(state_->options.timeout);
    const bool woken = state_->cv.wait_until(
        lock, deadline, [&] { return call.done || !state_->shutdown.is_ok(); });
    const std::vector<int>& ranks = key_.first;
    if (!call.done) {
      std::vector<int> missing;
      for (size_t i = 0; i < ranks.size(); ++i) {
        if (!call.arrived[i]) missing.push_back(ranks[i]);
      }
      call.done = true;
      const std::string where =
          fmt::format("in collective #{} over ranks {}; not arrived: rank(s) {}", key_.second,
                      format_ranks(ranks), fmt::join(missing, ", "));
      call.status = io_error(
          woken ? fmt::format("rank {}: stopped {}: {}", rank_, where, state_->shutdown.message())
                : fmt::format("rank {}: timed out after {} {}", rank_,
                              internal::format_seconds(state_->options.timeout), where));
      state_->cv.notify_all();
    }
    status_ = call.status;
    if (++call.num_departed == call.num_arrived &&
        call.num_arrived == static_cast<int>(ranks.size())) {
      state_->collectives.erase(key_);
    }
    return status_;
  }

 private:
  std::shared_ptr<State> state_;
  std::pair<std::vector<int>, int64_t> key_;
  int rank_;
  bool waited_ = false;
  Status status_;
};

class CompletedRequest final : public TransportRequest {
 public:
  Status wait() override { return Status::ok(); }
};

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(std::shared_ptr<State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return state_->world_size; }

  Result<std::unique_ptr<TransportRequest>> send(const at::Tensor& tensor, int peer, MessageTag tag,
                                                 std::string what) override {
    return post(tensor, peer, tag, std::move(what), /*is_send=*/true);
  }

  Result<std::unique_ptr<TransportRequest>> recv(const at::Tensor& buffer, int peer, MessageTag tag,
                                                 std::string what) override {
    return post(buffer, peer, tag, std::move(what), /*is_send=*/false);
  }

  Result<std::unique_ptr<TransportRequest>> all_reduce_sum_async(
      const std::vector<at::Tensor>& tensors, const std::vector<int>& ranks) override {
    return post_collective(tensors, {}, ranks, /*exchange=*/false);
  }

  // Each member's blocks copied straight into the others' buffers.
  Status all_to_all(const std::vector<at::Tensor>& send, const std::vector<at::Tensor>& recv,
                    const std::vector<int>& ranks) override {
    MOTLEY_RETURN_IF_ERROR(check_all_to_all(rank_, send, recv, ranks));
    MOTLEY_ASSIGN_OR_RETURN(auto request, post_collective(send, recv, ranks, /*exchange=*/true));
    return request->wait();
  }

  Status barrier() override {
    std::vector<int> all(state_->world_size);
    for (int r = 0; r < state_->world_size; ++r) all[r] = r;
    return all_reduce_sum({}, all);
  }

 private:
  // Posts this member's part of a collective over `ranks`: an all-reduce of `inputs`, or an
  // all-to-all of `inputs` into `outputs` (`exchange`). The last member to post completes it.
  Result<std::unique_ptr<TransportRequest>> post_collective(const std::vector<at::Tensor>& inputs,
                                                            const std::vector<at::Tensor>& outputs,
                                                            const std::vector<int>& ranks,
                                                            bool exchange) {
    MOTLEY_RETURN_IF_ERROR(check_rank_set(rank_, ranks));
    auto self = std::find(ranks.begin(), ranks.end(), rank_);
    if (ranks.size() == 1) {
      if (exchange) outputs[0].copy_(inputs[0]);
      return std::unique_ptr<TransportRequest>(new CompletedRequest());
    }
    const size_t position = static_cast<size_t>(self - ranks.begin());
    std::lock_guard<std::mutex> lock(state_->mu);
    const int64_t index = state_->calls_made[rank_][ranks]++;
    const auto key = std::make_pair(ranks, index);
    CollectiveCall& call = state_->collectives[key];
    if (call.inputs.empty()) {
      call.inputs.resize(ranks.size());
      call.outputs.resize(ranks.size());
      call.arrived.assign(ranks.size(), false);
      call.exchange = exchange;
    }
    call.inputs[position] = inputs;
    call.outputs[position] = outputs;
    call.arrived[position] = true;
    if (call.exchange != exchange && call.status.is_ok()) {
      call.status = invalid_argument(
          fmt::format("collective #{} over ranks {}: rank {} posted an {} where another member "
                      "posted an {}",
                      index, format_ranks(ranks), rank_, exchange ? "all-to-all" : "all-reduce",
                      exchange ? "all-reduce" : "all-to-all"));
    }
    if (++call.num_arrived == static_cast<int>(ranks.size()) && !call.done) {
      if (!call.status.is_ok()) {
        call.done = true;
      } else if (call.exchange) {
        exchange_blocks(call, ranks);
      } else {
        reduce(call, ranks);
      }
      state_->cv.notify_all();
    }
    return std::unique_ptr<TransportRequest>(new CollectiveRequest(state_, key, rank_));
  }

  // Member i's block j into member j's buffer i, once every block was checked against its
  // buffer.
  static void exchange_blocks(CollectiveCall& call, const std::vector<int>& ranks) {
    call.done = true;
    const size_t n = ranks.size();
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        const at::Tensor& block = call.inputs[i][j];
        const at::Tensor& buffer = call.outputs[j][i];
        if (block.sizes() != buffer.sizes() || block.scalar_type() != buffer.scalar_type()) {
          call.status = invalid_argument(fmt::format(
              "all-to-all over ranks {}: rank {} sends rank {} a block of shape [{}], which "
              "posted a buffer of shape [{}] for it",
              format_ranks(ranks), ranks[i], ranks[j], fmt::join(block.sizes(), ", "),
              fmt::join(buffer.sizes(), ", ")));
          return;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) call.outputs[j][i].copy_(call.inputs[i][j]);
    }
  }

  // Sums in member order into a fresh tensor, then copies it to every member, so all members
  // hold the same bits.
  static void reduce(CollectiveCall& call, const std::vector<int>& ranks) {
    call.done = true;
    const auto& first = call.inputs[0];
    for (size_t m = 1; m < call.inputs.size(); ++m) {
      bool same = call.inputs[m].size() == first.size();
      for (size_t i = 0; same && i < first.size(); ++i) {
        same = call.inputs[m][i].sizes() == first[i].sizes() &&
               call.inputs[m][i].scalar_type() == first[i].scalar_type();
      }
      if (!same) {
        call.status = invalid_argument(
            fmt::format("all-reduce over ranks {}: rank {} passed tensors of other shapes than "
                        "rank {}",
                        format_ranks(ranks), ranks[m], ranks[0]));
        return;
      }
    }
    for (size_t i = 0; i < first.size(); ++i) {
      at::Tensor sum = first[i].clone();
      for (size_t m = 1; m < call.inputs.size(); ++m) sum.add_(call.inputs[m][i]);
      for (auto& member : call.inputs) member[i].copy_(sum);
    }
  }

  Result<std::unique_ptr<TransportRequest>> post(const at::Tensor& tensor, int peer, MessageTag tag,
                                                 std::string what, bool is_send) {
    if (peer < 0 || peer >= state_->world_size || peer == rank_) {
      return invalid_argument(fmt::format("rank {}: cannot {} rank {} in a world of {}", rank_,
                                          is_send ? "send to" : "receive from", peer,
                                          state_->world_size));
    }
    if (tag < 0 || tag >= (int64_t{1} << 31)) {
      return invalid_argument(fmt::format("message tag {} is outside [0, 2^31)", tag));
    }
    auto op = std::make_shared<PendingOp>();
    op->tensor = tensor;
    op->tag = tag;
    const MessageTag slot_tag = state_->options.matching == MessageMatching::kByTag ? tag : 0;
    const auto key =
        is_send ? std::make_tuple(rank_, peer, slot_tag) : std::make_tuple(peer, rank_, slot_tag);
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      MessageSlot& slot = state_->slots[key];
      auto& others = is_send ? slot.recvs : slot.sends;
      if (others.empty()) {
        (is_send ? slot.sends : slot.recvs).push_back(op);
      } else {
        std::shared_ptr<PendingOp> other = others.front();
        others.pop_front();
        if (is_send) {
          match(op, other, rank_, peer);
        } else {
          match(other, op, peer, rank_);
        }
        if (slot.sends.empty() && slot.recvs.empty()) state_->slots.erase(key);
        state_->cv.notify_all();
      }
    }
    return std::unique_ptr<TransportRequest>(
        new InProcessRequest(state_, std::move(op), key, is_send, std::move(what)));
  }

  std::shared_ptr<State> state_;
  int rank_;
};

}  // namespace

Status Transport::all_reduce_sum(const std::vector<at::Tensor>& tensors,
                                 const std::vector<int>& ranks) {
  MOTLEY_ASSIGN_OR_RETURN(auto request, all_reduce_sum_async(tensors, ranks));
  return request->wait();
}

Status Transport::all_to_all(const std::vector<at::Tensor>& send,
                             const std::vector<at::Tensor>& recv, const std::vector<int>& ranks) {
  MOTLEY_RETURN_IF_ERROR(check_all_to_all(rank(), send, recv, ranks));
  const int64_t n = static_cast<int64_t>(ranks.size());
  const int64_t me = std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin();
  // Every block's row count, then every block at its place in one buffer.
  at::Tensor counts = at::zeros({n, n}, send[0].options().dtype(at::kDouble));
  for (int64_t j = 0; j < n; ++j) counts[me][j] = static_cast<double>(send[j].size(0));
  MOTLEY_RETURN_IF_ERROR(all_reduce_sum({counts}, ranks));
  const at::Tensor rows = counts.to(at::kCPU, at::kLong).contiguous();
  const auto count = rows.accessor<int64_t, 2>();
  int64_t width = 1;  // a row's elements
  for (int64_t d = 1; d < send[0].dim(); ++d) width *= send[0].size(d);
  std::vector<int64_t> offset(static_cast<size_t>(n * n) + 1, 0);
  for (int64_t k = 0; k < n * n; ++k) offset[k + 1] = offset[k] + count[k / n][k % n];
  at::Tensor buffer = at::zeros({offset.back(), width}, send[0].options());
  for (int64_t j = 0; j < n; ++j) {
    buffer.narrow(0, offset[me * n + j], count[me][j]).copy_(send[j].reshape({-1, width}));
  }
  MOTLEY_RETURN_IF_ERROR(all_reduce_sum({buffer}, ranks));
  for (int64_t i = 0; i < n; ++i) {
    if (recv[i].size(0) != count[i][me]) {
      return invalid_argument(fmt::format(
          "all-to-all over ranks {}: rank {} sends rank {} {} rows, which posted a buffer of {}",
          format_ranks(ranks), ranks[i], rank(), count[i][me], recv[i].size(0)));
    }
    recv[i].copy_(buffer.narrow(0, offset[i * n + me], count[i][me]).view(recv[i].sizes()));
  }
  return Status::ok();
}

Status check_all_to_all(int rank, const std::vector<at::Tensor>& send,
                        const std::vector<at::Tensor>& recv, const std::vector<int>& ranks) {
  MOTLEY_RETURN_IF_ERROR(check_rank_set(rank, ranks));
  if (send.size() != ranks.size() || recv.size() != ranks.size()) {
    return invalid_argument(fmt::format(
        "rank {}: an all-to-all over ranks {} takes one block per member, got {} to send and {} "
        "to receive",
        rank, format_ranks(ranks), send.size(), recv.size()));
  }
  return Status::ok();
}

Status check_rank_set(int rank, const std::vector<int>& ranks) {
  if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end() ||
      !std::is_sorted(ranks.begin(), ranks.end()) ||
      std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
    return invalid_argument(
        fmt::format("rank {}: all-reduce over ranks {}: expected sorted distinct ranks "
                    "including this one",
                    rank, format_ranks(ranks)));
  }
  return Status::ok();
}

Status Transport::prepare_collectives(const std::vector<std::vector<int>>&) { return Status::ok(); }

Status Transport::prepare_peers(const std::vector<int>&) { return Status::ok(); }

InProcessNetwork::InProcessNetwork(int world_size, TransportOptions options)
    : state_(std::make_shared<State>(world_size, options)) {
  MOTLEY_CHECK(world_size >= 1, "an in-process world needs at least one rank");
}

InProcessNetwork::~InProcessNetwork() = default;

int InProcessNetwork::world_size() const { return state_->world_size; }

void InProcessNetwork::shut_down(const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->shutdown.is_ok()) state_->shutdown = io_error(reason);
  state_->cv.notify_all();
}

std::unique_ptr<Transport> InProcessNetwork::endpoint(int rank) {
  MOTLEY_CHECK(rank >= 0 && rank < state_->world_size, "no such rank in the in-process world");
  return std::make_unique<InProcessTransport>(state_, rank);
}

}  // namespace motley
