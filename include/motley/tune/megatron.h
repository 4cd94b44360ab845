// A plan as Megatron-LM's command-line arguments: tensor and pipeline sizes, the per-stage layer
// layout (--pipeline-model-parallel-layout), micro and global batch, recompute, the distributed
// optimizer, sequence parallelism; which global rank runs on which of the plan's devices; what
// of the plan Megatron cannot express; and the closest plan it can, priced. Conventions and
// sources: docs/exports.md. Thread-safe free functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"
#include "motley/tune/tune.h"

namespace motley {

struct MegatronArguments {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int data_parallel = 1;     // the replicas over context_parallel
  int context_parallel = 1;  // --context-parallel-size (Plan::context_parallel)
  int virtual_stages = 1;    // per pipeline rank (interleaved 1F1B); implied by the layout
  // "Et*3|t*4|t*3L": E the embedding, t a decoder layer, L the output layer and loss, '|'
  // between stages in the plan's stage order (virtual stages continue the list), "*N" a run;
  // empty when a layer has no letter (not_expressed says which).
  std::string layout;
  // A hybrid (Mamba) model's layers for Megatron's MambaModel (pretrain_mamba.py), as
  // --hybrid-override-pattern spells them: M Mamba, * attention, - MLP, E MoE, without the
  // embedding and the head; empty for other models. The layout is then empty: MambaModel gives
  // every pipeline stage the same number of pattern layers (not_expressed says when the plan's
  // split differs).
  std::string hybrid_pattern;
  std::vector<std::string> arguments;  // "--tensor-model-parallel-size", "2", ...
  // Megatron's global rank r (tensor rank fastest, then context-parallel, data-parallel and
  // pipeline: its default order "tp-cp-ep-dp-pp"; replica dp x CP + cp is Megatron's data
  // rank dp, context rank cp) -> the plan's device id.
  std::vector<int> rank_devices;
  // What Megatron cannot express, in words; empty: it runs the plan as it is.
  std::vector<std::string> not_expressed;
};

// The arguments for `plan` (its first replica where replicas differ, which not_expressed then
// says). REQUIRES: the plan validates against `model` and `cluster`.
MegatronArguments megatron_arguments(const Plan& plan, const ModelSpec& model,
                                     const ClusterSpec& cluster);

// The closest plan Megatron can run, for a plan it cannot, priced under `options` (its cost
// model and stack; the batch shape and ZeRO-1 are the plan's). First the plan's own structure
// in Megatron's form, which is what megatron_arguments' layout runs (strategy
// "megatron-layout"): the same devices, TP groups, pipeline ranks, replicas and layer split,
// with Megatron's stage map (s mod pp), its 1F1B or interleaved order, even micro-batch counts
// and one recompute policy. When the plan has no such form (replicas of different depths or
// TP degrees, stages that do not fill the ranks evenly, micro-batches that do not split evenly)
// or it does not fit memory: the faster of the megatron-1f1b and megatron-interleaved baselines
// (Megatron's uniform split and cluster order) on the plan's cluster, global batch, sequence
// length and micro-batch size, whose detail says why. Errors: tune's (infeasible when neither
// baseline fits).
Result<StrategyOutcome> closest_megatron_plan(const Plan& plan, const ModelSpec& model,
                                              const ClusterSpec& cluster, TuneOptions options);

}  // namespace motley
