// GradientBuckets: a rank's gradient sums with the other holders of its parameters, overlapped
// with the backward as PyTorch's DistributedDataParallel overlaps them. The unit is a bucket —
// one rank set's parameters of one layer, or the loss — posted asynchronously as soon as its
// gradients are final on the rank: during the action that accumulates into them for the last
// time in the step (from the parameters' gradient-accumulation hooks), or right after it, but
// only after the set's earlier buckets in an order every member shares (the loss first, then
// decreasing layer), so the members of a set post its sums alike. All are waited on after the
// rank's last action. It decides neither which ranks sum a parameter (rank_layout.h) nor what
// the optimizer does with the sums. Internal to exec/. Not thread-safe: one rank's thread (the
// hooks fire on it, inside autograd's backward).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "motley/core/status.h"
#include "motley/exec/stage_module.h"
#include "motley/exec/transport.h"
#include "motley/plan/plan.h"
#include "step_trace.h"

namespace torch::autograd {
struct Node;
}

namespace motley::internal {

// One parameter's gradient sum. A plain shard (or an unsplit parameter) whose holders all
// split it alike sums its local gradient with the same-index ranks of the other holders;
// anything else (rows shared within a group, replicas with different tensor-parallel degrees)
// sums full-size contributions over every holding rank and keeps its rows (`full_size`).
struct GradientSum {
  at::Tensor param;
  TensorSlice slice;
  bool full_size = false;
  int layer = 0;  // the layer it belongs to (the embedding's, for a tied matrix)
};

// A rank's gradient sums by the set of ranks they run over, each set's in parameter name order.
using GradientSumSets = std::map<std::vector<int>, std::vector<GradientSum>>;

class GradientBuckets {
 public:
  // `sets`: the rank's sums. `actions`: its group's compute actions in order, from which the
  // action that finishes each bucket is known (a stage's last W or fused B; for the loss, the
  // last stage's last F, or its last I or fused B when `loss_in_backward`: a head shard knows
  // the loss only once every shard's statistics have come).
  // `stage_params`: per stage the rank runs, the parameters its W and B differentiate.
  // `loss_ranks`: the last stage's ranks when this rank runs it (the loss is summed over them,
  // `loss` giving this rank's part when its bucket is posted), else empty. `post_from_hooks`
  // false: a bucket leaves only after the action that finished it (an after_action hook slows
  // actions after they ran, and nothing may leave before the emulated device would be done).
  // `transport` must outlive the buckets. The loss travels as a tensor on `device` (the
  // parameters'). `left_for_w`, when given, says which parameters a split backward accumulates
  // in W (SplitBackward::defers; asked when a stage's last W starts): the others of a stage
  // whose last action is a W were final after its last I, and its bucket waits in that W only
  // for these.
  GradientBuckets(const GradientSumSets& sets, const std::vector<Action>& actions,
                  const std::map<int, std::vector<at::Tensor>>& stage_params, int last_stage,
                  bool loss_in_backward, const std::vector<int>& loss_ranks,
                  std::function<double()> loss, bool post_from_hooks, Transport& transport,
                  c10::Device device = c10::kCPU,
                  std::function<bool(const at::TensorImpl*)> left_for_w = nullptr);
  ~GradientBuckets();

  // Every rank set a bucket sums over, increasing (the loss's included).
  std::vector<std::vector<int>> rank_sets() const;

  // Per step: begin_step() first, then around each action of the list begin_action /
  // end_action with its index, then finish().
  void begin_step();
  void begin_action(int action);
  void end_action(int action);
  // Posts what is left, waits for every bucket (the trace gets each one's sum, from its posting
  // to the end of its wait), writes the rows of full-size sums back into the gradients and sets
  // *loss to the summed loss on ranks that hold it. A failed post or sum is returned.
  Status finish(std::optional<double>* loss, StepTrace& trace);

 private:
  struct Bucket {
    std::vector<int> ranks;
    std::vector<GradientSum> sums;
    bool loss = false;
    int final_action = -1;  // index of the action after which it is final
    int final_params = 0;   // its parameters whose last accumulation happens in that action
    std::vector<const at::TensorImpl*> final_of_w;  // those, when that action is a W
    int pending = 0;  // of those, the ones not accumulated yet this step
    bool posted = false;
    std::vector<at::Tensor> tensors;  // what travels: gradients or full-size contributions
    at::Tensor loss_value;
    std::unique_ptr<TransportRequest> request;
    std::chrono::steady_clock::time_point posted_at;
  };

  void install_hooks(const std::vector<at::Tensor>& params);
  void on_gradient_final(const at::TensorImpl* param);
  void post_ready(const std::vector<int>& ranks);
  void post_all_ready();
  Status post(Bucket& b);

  std::function<double()> loss_;
  bool post_from_hooks_;
  Transport& transport_;
  c10::Device device_;
  int actions_ = 0;
  std::vector<Bucket> buckets_;
  std::map<std::vector<int>, std::vector<size_t>> set_buckets_;  // each set's, in posting order
  std::map<std::vector<int>, size_t> next_bucket_;               // per set: next to post
  std::map<const at::TensorImpl*, size_t> bucket_of_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooks alive
  int running_action_ = -1;    // the action being run (gradient hooks fire inside it)
  int completed_action_ = -1;  // every action up to this one has finished
  std::function<bool(const at::TensorImpl*)> left_for_w_;
  std::vector<bool> is_weight_pass_;  // per action of the list: a W
  Status post_failure_;               // a failed post, reported by finish()
};

}  // namespace motley::internal
