#include "rank_checkpoint.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <filesystem>

#include "motley/core/json.h"
#include "motley/exec/checkpoint.h"
#include "motley/plan/spec_hash.h"

namespace motley::internal {
namespace {

std::string layer_file(const std::string& dir, int layer) {
  return (std::filesystem::path(dir) / ("layer-" + std::to_string(layer) + ".bin")).string();
}

std::string manifest_file(const std::string& dir) {
  return (std::filesystem::path(dir) / "manifest.json").string();
}

}  // namespace

RankCheckpoint::RankCheckpoint(const ModelSpec& model, int rank, RankPlace place,
                               std::vector<int> group_ranks,
                               std::map<std::string, CheckpointParameter> parameters)
    : model_(model),
      rank_(rank),
      place_(place),
      group_ranks_(std::move(group_ranks)),
      parameters_(std::move(parameters)) {}

Result<at::Tensor> RankCheckpoint::gather_full(const at::Tensor& local, const TensorSlice& slice,
                                               Transport& transport) const {
  if (place_.tp_size == 1) return local;
  at::Tensor full = at::zeros(slice.full_shape, local.options());
  full.index_copy_(slice.dim, slice.rows.index_select(0, slice.value_rows),
                   local.index_select(slice.dim, slice.value_rows));
  MOTLEY_RETURN_IF_ERROR(transport.all_reduce_sum({full}, group_ranks_)
                             .with_context("assembling tensor-parallel parameters"));
  return full;
}

Status RankCheckpoint::save(const std::string& dir, int64_t step, const StateOf& state_of,
                            Transport& transport) const {
  if (place_.replica == 0) {
    // A tensor-parallel group assembles its full tensors (a collective of the group, in name
    // order on every member); its first rank writes them.
    std::map<int, TensorFile> files;
    for (const auto& [name, p] : parameters_) {
      if (p.layer < 0 || !p.saved_here) continue;  // a tied copy
      TensorFile& file = files[p.layer];
      file.step = step;
      MOTLEY_ASSIGN_OR_RETURN(at::Tensor value, gather_full(p.tensor.detach(), p.slice, transport));
      file.tensors.push_back({name, value});
      if (const std::optional<AdamWStep::State> state = state_of(p.tensor)) {
        MOTLEY_ASSIGN_OR_RETURN(at::Tensor avg, gather_full(state->exp_avg, p.slice, transport));
        MOTLEY_ASSIGN_OR_RETURN(at::Tensor avg_sq,
                                gather_full(state->exp_avg_sq, p.slice, transport));
        file.tensors.push_back({name + ".exp_avg", avg});
        file.tensors.push_back({name + ".exp_avg_sq", avg_sq});
        file.tensors.push_back({name + ".step", at::full({1}, state->step, at::kLong)});
      }
    }
    if (place_.tp_rank == 0) {
      for (const auto& [layer, file] : files) {
        MOTLEY_RETURN_IF_ERROR(write_tensor_file(layer_file(dir, layer), file));
      }
    }
  }
  MOTLEY_RETURN_IF_ERROR(
      transport.barrier().with_context(fmt::format("saving checkpoint {}", dir)));
  if (rank_ == 0) {
    const SpecRef ref = model_ref(model_);
    Json manifest = {{"format", kCheckpointFormat},
                     {"step", step},
                     {"model", {{"name", ref.name}, {"hash", ref.hash}}},
                     {"layers", model_.layers.size()}};
    MOTLEY_RETURN_IF_ERROR(write_file_atomically(manifest_file(dir), manifest.dump(2) + "\n"));
  }
  return transport.barrier().with_context(fmt::format("saving checkpoint {}", dir));
}

Result<int64_t> RankCheckpoint::load(const std::string& dir, const Restore& restore) const {
  const std::string manifest_path = manifest_file(dir);
  MOTLEY_ASSIGN_OR_RETURN(Json manifest, read_json_file(manifest_path));
  JsonField root(manifest, manifest_path);
  MOTLEY_ASSIGN_OR_RETURN(std::string format, root.get_string("format"));
  if (format != kCheckpointFormat) {
    return root.child_error("format", fmt::format("expected \"{}\"", kCheckpointFormat));
  }
  MOTLEY_ASSIGN_OR_RETURN(int64_t step, root.get_nonnegative_int("step"));
  MOTLEY_ASSIGN_OR_RETURN(JsonField model_field, root.get("model"));
  MOTLEY_ASSIGN_OR_RETURN(std::string hash, model_field.get_string("hash"));
  const SpecRef ref = model_ref(model_);
  if (hash != ref.hash) {
    return model_field.child_error(
        "hash",
        fmt::format("the checkpoint is of another model than '{}' (hash {})", ref.name, ref.hash));
  }
  std::map<int, std::map<std::string, at::Tensor>> files;
  for (const auto& [name, p] : parameters_) {
    auto it = files.find(p.layer);
    if (it == files.end()) {
      const std::string path = layer_file(dir, p.layer);
      MOTLEY_ASSIGN_OR_RETURN(TensorFile file, read_tensor_file(path));
      if (file.step != step) {
        return invalid_argument(
            fmt::format("{}: holds step {} but the manifest says step {} (an interrupted save?)",
                        path, file.step, step));
      }
      std::map<std::string, at::Tensor> by_name;
      for (NamedTensor& t : file.tensors) by_name[t.name] = t.tensor;
      it = files.emplace(p.layer, std::move(by_name)).first;
    }
    const std::string path = layer_file(dir, p.layer);
    auto value = it->second.find(name);
    if (value == it->second.end() || !value->second.sizes().equals(p.slice.full_shape)) {
      return invalid_argument(
          fmt::format("{}: no parameter '{}' of the model's shape", path, name));
    }
    // The checkpoint holds whole tensors; a tensor-parallel rank keeps its rows.
    const TensorSlice& slice = p.slice;
    auto mine = [&slice](const at::Tensor& full) {
      return slice.rows.numel() == full.size(slice.dim) ? full
                                                        : full.index_select(slice.dim, slice.rows);
    };
    {
      at::NoGradGuard no_grad;
      p.tensor.copy_(mine(value->second));
    }
    auto avg = it->second.find(name + ".exp_avg");
    auto avg_sq = it->second.find(name + ".exp_avg_sq");
    auto count = it->second.find(name + ".step");
    if (avg != it->second.end() && avg_sq != it->second.end() && count != it->second.end()) {
      restore(p.tensor, AdamWStep::State{count->second.item<int64_t>(), mine(avg->second),
                                         mine(avg_sq->second)});
    }
  }
  return step;
}

}  // namespace motley::internal
