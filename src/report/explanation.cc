#include "motley/report/explanation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

namespace motley {
namespace {

// Milliseconds with two decimals, as the explanation states every time.
std::string ms(Seconds t) { return fmt::format("{:.2f} ms", t.value() * 1e3); }

// "a, b, c" of the items' texts.
template <class T, class Text>
std::string listed(const std::vector<T>& items, Text text) {
  std::string out;
  for (const T& item : items) out += (out.empty() ? "" : ", ") + text(item);
  return out;
}

std::string placement(const PlanExplanation& e) {
  std::string out = "Placement: " + e.layout + ".";
  bool uneven = false;
  for (int64_t m : e.replica_micro_batches) uneven = uneven || m != e.replica_micro_batches[0];
  if (uneven) {
    out += " Replicas run " +
           listed(e.replica_micro_batches, [](int64_t m) { return std::to_string(m); }) +
           " micro-batches: proportional to their speed, so that all finish together.";
  }
  if (e.megatron) out += " megatron-1f1b: " + e.megatron->detail + ".";
  if (!e.idle_devices.empty()) {
    out += " Left idle: " +
           listed(e.idle_devices,
                  [](const auto& idle) { return fmt::format("{} {}", idle.second, idle.first); }) +
           " (the best plan found does not use them).";
  }
  return out;
}

std::string partition(const PlanExplanation& e) {
  std::string out = fmt::format(
      "Partition: {} stages in the first replica with {} layers; the busiest device group needs "
      "{} per micro-batch",
      e.stage_layers.size(), listed(e.stage_layers, [](int n) { return std::to_string(n); }),
      ms(e.bottleneck));
  if (e.megatron) {
    out += fmt::format(" (megatron-1f1b's split: {} with micro-batches of {})",
                       ms(e.megatron->bottleneck), e.megatron->micro_batch_size);
  }
  if (e.ends_with_head && e.stage_layers.size() > 1 && e.vocab_rows.empty()) {
    out += fmt::format("; the stage with the LM head holds {} other layer(s)",
                       e.stage_layers.back() - 1);
  }
  return out + ".";
}

std::string recompute(const PlanExplanation& e) {
  if (e.recompute.size() == 1 && e.recompute[0].first == RecomputePolicy::kNone &&
      e.recompute_layers == 0 && e.recomputed_micro_batches == 0) {
    return "Recompute: none (everything fits in memory).";
  }
  std::string layers;
  if (e.recompute_layers > 0) {
    layers = fmt::format("; {} layer(s) recomputed in full on their own", e.recompute_layers);
  }
  if (e.recomputed_micro_batches > 0) {
    layers += fmt::format(
        "; {} micro-batch(es) recomputed alone on stages that keep their activations (the "
        "order's R actions)",
        e.recomputed_micro_batches);
  }
  return "Recompute: " +
         listed(e.recompute,
                [](const auto& p) {
                  return fmt::format("{} on {} stage(s)", recompute_policy_name(p.first), p.second);
                }) +
         layers + ", where memory is short.";
}

std::string optimizer(const PlanExplanation& e) {
  switch (e.zero_stage) {
    case 1:
      return fmt::format(
          "Optimizer: state sharded across the {} replicas (ZeRO-1, Megatron's distributed "
          "optimizer): the gradients are reduce-scattered and the updated weights all-gathered.",
          e.zero_replicas);
    case 2:
      return fmt::format(
          "Optimizer: state and gradients sharded across the {} replicas (ZeRO-2): every "
          "micro-batch's gradients are reduce-scattered after its backward, the updated weights "
          "all-gathered after the step.",
          e.zero_replicas);
    default:
      return fmt::format(
          "Optimizer: state, gradients and weights sharded across the {} replicas (ZeRO-3, "
          "FSDP's full shard): the weights are all-gathered before every forward and backward, "
          "every micro-batch's gradients reduce-scattered after its backward.",
          e.zero_replicas);
  }
}

std::string schedule(const PlanExplanation& e) {
  std::string out = fmt::format("Schedule: {}, micro-batch size {}, bubble {:.1f}%", e.schedule,
                                e.micro_batch_size, 100 * e.bubble_fraction);
  if (e.megatron)
    out += fmt::format(" (megatron-1f1b: {:.1f}%)", 100 * e.megatron->bubble_fraction);
  return out + ".";
}

std::string cost(const PlanExplanation& e) {
  std::string out = fmt::format("Cost: ${:.3f} per million tokens", e.dollars_per_million_tokens);
  if (e.megatron) {
    out += fmt::format(" (megatron-1f1b: ${:.3f})", e.megatron->dollars_per_million_tokens);
  }
  return out + ".";
}

std::string result(const PlanExplanation& e) {
  std::string out =
      fmt::format("Result: {} per iteration, {:.0f} tokens/s, {:.3f} of the lower bound",
                  ms(e.iteration_time), e.tokens_per_s, e.lower_bound / e.iteration_time);
  if (e.megatron) {
    out +=
        fmt::format("; {:.2f}x megatron-1f1b ({})", e.megatron->iteration_time / e.iteration_time,
                    ms(e.megatron->iteration_time));
  }
  if (e.megatron_tuned) {
    out += fmt::format("; {:.2f}x megatron-tuned ({})", *e.megatron_tuned / e.iteration_time,
                       ms(*e.megatron_tuned));
  }
  return out + ".";
}

}  // namespace

std::vector<std::string> explanation_lines(const PlanExplanation& e) {
  std::vector<std::string> out{placement(e), partition(e), recompute(e)};
  if (e.zero_replicas > 0) out.push_back(optimizer(e));
  if (e.expert_parallel > 1) {
    out.push_back(fmt::format(
        "Experts: split over groups of {} replicas ({} group(s); expert parallelism): each "
        "replica holds 1/{} of every MoE layer's experts, and every forward and backward sends "
        "the tokens to their experts and back by all-to-all.",
        e.expert_parallel, e.expert_groups, e.expert_parallel));
  }
  if (e.context_parallel > 1) {
    out.push_back(fmt::format(
        "Sequences: split over groups of {} replicas (context parallelism, ring attention): "
        "each replica runs its group's micro-batches on 1/{} of every sequence (two of {} "
        "chunks, for an even share of the causal mask), its attention passing keys and values "
        "around the group at every layer.",
        e.context_parallel, e.context_parallel, 2 * e.context_parallel));
  }
  if (!e.vocab_rows.empty()) {
    std::vector<std::string> rows;
    for (int64_t r : e.vocab_rows) rows.push_back(std::to_string(r));
    std::string embedding;
    if (!e.embedding_rows.empty()) {
      std::vector<std::string> split;
      for (int64_t r : e.embedding_rows) split.push_back(std::to_string(r));
      embedding = fmt::format(
          " The embedding likewise, {} rows: its shards' partial embeddings are summed into the "
          "next stage, whose input gradient goes back to each.",
          fmt::join(split, ", "));
    }
    out.push_back(fmt::format(
        "Head: split by vocabulary rows over the {} groups of each pipeline (vocabulary "
        "parallelism), {} rows, {}: every micro-batch's loss statistics cross between the "
        "shards and their input gradients are summed.{}",
        e.vocab_rows.size(), fmt::join(rows, ", "),
        e.vocab_rows_balance_load
            ? "to even out the groups' whole load (the shards take up what whole layers leave "
              "uneven)"
            : "by each group's speed on it",
        embedding));
  }
  if (e.sequence_parallel) {
    out.push_back(
        "Sequence parallelism: on in the tensor-parallel groups (Megatron-LM's): norms, dropout "
        "and their activations split across each group, a reduce-scatter and an all-gather in "
        "place of each all-reduce.");
  }
  out.push_back(schedule(e));
  if (e.cost_objective) out.push_back(cost(e));
  out.push_back(result(e));
  if (e.megatron && !e.single_dimension.empty()) {
    const Seconds megatron = e.megatron->iteration_time;
    out.push_back(fmt::format(
        "Gain over megatron-1f1b by one dimension alone: {}; all together {:.2f}x.",
        listed(e.single_dimension,
               [&](const DimensionOutcome& d) {
                 return fmt::format("{} {:.2f}x", d.strategy, megatron / d.iteration_time);
               }),
        megatron / e.iteration_time));
  }
  if (!e.baseline_plan.empty()) {
    out.push_back("This is the " + e.baseline_plan +
                  " baseline's plan: no candidate of the full search beat it.");
  }
  return out;
}

}  // namespace motley
