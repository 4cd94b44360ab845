#include "zero1.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

namespace motley::internal {

std::vector<size_t> zero1_owners(const std::vector<int64_t>& elements, size_t members) {
  MOTLEY_CHECK(members >= 1, "a ZeRO-1 set without members");
  std::vector<size_t> order(elements.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&elements](size_t a, size_t b) { return elements[a] > elements[b]; });
  std::vector<int64_t> load(members, 0);
  std::vector<size_t> owner(elements.size(), 0);
  for (size_t i : order) {
    owner[i] = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[owner[i]] += elements[i];
  }
  return owner;
}

Zero1Shards::Zero1Shards(const GradientSumSets& sets, int rank) {
  for (const auto& [ranks, sums] : sets) {
    const bool shardable =
        ranks.size() > 1 &&
        std::none_of(sums.begin(), sums.end(), [](const GradientSum& s) { return s.full_size; });
    if (!shardable) continue;
    Set z;
    z.ranks = ranks;
    const size_t me =
        static_cast<size_t>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
    std::vector<int64_t> elements;
    for (const GradientSum& s : sums) {
      z.params.push_back(s.param);
      elements.push_back(s.param.numel());
    }
    const std::vector<size_t> owner = zero1_owners(elements, ranks.size());
    for (size_t i = 0; i < z.params.size(); ++i) {
      z.owned.push_back(owner[i] == me);
      if (owner[i] != me) owned_elsewhere_.insert(z.params[i].unsafeGetTensorImpl());
    }
    sets_.push_back(std::move(z));
  }
}

Status Zero1Shards::share_updates(Transport& transport) const {
  for (const Set& z : sets_) {
    std::vector<at::Tensor> values;
    for (size_t i = 0; i < z.params.size(); ++i) {
      values.push_back(z.owned[i] ? z.params[i].detach().clone() : at::zeros_like(z.params[i]));
    }
    MOTLEY_RETURN_IF_ERROR(
        transport.all_reduce_sum(values, z.ranks).with_context("sharing ZeRO-1 updates"));
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < z.params.size(); ++i) {
      if (!z.owned[i]) z.params[i].copy_(values[i]);
    }
  }
  return Status::ok();
}

Result<std::map<const at::TensorImpl*, AdamWStep::State>> Zero1Shards::gather_state(
    Transport& transport, const AdamWStep& optimizer, int64_t steps_done) const {
  std::map<const at::TensorImpl*, AdamWStep::State> out;
  if (steps_done == 0) return out;  // no moments before the first step
  for (const Set& z : sets_) {
    std::vector<at::Tensor> moments;  // exp_avg, exp_avg_sq per parameter
    for (size_t i = 0; i < z.params.size(); ++i) {
      const auto state = z.owned[i] ? optimizer.state(z.params[i]) : std::nullopt;
      moments.push_back(state ? state->exp_avg.clone() : at::zeros_like(z.params[i]));
      moments.push_back(state ? state->exp_avg_sq.clone() : at::zeros_like(z.params[i]));
    }
    MOTLEY_RETURN_IF_ERROR(transport.all_reduce_sum(moments, z.ranks)
                               .with_context("gathering ZeRO-1 optimizer state"));
    for (size_t i = 0; i < z.params.size(); ++i) {
      out[z.params[i].unsafeGetTensorImpl()] =
          AdamWStep::State{steps_done, moments[2 * i], moments[2 * i + 1]};
    }
  }
  return out;
}

}  // namespace motley::internal
