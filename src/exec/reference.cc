#include "motley/exec/reference.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>

#include "optimizer.h"

namespace motley {

struct SequentialTrainer::Impl {
  Impl(const Plan& p, const TokenStream& t, GradientOrder o) : plan(p), tokens(t), order(o) {}
  Plan plan;
  const TokenStream& tokens;
  GradientOrder order;
  Precision precision = Precision::kFp32;
  std::vector<at::Tensor> params;
  ParameterStore store;
  std::unique_ptr<StageModule> model;
  std::unique_ptr<internal::AdamWStep> optimizer;
  int64_t steps_done = 0;
};

SequentialTrainer::SequentialTrainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SequentialTrainer::~SequentialTrainer() = default;

Result<std::unique_ptr<SequentialTrainer>> SequentialTrainer::create(const ExecOptions& options,
                                                                     const Plan& plan,
                                                                     const ModelSpec& model,
                                                                     const TokenStream& tokens,
                                                                     GradientOrder order) {
  auto impl = std::make_unique<Impl>(plan, tokens, order);
  impl->precision = options.precision;
  const int layers = static_cast<int>(model.layers.size());
  if (options.stage_factory) {
    // A custom factory builds stages; the reference is then the plan's stages in one chain.
    return invalid_argument("the sequential reference builds the whole model itself");
  }
  MOTLEY_ASSIGN_OR_RETURN(
      impl->model,
      make_transformer_stage(model, 0, layers, StageModuleOptions{options.seed, plan.seq_len, {}},
                             impl->store));
  std::vector<at::Tensor> params;
  for (const NamedTensor& p : impl->store.parameters()) params.push_back(p.tensor);
  impl->params = params;
  impl->optimizer = std::make_unique<internal::AdamWStep>(params, options.optimizer);
  return std::unique_ptr<SequentialTrainer>(new SequentialTrainer(std::move(impl)));
}

Result<double> SequentialTrainer::step() {
  Impl& m = *impl_;
  const int64_t total = total_micro_batches(m.plan);
  double loss_sum = 0;
  try {
    m.optimizer->zero_gradients();
    std::vector<at::Tensor> replica_sums;  // kByReplica: per parameter, the replicas' total
    for (size_t r = 0; r < m.plan.replicas.size(); ++r) {
      const Replica& replica = m.plan.replicas[r];
      for (int64_t j = 0; j < replica.micro_batches; ++j) {
        const int64_t g = global_micro_batch(m.plan, m.steps_done, static_cast<int>(r), j);
        at::Tensor inputs, targets;
        micro_batch_tensors(m.tokens, g, m.plan.micro_batch_size, m.plan.seq_len, &inputs,
                            &targets);
        const AutocastGuard autocast(m.precision);  // as the executor: F and B, not AdamW
        at::Tensor loss = m.model->forward(inputs, targets);
        loss_sum += loss.item<double>() / static_cast<double>(total);
        torch::autograd::backward({loss}, {internal::loss_seed(total, loss)});
      }
      if (m.order == GradientOrder::kByReplica) {
        m.optimizer->materialize_gradients();
        for (size_t i = 0; i < m.params.size(); ++i) {
          at::Tensor grad = m.params[i].grad();
          if (replica_sums.size() <= i) {
            replica_sums.push_back(grad.clone());
          } else {
            replica_sums[i].add_(grad);
          }
        }
        m.optimizer->zero_gradients();
      }
    }
    if (m.order == GradientOrder::kByReplica) {
      for (size_t i = 0; i < m.params.size(); ++i)
        m.params[i].mutable_grad().copy_(replica_sums[i]);
    }
    m.optimizer->step();
  } catch (const std::exception& e) {
    return internal_error(fmt::format("sequential reference: {}", e.what()));
  }
  ++m.steps_done;
  return loss_sum;
}

std::vector<NamedTensor> SequentialTrainer::parameters() const { return impl_->store.parameters(); }

}  // namespace motley
