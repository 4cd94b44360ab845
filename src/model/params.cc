// Parameter counts per layer: pure functions over the shapes of model.h. Each formula counts
// the weight and bias tensors of the Hugging Face transformers module the shape describes;
// docs/hf-import.md lists them with the module names they were checked against.

#include <fmt/format.h>

#include <cmath>

#include "motley/core/check.h"
#include "motley/model/layer_cost.h"

namespace motley {
namespace {

// One feed-forward network of width `hidden` and intermediate size `ffn`: gate, up and down
// projections when gated (SwiGLU, GeGLU), else up and down.
int64_t ffn_params(int64_t hidden, int64_t ffn, Activation activation, bool bias) {
  if (is_gated(activation)) return 3 * hidden * ffn + (bias ? 2 * ffn + hidden : 0);
  return 2 * hidden * ffn + (bias ? ffn + hidden : 0);
}

int64_t attention_params(const AttentionShape& a) {
  const int64_t h = a.hidden;
  const int64_t heads = a.num_heads;
  const int64_t v_dim = a.v_head_dim > 0 ? a.v_head_dim : a.head_dim;
  int64_t p = 0;
  if (a.mla) {
    // DeepSeek-V2/V3: queries optionally through a LoRA-style bottleneck with its own norm;
    // keys and values from one compressed latent plus a shared rotary key.
    const int64_t qk_dim = a.qk_nope_head_dim + a.qk_rope_head_dim;
    if (a.q_lora_rank > 0) {
      p += h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * heads * qk_dim;
      if (a.qkv_bias) p += a.q_lora_rank;  // q_a_proj bias
    } else {
      p += h * heads * qk_dim;
    }
    p += h * (a.kv_lora_rank + a.qk_rope_head_dim);  // kv_a_proj_with_mqa
    if (a.qkv_bias) p += a.kv_lora_rank + a.qk_rope_head_dim;
    p += a.kv_lora_rank;                                         // kv_a_layernorm
    p += a.kv_lora_rank * heads * (a.qk_nope_head_dim + v_dim);  // kv_b_proj
  } else {
    const int64_t kv = a.num_kv_heads;
    p += h * heads * a.head_dim;                // q
    p += h * kv * a.head_dim + h * kv * v_dim;  // k, v
    if (a.qkv_bias) p += heads * a.head_dim + kv * a.head_dim + kv * v_dim;
    if (a.qk_norm) p += 2 * a.head_dim;
  }
  p += heads * v_dim * h;  // o
  if (a.output_bias) p += h;
  if (a.sinks) p += heads;
  return p;
}

// Parameters of the MoE block a token always uses: router, shared experts and their gate,
// latent projections around the routed experts.
int64_t moe_dense_params(const MoeShape& m) {
  const int64_t h = m.hidden;
  int64_t p = h * m.num_experts + (m.router_bias ? m.num_experts : 0);
  p += m.num_shared_experts * ffn_params(h, m.shared_ffn_size, m.activation, /*bias=*/false);
  if (m.num_shared_experts > 0 && m.shared_expert_gate) p += h;
  if (m.latent_size > 0) p += 2 * h * m.latent_size;
  return p;
}

int64_t expert_params(const MoeShape& m) {
  const int64_t width = m.latent_size > 0 ? m.latent_size : m.hidden;
  return ffn_params(width, m.expert_ffn_size, m.activation, m.expert_bias);
}

int64_t mamba_params(const MambaShape& m) {
  const int64_t h = m.hidden;
  const int64_t inner = m.d_inner;
  if (m.version == 1) {
    // Mamba-1 (Jamba, Falcon-Mamba): x and z from in_proj; dt, B, C from x_proj; a
    // d_inner x d_state decay matrix.
    const int64_t xp = m.dt_rank + 2 * m.d_state;
    int64_t p = h * 2 * inner + (m.proj_bias ? 2 * inner : 0);  // in_proj
    p += inner * m.conv_kernel + (m.conv_bias ? inner : 0);     // depthwise conv1d
    p += inner * xp;                                            // x_proj
    p += m.dt_rank * inner + inner;                             // dt_proj (always biased)
    p += inner * m.d_state + inner;                             // A_log, D
    p += inner * h + (m.proj_bias ? h : 0);                     // out_proj
    if (m.inner_norms) p += xp;                                 // RMSNorms of dt, B and C
    return p;
  }
  // Mamba-2: in_proj yields z, x, B, C and dt; the convolution runs over x, B and C.
  const int64_t bc = 2 * m.n_groups * m.d_state;
  const int64_t in_out = 2 * inner + bc + m.n_heads;
  const int64_t conv = inner + bc;
  int64_t p = h * in_out + (m.proj_bias ? in_out : 0);   // in_proj
  p += conv * m.conv_kernel + (m.conv_bias ? conv : 0);  // depthwise conv1d
  p += 3 * m.n_heads;                                    // dt_bias, A_log, D
  if (m.gated_norm) p += inner;
  p += inner * h + (m.proj_bias ? h : 0);  // out_proj
  return p;
}

template <class T>
const T& shape_of(const std::optional<T>& value, const Layer& layer, const char* what) {
  MOTLEY_CHECK(value.has_value(), fmt::format("layer '{}' of kind {} has no {} shape", layer.name,
                                              layer_kind_name(layer.kind), what));
  return *value;
}

// The width of the hidden-size norms `num_norms` counts (the projector's sit on its input).
int64_t norm_width(const Layer& layer) {
  switch (layer.kind) {
    case LayerKind::kEmbedding:
      return shape_of(layer.embedding, layer, "embedding").hidden;
    case LayerKind::kAttention:
    case LayerKind::kDecoderBlock:
    case LayerKind::kVisionBlock:
      return shape_of(layer.attention, layer, "attention").hidden;
    case LayerKind::kFeedForward:
      return shape_of(layer.ffn, layer, "feed-forward").hidden;
    case LayerKind::kMoe:
      return shape_of(layer.moe, layer, "mixture-of-experts").hidden;
    case LayerKind::kMamba:
      return shape_of(layer.mamba, layer, "mamba").hidden;
    case LayerKind::kPatchEmbedding:
      return shape_of(layer.patch_embedding, layer, "patch embedding").hidden;
    case LayerKind::kProjector:
      return shape_of(layer.projector, layer, "projector").in_hidden;
    case LayerKind::kHead:
      return shape_of(layer.head, layer, "head").hidden;
    case LayerKind::kMeasured:
      return 0;
  }
  return 0;
}

int64_t norm_params(const Layer& layer) {
  if (layer.num_norms == 0) return 0;
  return layer.num_norms * norm_width(layer) * (layer.norm_bias ? 2 : 1);
}

// Parameters of the layer apart from its hidden-size norms; `active` counts only the top_k
// routed experts of an MoE block, as one token uses them.
int64_t body_params(const Layer& layer, bool active) {
  auto moe = [active](const MoeShape& m) {
    const int64_t routed = active ? m.top_k : m.num_experts;
    return moe_dense_params(m) + routed * expert_params(m);
  };
  switch (layer.kind) {
    case LayerKind::kEmbedding: {
      const EmbeddingShape& e = shape_of(layer.embedding, layer, "embedding");
      return e.vocab * e.hidden + e.learned_positions * e.hidden;
    }
    case LayerKind::kAttention:
      return attention_params(shape_of(layer.attention, layer, "attention"));
    case LayerKind::kFeedForward: {
      const FeedForwardShape& f = shape_of(layer.ffn, layer, "feed-forward");
      return ffn_params(f.hidden, f.ffn_size, f.activation, f.bias);
    }
    case LayerKind::kMoe:
      return moe(shape_of(layer.moe, layer, "mixture-of-experts"));
    case LayerKind::kMamba:
      return mamba_params(shape_of(layer.mamba, layer, "mamba"));
    case LayerKind::kDecoderBlock:
    case LayerKind::kVisionBlock: {
      int64_t p = attention_params(shape_of(layer.attention, layer, "attention"));
      if (layer.moe.has_value()) {
        p += moe(*layer.moe);
      } else {
        const FeedForwardShape& f = shape_of(layer.ffn, layer, "feed-forward");
        p += ffn_params(f.hidden, f.ffn_size, f.activation, f.bias);
      }
      return p;
    }
    case LayerKind::kPatchEmbedding: {
      // A patch_size x patch_size convolution with bias (SigLIP, ViT) and a position table.
      const PatchEmbeddingShape& pe = shape_of(layer.patch_embedding, layer, "patch embedding");
      return pe.channels * pe.patch_size * pe.patch_size * pe.hidden + pe.hidden +
             pe.num_positions * pe.hidden;
    }
    case LayerKind::kProjector: {
      const ProjectorShape& pr = shape_of(layer.projector, layer, "projector");
      if (pr.ffn_size == 0) {
        return pr.in_hidden * pr.out_hidden + (pr.bias ? pr.out_hidden : 0);
      }
      return pr.in_hidden * pr.ffn_size + pr.ffn_size * pr.out_hidden +
             (pr.bias ? pr.ffn_size + pr.out_hidden : 0);
    }
    case LayerKind::kHead: {
      // A tied LM head is the embedding's matrix, counted there.
      const HeadShape& hs = shape_of(layer.head, layer, "head");
      return hs.tied ? 0 : hs.vocab * hs.hidden;
    }
    case LayerKind::kMeasured: {
      // A profile states bytes; parameters are stored in bf16 there (2 bytes each).
      const MeasuredLayer& m = shape_of(layer.measured, layer, "measured");
      return static_cast<int64_t>(std::llround(m.param_bytes.value() / 2.0));
    }
  }
  MOTLEY_CHECK(false, "unhandled layer kind");
  return 0;
}

}  // namespace

int64_t layer_params(const Layer& layer) {
  return body_params(layer, /*active=*/false) + norm_params(layer);
}

int64_t layer_stored_params(const Layer& layer) {
  int64_t p = layer_params(layer);
  if (layer.kind == LayerKind::kHead) {
    const HeadShape& hs = shape_of(layer.head, layer, "head");
    if (hs.tied) p += hs.vocab * hs.hidden;  // the stage holding the head keeps its own copy
  }
  return p;
}

int64_t layer_routed_expert_params(const Layer& layer) {
  if (!layer.moe.has_value() ||
      (layer.kind != LayerKind::kMoe && layer.kind != LayerKind::kDecoderBlock)) {
    return 0;
  }
  return layer.moe->num_experts * expert_params(*layer.moe);
}

int64_t layer_active_params(const Layer& layer) {
  return body_params(layer, /*active=*/true) + norm_params(layer);
}

}  // namespace motley
