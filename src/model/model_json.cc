#include "motley/model/model_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "motley/core/checked_math.h"
#include "motley/model/hf_config.h"
#include "motley/model/layer_cost.h"
#include "motley/model/limits.h"
#include "motley/model/presets.h"
#include "motley/model/profile.h"

namespace motley {
namespace {

// ---------------------------------------------------------------------------------------------
// Writing

Json attention_to_json(const AttentionShape& a) {
  Json j = Json::object();
  j["hidden"] = a.hidden;
  j["num_heads"] = a.num_heads;
  j["num_kv_heads"] = a.num_kv_heads;
  j["head_dim"] = a.head_dim;
  j["v_head_dim"] = a.v_head_dim;
  j["qkv_bias"] = a.qkv_bias;
  j["output_bias"] = a.output_bias;
  j["sliding_window"] = a.sliding_window;
  j["causal"] = a.causal;
  j["qk_norm"] = a.qk_norm;
  j["sinks"] = a.sinks;
  j["mla"] = a.mla;
  j["q_lora_rank"] = a.q_lora_rank;
  j["kv_lora_rank"] = a.kv_lora_rank;
  j["qk_nope_head_dim"] = a.qk_nope_head_dim;
  j["qk_rope_head_dim"] = a.qk_rope_head_dim;
  return j;
}

Json ffn_to_json(const FeedForwardShape& f) {
  Json j = Json::object();
  j["hidden"] = f.hidden;
  j["ffn_size"] = f.ffn_size;
  j["activation"] = activation_name(f.activation);
  j["bias"] = f.bias;
  return j;
}

Json moe_to_json(const MoeShape& m) {
  Json j = Json::object();
  j["hidden"] = m.hidden;
  j["num_experts"] = m.num_experts;
  j["top_k"] = m.top_k;
  j["expert_ffn_size"] = m.expert_ffn_size;
  j["num_shared_experts"] = m.num_shared_experts;
  j["shared_ffn_size"] = m.shared_ffn_size;
  j["activation"] = activation_name(m.activation);
  j["expert_bias"] = m.expert_bias;
  j["router_bias"] = m.router_bias;
  j["shared_expert_gate"] = m.shared_expert_gate;
  j["latent_size"] = m.latent_size;
  return j;
}

Json mamba_to_json(const MambaShape& m) {
  Json j = Json::object();
  j["version"] = m.version;
  j["hidden"] = m.hidden;
  j["d_inner"] = m.d_inner;
  j["d_state"] = m.d_state;
  j["n_groups"] = m.n_groups;
  j["n_heads"] = m.n_heads;
  j["head_dim"] = m.head_dim;
  j["conv_kernel"] = m.conv_kernel;
  j["chunk_size"] = m.chunk_size;
  j["conv_bias"] = m.conv_bias;
  j["proj_bias"] = m.proj_bias;
  j["gated_norm"] = m.gated_norm;
  j["dt_rank"] = m.dt_rank;
  j["inner_norms"] = m.inner_norms;
  return j;
}

Json embedding_to_json(const EmbeddingShape& e) {
  Json j = Json::object();
  j["vocab"] = e.vocab;
  j["hidden"] = e.hidden;
  j["learned_positions"] = e.learned_positions;
  return j;
}

Json head_to_json(const HeadShape& h) {
  Json j = Json::object();
  j["vocab"] = h.vocab;
  j["hidden"] = h.hidden;
  j["tied"] = h.tied;
  return j;
}

Json patch_embedding_to_json(const PatchEmbeddingShape& p) {
  Json j = Json::object();
  j["channels"] = p.channels;
  j["patch_size"] = p.patch_size;
  j["hidden"] = p.hidden;
  j["num_positions"] = p.num_positions;
  return j;
}

Json projector_to_json(const ProjectorShape& p) {
  Json j = Json::object();
  j["in_hidden"] = p.in_hidden;
  j["out_hidden"] = p.out_hidden;
  j["ffn_size"] = p.ffn_size;
  j["bias"] = p.bias;
  return j;
}

Json measured_to_json(const MeasuredLayer& m) {
  Json j = measured_times_to_json(m.times);
  j["measured_on"] = m.measured_on;
  if (m.weight_pass != WeightPass::kWeightsOnly) j["weight_pass"] = weight_pass_name(m.weight_pass);
  if (m.optimizer_step) j["optimizer_s"] = m.optimizer_step->value();
  if (!m.times_by_device.empty()) {
    Json by_device = Json::object();
    for (const auto& [device, times] : m.times_by_device) {
      by_device[device] = measured_times_to_json(times);
    }
    j["times_by_device"] = std::move(by_device);
  }
  if (!m.times_by_tp.empty()) j["times_by_tp"] = times_by_tp_to_json(m.times_by_tp);
  j["seq_len"] = m.seq_len;
  j["micro_batch_size"] = m.micro_batch_size;
  j["param_bytes"] = number_json(m.param_bytes.value());
  j["activation_bytes"] = number_json(m.activation_bytes.value());
  j["output_bytes"] = number_json(m.output_bytes.value());
  if (m.vocab > 0) j["vocab"] = m.vocab;
  return j;
}

Json layer_to_json(const Layer& layer) {
  Json j = Json::object();
  j["name"] = layer.name;
  j["kind"] = layer_kind_name(layer.kind);
  j["num_norms"] = layer.num_norms;
  j["norm_bias"] = layer.norm_bias;
  j["tokens_per_sample"] = layer.tokens_per_sample;
  if (layer.attention) j["attention"] = attention_to_json(*layer.attention);
  if (layer.ffn) j["ffn"] = ffn_to_json(*layer.ffn);
  if (layer.moe) j["moe"] = moe_to_json(*layer.moe);
  if (layer.mamba) j["mamba"] = mamba_to_json(*layer.mamba);
  if (layer.embedding) j["embedding"] = embedding_to_json(*layer.embedding);
  if (layer.head) j["head"] = head_to_json(*layer.head);
  if (layer.patch_embedding) j["patch_embedding"] = patch_embedding_to_json(*layer.patch_embedding);
  if (layer.projector) j["projector"] = projector_to_json(*layer.projector);
  if (layer.measured) j["measured"] = measured_to_json(*layer.measured);
  return j;
}

// ---------------------------------------------------------------------------------------------
// Reading. Sizes are required; flags and secondary sizes default to the struct's defaults, so a
// hand-written file can stay short while a written one states everything.

Result<Activation> activation_from(const JsonField& f, std::string_view key, Activation fallback) {
  if (!f.has(key)) return fallback;
  MOTLEY_ASSIGN_OR_RETURN(std::string name, f.get_string(key));
  std::optional<Activation> a = parse_activation(name);
  if (!a) {
    return f.child_error(key, fmt::format("unknown activation \"{}\"; expected {}", name,
                                          join_alternatives(activation_names())));
  }
  return *a;
}

Result<AttentionShape> attention_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(
      f.check_keys({"hidden", "num_heads", "num_kv_heads", "head_dim", "v_head_dim", "qkv_bias",
                    "output_bias", "sliding_window", "causal", "qk_norm", "sinks", "mla",
                    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim"}));
  AttentionShape a;
  MOTLEY_ASSIGN_OR_RETURN(a.hidden, f.get_positive_int("hidden"));
  MOTLEY_ASSIGN_OR_RETURN(a.num_heads, f.get_positive_int("num_heads"));
  MOTLEY_ASSIGN_OR_RETURN(a.num_kv_heads, f.get_positive_int_or("num_kv_heads", a.num_heads));
  if (f.has("head_dim") || a.hidden % a.num_heads != 0) {
    MOTLEY_ASSIGN_OR_RETURN(a.head_dim, f.get_positive_int("head_dim"));
  } else {
    a.head_dim = a.hidden / a.num_heads;
  }
  MOTLEY_ASSIGN_OR_RETURN(a.v_head_dim, f.get_nonnegative_int_or("v_head_dim", 0));
  MOTLEY_ASSIGN_OR_RETURN(a.qkv_bias, f.get_bool_or("qkv_bias", false));
  MOTLEY_ASSIGN_OR_RETURN(a.output_bias, f.get_bool_or("output_bias", false));
  MOTLEY_ASSIGN_OR_RETURN(a.sliding_window, f.get_nonnegative_int_or("sliding_window", 0));
  MOTLEY_ASSIGN_OR_RETURN(a.causal, f.get_bool_or("causal", true));
  MOTLEY_ASSIGN_OR_RETURN(a.qk_norm, f.get_bool_or("qk_norm", false));
  MOTLEY_ASSIGN_OR_RETURN(a.sinks, f.get_bool_or("sinks", false));
  MOTLEY_ASSIGN_OR_RETURN(a.mla, f.get_bool_or("mla", false));
  MOTLEY_ASSIGN_OR_RETURN(a.q_lora_rank, f.get_nonnegative_int_or("q_lora_rank", 0));
  MOTLEY_ASSIGN_OR_RETURN(a.kv_lora_rank, f.get_nonnegative_int_or("kv_lora_rank", 0));
  MOTLEY_ASSIGN_OR_RETURN(a.qk_nope_head_dim, f.get_nonnegative_int_or("qk_nope_head_dim", 0));
  MOTLEY_ASSIGN_OR_RETURN(a.qk_rope_head_dim, f.get_nonnegative_int_or("qk_rope_head_dim", 0));
  return a;
}

Result<FeedForwardShape> ffn_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"hidden", "ffn_size", "activation", "bias"}));
  FeedForwardShape s;
  MOTLEY_ASSIGN_OR_RETURN(s.hidden, f.get_positive_int("hidden"));
  MOTLEY_ASSIGN_OR_RETURN(s.ffn_size, f.get_positive_int("ffn_size"));
  MOTLEY_ASSIGN_OR_RETURN(s.activation, activation_from(f, "activation", Activation::kSwiGlu));
  MOTLEY_ASSIGN_OR_RETURN(s.bias, f.get_bool_or("bias", false));
  return s;
}

