// The plan file: Plan <-> JSON ("format": "motley.plan/4"), load and atomic save, and the one
// loader every consumer of a plan file uses. A plan file carries the model (motley's own model
// JSON) and the normalized cluster it was made for, beside their hashes, so that the file alone
// can be simulated, run, exported or replanned anywhere; "motley.plan/2" files (each group's
// actions an array rather than one string) and "motley.plan/1" files (references only) are
// still read. Actions are written as PyTorch pipelining writes them:
// "<stage><letter><micro-batch>", e.g. "0F3", "1I3" (input-gradient backward), "1W3", "2B0"
// (fused backward), "0R3" (recompute). Thread-safe free functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley {

// What a plan file holds. `model` and `cluster` are absent in a motley.plan/1 file and in a
// file written without them; when present, their hashes equal plan.model / plan.cluster.
struct PlanFile {
  Plan plan;
  std::optional<ModelSpec> model;
  std::optional<ClusterSpec> cluster;
};

// The plan alone (references only) or with the specs it was made for embedded as
// "model_spec" and "cluster_spec". REQUIRES (embedding): model_ref(model) == plan.model and
// cluster_ref(cluster) == plan.cluster.
Json plan_to_json(const Plan& plan);
Json plan_to_json(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster);
// The most actions a plan file is read with, replicas that name another's actions
// (same_actions_as) counting theirs: as many as the largest file read (kMaxStructuredFileBytes)
// could list at four bytes an action, so that a small file cannot claim more memory than a
// large one. (768 MB of actions; a 65,536-device plan of 1,024 pipelines of 32 groups with 512
// micro-batches each holds 33.6 million.)
inline constexpr int64_t kMaxReadPlanActions = kMaxStructuredFileBytes / 4;

// Checks the schema only (types, ranges, known keys, and that embedded specs are valid and
// match their hashes); validate_plan checks runnability. `max_actions`: kMaxReadPlanActions but
// in tests.
Result<PlanFile> plan_file_from_json(const Json& json, const std::string& source,
                                     int64_t max_actions = kMaxReadPlanActions);
Result<Plan> plan_from_json(const Json& json, const std::string& source);
Result<PlanFile> load_plan_file(const std::string& path);
Result<Plan> load_plan(const std::string& path);
// The text save_plan writes: indented JSON with the format first, each action list on one
// line, the embedded specs last, ending in a newline.
std::string plan_to_text(const Plan& plan);
std::string plan_to_text(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster);
Status save_plan(const Plan& plan, const std::string& path);
Status save_plan(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster,
                 const std::string& path);

// What a user may pass instead of the specs a plan carries (`--model`, `--cluster`): a preset
// name or a path, as load_model / load_cluster read them; empty: the plan's own.
struct PlanSpecOverrides {
  std::string model;
  std::string cluster;
};

// A plan with the model and cluster to check and price it against.
struct PlanInputs {
  Plan plan;
  ModelSpec model;
  ClusterSpec cluster;
};

// Reads a plan file and resolves its model and cluster: an override when given (which must
// have the hash the plan records), else the spec the file carries, else (a file without one)
// the preset or file the plan names. Errors name the file and say which spec does not match,
// with both hashes, and what to pass instead.
Result<PlanInputs> load_plan_inputs(const std::string& path,
                                    const PlanSpecOverrides& overrides = PlanSpecOverrides{});

std::string action_to_string(const Action& action);  // "0F3"
Result<Action> parse_action(std::string_view text);

}  // namespace motley
