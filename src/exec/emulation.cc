#include "motley/exec/emulation.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "motley/exec/reference.h"

namespace motley {
namespace {

using Clock = std::chrono::steady_clock;

void sleep_for(Seconds duration) {
  if (duration.value() > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(duration.value()));
  }
}

// A send waiting for its due time, then the request `inner` returned for it.
struct PendingSend {
  at::Tensor tensor;
  int peer = 0;
  MessageTag tag = 0;
  std::string what;
  bool posted = false;  // guarded by DelayedTransport::mu_
  Status post_status;
  std::unique_ptr<TransportRequest> request;
};

class DelayedTransport;

class DelayedRequest final : public TransportRequest {
 public:
  DelayedRequest(DelayedTransport* owner, std::shared_ptr<PendingSend> pending)
      : owner_(owner), pending_(std::move(pending)) {}
  Status wait() override;

 private:
  DelayedTransport* owner_;
  std::shared_ptr<PendingSend> pending_;
  bool finished_ = false;
  Status status_;
};

// An all-reduce that completes the emulated link time after the real sum did.
class DelayedCollective final : public TransportRequest {
 public:
  DelayedCollective(std::unique_ptr<TransportRequest> inner, Seconds delay)
      : inner_(std::move(inner)), delay_(delay), posted_(Clock::now()) {}

  Status wait() override {
    if (finished_) return status_;
    finished_ = true;
    const auto called = Clock::now();
    status_ = inner_->wait();
    if (!status_.is_ok()) return status_;
    const auto returned = Clock::now();
    const bool blocked = returned - called > std::chrono::milliseconds(1);
    const auto end =
        (blocked ? returned : posted_) +
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(delay_.value()));
    std::this_thread::sleep_until(end);
    return status_;
  }

 private:
  std::unique_ptr<TransportRequest> inner_;
  Seconds delay_;
  Clock::time_point posted_;
  bool finished_ = false;
  Status status_;
};

class DelayedTransport final : public Transport {
 public:
  DelayedTransport(Transport& inner, MessageTime message_time, AllReduceTime all_reduce_time)
      : inner_(inner),
        message_time_(std::move(message_time)),
        all_reduce_time_(std::move(all_reduce_time)),
        poster_([this] { post_loop(); }) {}

  ~DelayedTransport() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    poster_.join();
  }

  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }

  Result<std::unique_ptr<TransportRequest>> send(const at::Tensor& tensor, int peer, MessageTag tag,
                                                 std::string what) override {
    auto pending = std::make_shared<PendingSend>();
    pending->tensor = tensor;
    pending->peer = peer;
    pending->tag = tag;
    pending->what = std::move(what);
    const Seconds delay = message_time_
                              ? message_time_(rank(), peer, static_cast<int64_t>(tensor.nbytes()))
                              : Seconds(0);
    const auto due = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(delay.value()));
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.emplace(due, pending);
    }
    cv_.notify_all();
    return std::unique_ptr<TransportRequest>(new DelayedRequest(this, std::move(pending)));
  }

  Result<std::unique_ptr<TransportRequest>> recv(const at::Tensor& buffer, int peer, MessageTag tag,
                                                 std::string what) override {
    std::lock_guard<std::mutex> lock(inner_mu_);
    return inner_.recv(buffer, peer, tag, std::move(what));
  }

  // Posted into the inner transport under the lock that serializes calls into it, waited on
  // outside it (a rank blocked in an all-reduce must not keep the helper thread from posting
  // its delayed sends). The emulated time runs from when the sum was complete: when wait()
  // blocked, from its return; otherwise from the posting (the members posted about together).
  Result<std::unique_ptr<TransportRequest>> all_reduce_sum_async(
      const std::vector<at::Tensor>& tensors, const std::vector<int>& ranks) override {
    std::unique_ptr<TransportRequest> inner;
    {
      std::lock_guard<std::mutex> lock(inner_mu_);
      MOTLEY_ASSIGN_OR_RETURN(inner, inner_.all_reduce_sum_async(tensors, ranks));
    }
    Seconds delay(0);
    if (all_reduce_time_ && ranks.size() > 1) {
      int64_t bytes = 0;
      for (const at::Tensor& t : tensors) bytes += static_cast<int64_t>(t.nbytes());
      delay = all_reduce_time_(ranks, bytes);
    }
    return std::unique_ptr<TransportRequest>(new DelayedCollective(std::move(inner), delay));
  }

  Status prepare_collectives(const std::vector<std::vector<int>>& sets) override {
    std::lock_guard<std::mutex> lock(inner_mu_);
    return inner_.prepare_collectives(sets);
  }

  Status prepare_peers(const std::vector<int>& peers) override {
    std::lock_guard<std::mutex> lock(inner_mu_);
    return inner_.prepare_peers(peers);
  }

  Status barrier() override {
    std::lock_guard<std::mutex> lock(inner_mu_);
    return inner_.barrier();
  }

  // Blocks until the helper thread posted `pending` (at most its delay, or until shut down).
  void await_posting(const PendingSend& pending) {
    std::unique_lock<std::mutex> lock(mu_);
    posted_cv_.wait(lock, [&] { return pending.posted; });
  }

 private:
  void post_loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (queue_.empty()) {
        if (stop_) return;
        cv_.wait(lock);
        continue;
      }
      auto first = queue_.begin();
      if (!stop_ && Clock::now() < first->first) {
        cv_.wait_until(lock, first->first);
        continue;
      }
      std::shared_ptr<PendingSend> pending = first->second;
      queue_.erase(first);
      Status status;
      std::unique_ptr<TransportRequest> request;
      if (stop_) {
        status = io_error(fmt::format("rank {}: the transport closed before {} was sent",
                                      inner_.rank(), pending->what));
      } else {
        lock.unlock();
        {
          std::lock_guard<std::mutex> io(inner_mu_);
          auto posted = inner_.send(pending->tensor, pending->peer, pending->tag, pending->what);
          if (posted.is_ok()) {
            request = std::move(posted).value();
          } else {
            status = posted.status();
          }
        }
        lock.lock();
      }
      pending->post_status = status;
      pending->request = std::move(request);
      pending->posted = true;
      posted_cv_.notify_all();
    }
  }

  Transport& inner_;
  MessageTime message_time_;
  AllReduceTime all_reduce_time_;
  std::mutex inner_mu_;  // one thread at a time in `inner_`
  std::mutex mu_;        // guards the fields below and PendingSend::posted
  std::condition_variable cv_;
  std::condition_variable posted_cv_;
  std::multimap<Clock::time_point, std::shared_ptr<PendingSend>> queue_;
  bool stop_ = false;
  std::thread poster_;  // last: starts once the fields above exist
};