Result<MoeShape> moe_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys(
      {"hidden", "num_experts", "top_k", "expert_ffn_size", "num_shared_experts", "shared_ffn_size",
       "activation", "expert_bias", "router_bias", "shared_expert_gate", "latent_size"}));
  MoeShape m;
  MOTLEY_ASSIGN_OR_RETURN(m.hidden, f.get_positive_int("hidden"));
  MOTLEY_ASSIGN_OR_RETURN(m.num_experts, f.get_positive_int("num_experts"));
  MOTLEY_ASSIGN_OR_RETURN(m.top_k, f.get_positive_int("top_k"));
  MOTLEY_ASSIGN_OR_RETURN(m.expert_ffn_size, f.get_positive_int("expert_ffn_size"));
  MOTLEY_ASSIGN_OR_RETURN(m.num_shared_experts, f.get_nonnegative_int_or("num_shared_experts", 0));
  MOTLEY_ASSIGN_OR_RETURN(m.shared_ffn_size,
                          f.get_nonnegative_int_or(
                              "shared_ffn_size", m.num_shared_experts > 0 ? m.expert_ffn_size : 0));
  MOTLEY_ASSIGN_OR_RETURN(m.activation, activation_from(f, "activation", Activation::kSwiGlu));
  MOTLEY_ASSIGN_OR_RETURN(m.expert_bias, f.get_bool_or("expert_bias", false));
  MOTLEY_ASSIGN_OR_RETURN(m.router_bias, f.get_bool_or("router_bias", false));
  MOTLEY_ASSIGN_OR_RETURN(m.shared_expert_gate, f.get_bool_or("shared_expert_gate", false));
  MOTLEY_ASSIGN_OR_RETURN(m.latent_size, f.get_nonnegative_int_or("latent_size", 0));
  return m;
}

Result<MambaShape> mamba_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys(
      {"version", "hidden", "d_inner", "d_state", "n_groups", "n_heads", "head_dim", "conv_kernel",
       "chunk_size", "conv_bias", "proj_bias", "gated_norm", "dt_rank", "inner_norms"}));
  MambaShape m;
  MOTLEY_ASSIGN_OR_RETURN(int64_t version, f.get_int_or("version", 2));
  if (version != 1 && version != 2) {
    return f.child_error("version", fmt::format("expected 1 or 2, got {}", version));
  }
  m.version = static_cast<int>(version);
  MOTLEY_ASSIGN_OR_RETURN(m.hidden, f.get_positive_int("hidden"));
  // Defaults derived from a hidden size past its limit only need not overflow: validation
  // rejects the hidden size itself.
  const int64_t hidden = std::min(m.hidden, kMaxWidth);
  MOTLEY_ASSIGN_OR_RETURN(m.d_inner, f.get_positive_int_or("d_inner", 2 * hidden));
  MOTLEY_ASSIGN_OR_RETURN(m.d_state, f.get_positive_int("d_state"));
  if (m.version == 2) {
    MOTLEY_ASSIGN_OR_RETURN(m.n_groups, f.get_positive_int_or("n_groups", 1));
    MOTLEY_ASSIGN_OR_RETURN(m.chunk_size, f.get_positive_int_or("chunk_size", m.chunk_size));
    MOTLEY_ASSIGN_OR_RETURN(m.n_heads, f.get_positive_int("n_heads"));
    if (f.has("head_dim") || m.d_inner % m.n_heads != 0) {
      MOTLEY_ASSIGN_OR_RETURN(m.head_dim, f.get_positive_int("head_dim"));
    } else {
      m.head_dim = m.d_inner / m.n_heads;
    }
  } else {
    // Not used by Mamba-1; kept only so that a written model reads back unchanged.
    MOTLEY_ASSIGN_OR_RETURN(m.n_groups, f.get_nonnegative_int_or("n_groups", m.n_groups));
    MOTLEY_ASSIGN_OR_RETURN(m.chunk_size, f.get_nonnegative_int_or("chunk_size", m.chunk_size));
    MOTLEY_ASSIGN_OR_RETURN(m.n_heads, f.get_nonnegative_int_or("n_heads", 0));
    MOTLEY_ASSIGN_OR_RETURN(m.head_dim, f.get_nonnegative_int_or("head_dim", 0));
  }
  MOTLEY_ASSIGN_OR_RETURN(m.conv_kernel, f.get_positive_int_or("conv_kernel", m.conv_kernel));
  MOTLEY_ASSIGN_OR_RETURN(m.conv_bias, f.get_bool_or("conv_bias", m.conv_bias));
  MOTLEY_ASSIGN_OR_RETURN(m.proj_bias, f.get_bool_or("proj_bias", m.proj_bias));
  MOTLEY_ASSIGN_OR_RETURN(m.gated_norm, f.get_bool_or("gated_norm", m.gated_norm));
  // Mamba-1's default time-step rank is ceil(hidden / 16) (Gu & Dao 2023, "dt_rank=auto").
  MOTLEY_ASSIGN_OR_RETURN(
      m.dt_rank, f.get_nonnegative_int_or("dt_rank", m.version == 1 ? (hidden + 15) / 16 : 0));
  MOTLEY_ASSIGN_OR_RETURN(m.inner_norms, f.get_bool_or("inner_norms", false));
  return m;
}

