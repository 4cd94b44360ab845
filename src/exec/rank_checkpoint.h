// RankCheckpoint: one rank's part of a checkpoint in the per-layer layout of
// RankExecutor::save_checkpoint (executor.h): which of its parameters it writes (replica 0's
// copies, a tied copy once, with the embedding), the full tensors a tensor-parallel group
// assembles before its first rank writes them, and on loading the rows of the checkpoint's
// whole tensors this rank holds, so that a checkpoint resumes under another partition,
// placement, replica layout or tensor-parallel degree. The file format is checkpoint.h's; the
// optimizer state comes in and goes out through callbacks. Internal to exec/. Not thread-safe:
// one rank's thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "motley/core/status.h"
#include "motley/exec/rank_layout.h"
#include "motley/exec/stage_module.h"
#include "motley/exec/transport.h"
#include "motley/model/model.h"
#include "optimizer.h"

namespace motley::internal {

// A parameter of the rank as the checkpoint sees it.
struct CheckpointParameter {
  at::Tensor tensor;
  int layer = -1;     // whose file holds it: its first reading layer (StageParameter::layers)
  TensorSlice slice;  // the part of the model's tensor this rank holds
  // Whether this rank's copy is the one written (its layer's stage runs on this rank; not so
  // for a tied head's copy of the embedding on another rank).
  bool saved_here = true;
  // The ranks that assemble its full value together, increasing, the first of which writes it:
  // the ranks of replica 0 running the stages holding its layer (one tensor-parallel group, or
  // the groups of a layer's vocabulary shards); for a routed expert split over expert-parallel
  // groups, those of the first group's replicas. Empty: this rank's tensor-parallel group. A
  // rank that is not among them writes nothing of it.
  std::vector<int> assemblers;
  // A routed expert another member of this rank's expert-parallel group holds (`tensor`
  // undefined): the rank takes part in assembling it with zeros and contributes no row, and
  // loads nothing of it.
  bool held_elsewhere = false;
  // A routed expert split over expert-parallel groups (held here or elsewhere): its assemblers
  // learn together whether its holder has optimizer state.
  bool expert_shard = false;
};

class RankCheckpoint {
 public:
  // The optimizer state of a parameter to save (nullopt: none yet), and a state to restore.
  using StateOf = std::function<std::optional<AdamWStep::State>(const at::Tensor& param)>;
  using Restore = std::function<void(const at::Tensor& param, const AdamWStep::State& state)>;

  // `parameters`: every parameter of the rank by name; `place` and `group_ranks` (its
  // tensor-parallel group) are rank `rank`'s in the plan's layout.
  RankCheckpoint(const ModelSpec& model, int rank, RankPlace place, std::vector<int> group_ranks,
                 std::map<std::string, CheckpointParameter> parameters);

  const std::map<std::string, CheckpointParameter>& parameters() const { return parameters_; }

  // Saves the state after `step` steps into checkpoint directory `dir` (checkpoint_store.h),
  // keeping the `keep` newest checkpoints: rank 0 begins the save, and after a barrier every
  // writer puts its layer files into the save's partial directory; after a second barrier rank
  // 0 writes the manifest and completes the save, then a third barrier. Every rank of the world
  // calls it. The assemblers of a parameter build each full tensor together, in the order of
  // (assemblers, name) on every rank (a total order, so ranks in several sets never wait on
  // each other's), so every member takes part. May throw c10::Error.
  Status save(const std::string& dir, int64_t step, int keep, const StateOf& state_of,
              Transport& transport) const;
  // Loads, from the checkpoint find_checkpoint(checkpoint_dir) names, this rank's rows of every
  // parameter and, through `restore`, the optimizer state saved with it; returns the
  // checkpoint's step. Errors as RankExecutor::load_checkpoint's. May throw c10::Error.
  Result<int64_t> load(const std::string& checkpoint_dir, const Restore& restore) const;

 private:
  // The full value of a tensor split over `ranks` (`local` has `slice`'s rows): a sum over them
  // in which each row comes from one rank (within a tensor-parallel group the slices say which;
  // across vocabulary shards the lowest holder of each row). A collective of `ranks`.
  Result<at::Tensor> gather_full(const at::Tensor& local, const TensorSlice& slice,
                                 const std::vector<int>& ranks, Transport& transport) const;

  // Parameter `name`'s full value and, where it has any, its optimizer state, as the layer file
  // holds them: a collective of `ranks`, its assemblers.
  Result<std::vector<NamedTensor>> assemble(const std::string& name, const CheckpointParameter& p,
                                            const std::vector<int>& ranks, const StateOf& state_of,
                                            Transport& transport) const;

  const ModelSpec& model_;
  int rank_;
  RankPlace place_;
  std::vector<int> group_ranks_;
  std::map<std::string, CheckpointParameter> parameters_;
};

}  // namespace motley::internal