Status DelayedRequest::wait() {
  if (finished_) return status_;
  owner_->await_posting(*pending_);
  finished_ = true;
  status_ = pending_->post_status.is_ok() ? pending_->request->wait() : pending_->post_status;
  return status_;
}

}  // namespace

std::unique_ptr<Transport> make_delayed_transport(Transport& inner, MessageTime message_time,
                                                  AllReduceTime all_reduce_time) {
  return std::make_unique<DelayedTransport>(inner, std::move(message_time),
                                            std::move(all_reduce_time));
}

EmulationOptions emulation_options(const EmulationFactors& factors, double time_scale) {
  EmulationOptions e;
  e.compute_slowdown = factors.compute_slowdown;
  auto network = std::make_shared<const EmulatedNetwork>(factors);
  e.message_time = [network, time_scale](int src, int dst, int64_t bytes) {
    return time_scale * network->message_time(src, dst, bytes);
  };
  e.all_reduce_time = [network, time_scale](const std::vector<int>& ranks, int64_t bytes) {
    return time_scale * network->all_reduce_time(ranks, bytes);
  };
  return e;
}

Result<double> emulation_time_scale(const ExecOptions& exec, const Plan& plan,
                                    const ModelSpec& model, const TokenStream& tokens,
                                    Seconds cluster_step, Transport* world) {
  MOTLEY_ASSIGN_OR_RETURN(auto trainer, SequentialTrainer::create(exec, plan, model, tokens));
  MOTLEY_RETURN_IF_ERROR(trainer->step().status());  // warm-up: first allocations
  double best = 0;
  for (int i = 0; i < 2; ++i) {
    const auto start = Clock::now();
    MOTLEY_RETURN_IF_ERROR(trainer->step().status());
    const std::chrono::duration<double> t = Clock::now() - start;
    best = i == 0 ? t.count() : std::min(best, t.count());
  }
  double scale = best / cluster_step.value();
  if (world != nullptr) {
    std::vector<int> all(world->world_size());
    for (int r = 0; r < world->world_size(); ++r) all[r] = r;
    std::vector<at::Tensor> value = {at::full({1}, scale, at::kDouble)};
    MOTLEY_RETURN_IF_ERROR(
        world->all_reduce_sum(value, all).with_context("agreeing on the emulation's time scale"));
    scale = value[0].item<double>() / world->world_size();
  }
  return scale;
}

void apply_emulation(const EmulationOptions& emulation, TrainOptions* options) {
  auto previous = options->exec.after_action;
  const std::vector<double> slowdown = emulation.compute_slowdown;
  options->exec.after_action = [previous, slowdown](int rank, int64_t step, const Action& action,
                                                    Seconds elapsed) {
    if (previous) previous(rank, step, action, elapsed);
    if (rank >= 0 && rank < static_cast<int>(slowdown.size()) && slowdown[rank] > 1) {
      sleep_for((slowdown[rank] - 1) * elapsed);
    }
  };
  if (emulation.message_time || emulation.all_reduce_time) {
    MessageTime message_time = emulation.message_time;
    AllReduceTime all_reduce_time = emulation.all_reduce_time;
    options->decorate_transport = [message_time, all_reduce_time](Transport& inner) {
      return make_delayed_transport(inner, message_time, all_reduce_time);
    };
  }
}

}  // namespace motley