Result<EmbeddingShape> embedding_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"vocab", "hidden", "learned_positions"}));
  EmbeddingShape e;
  MOTLEY_ASSIGN_OR_RETURN(e.vocab, f.get_positive_int("vocab"));
  MOTLEY_ASSIGN_OR_RETURN(e.hidden, f.get_positive_int("hidden"));
  MOTLEY_ASSIGN_OR_RETURN(e.learned_positions, f.get_nonnegative_int_or("learned_positions", 0));
  return e;
}

Result<HeadShape> head_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"vocab", "hidden", "tied"}));
  HeadShape h;
  MOTLEY_ASSIGN_OR_RETURN(h.vocab, f.get_positive_int("vocab"));
  MOTLEY_ASSIGN_OR_RETURN(h.hidden, f.get_positive_int("hidden"));
  MOTLEY_ASSIGN_OR_RETURN(h.tied, f.get_bool_or("tied", false));
  return h;
}

Result<PatchEmbeddingShape> patch_embedding_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"channels", "patch_size", "hidden", "num_positions"}));
  PatchEmbeddingShape p;
  MOTLEY_ASSIGN_OR_RETURN(p.channels, f.get_positive_int_or("channels", p.channels));
  MOTLEY_ASSIGN_OR_RETURN(p.patch_size, f.get_positive_int_or("patch_size", p.patch_size));
  MOTLEY_ASSIGN_OR_RETURN(p.hidden, f.get_positive_int("hidden"));
  MOTLEY_ASSIGN_OR_RETURN(p.num_positions, f.get_nonnegative_int("num_positions"));
  return p;
}

Result<ProjectorShape> projector_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"in_hidden", "out_hidden", "ffn_size", "bias"}));
  ProjectorShape p;
  MOTLEY_ASSIGN_OR_RETURN(p.in_hidden, f.get_positive_int("in_hidden"));
  MOTLEY_ASSIGN_OR_RETURN(p.out_hidden, f.get_positive_int("out_hidden"));
  MOTLEY_ASSIGN_OR_RETURN(p.ffn_size, f.get_nonnegative_int_or("ffn_size", 0));
  MOTLEY_ASSIGN_OR_RETURN(p.bias, f.get_bool_or("bias", true));
  return p;
}

Result<MeasuredLayer> measured_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys(
      {"measured_on", "forward_s", "backward_input_s", "backward_weight_s", "selective_recompute_s",
       "backward_s", "times_by_device", "times_by_tp", "seq_len", "micro_batch_size", "param_bytes",
       "activation_bytes", "output_bytes", "vocab", "weight_pass", "optimizer_s"}));
  MeasuredLayer m;
  MOTLEY_ASSIGN_OR_RETURN(m.measured_on, f.get_string("measured_on"));
  MOTLEY_ASSIGN_OR_RETURN(m.weight_pass,
                          weight_pass_from_json(f, "weight_pass", WeightPass::kWeightsOnly));
  // The times on measured_on are the layer's reference; all three are needed.
  for (std::string_view key : {"forward_s", "backward_input_s", "backward_weight_s"}) {
    if (!f.has(key)) return f.child_error(key, "is missing");
  }
  MOTLEY_ASSIGN_OR_RETURN(m.times, measured_times_from_json(f));
  if (std::optional<JsonField> by_device = f.find("times_by_device")) {
    MOTLEY_ASSIGN_OR_RETURN(std::vector<std::string> devices, by_device->keys());
    for (const std::string& device : devices) {
      MOTLEY_ASSIGN_OR_RETURN(JsonField entry, by_device->get(device));
      MOTLEY_RETURN_IF_ERROR(entry.check_keys({"forward_s", "backward_input_s", "backward_weight_s",
                                               "selective_recompute_s", "backward_s"}));
      MOTLEY_ASSIGN_OR_RETURN(m.times_by_device[device], measured_times_from_json(entry));
    }
  }
  if (std::optional<JsonField> by_tp = f.find("times_by_tp")) {
    MOTLEY_ASSIGN_OR_RETURN(m.times_by_tp, times_by_tp_from_json(*by_tp));
  }
  MOTLEY_ASSIGN_OR_RETURN(m.seq_len, f.get_nonnegative_int_or("seq_len", 0));
  MOTLEY_ASSIGN_OR_RETURN(m.micro_batch_size, f.get_nonnegative_int_or("micro_batch_size", 0));
  MOTLEY_ASSIGN_OR_RETURN(double param_bytes, f.get_nonnegative_double_or("param_bytes", 0));
  MOTLEY_ASSIGN_OR_RETURN(double act_bytes, f.get_nonnegative_double_or("activation_bytes", 0));
  MOTLEY_ASSIGN_OR_RETURN(double out_bytes, f.get_nonnegative_double_or("output_bytes", 0));
  m.param_bytes = Bytes(param_bytes);
  m.activation_bytes = Bytes(act_bytes);
  m.output_bytes = Bytes(out_bytes);
  MOTLEY_ASSIGN_OR_RETURN(m.vocab, f.get_int_in_or("vocab", IntRange{1, kMaxVocab}, 0));
  if (f.has("optimizer_s")) {
    MOTLEY_ASSIGN_OR_RETURN(double optimizer, f.get_nonnegative_double("optimizer_s"));
    m.optimizer_step = Seconds(optimizer);
  }
  return m;
}

