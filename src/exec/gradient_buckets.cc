#include "gradient_buckets.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <set>
#include <string>

namespace motley::internal {

GradientBuckets::GradientBuckets(const GradientSumSets& sets, const std::vector<Action>& actions,
                                 const std::map<int, std::vector<at::Tensor>>& stage_params,
                                 int last_stage, bool loss_in_backward,
                                 const std::vector<int>& loss_ranks, std::function<double()> loss,
                                 bool post_from_hooks, Transport& transport, c10::Device device,
                                 std::function<bool(const at::TensorImpl*)> left_for_w)
    : loss_(std::move(loss)),
      post_from_hooks_(post_from_hooks),
      transport_(transport),
      device_(device),
      actions_(static_cast<int>(actions.size())),
      left_for_w_(std::move(left_for_w)) {
  for (const Action& a : actions) is_weight_pass_.push_back(a.kind == ActionKind::kBackwardWeight);
  // The last action of the list that accumulates into each stage's weights.
  std::map<int, int> last_weight_action;  // stage -> action index
  int last_loss_action = -1;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (a.kind == ActionKind::kBackwardWeight || a.kind == ActionKind::kBackward) {
      last_weight_action[a.stage] = static_cast<int>(i);
    }
    const bool counts_loss =
        loss_in_backward ? a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackward
                         : a.kind == ActionKind::kForward;
    if (counts_loss && a.stage == last_stage) {
      last_loss_action = static_cast<int>(i);
    }
  }
  std::map<const at::TensorImpl*, int> final_of;  // parameter -> action of its last accumulation
  for (const auto& [stage, params] : stage_params) {
    for (const at::Tensor& p : params) {
      int& f = final_of.emplace(p.unsafeGetTensorImpl(), -1).first->second;
      f = std::max(f, last_weight_action.count(stage) ? last_weight_action.at(stage) : -1);
    }
  }
  GradientSumSets all = sets;
  const bool holds_loss = !loss_ranks.empty();
  if (holds_loss && !all.count(loss_ranks)) all[loss_ranks] = {};
  std::vector<at::Tensor> params;
  for (const auto& [ranks, sums] : all) {
    std::vector<size_t>& order = set_buckets_[ranks];
    auto add_bucket = [&]() -> Bucket& {
      order.push_back(buckets_.size());
      buckets_.emplace_back();
      buckets_.back().ranks = ranks;
      return buckets_.back();
    };
    if (holds_loss && ranks == loss_ranks) {
      Bucket& b = add_bucket();
      b.loss = true;
      b.final_action = last_loss_action;
    }
    std::map<int, std::vector<GradientSum>, std::greater<int>> by_layer;
    for (const GradientSum& s : sums) {
      by_layer[s.layer].push_back(s);
      params.push_back(s.param);
    }
    for (auto& [layer, members] : by_layer) {
      Bucket& b = add_bucket();
      for (const GradientSum& s : members) {
        b.final_action = std::max(b.final_action, final_of.at(s.param.unsafeGetTensorImpl()));
      }
      for (const GradientSum& s : members) {
        if (final_of.at(s.param.unsafeGetTensorImpl()) != b.final_action) continue;
        ++b.final_params;
        if (b.final_action >= 0 && is_weight_pass_[static_cast<size_t>(b.final_action)]) {
          b.final_of_w.push_back(s.param.unsafeGetTensorImpl());
        }
      }
      b.sums = std::move(members);
    }
  }
  for (size_t k = 0; k < buckets_.size(); ++k) {
    for (const GradientSum& s : buckets_[k].sums) bucket_of_[s.param.unsafeGetTensorImpl()] = k;
  }
  install_hooks(params);
}

GradientBuckets::~GradientBuckets() = default;

std::vector<std::vector<int>> GradientBuckets::rank_sets() const {
  std::vector<std::vector<int>> out;
  for (const auto& [ranks, order] : set_buckets_) out.push_back(ranks);
  return out;
}

void GradientBuckets::install_hooks(const std::vector<at::Tensor>& params) {
  // Runs after autograd accumulated into the parameter's .grad (a post hook of its
  // AccumulateGrad node), for every backward that reaches it.
  struct Accumulated final : torch::autograd::FunctionPostHook {
    std::function<void()> done;
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list&) override {
      done();
      return outputs;
    }
  };
  for (const at::Tensor& p : params) {
    std::shared_ptr<torch::autograd::Node> node = torch::autograd::impl::grad_accumulator(p);
    auto hook = std::make_unique<Accumulated>();
    const at::TensorImpl* key = p.unsafeGetTensorImpl();
    hook->done = [this, key] { on_gradient_final(key); };
    node->add_post_hook(std::move(hook));
    accumulators_.push_back(std::move(node));
  }
}

