#include "rank_checkpoint.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/exec/checkpoint.h"
#include "motley/exec/checkpoint_store.h"
#include "motley/plan/spec_hash.h"

namespace motley::internal {
namespace {

std::string layer_file(const std::string& dir, int layer) {
  return (std::filesystem::path(dir) / checkpoint_layer_file(layer)).string();
}

std::string manifest_file(const std::string& dir) {
  return (std::filesystem::path(dir) / kCheckpointManifest).string();
}

// The step the manifest of `dir` records, once it is known to be a checkpoint of `model`.
Result<int64_t> read_manifest(const std::string& dir, const ModelSpec& model) {
  const std::string path = manifest_file(dir);
  MOTLEY_ASSIGN_OR_RETURN(Json json, read_json_file(path));
  MOTLEY_ASSIGN_OR_RETURN(CheckpointManifest manifest, checkpoint_manifest_from_json(json, path));
  const SpecRef ref = model_ref(model);
  if (manifest.model_hash != ref.hash) {
    return invalid_argument(fmt::format(
        "{}: field 'model.hash': the checkpoint is of another model than '{}' (hash {})", path,
        ref.name, ref.hash));
  }
  if (manifest.layers != static_cast<int64_t>(model.layers.size())) {
    return invalid_argument(
        fmt::format("{}: field 'layers': model '{}' has {} layers, the manifest says {}", path,
                    ref.name, model.layers.size(), manifest.layers));
  }
  return manifest.step;
}

const char* dtype_text(at::ScalarType type) {
  return type == at::kFloat ? "float32" : type == at::kLong ? "int64" : "another dtype";
}

std::string tensor_text(at::ScalarType type, at::IntArrayRef shape) {
  return fmt::format("{} of shape [{}]", dtype_text(type), fmt::join(shape, ", "));
}

// A tensor of one layer file, by name, checked against what the model expects of it.
class LayerFile {
 public:
  LayerFile(std::string path, std::vector<NamedTensor> tensors) : path_(std::move(path)) {
    for (NamedTensor& t : tensors) by_name_[t.name] = std::move(t.tensor);
  }
  bool has(const std::string& name) const { return by_name_.count(name) > 0; }
  // The tensor `name`, which must be there with `type` and `shape`.
  Result<at::Tensor> expect(const std::string& name, at::ScalarType type,
                            at::IntArrayRef shape) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      return invalid_argument(
          fmt::format("{}: no tensor '{}' ({} expected)", path_, name, tensor_text(type, shape)));
    }
    const at::Tensor& t = it->second;
    if (t.scalar_type() != type || !t.sizes().equals(shape)) {
      return invalid_argument(fmt::format("{}: tensor '{}': expected {}, found {}", path_, name,
                                          tensor_text(type, shape),
                                          tensor_text(t.scalar_type(), t.sizes())));
    }
    return t;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, at::Tensor> by_name_;
};

// A parameter's whole tensor and the optimizer state saved with it, as the checkpoint has them.
struct SavedParameter {
  at::Tensor value;
  std::optional<AdamWStep::State> state;
};

// The value and optimizer state of parameter `name` (`p`) in `file`: the value of the model's
// shape and dtype; the state none or all of its moments of the same shape and a step count.
Result<SavedParameter> saved_parameter(const LayerFile& file, const std::string& name,
                                       const CheckpointParameter& p) {
  const at::ScalarType type = p.tensor.scalar_type();
  const at::IntArrayRef shape(p.slice.full_shape);
  SavedParameter saved;
  MOTLEY_ASSIGN_OR_RETURN(saved.value, file.expect(name, type, shape));
  const std::vector<std::string> state_names = {name + ".exp_avg", name + ".exp_avg_sq",
                                                name + ".step"};
  const int present =
      static_cast<int>(std::count_if(state_names.begin(), state_names.end(),
                                     [&file](const std::string& n) { return file.has(n); }));
  if (present == 0) return saved;
  MOTLEY_ASSIGN_OR_RETURN(at::Tensor avg, file.expect(state_names[0], type, shape));
  MOTLEY_ASSIGN_OR_RETURN(at::Tensor avg_sq, file.expect(state_names[1], type, shape));
  MOTLEY_ASSIGN_OR_RETURN(at::Tensor count, file.expect(state_names[2], at::kLong, {1}));
  const int64_t steps = count.item<int64_t>();
  if (steps < 0) {
    return invalid_argument(fmt::format("{}: tensor '{}': expected a step count >= 0, found {}",
                                        file.path(), state_names[2], steps));
  }
  saved.state = AdamWStep::State{steps, avg, avg_sq};
  return saved;
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
                                               const std::vector<int>& ranks,
                                               Transport& transport) const {
  if (ranks.size() == 1) return local;
  at::Tensor value_rows = slice.value_rows;
  if (ranks != group_ranks_) {
    // Several groups may hold a row (a norm every shard of a head holds): each rank marks the
    // rows it would write, and a row goes to the first rank that marks it.
    const auto me = std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin();
    at::Tensor marks = at::zeros({slice.full_shape[slice.dim], static_cast<int64_t>(ranks.size())},
                                 local.options().dtype(at::kFloat));
    marks.select(1, me).index_fill_(0, slice.rows.index_select(0, slice.value_rows), 1.0);
    MOTLEY_RETURN_IF_ERROR(transport.all_reduce_sum({marks}, ranks)
                               .with_context("assembling vocabulary-sharded parameters"));
    const at::Tensor first = marks.gt(0).to(at::kFloat).argmax(1);  // the first marking rank
    const at::Tensor mine = first.index_select(0, slice.rows.index_select(0, value_rows)).eq(me);
    value_rows = value_rows.masked_select(mine);
  }
  at::Tensor full = at::zeros(slice.full_shape, local.options());
  full.index_copy_(slice.dim, slice.rows.index_select(0, value_rows),
                   local.index_select(slice.dim, value_rows));
  MOTLEY_RETURN_IF_ERROR(
      transport.all_reduce_sum({full}, ranks).with_context("assembling split parameters"));
  return full;
}

Result<std::vector<NamedTensor>> RankCheckpoint::assemble(const std::string& name,
                                                          const CheckpointParameter& p,
                                                          const std::vector<int>& ranks,
                                                          const StateOf& state_of,
                                                          Transport& transport) const {
  TensorSlice slice = p.slice;
  at::Tensor local = p.tensor.defined() ? p.tensor.detach() : at::Tensor();
  std::optional<AdamWStep::State> state = local.defined() ? state_of(p.tensor) : std::nullopt;
  if (p.held_elsewhere) {
    // Zeros of the holder's shape, no row of them written.
    std::vector<int64_t> shape = slice.full_shape;
    shape[slice.dim] = slice.rows.numel();
    local = at::zeros(shape, at::TensorOptions().dtype(at::kFloat).device(slice.rows.device()));
    slice.value_rows = slice.value_rows.narrow(0, 0, 0);
  }
  if (p.expert_shard) {
    // Whether the holder has optimizer state, and its step count: the assemblers that hold the
    // parameter count themselves and add their step counts.
    at::Tensor known = at::zeros({2}, local.options().dtype(at::kDouble));
    if (state) {
      known[0] = 1.0;
      known[1] = static_cast<double>(state->step);
    }
    MOTLEY_RETURN_IF_ERROR(
        transport.all_reduce_sum({known}, ranks).with_context("assembling optimizer state"));
    const at::Tensor counts = known.cpu();
    const double holders = counts[0].item<double>();
    if (holders > 0 && !state) {
      state = AdamWStep::State{std::llround(counts[1].item<double>() / holders),
                               at::zeros_like(local), at::zeros_like(local)};
    }
  }
  auto gather = [&](const at::Tensor& t) { return gather_full(t, slice, ranks, transport); };
  MOTLEY_ASSIGN_OR_RETURN(at::Tensor value, gather(local));
  std::vector<NamedTensor> tensors = {{name, value}};
  if (state) {
    MOTLEY_ASSIGN_OR_RETURN(at::Tensor avg, gather(state->exp_avg));
    MOTLEY_ASSIGN_OR_RETURN(at::Tensor avg_sq, gather(state->exp_avg_sq));
    tensors.push_back({name + ".exp_avg", avg});
    tensors.push_back({name + ".exp_avg_sq", avg_sq});
    tensors.push_back({name + ".step", at::full({1}, state->step, at::kLong)});
  }
  return tensors;
}

Status RankCheckpoint::save(const std::string& dir, int64_t step, int keep, const StateOf& state_of,
                            Transport& transport) const {
  const std::string context = fmt::format("saving checkpoint {} in {}", step, dir);
  if (rank_ == 0) MOTLEY_RETURN_IF_ERROR(begin_checkpoint_save(dir, step));
  MOTLEY_RETURN_IF_ERROR(transport.barrier().with_context(context));
  const std::string partial = checkpoint_partial_directory(dir, step);
  {
    // The assemblers of each parameter build its full tensor (a collective of theirs, in the
    // order of (assemblers, name) on every member); the first of them writes it.
    std::vector<std::pair<std::vector<int>, std::string>> order;
    for (const auto& [name, p] : parameters_) {
      if (p.layer < 0 || !p.saved_here) continue;  // a tied copy
      if (p.assemblers.empty()
              ? place_.replica != 0
              : !std::binary_search(p.assemblers.begin(), p.assemblers.end(), rank_)) {
        continue;
      }
      order.emplace_back(p.assemblers.empty() ? group_ranks_ : p.assemblers, name);
    }
    std::sort(order.begin(), order.end());
    std::map<int, TensorFile> files;
    for (const auto& [ranks, name] : order) {
      const CheckpointParameter& p = parameters_.at(name);
      MOTLEY_ASSIGN_OR_RETURN(std::vector<NamedTensor> tensors,
                              assemble(name, p, ranks, state_of, transport));
      if (ranks.front() != rank_) continue;
      TensorFile& file = files[p.layer];
      file.step = step;
      for (NamedTensor& t : tensors) file.tensors.push_back(std::move(t));
    }
    for (const auto& [layer, file] : files) {
      MOTLEY_RETURN_IF_ERROR(write_tensor_file(layer_file(partial, layer), file));
    }
  }
  MOTLEY_RETURN_IF_ERROR(transport.barrier().with_context(context));
  if (rank_ == 0) {
    // Every layer file is in place: the manifest, then the switch to the new checkpoint.
    const SpecRef ref = model_ref(model_);
    const Json manifest = checkpoint_manifest_to_json(
        CheckpointManifest{step, ref.name, ref.hash, static_cast<int64_t>(model_.layers.size())});
    OutputFiles files;
    files.add(manifest_file(partial), manifest.dump(2) + "\n");
    MOTLEY_RETURN_IF_ERROR(files.commit());
    MOTLEY_RETURN_IF_ERROR(finish_checkpoint_save(dir, step, keep));
  }
  return transport.barrier().with_context(context);
}

Result<int64_t> RankCheckpoint::load(const std::string& checkpoint_dir,
                                     const Restore& restore) const {
  MOTLEY_ASSIGN_OR_RETURN(const std::string dir, find_checkpoint(checkpoint_dir));
  MOTLEY_ASSIGN_OR_RETURN(const int64_t step, read_manifest(dir, model_));
  const std::optional<int64_t> named =
      checkpoint_step_of(std::filesystem::path(dir).filename().string());
  if (named && *named != step) {
    return invalid_argument(
        fmt::format("{}: field 'step': the manifest says {}, its directory is step {}'s",
                    manifest_file(dir), step, *named));
  }
  // Every file and tensor this rank needs is read and checked before any parameter changes.
  std::map<int, LayerFile> files;
  std::map<std::string, SavedParameter> saved;
  for (const auto& [name, p] : parameters_) {
    if (p.held_elsewhere) continue;
    auto it = files.find(p.layer);
    if (it == files.end()) {
      const std::string path = layer_file(dir, p.layer);
      MOTLEY_ASSIGN_OR_RETURN(TensorFile file, read_tensor_file(path));
      if (file.step != step) {
        return invalid_argument(
            fmt::format("{}: holds step {} but the manifest says step {} (an interrupted save?)",
                        path, file.step, step));
      }
      it = files.emplace(p.layer, LayerFile(path, std::move(file.tensors))).first;
    }
    MOTLEY_ASSIGN_OR_RETURN(saved[name], saved_parameter(it->second, name, p));
  }
  for (const auto& [name, p] : parameters_) {
    if (p.held_elsewhere) continue;
    // The checkpoint holds whole tensors (read into host memory); a tensor-parallel rank keeps
    // its rows, on its parameters' device.
    const TensorSlice& slice = p.slice;
    auto mine = [&slice, device = p.tensor.device()](const at::Tensor& file_tensor) {
      const at::Tensor full = file_tensor.to(device);
      return slice.rows.numel() == full.size(slice.dim) ? full
                                                        : full.index_select(slice.dim, slice.rows);
    };
    const SavedParameter& s = saved.at(name);
    {
      at::NoGradGuard no_grad;
      p.tensor.copy_(mine(s.value));
    }
    if (s.state) {
      restore(p.tensor,
              AdamWStep::State{s.state->step, mine(s.state->exp_avg), mine(s.state->exp_avg_sq)});
    }
  }
  return step;
}

}  // namespace motley::internal