// Norms a layer of each kind has in the common pre-norm layout, for files that omit num_norms.
int64_t default_num_norms(LayerKind kind) {
  switch (kind) {
    case LayerKind::kAttention:
    case LayerKind::kFeedForward:
    case LayerKind::kMoe:
    case LayerKind::kMamba:
    case LayerKind::kHead:
      return 1;
    case LayerKind::kDecoderBlock:
    case LayerKind::kVisionBlock:
      return 2;
    case LayerKind::kEmbedding:
    case LayerKind::kPatchEmbedding:
    case LayerKind::kProjector:
    case LayerKind::kMeasured:
      return 0;
  }
  return 0;
}

template <class Shape, class Reader>
Status read_optional(const JsonField& f, std::string_view key, Reader reader,
                     std::optional<Shape>* out) {
  std::optional<JsonField> child = f.find(key);
  if (!child) return Status::ok();
  Result<Shape> shape = reader(*child);
  if (!shape.is_ok()) return shape.status();
  *out = std::move(shape).value();
  return Status::ok();
}

Result<Layer> layer_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys(
      {"name", "kind", "num_norms", "norm_bias", "tokens_per_sample", "attention", "ffn", "moe",
       "mamba", "embedding", "head", "patch_embedding", "projector", "measured"}));
  Layer layer;
  MOTLEY_ASSIGN_OR_RETURN(layer.name, f.get_string("name"));
  MOTLEY_ASSIGN_OR_RETURN(std::string kind, f.get_string("kind"));
  std::optional<LayerKind> parsed = parse_layer_kind(kind);
  if (!parsed) {
    return f.child_error("kind", fmt::format("unknown layer kind \"{}\"; expected {}", kind,
                                             join_alternatives(layer_kind_names())));
  }
  layer.kind = *parsed;
  MOTLEY_ASSIGN_OR_RETURN(layer.num_norms,
                          f.get_nonnegative_int_or("num_norms", default_num_norms(layer.kind)));
  MOTLEY_ASSIGN_OR_RETURN(layer.norm_bias, f.get_bool_or("norm_bias", false));
  MOTLEY_ASSIGN_OR_RETURN(layer.tokens_per_sample,
                          f.get_nonnegative_int_or("tokens_per_sample", 0));
  MOTLEY_RETURN_IF_ERROR(read_optional(f, "attention", attention_from_json, &layer.attention));
  MOTLEY_RETURN_IF_ERROR(read_optional(f, "ffn", ffn_from_json, &layer.ffn));
  MOTLEY_RETURN_IF_ERROR(read_optional(f, "moe", moe_from_json, &layer.moe));
  MOTLEY_RETURN_IF_ERROR(read_optional(f, "mamba", mamba_from_json, &layer.mamba));
  MOTLEY_RETURN_IF_ERROR(read_optional(f, "embedding", embedding_from_json, &layer.embedding));
  MOTLEY_RETURN_IF_ERROR(read_optional(f, "head", head_from_json, &layer.head));
  MOTLEY_RETURN_IF_ERROR(
      read_optional(f, "patch_embedding", patch_embedding_from_json, &layer.patch_embedding));
  MOTLEY_RETURN_IF_ERROR(read_optional(f, "projector", projector_from_json, &layer.projector));
  MOTLEY_RETURN_IF_ERROR(read_optional(f, "measured", measured_from_json, &layer.measured));
  return layer;
}

Result<std::vector<Layer>> layers_from_json(const JsonField& list) {
  if (list.is_array() && list.json().size() > static_cast<size_t>(kMaxLayers)) {
    return list.error(
        fmt::format("lists {} layers; at most {} are supported", list.json().size(), kMaxLayers));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> items, list.items());
  std::vector<Layer> layers;
  layers.reserve(items.size());
  for (const JsonField& item : items) {
    MOTLEY_ASSIGN_OR_RETURN(Layer layer, layer_from_json(item));
    layers.push_back(std::move(layer));
  }
  return layers;
}

// ---------------------------------------------------------------------------------------------
// Validation. Each check returns an empty string when the shape is fine, else what is wrong,
// naming the sub-shape field; validate_model adds the source and the layer.

// A sliding window only caps the keys a query attends to, in floating point: any size is safe.
constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

class Problems {
 public:
  explicit Problems(std::string prefix) : prefix_(std::move(prefix)) {}
  bool ok() const { return first_.empty(); }
  const std::string& first() const { return first_; }

  void require(bool cond, const std::string& what) {
    if (first_.empty() && !cond) first_ = what;
  }
  // A size from 1 to `max`.
  void positive(std::string_view field, int64_t v, int64_t max) {
    require(v > 0, fmt::format("{} must be positive, got {}", name(field), v));
    at_most(field, v, max);
  }
  // An optional size, count or window: 0 to `max`.
  void nonnegative(std::string_view field, int64_t v, int64_t max) {
    require(v >= 0, fmt::format("{} must not be negative, got {}", name(field), v));
    at_most(field, v, max);
  }
  void at_most(std::string_view field, int64_t v, int64_t max) {
    require(v <= max, fmt::format("{} must be at most {}, got {}", name(field), max, v));
  }
  void seconds(std::string_view field, const std::optional<Seconds>& t) {
    if (!t) return;
    require(
        std::isfinite(t->value()) && t->value() >= 0,
        fmt::format("{} must be a finite non-negative time, got {:f}", name(field), t->value()));
    require(t->value() <= kMaxLayerSeconds, fmt::format("{} must be at most {:g} seconds, got {:g}",
                                                        name(field), kMaxLayerSeconds, t->value()));
  }
  void bytes(std::string_view field, Bytes b) {
    require(std::isfinite(b.value()) && b.value() >= 0,
            fmt::format("{} must be a finite non-negative size, got {:f}", name(field), b.value()));
    require(b.value() <= kMaxLayerBytes, fmt::format("{} must be at most {:g} bytes, got {:g}",
                                                     name(field), kMaxLayerBytes, b.value()));
  }
  std::string name(std::string_view field) const { return fmt::format("{}{}", prefix_, field); }

 private:
  std::string prefix_;
  std::string first_;
};