void GradientBuckets::begin_step() {
  for (auto& [ranks, next] : next_bucket_) next = 0;
  for (Bucket& b : buckets_) {
    b.posted = false;
    b.pending = b.final_params;
  }
  post_failure_ = Status::ok();
  running_action_ = -1;
  completed_action_ = -1;
}

void GradientBuckets::begin_action(int action) {
  running_action_ = action;
  if (!left_for_w_ || action < 0 || !is_weight_pass_[static_cast<size_t>(action)]) return;
  // A split backward's last W accumulates only the weight products' gradients; the rest of a
  // bucket was final when the stage's last I ended, so the bucket waits for those alone (and
  // is ready now if it has none).
  std::set<std::vector<int>> ready;
  for (Bucket& b : buckets_) {
    if (b.posted || b.loss || b.final_action != action) continue;
    b.pending =
        static_cast<int>(std::count_if(b.final_of_w.begin(), b.final_of_w.end(),
                                       [this](const at::TensorImpl* p) { return left_for_w_(p); }));
    if (b.pending == 0) ready.insert(b.ranks);
  }
  if (!post_from_hooks_) return;
  for (const std::vector<int>& ranks : ready) post_ready(ranks);
}

void GradientBuckets::end_action(int action) {
  completed_action_ = action;
  post_all_ready();
}

void GradientBuckets::on_gradient_final(const at::TensorImpl* param) {
  if (!post_from_hooks_) return;
  auto it = bucket_of_.find(param);
  if (it == bucket_of_.end()) return;
  Bucket& b = buckets_[it->second];
  if (b.posted || b.final_action != running_action_) return;  // not its last accumulation
  if (--b.pending == 0) post_ready(b.ranks);
}

void GradientBuckets::post_all_ready() {
  for (const auto& [ranks, order] : set_buckets_) post_ready(ranks);
}

void GradientBuckets::post_ready(const std::vector<int>& ranks) {
  const std::vector<size_t>& order = set_buckets_.at(ranks);
  size_t& next = next_bucket_[ranks];
  while (next < order.size()) {
    Bucket& b = buckets_[order[next]];
    const bool ready = b.final_action <= completed_action_ ||
                       (b.final_action == running_action_ && b.pending <= 0);
    if (!ready) return;
    if (!post_failure_.is_ok()) return;
    post_failure_ = post(b);
    ++next;
  }
}

Status GradientBuckets::post(Bucket& b) {
  b.tensors.clear();
  for (const GradientSum& s : b.sums) {
    at::Tensor& grad = s.param.mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(s.param);  // not reached this step
    if (!s.full_size) {
      b.tensors.push_back(grad);
      continue;
    }
    const TensorSlice& slice = s.slice;
    b.tensors.push_back(at::zeros(slice.full_shape, grad.options())
                            .index_add_(slice.dim, slice.rows.index_select(0, slice.grad_rows),
                                        grad.index_select(slice.dim, slice.grad_rows)));
  }
  if (b.loss) {
    b.loss_value = at::full({1}, loss_(), at::TensorOptions().dtype(at::kFloat).device(device_));
    b.tensors.push_back(b.loss_value);
  }
  b.posted = true;
  b.posted_at = std::chrono::steady_clock::now();
  MOTLEY_ASSIGN_OR_RETURN(b.request, transport_.all_reduce_sum_async(b.tensors, b.ranks));
  return Status::ok();
}

Status GradientBuckets::finish(std::optional<double>* loss, StepTrace& trace) {
  running_action_ = -1;
  completed_action_ = actions_;  // everything is final now
  post_all_ready();
  MOTLEY_RETURN_IF_ERROR(post_failure_.with_context("gradient all-reduce"));
  for (Bucket& b : buckets_) {
    MOTLEY_RETURN_IF_ERROR(b.request->wait().with_context("gradient all-reduce"));
    if (trace.enabled()) {
      TraceEvent e;
      e.kind = TraceEvent::Kind::kGradientSum;
      e.name = b.loss ? "sum loss" : fmt::format("sum layer {} gradients", b.sums.front().layer);
      e.start = trace.since_start(b.posted_at);
      e.ready = e.start;
      e.end = trace.since_start(std::chrono::steady_clock::now());
      trace.add(std::move(e));
    }
    for (size_t i = 0; i < b.sums.size(); ++i) {
      const GradientSum& s = b.sums[i];
      if (s.full_size) {
        s.param.mutable_grad().copy_(b.tensors[i].index_select(s.slice.dim, s.slice.rows));
      }
    }
    if (b.loss) *loss = b.loss_value.item<double>();
    // Holding no gradient between steps lets autograd accumulate into .grad in place.
    b.tensors.clear();
    b.request.reset();
  }
  return Status::ok();
}

}  // namespace motley::internal
