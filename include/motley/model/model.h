// ModelSpec: a model as the ordered list of layers that partitioning moves between pipeline
// stages, with each layer's kind and shape. Pure data: no formulas here (see layer_cost.h),
// no file formats (see presets.h, hf_config.h, profile.h, model_json.h). Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motley/core/dtype.h"
#include "motley/core/units.h"

namespace motley {

// Feed-forward activation. Gated variants (SwiGLU, GeGLU) have three projections, others two.
enum class Activation { kGelu, kRelu, kRelu2, kSilu, kSwiGlu, kGeGlu };
bool is_gated(Activation activation);
const char* activation_name(Activation activation);  // "gelu", "relu", "relu2", "silu", ...
// Inverse of activation_name (case-insensitive); nullopt for an unknown name.
std::optional<Activation> parse_activation(std::string_view name);
std::vector<std::string> activation_names();

// What activation memory a layer keeps for its backward pass (Korthikanti et al. 2022):
// none keeps everything, selective recomputes the attention core (the s^2 terms), full keeps
// only the layer input and recomputes the forward pass before the backward pass.
enum class RecomputePolicy { kNone = 0, kSelective = 1, kFull = 2 };
const char* recompute_policy_name(RecomputePolicy policy);  // "none", "selective", "full"
std::optional<RecomputePolicy> parse_recompute_policy(std::string_view name);
std::vector<std::string> recompute_policy_names();

struct AttentionShape {
  int64_t hidden = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // == num_heads: multi-head; < num_heads: grouped-query; 1: multi-query
  int64_t head_dim = 0;      // query/key head size (and value, unless v_head_dim is set)
  int64_t v_head_dim = 0;    // 0: same as head_dim
  bool qkv_bias = false;
  bool output_bias = false;
  int64_t sliding_window = 0;  // 0: full attention; else each query sees this many keys at most
  bool causal = true;          // false for vision encoders (bidirectional)
  bool qk_norm = false;        // per-head RMSNorm on queries and keys (Qwen3, Gemma 3)
  bool sinks = false;          // one learned sink logit per head (gpt-oss)
  // Multi-head latent attention (DeepSeek-V2/V3): queries through an optional low-rank
  // bottleneck, keys and values through a shared compressed latent of kv_lora_rank.
  bool mla = false;
  int64_t q_lora_rank = 0;  // 0: queries projected directly from the hidden state
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
};

struct FeedForwardShape {
  int64_t hidden = 0;
  int64_t ffn_size = 0;  // intermediate size
  Activation activation = Activation::kSwiGlu;
  bool bias = false;
};

struct MoeShape {
  int64_t hidden = 0;
  int64_t num_experts = 0;      // routed experts
  int64_t top_k = 0;            // routed experts per token
  int64_t expert_ffn_size = 0;  // intermediate size of one routed expert
  int64_t num_shared_experts = 0;
  int64_t shared_ffn_size = 0;  // intermediate size of one shared expert
  Activation activation = Activation::kSwiGlu;
  bool expert_bias = false;         // biases inside expert projections (gpt-oss)
  bool router_bias = false;         // a bias per expert on the router (gpt-oss, DeepSeek-V3)
  bool shared_expert_gate = false;  // a sigmoid gate hidden -> 1 on the shared expert (Qwen2-MoE)
  // > 0: routed experts work at this width, behind hidden -> latent and latent -> hidden
  // projections every token uses (Nemotron-H latent MoE); 0: experts work at `hidden`.
  int64_t latent_size = 0;
};

// Mamba mixer. Version 2 (Dao & Gu 2024, Hugging Face Mamba2 / NemotronH): scalar decay per
// head, B and C shared by n_groups. Version 1 (Gu & Dao 2023, Jamba, Falcon-Mamba): selective
// scan with a dt_rank bottleneck and a d_inner x d_state decay matrix.
struct MambaShape {
  int version = 2;
  int64_t hidden = 0;
  int64_t d_inner = 0;  // n_heads * head_dim (expand * hidden)
  int64_t d_state = 0;  // N
  int64_t n_groups = 1;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t conv_kernel = 4;
  int64_t chunk_size = 256;
  bool conv_bias = true;
  bool proj_bias = false;
  bool gated_norm = true;  // version 2: RMSNorm of d_inner before out_proj
  int64_t dt_rank = 0;     // version 1: rank of the time-step projection
  // Version 1: learned RMSNorms on dt, B and C (Jamba). Falcon-Mamba's are weightless: false.
  bool inner_norms = false;
};

struct EmbeddingShape {
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t learned_positions = 0;  // rows of a learned position table, 0 for rotary models
};

// Final norm, LM head and cross-entropy loss.
struct HeadShape {
  int64_t vocab = 0;
  int64_t hidden = 0;
  bool tied = false;  // the LM head reuses the embedding matrix (counted once in the total)
};

// ViT patch embedding: a convolution of patch_size^2 * channels -> hidden per patch, plus a
// learned position table; produces `tokens_per_sample` tokens per image.
struct PatchEmbeddingShape {
  int64_t channels = 3;
  int64_t patch_size = 14;
  int64_t hidden = 0;
  int64_t num_positions = 0;
};

// Vision-to-language projector: an MLP from the vision width to the decoder width.
struct ProjectorShape {
  int64_t in_hidden = 0;
  int64_t out_hidden = 0;
  int64_t ffn_size = 0;  // 0: a single linear layer; else linear, GELU, linear
  bool bias = true;      // biases on the linear layers (false: DeepSeek-V3's MTP eh_proj)
};

// Times measured by the user (profile JSON) for one layer, used instead of formulas.
struct MeasuredTimes {
  std::optional<Seconds> forward;
  std::optional<Seconds> backward_input;
  std::optional<Seconds> backward_weight;
  // The extra forward work selective recomputation repeats before B (the attention core);
  // absent: the cost model prices it from the layer's shape when it has one, else 0.
  std::optional<Seconds> selective_recompute;
  // B and W computed in one backward pass (what a schedule without split backwards runs), which
  // may cost less than the two apart; absent: B + W.
  std::optional<Seconds> backward;
};

// What a measured W (backward_weight) did. kWeightsOnly: only the weights' gradients, from
// the input gradients B computed (motley's executor and `motley profile layers` since the
// executor splits its backward at the weight products). kFullBackward: the whole backward graph
// of the layer walked again from its output, as motley's executor ran W before, so a W alone
// does everything a stage whose input needs no gradient (the first one) needs, and that stage's
// B does nothing.
enum class WeightPass { kWeightsOnly, kFullBackward };
const char* weight_pass_name(WeightPass pass);
std::optional<WeightPass> parse_weight_pass(std::string_view name);

struct MeasuredLayer {
  std::string measured_on;                               // device type name of `times`
  WeightPass weight_pass = WeightPass::kWeightsOnly;     // how `times` measured W
  MeasuredTimes times;                                   // all three present
  std::map<std::string, MeasuredTimes> times_by_device;  // overrides per device type name
  // Times per device of a tensor-parallel group, its collectives included: device type name,
  // then TP degree (>= 2). Where a degree is missing the cost model prices TP itself.
  std::map<std::string, std::map<int, MeasuredTimes>> times_by_tp;
  // The optimizer's update of the layer's parameters (AdamW, once per iteration) on
  // measured_on, one device holding them all; absent: priced from memory traffic.
  std::optional<Seconds> optimizer_step;
  int64_t seq_len = 0;  // shape the times were measured at
  int64_t micro_batch_size = 0;
  Bytes param_bytes;
  Bytes activation_bytes;  // kept for backward per micro-batch, no recompute
  Bytes output_bytes;      // passed to the next layer per micro-batch
  // The vocabulary of a measured head (output layer and loss), which vocabulary parallelism may
  // split by rows; 0: not known to be a head.
  int64_t vocab = 0;
};

enum class LayerKind {
  kEmbedding,       // token embedding (+ learned positions)
  kAttention,       // split form: pre-norm + attention sub-layer
  kFeedForward,     // split form: pre-norm + dense feed-forward sub-layer
  kMoe,             // split form: pre-norm + mixture-of-experts sub-layer
  kMamba,           // pre-norm + Mamba-2 mixer
  kDecoderBlock,    // attention + (dense feed-forward or MoE), each with its norms
  kPatchEmbedding,  // vision: patches -> tokens
  kVisionBlock,     // vision encoder block: bidirectional attention + GELU MLP, LayerNorms
  kProjector,       // vision -> decoder projector
  kHead,            // final norm + LM head + cross-entropy
  kMeasured,        // a layer known only by its profile
};
const char* layer_kind_name(LayerKind kind);  // "embedding", "decoder_block", "mamba", ...
struct Layer;
struct ModelSpec;
// The vocabulary of the model's head when its last layer is one (a head, or a measured layer
// stating its vocabulary): what vocabulary parallelism splits. 0 otherwise.
int64_t head_vocab(const ModelSpec& model);
// The vocabulary of the model's embedding when its first layer is one (an embedding, or a
// measured layer stating its vocabulary), before at least one other layer. 0 otherwise.
int64_t embedding_vocab(const ModelSpec& model);
std::optional<LayerKind> parse_layer_kind(std::string_view name);
std::vector<std::string> layer_kind_names();

struct Layer {
  std::string name;  // unique within the model, e.g. "decoder.7", "head"
  LayerKind kind = LayerKind::kDecoderBlock;
  std::optional<AttentionShape> attention;  // kAttention, kDecoderBlock, kVisionBlock
  std::optional<FeedForwardShape> ffn;      // kFeedForward, dense kDecoderBlock, kVisionBlock
  std::optional<MoeShape> moe;              // kMoe, MoE kDecoderBlock
  std::optional<MambaShape> mamba;          // kMamba
  std::optional<EmbeddingShape> embedding;  // kEmbedding
  std::optional<HeadShape> head;            // kHead
  std::optional<PatchEmbeddingShape> patch_embedding;  // kPatchEmbedding
  std::optional<ProjectorShape> projector;             // kProjector
  std::optional<MeasuredLayer> measured;               // kMeasured
  // Hidden-size normalization layers in this layer (pre-norms, post-norms, the final norm of
  // kHead); each has `hidden` weights, and as many biases when norm_bias (LayerNorm).
  int64_t num_norms = 0;
  bool norm_bias = false;
  // Tokens this layer processes per sample: 0 means the model's sequence length; vision layers
  // process a fixed number of patches per image.
  int64_t tokens_per_sample = 0;
};

struct ModelSpec {
  std::string name;
  std::string family;         // "llama", "deepseek_v3", "preset", "profile", ...
  std::vector<Layer> layers;  // the trained model, in pipeline order
  // Parts that are not the trained model proper (e.g. DeepSeek-V3's multi-token-prediction
  // module): reported separately and excluded from totals and from partitioning.
  std::vector<Layer> extra_layers;
  int64_t default_seq_len = 4096;
  DType dtype = DType::kBFloat16;
  bool dropout = false;  // dropout masks kept for backward (Korthikanti's 34sbh assumes them)
};

// Whether a tensor-parallel group of t devices can split `layer` evenly the way Megatron-LM
// does: query and key/value heads, feed-forward and expert widths, Mamba-2 heads (with Mamba
// groups dividing or divided by t), Mamba-1 channels (d_inner) and, when `vocabulary`, the
// embedding's and head's vocabulary (Megatron pads it instead; motley's executor does not).
// Returns the first obstacle as "<field> (<value>) is not a multiple of <t>" (or the Mamba
// groups' rule), nullopt when there is none. REQUIRES: t >= 1.
std::optional<std::string> tensor_parallel_obstacle(const Layer& layer, int t, bool vocabulary);

}  // namespace motley