std::string check_attention(const AttentionShape& a) {
  Problems p("attention.");
  p.positive("hidden", a.hidden, kMaxWidth);
  p.positive("num_heads", a.num_heads, kMaxHeads);
  p.positive("num_kv_heads", a.num_kv_heads, kMaxHeads);
  p.positive("head_dim", a.head_dim, kMaxWidth);
  p.nonnegative("v_head_dim", a.v_head_dim, kMaxWidth);
  p.nonnegative("sliding_window", a.sliding_window, kUnbounded);
  if (!p.ok()) return p.first();
  p.require(
      a.num_heads % a.num_kv_heads == 0,
      fmt::format("attention.num_heads ({}) must be a multiple of attention.num_kv_heads ({})",
                  a.num_heads, a.num_kv_heads));
  if (a.mla) {
    p.nonnegative("q_lora_rank", a.q_lora_rank, kMaxWidth);
    p.positive("kv_lora_rank", a.kv_lora_rank, kMaxWidth);
    p.positive("qk_nope_head_dim", a.qk_nope_head_dim, kMaxWidth);
    p.nonnegative("qk_rope_head_dim", a.qk_rope_head_dim, kMaxWidth);
    if (!p.ok()) return p.first();
    p.require(a.head_dim == a.qk_nope_head_dim + a.qk_rope_head_dim,
              fmt::format("attention.head_dim ({}) of a latent (mla) attention must equal "
                          "qk_nope_head_dim + qk_rope_head_dim ({})",
                          a.head_dim, a.qk_nope_head_dim + a.qk_rope_head_dim));
    // The rotary embedding turns pairs of dimensions.
    p.require(a.qk_rope_head_dim % 2 == 0,
              fmt::format("attention.qk_rope_head_dim ({}) must be even: rotary embeddings "
                          "turn pairs",
                          a.qk_rope_head_dim));
  }
  return p.first();
}

std::string check_ffn(const FeedForwardShape& f) {
  Problems p("ffn.");
  p.positive("hidden", f.hidden, kMaxWidth);
  p.positive("ffn_size", f.ffn_size, kMaxWidth);
  return p.first();
}

std::string check_moe(const MoeShape& m) {
  Problems p("moe.");
  p.positive("hidden", m.hidden, kMaxWidth);
  p.positive("num_experts", m.num_experts, kMaxHeads);
  p.positive("top_k", m.top_k, kMaxHeads);
  p.positive("expert_ffn_size", m.expert_ffn_size, kMaxWidth);
  p.nonnegative("num_shared_experts", m.num_shared_experts, kMaxHeads);
  p.nonnegative("shared_ffn_size", m.shared_ffn_size, kMaxWidth);
  p.nonnegative("latent_size", m.latent_size, kMaxWidth);
  if (!p.ok()) return p.first();
  p.require(
      m.top_k <= m.num_experts,
      fmt::format("moe.top_k ({}) must not exceed moe.num_experts ({})", m.top_k, m.num_experts));
  if (m.num_shared_experts > 0) p.positive("shared_ffn_size", m.shared_ffn_size, kMaxWidth);
  return p.first();
}

std::string check_mamba(const MambaShape& m) {
  Problems p("mamba.");
  p.require(m.version == 1 || m.version == 2,
            fmt::format("mamba.version must be 1 or 2, got {}", m.version));
  p.positive("hidden", m.hidden, kMaxWidth);
  p.positive("d_inner", m.d_inner, kMaxWidth);
  p.positive("d_state", m.d_state, kMaxWidth);
  p.positive("conv_kernel", m.conv_kernel, kMaxKernel);
  if (!p.ok()) return p.first();
  // Heads, groups and chunks belong to Mamba-2's scan; Mamba-1 has none of them.
  if (m.version == 2) {
    p.positive("n_groups", m.n_groups, kMaxHeads);
    p.positive("chunk_size", m.chunk_size, kMaxSeqLen);
    p.positive("n_heads", m.n_heads, kMaxHeads);
    p.positive("head_dim", m.head_dim, kMaxWidth);
    if (!p.ok()) return p.first();
    p.require(m.n_heads * m.head_dim == m.d_inner,
              fmt::format("mamba.n_heads * mamba.head_dim ({}) must equal mamba.d_inner ({})",
                          m.n_heads * m.head_dim, m.d_inner));
    p.require(m.n_heads % m.n_groups == 0,
              fmt::format("mamba.n_heads ({}) must be a multiple of mamba.n_groups ({})", m.n_heads,
                          m.n_groups));
  } else {
    p.positive("dt_rank", m.dt_rank, kMaxWidth);
  }
  return p.first();
}

std::string check_embedding(const EmbeddingShape& e) {
  Problems p("embedding.");
  p.positive("vocab", e.vocab, kMaxVocab);
  p.positive("hidden", e.hidden, kMaxWidth);
  p.nonnegative("learned_positions", e.learned_positions, kMaxSeqLen);
  return p.first();
}

std::string check_head(const HeadShape& h) {
  Problems p("head.");
  p.positive("vocab", h.vocab, kMaxVocab);
  p.positive("hidden", h.hidden, kMaxWidth);
  return p.first();
}

std::string check_patch_embedding(const PatchEmbeddingShape& s) {
  Problems p("patch_embedding.");
  p.positive("channels", s.channels, kMaxKernel);
  p.positive("patch_size", s.patch_size, kMaxKernel);
  p.positive("hidden", s.hidden, kMaxWidth);
  p.nonnegative("num_positions", s.num_positions, kMaxSeqLen);
  return p.first();
}

std::string check_projector(const ProjectorShape& s) {
  Problems p("projector.");
  p.positive("in_hidden", s.in_hidden, kMaxWidth);
  p.positive("out_hidden", s.out_hidden, kMaxWidth);
  p.nonnegative("ffn_size", s.ffn_size, kMaxWidth);
  return p.first();
}

std::string check_measured(const MeasuredLayer& m) {
  Problems p("measured.");
  p.require(!m.measured_on.empty(), "measured.measured_on must name a device type");
  p.require(m.times.forward.has_value(), "measured.forward_s is missing");
  p.require(m.times.backward_input.has_value(), "measured.backward_input_s is missing");
  p.require(m.times.backward_weight.has_value(), "measured.backward_weight_s is missing");
  p.seconds("forward_s", m.times.forward);
  p.seconds("backward_input_s", m.times.backward_input);
  p.seconds("backward_weight_s", m.times.backward_weight);
  p.seconds("selective_recompute_s", m.times.selective_recompute);
  p.seconds("backward_s", m.times.backward);
  auto check_times = [&p](const std::string& where, const MeasuredTimes& times) {
    p.seconds(where + ".forward_s", times.forward);
    p.seconds(where + ".backward_input_s", times.backward_input);
    p.seconds(where + ".backward_weight_s", times.backward_weight);
    p.seconds(where + ".selective_recompute_s", times.selective_recompute);
    p.seconds(where + ".backward_s", times.backward);
  };
  for (const auto& [device, times] : m.times_by_device) {
    p.require(!device.empty(), "measured.times_by_device has an empty device name");
    check_times(fmt::format("times_by_device.{}", device), times);
  }
  for (const auto& [device, by_degree] : m.times_by_tp) {
    p.require(!device.empty(), "measured.times_by_tp has an empty device name");
    for (const auto& [degree, times] : by_degree) {
      p.require(degree >= kMinMeasuredTpDegree && degree <= kMaxHeads,
                fmt::format("measured.times_by_tp.{}: tensor-parallel degree {} must be from {} "
                            "to {}",
                            device, degree, kMinMeasuredTpDegree, kMaxHeads));
      check_times(fmt::format("times_by_tp.{}.{}", device, degree), times);
    }
  }
  p.nonnegative("seq_len", m.seq_len, kMaxSeqLen);
  p.nonnegative("micro_batch_size", m.micro_batch_size, kMaxMicroBatchSize);
  p.bytes("param_bytes", m.param_bytes);
  p.bytes("activation_bytes", m.activation_bytes);
  p.bytes("output_bytes", m.output_bytes);
  p.seconds("optimizer_s", m.optimizer_step);
  return p.first();
}

