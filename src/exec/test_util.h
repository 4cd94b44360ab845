// Helpers shared by the executor's tests: model variants, the options every run uses, ranks as
// threads, the sequential reference's results and the check of a run against them, and a free
// localhost port (presets and plans from the schedule generators are test_plans.h's).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/exec/data.h"
#include "motley/exec/executor.h"
#include "motley/exec/reference.h"
#include "motley/exec/transport.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"
#include "motley/schedule/schedule.h"
#include "test_plans.h"

namespace motley::testing {

inline constexpr int kSteps = 3;

// tiny-llama with its four blocks replaced by feed-forward layers of width `hidden` (inner width
// 8): activations of 2 x 64 x 8192 floats are 4 MiB, so no message slips through a buffer.
ModelSpec wide_model(int64_t hidden);
// tiny-hybrid with Mamba-1 mixers (Jamba's shape in miniature: d_inner 128, d_state 8, dt_rank
// 4, kernel 4) in place of its Mamba-2 ones; with learned RMSNorms of dt, B and C (Jamba) or
// none (Mamba).
ModelSpec mamba1_hybrid(bool inner_norms);
// tiny-llama (named tiny-mla) with multi-head latent attention in its four blocks: 4 heads,
// kv_lora_rank 32, qk_nope_head_dim 16, qk_rope_head_dim 8, v_head_dim 16, queries through a
// bottleneck of `q_lora_rank` (0: projected directly); `bias`: DeepSeek's attention_bias.
ModelSpec mla_model(int64_t q_lora_rank, bool bias = false);
// The deepseek-v2-lite preset in miniature: its embedding, first (dense) block, two MoE blocks
// and head, at tiny-mla's widths with 8 routed experts (top 2) of width 32 and its 2 shared ones.
ModelSpec deepseek_v2_lite_miniature();
// Seed 11 and AdamW with a learning rate of 1e-2 (three steps move every weight).
ExecOptions exec_options();

int world_size(const Plan& plan);

struct WorldResult {
  std::vector<double> losses;                    // per step
  std::map<std::string, at::Tensor> parameters;  // by name (with the last step's gradients)
};
WorldResult run_reference(const Plan& plan, const ModelSpec& model, const TokenStream& tokens,
                          int steps, GradientOrder order);

// What one rank ended a run of run_ranks with.
struct RankRun {
  std::vector<std::optional<double>> losses;  // per step; set on the ranks holding the loss
  std::vector<NamedTensor> parameters;        // RankExecutor::parameters, with the last gradients
  std::map<std::string, TensorSlice> slices;  // RankExecutor::slices
  int64_t optimizer_state_bytes = 0;
};
// Every rank of `plan` as a thread over an InProcessNetwork with `transport` options for `steps`
// steps (behind a DelayingTransport each when `delays`). A rank's failure is a test failure and
// shuts the network down, so the others stop.
std::vector<RankRun> run_ranks(const Plan& plan, const ModelSpec& model, const TokenStream& tokens,
                               int steps, bool delays = false,
                               const TransportOptions& transport = TransportOptions{});

// Runs `plan` as ranks (run_ranks) and the sequential reference for `steps` steps, and checks
// every rank's losses and slices against the reference's rows; rows several ranks hold must be
// the same bits, and every row of every parameter must be held somewhere. A split layer adds its
// products in another order than the whole one (each rank sums over its half of the width, then
// the halves are added), so values differ by rounding from the first forward on: the losses of
// every step and the first step's gradients (taken at identical parameters) stay within 1e-5.
// Parameters after several steps get a looser bound, because AdamW's first updates are nearly
// lr * sign(g): an element whose gradient is at rounding level moves a whole step either way
// (with the tests' lr of 1e-2, about half the initial weights' scale); a wrong slice or a
// missing sum is off by orders of magnitude more.
void expect_matches_reference(const Plan& plan, const ModelSpec& model, int steps,
                              bool delays = false);
// The same after one step and after kSteps.
void expect_matches_reference(const Plan& plan, const ModelSpec& model);

// Rank `rank`'s part of an all-to-all over ranks {0, 2} of a world of three (rank 1 takes no
// part), with blocks of 0 to 3 rows of width 3, each element naming its sender, receiver and
// row; EXPECTs every block received to be the one sent.
void expect_all_to_all_delivers(int rank, Transport& transport);

// A checkpoint of one plan resumed under another: trains `first` for four steps; then, afresh,
// two steps saving a checkpoint into a temporary directory named `name`, resumed under `second`
// for two more, whose losses must be the uninterrupted run's (relative 1e-5). Then the same with
// the plans swapped.
void expect_checkpoints_resume_across(const Plan& first, const Plan& second, const ModelSpec& model,
                                      const std::string& name);

// ||a - b|| / ||b|| (Frobenius): how far a whole tensor is from the reference; ||a|| when b is
// zero (an expert no token chose).
double relative_difference(const at::Tensor& a, const at::Tensor& b);

// Sleeps a random 0-2 ms before each send and all-reduce is posted and before each wait, so the
// ranks' interleavings vary from run to run; a fault-injecting wrapper around any transport.
class DelayingTransport final : public Transport {
 public:
  DelayingTransport(std::unique_ptr<Transport> base, uint64_t seed);
  int rank() const override { return base_->rank(); }
  int world_size() const override { return base_->world_size(); }
  Result<std::unique_ptr<TransportRequest>> send(const at::Tensor& tensor, int peer, MessageTag tag,
                                                 std::string what) override;
  Result<std::unique_ptr<TransportRequest>> recv(const at::Tensor& buffer, int peer, MessageTag tag,
                                                 std::string what) override;
  Status all_reduce_sum(const std::vector<at::Tensor>& tensors,
                        const std::vector<int>& ranks) override;
  Result<std::unique_ptr<TransportRequest>> all_reduce_sum_async(
      const std::vector<at::Tensor>& tensors, const std::vector<int>& ranks) override;
  Status prepare_collectives(const std::vector<std::vector<int>>& sets) override {
    return base_->prepare_collectives(sets);
  }
  Status prepare_peers(const std::vector<int>& peers) override {
    return base_->prepare_peers(peers);
  }
  Status barrier() override { return base_->barrier(); }