// Which sub-shapes a kind carries. `either_ffn_or_moe` is the decoder block's choice.
struct KindShapes {
  bool attention = false, ffn = false, moe = false, mamba = false, embedding = false, head = false,
       patch_embedding = false, projector = false, measured = false;
  bool either_ffn_or_moe = false;
};

KindShapes shapes_for(LayerKind kind) {
  KindShapes s;
  switch (kind) {
    case LayerKind::kEmbedding:
      s.embedding = true;
      break;
    case LayerKind::kAttention:
      s.attention = true;
      break;
    case LayerKind::kFeedForward:
      s.ffn = true;
      break;
    case LayerKind::kMoe:
      s.moe = true;
      break;
    case LayerKind::kMamba:
      s.mamba = true;
      break;
    case LayerKind::kDecoderBlock:
      s.attention = true;
      s.either_ffn_or_moe = true;
      break;
    case LayerKind::kPatchEmbedding:
      s.patch_embedding = true;
      break;
    case LayerKind::kVisionBlock:
      s.attention = true;
      s.ffn = true;
      break;
    case LayerKind::kProjector:
      s.projector = true;
      break;
    case LayerKind::kHead:
      s.head = true;
      break;
    case LayerKind::kMeasured:
      s.measured = true;
      break;
  }
  return s;
}

std::string present_shapes(const Layer& l) {
  std::vector<std::string> names;
  if (l.attention) names.emplace_back("attention");
  if (l.ffn) names.emplace_back("ffn");
  if (l.moe) names.emplace_back("moe");
  if (l.mamba) names.emplace_back("mamba");
  if (l.embedding) names.emplace_back("embedding");
  if (l.head) names.emplace_back("head");
  if (l.patch_embedding) names.emplace_back("patch_embedding");
  if (l.projector) names.emplace_back("projector");
  if (l.measured) names.emplace_back("measured");
  if (names.empty()) return "none";
  if (names.size() == 1) return names.front();
  return fmt::format("{} and {}", fmt::join(names.begin(), names.end() - 1, ", "), names.back());
}

std::string check_kind_shapes(const Layer& l) {
  KindShapes want = shapes_for(l.kind);
  std::string needs;
  if (want.attention) needs += "attention";
  if (want.either_ffn_or_moe) needs += " and one of ffn or moe";
  if (want.ffn) needs += needs.empty() ? "ffn" : " and ffn";
  if (want.moe) needs += "moe";
  if (want.mamba) needs += "mamba";
  if (want.embedding) needs += "embedding";
  if (want.head) needs += "head";
  if (want.patch_embedding) needs += "patch_embedding";
  if (want.projector) needs += "projector";
  if (want.measured) needs += "measured";
  bool ok = want.attention == l.attention.has_value() && want.mamba == l.mamba.has_value() &&
            want.embedding == l.embedding.has_value() && want.head == l.head.has_value() &&
            want.patch_embedding == l.patch_embedding.has_value() &&
            want.projector == l.projector.has_value() && want.measured == l.measured.has_value();
  if (want.either_ffn_or_moe) {
    ok = ok && (l.ffn.has_value() != l.moe.has_value());
  } else {
    ok = ok && want.ffn == l.ffn.has_value() && want.moe == l.moe.has_value();
  }
  if (ok) return "";
  return fmt::format("a layer of kind {} needs exactly {}, but this one has {}",
                     layer_kind_name(l.kind), needs, present_shapes(l));
}

std::string check_layer(const Layer& l) {
  if (l.name.empty()) return "the layer name is empty";
  if (std::string s = check_kind_shapes(l); !s.empty()) return s;
  Problems p("");
  p.nonnegative("num_norms", l.num_norms, kMaxNormsPerLayer);
  p.nonnegative("tokens_per_sample", l.tokens_per_sample, kMaxSeqLen);
  if (!p.ok()) return p.first();
  std::string s;
  if (l.attention && !(s = check_attention(*l.attention)).empty()) return s;
  if (l.ffn && !(s = check_ffn(*l.ffn)).empty()) return s;
  if (l.moe && !(s = check_moe(*l.moe)).empty()) return s;
  if (l.mamba && !(s = check_mamba(*l.mamba)).empty()) return s;
  if (l.embedding && !(s = check_embedding(*l.embedding)).empty()) return s;
  if (l.head && !(s = check_head(*l.head)).empty()) return s;
  if (l.patch_embedding && !(s = check_patch_embedding(*l.patch_embedding)).empty()) return s;
  if (l.projector && !(s = check_projector(*l.projector)).empty()) return s;
  if (l.measured && !(s = check_measured(*l.measured)).empty()) return s;
  // The two halves of a block add into one residual stream, so they share its width.
  if (l.attention && l.ffn && l.attention->hidden != l.ffn->hidden) {
    return fmt::format("attention.hidden ({}) differs from ffn.hidden ({})", l.attention->hidden,
                       l.ffn->hidden);
  }
  if (l.attention && l.moe && l.attention->hidden != l.moe->hidden) {
    return fmt::format("attention.hidden ({}) differs from moe.hidden ({})", l.attention->hidden,
                       l.moe->hidden);
  }
  return "";
}

std::string layer_label(const Layer& l, std::string_view list, size_t index) {
  return fmt::format("layer '{}' ({}[{}])", l.name, list, index);
}

// Within the sizes' limits every layer's parameter count fits int64_t; the model's sum is
// bounded here, so that totals downstream cannot overflow either.
Status check_total_params(const ModelSpec& model, const std::string& source) {
  int64_t total = 0;
  for (std::string_view list_name : {"layers", "extra_layers"}) {
    const std::vector<Layer>& list = list_name == "layers" ? model.layers : model.extra_layers;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::optional<int64_t> sum = checked_add(total, layer_stored_params(list[i]));
      if (!sum || *sum > kMaxModelParams) {
        return invalid_argument(
            fmt::format("{}: {}: brings the model past {} parameters, the most supported", source,
                        layer_label(list[i], list_name, i), kMaxModelParams));
      }
      total = *sum;
    }
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------
// Resolving --model.

std::string preset_list() { return fmt::format("{}", fmt::join(model_preset_names(), ", ")); }

Result<ModelSpec> load_model_file(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(Json json, read_json_file(path));
  JsonField root(json, path);
  if (!root.is_object()) {
    return root.error(fmt::format(
        "expected a JSON object (a motley model, a motley profile or a Hugging Face config.json), "
        "got {}",
        describe_json_value(json)));
  }
  if (root.has("format")) {
    MOTLEY_ASSIGN_OR_RETURN(std::string format, root.get_string("format"));
    if (format == kModelFormat) return model_from_json(json, path);
    if (is_profile_format(format)) return profile_from_json(json, path);
    return root.child_error(
        "format", fmt::format("unknown format \"{}\"; expected \"{}\", \"{}\" or \"{}\"", format,
                              kModelFormat, kProfileFormatV1, kProfileFormat));
  }
  if (root.has("model_type")) {
    MOTLEY_ASSIGN_OR_RETURN(ModelSpec model, import_hf_config(json, path));
    MOTLEY_RETURN_IF_ERROR(validate_model(model, path));
    return model;
  }
  return root.error(fmt::format(
      "not a model file: expected a motley model (\"format\": \"{}\"), a motley profile "
      "(\"format\": \"{}\") or a Hugging Face config.json (with \"model_type\")",
      kModelFormat, kProfileFormat));
}

}  // namespace

Json measured_times_to_json(const MeasuredTimes& times) {
  Json j = Json::object();
  if (times.forward) j["forward_s"] = times.forward->value();
  if (times.backward_input) j["backward_input_s"] = times.backward_input->value();
  if (times.backward_weight) j["backward_weight_s"] = times.backward_weight->value();
  if (times.selective_recompute) j["selective_recompute_s"] = times.selective_recompute->value();
  if (times.backward) j["backward_s"] = times.backward->value();
  return j;
}

Result<MeasuredTimes> measured_times_from_json(const JsonField& field) {
  if (!field.is_object()) {
    return field.error(
        fmt::format("expected an object, got {}", describe_json_value(field.json())));
  }
  MeasuredTimes t;
  if (field.has("forward_s")) {
    MOTLEY_ASSIGN_OR_RETURN(double v, field.get_nonnegative_double("forward_s"));
    t.forward = Seconds(v);
  }
  if (field.has("backward_input_s")) {
    MOTLEY_ASSIGN_OR_RETURN(double v, field.get_nonnegative_double("backward_input_s"));
    t.backward_input = Seconds(v);
  }
  if (field.has("backward_weight_s")) {
    MOTLEY_ASSIGN_OR_RETURN(double v, field.get_nonnegative_double("backward_weight_s"));
    t.backward_weight = Seconds(v);
  }
  if (field.has("selective_recompute_s")) {
    MOTLEY_ASSIGN_OR_RETURN(double v, field.get_nonnegative_double("selective_recompute_s"));
    t.selective_recompute = Seconds(v);
  }
  if (field.has("backward_s")) {
    MOTLEY_ASSIGN_OR_RETURN(double v, field.get_nonnegative_double("backward_s"));
    t.backward = Seconds(v);
  }
  return t;
}

Result<WeightPass> weight_pass_from_json(const JsonField& field, std::string_view key,
                                         WeightPass fallback) {
  if (!field.has(key)) return fallback;
  MOTLEY_ASSIGN_OR_RETURN(std::string name, field.get_string(key));
  std::optional<WeightPass> pass = parse_weight_pass(name);
  if (!pass) {
    return field.child_error(
        key, fmt::format("unknown weight pass \"{}\"; expected \"weights_only\" (W computes only "
                         "the weights' gradients) or \"full_backward\" (W walks the layer's "
                         "whole backward again)",
                         name));
  }
  return *pass;
}

Json times_by_tp_to_json(const std::map<std::string, std::map<int, MeasuredTimes>>& by_tp) {
  Json j = Json::object();
  for (const auto& [device, by_degree] : by_tp) {
    Json degrees = Json::object();
    for (const auto& [degree, times] : by_degree) {
      degrees[std::to_string(degree)] = measured_times_to_json(times);
    }
    j[device] = std::move(degrees);
  }
  return j;
}

Result<std::map<std::string, std::map<int, MeasuredTimes>>> times_by_tp_from_json(
    const JsonField& field) {
  if (!field.is_object()) {
    return field.error(fmt::format("expected an object of device type names, got {}",
                                   describe_json_value(field.json())));
  }
  std::map<std::string, std::map<int, MeasuredTimes>> out;
  MOTLEY_ASSIGN_OR_RETURN(std::vector<std::string> devices, field.keys());
  for (const std::string& device : devices) {
    if (device.empty()) return field.error("a device name is empty");
    MOTLEY_ASSIGN_OR_RETURN(JsonField by_degree, field.get(device));
    if (!by_degree.is_object()) {
      return by_degree.error(
          fmt::format("expected an object of tensor-parallel degrees (\"2\", \"4\", ...), got {}",
                      describe_json_value(by_degree.json())));
    }
    MOTLEY_ASSIGN_OR_RETURN(std::vector<std::string> degrees, by_degree.keys());
    if (degrees.empty()) return by_degree.error("expected at least one tensor-parallel degree");
    for (const std::string& key : degrees) {
      // Plain decimal digits only: "2", not "02", "+2", "2.0" or " 2".
      bool digits = !key.empty() && key.size() <= 6 && (key.size() == 1 || key[0] != '0');
      for (char c : key) digits = digits && c >= '0' && c <= '9';
      const int64_t degree = digits ? std::stoll(key) : 0;
      if (!digits || degree < kMinMeasuredTpDegree || degree > kMaxHeads) {
        return by_degree.error(
            fmt::format("tensor-parallel degree \"{}\": expected an integer from {} to {}", key,
                        kMinMeasuredTpDegree, kMaxHeads));
      }
      MOTLEY_ASSIGN_OR_RETURN(JsonField entry, by_degree.get(key));
      MOTLEY_RETURN_IF_ERROR(entry.check_keys({"forward_s", "backward_input_s", "backward_weight_s",
                                               "selective_recompute_s", "backward_s"}));
      MOTLEY_ASSIGN_OR_RETURN(MeasuredTimes t, measured_times_from_json(entry));
      if (!t.forward && !t.backward_input && !t.backward_weight && !t.selective_recompute &&
          !t.backward) {
        return entry.error(
            "expected at least one of forward_s, backward_input_s, backward_weight_s, "
            "selective_recompute_s or backward_s");
      }
      out[device][static_cast<int>(degree)] = t;
    }
  }
  return out;
}

Json model_to_json(const ModelSpec& model) {
  Json j = Json::object();
  j["format"] = kModelFormat;
  j["name"] = model.name;
  j["family"] = model.family;
  j["default_seq_len"] = model.default_seq_len;
  j["dtype"] = dtype_name(model.dtype);
  j["dropout"] = model.dropout;
  Json layers = Json::array();
  for (const Layer& layer : model.layers) layers.push_back(layer_to_json(layer));
  j["layers"] = std::move(layers);
  Json extra = Json::array();
  for (const Layer& layer : model.extra_layers) extra.push_back(layer_to_json(layer));
  j["extra_layers"] = std::move(extra);
  return j;
}