  void delay();

 private:
  std::unique_ptr<Transport> base_;
  std::mt19937_64 random_;
};

// Passes everything to `base` and records what was asked of it, in order: the rank sets of
// prepare_collectives and of every all-reduce (posted or blocking) with its tensors' shapes.
class RecordingTransport final : public Transport {
 public:
  struct Sum {
    std::vector<int> ranks;
    std::vector<std::vector<int64_t>> shapes;
    bool posted = false;  // all_reduce_sum_async
  };
  explicit RecordingTransport(std::unique_ptr<Transport> base) : base_(std::move(base)) {}
  int rank() const override { return base_->rank(); }
  int world_size() const override { return base_->world_size(); }
  Result<std::unique_ptr<TransportRequest>> send(const at::Tensor& tensor, int peer, MessageTag tag,
                                                 std::string what) override {
    return base_->send(tensor, peer, tag, std::move(what));
  }
  Result<std::unique_ptr<TransportRequest>> recv(const at::Tensor& buffer, int peer, MessageTag tag,
                                                 std::string what) override {
    return base_->recv(buffer, peer, tag, std::move(what));
  }
  Status all_reduce_sum(const std::vector<at::Tensor>& tensors,
                        const std::vector<int>& ranks) override {
    record(tensors, ranks, false);
    return base_->all_reduce_sum(tensors, ranks);
  }
  Result<std::unique_ptr<TransportRequest>> all_reduce_sum_async(
      const std::vector<at::Tensor>& tensors, const std::vector<int>& ranks) override {
    record(tensors, ranks, true);
    return base_->all_reduce_sum_async(tensors, ranks);
  }
  Status prepare_collectives(const std::vector<std::vector<int>>& sets) override {
    prepared_.insert(prepared_.end(), sets.begin(), sets.end());
    return base_->prepare_collectives(sets);
  }
  Status prepare_peers(const std::vector<int>& peers) override {
    return base_->prepare_peers(peers);
  }
  Status barrier() override { return base_->barrier(); }

  const std::vector<std::vector<int>>& prepared() const { return prepared_; }
  const std::vector<Sum>& sums() const { return sums_; }

 private:
  void record(const std::vector<at::Tensor>& tensors, const std::vector<int>& ranks, bool posted);

  std::unique_ptr<Transport> base_;
  std::vector<std::vector<int>> prepared_;
  std::vector<Sum> sums_;
};

// A localhost port that was free a moment ago.
int free_port();

// One intra-op thread for ATen and for OpenBLAS (when it is the BLAS in use): ranks run as
// threads, and BLAS worker threads of every rank would otherwise spin against each other.
void single_threaded();

}  // namespace motley::testing