Result<ModelSpec> model_from_json(const Json& json, const std::string& source) {
  return model_from_json(JsonField(json, source));
}

Result<ModelSpec> model_from_json(const JsonField& root) {
  if (!root.is_object()) {
    return root.error(
        fmt::format("expected a motley model (an object with \"format\": \"{}\"), got {}",
                    kModelFormat, describe_json_value(root.json())));
  }
  MOTLEY_RETURN_IF_ERROR(root.check_keys({"format", "name", "family", "default_seq_len", "dtype",
                                          "dropout", "layers", "extra_layers"}));
  MOTLEY_ASSIGN_OR_RETURN(std::string format, root.get_string("format"));
  if (format != kModelFormat) {
    return root.child_error("format",
                            fmt::format("expected \"{}\", got \"{}\"", kModelFormat, format));
  }
  ModelSpec model;
  MOTLEY_ASSIGN_OR_RETURN(model.name, root.get_string_or("name", ""));
  MOTLEY_ASSIGN_OR_RETURN(model.family, root.get_string_or("family", "custom"));
  MOTLEY_ASSIGN_OR_RETURN(model.default_seq_len,
                          root.get_positive_int_or("default_seq_len", model.default_seq_len));
  if (root.has("dtype")) {
    MOTLEY_ASSIGN_OR_RETURN(std::string dtype, root.get_string("dtype"));
    std::optional<DType> parsed = parse_dtype(dtype);
    if (!parsed) {
      return root.child_error(
          "dtype", fmt::format("unknown dtype \"{}\"; expected fp32, bf16 or fp16", dtype));
    }
    model.dtype = *parsed;
  }
  MOTLEY_ASSIGN_OR_RETURN(model.dropout, root.get_bool_or("dropout", false));
  MOTLEY_ASSIGN_OR_RETURN(JsonField layers, root.get("layers"));
  MOTLEY_ASSIGN_OR_RETURN(model.layers, layers_from_json(layers));
  if (std::optional<JsonField> extra = root.find("extra_layers")) {
    MOTLEY_ASSIGN_OR_RETURN(model.extra_layers, layers_from_json(*extra));
  }
  MOTLEY_RETURN_IF_ERROR(validate_model(
      model, root.path().empty() ? root.source()
                                 : fmt::format("{}: field '{}'", root.source(), root.path())));
  return model;
}

Status validate_model(const ModelSpec& model, const std::string& source) {
  if (model.layers.empty()) {
    return invalid_argument(fmt::format("{}: the model has no layers", source));
  }
  const size_t layers = model.layers.size() + model.extra_layers.size();
  if (layers > static_cast<size_t>(kMaxLayers)) {
    return invalid_argument(fmt::format("{}: the model has {} layers; at most {} are supported",
                                        source, layers, kMaxLayers));
  }
  if (model.default_seq_len <= 0 || model.default_seq_len > kMaxSeqLen) {
    return invalid_argument(fmt::format("{}: default_seq_len must be from 1 to {}, got {}", source,
                                        kMaxSeqLen, model.default_seq_len));
  }
  // name -> where it was first seen, for the duplicate message.
  std::map<std::string, std::string> seen;
  auto check_list = [&](const std::vector<Layer>& list, std::string_view list_name) -> Status {
    for (size_t i = 0; i < list.size(); ++i) {
      const Layer& l = list[i];
      std::string label = layer_label(l, list_name, i);
      if (std::string problem = check_layer(l); !problem.empty()) {
        return invalid_argument(fmt::format("{}: {}: {}", source, label, problem));
      }
      auto [it, inserted] = seen.emplace(l.name, fmt::format("{}[{}]", list_name, i));
      if (!inserted) {
        return invalid_argument(
            fmt::format("{}: {}: the name is already used by {}; layer names must be unique",
                        source, label, it->second));
      }
    }
    return Status::ok();
  };
  MOTLEY_RETURN_IF_ERROR(check_list(model.layers, "layers"));
  MOTLEY_RETURN_IF_ERROR(check_list(model.extra_layers, "extra_layers"));
  MOTLEY_RETURN_IF_ERROR(check_total_params(model, source));
  // Each layer of the trained model reads the hidden state the layer before it writes.
  for (size_t i = 1; i < model.layers.size(); ++i) {
    const int64_t read = hidden_width_read(model.layers[i]);
    const int64_t written = hidden_width_written(model.layers[i - 1]);
    if (read > 0 && written > 0 && read != written) {
      return invalid_argument(
          fmt::format("{}: {}: reads a hidden state of width {} but {} before it writes {}", source,
                      layer_label(model.layers[i], "layers", i), read,
                      layer_label(model.layers[i - 1], "layers", i - 1), written));
    }
  }
  // A tied head reuses the embedding matrix, so one of the same shape must exist.
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const Layer& l = model.layers[i];
    if (!l.head || !l.head->tied) continue;
    bool found = false;
    for (const Layer& e : model.layers) {
      found = found || (e.embedding && e.embedding->vocab == l.head->vocab &&
                        e.embedding->hidden == l.head->hidden);
    }
    if (!found) {
      return invalid_argument(fmt::format(
          "{}: {}: head.tied needs an embedding layer with the same vocab ({}) and hidden ({})",
          source, layer_label(l, "layers", i), l.head->vocab, l.head->hidden));
    }
  }
  return Status::ok();
}

int64_t hidden_width_read(const Layer& l) {
  if (l.projector) return l.projector->in_hidden;
  if (l.embedding || l.patch_embedding) return 0;
  if (l.attention) return l.attention->hidden;
  if (l.ffn) return l.ffn->hidden;
  if (l.moe) return l.moe->hidden;
  if (l.mamba) return l.mamba->hidden;
  if (l.head) return l.head->hidden;
  return 0;
}

int64_t hidden_width_written(const Layer& l) {
  if (l.projector) return l.projector->out_hidden;
  if (l.embedding) return l.embedding->hidden;
  if (l.patch_embedding) return l.patch_embedding->hidden;
  if (l.head) return 0;
  return hidden_width_read(l);
}

Result<ModelSpec> load_model(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!name_or_path.empty() && fs::is_directory(name_or_path, ec)) {
    fs::path config = fs::path(name_or_path) / "config.json";
    if (!fs::is_regular_file(config, ec)) {
      return invalid_argument(
          fmt::format("{}: is a directory without a config.json; pass a model file, a Hugging "
                      "Face model directory or a preset name",
                      name_or_path));
    }
    return load_model_file(config.string());
  }
  if (!name_or_path.empty() && fs::exists(name_or_path, ec)) return load_model_file(name_or_path);
  Result<ModelSpec> preset = model_preset(name_or_path);
  if (preset.is_ok()) return preset;
  if (preset.status().code() != StatusCode::kNotFound) return preset.status();
  return not_found(fmt::format("no such file and no preset named '{}'; presets: {}", name_or_path,
                               preset_list()));
}

}  // namespace motley
