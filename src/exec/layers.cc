// The transformer layers the executor runs, written with ATen operations on explicit weight
// tensors (no torch::nn modules, so parameters live in the rank's ParameterStore under stable
// names and their initial values depend only on the layer's seed). fp32 throughout.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>

#include "motley/exec/data.h"
#include "motley/exec/stage_module.h"

namespace motley {

at::Tensor ParameterStore::get_or_create(const std::string& name, at::Tensor initial) {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return it->second;
  initial = initial.detach().contiguous();
  initial.requires_grad_(true);
  tensors_.emplace(name, initial);
  return initial;
}

std::vector<NamedTensor> ParameterStore::parameters() const {
  std::vector<NamedTensor> out;
  for (const auto& [name, tensor] : tensors_) out.push_back({name, tensor});
  return out;
}

namespace {

// Not in ModelSpec; the values Llama-style models use. docs/executor.md lists them.
constexpr double kNormEps = 1e-5;
constexpr double kInitStd = 0.02;
constexpr double kRopeTheta = 10000.0;

// Draws one layer's parameters, in a fixed order, from a generator of its own seed.
class Init {
 public:
  // `layers`: every layer that reads the parameters drawn here (StageParameter::layers).
  Init(ParameterStore& store, std::string prefix, uint64_t seed, std::vector<int> layers)
      : store_(store),
        prefix_(std::move(prefix)),
        generator_(at::make_generator<at::CPUGeneratorImpl>(seed)),
        layers_(std::move(layers)) {}

  at::Tensor normal(const std::string& name, at::IntArrayRef shape) {
    at::Tensor t = at::empty(shape, at::kFloat);
    t.normal_(0.0, kInitStd, generator_);
    return adopt(name, t);
  }
  at::Tensor ones(const std::string& name, at::IntArrayRef shape) {
    return adopt(name, at::ones(shape, at::kFloat));
  }
  at::Tensor zeros(const std::string& name, at::IntArrayRef shape) {
    return adopt(name, at::zeros(shape, at::kFloat));
  }
  // A parameter computed from a uniform draw on [0, 1) by `transform`.
  at::Tensor from_uniform(const std::string& name, at::IntArrayRef shape,
                          const std::function<at::Tensor(const at::Tensor&)>& transform) {
    at::Tensor u = at::empty(shape, at::kFloat);
    u.uniform_(0.0, 1.0, generator_);
    return adopt(name, transform(u));
  }
  // A parameter of fixed value.
  at::Tensor value(const std::string& name, const at::Tensor& t) { return adopt(name, t); }
  // A sub-scope: "<prefix>.<name>".
  Init scope(const std::string& name) { return Init(*this, name); }

  std::vector<StageParameter>& used() { return *used_; }

 private:
  Init(Init& parent, const std::string& name)
      : store_(parent.store_),
        prefix_(parent.prefix_ + "." + name),
        generator_(parent.generator_),
        layers_(parent.layers_),
        used_(parent.used_) {}

  at::Tensor adopt(const std::string& name, const at::Tensor& t) {
    const std::string full = prefix_ + "." + name;
    at::Tensor p = store_.get_or_create(full, t);
    used_->push_back({full, p, layers_});
    return p;
  }

  ParameterStore& store_;
  std::string prefix_;
  at::Generator generator_;  // shared with sub-scopes: one draw sequence per layer
  std::vector<int> layers_;
  std::shared_ptr<std::vector<StageParameter>> used_ =
      std::make_shared<std::vector<StageParameter>>();
};

at::Tensor affine(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return at::linear(x, w, b.defined() ? c10::optional<at::Tensor>(b) : c10::nullopt);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) {
  return x * at::rsqrt(x.pow(2).mean({-1}, /*keepdim=*/true) + kNormEps) * weight;
}

// RMSNorm, or LayerNorm when the model's norms have biases.
struct Norm {
  Norm() = default;
  Norm(Init& init, const std::string& name, int64_t width, bool with_bias) {
    Init scope = init.scope(name);
    weight = scope.ones("weight", {width});
    if (with_bias) bias = scope.zeros("bias", {width});
  }
  at::Tensor operator()(const at::Tensor& x) const {
    if (bias.defined()) return at::layer_norm(x, {weight.size(0)}, weight, bias, kNormEps);
    return rms_norm(x, weight);
  }
  at::Tensor weight;
  at::Tensor bias;
};

at::Tensor activate(Activation activation, const at::Tensor& x) {
  switch (activation) {
    case Activation::kGelu:
      return at::gelu(x);
    case Activation::kRelu:
      return at::relu(x);
    case Activation::kRelu2:
      return at::relu(x).pow(2);
    case Activation::kSilu:
    case Activation::kSwiGlu:
      return at::silu(x);
    case Activation::kGeGlu:
      return at::gelu(x, "tanh");
  }
  return x;
}

class FeedForward {
 public:
  FeedForward(Init& init, int64_t hidden, int64_t ffn, Activation activation, bool bias)
      : activation_(activation) {
    if (is_gated(activation)) {
      w_gate_ = init.normal("w_gate", {ffn, hidden});
      if (bias) b_gate_ = init.zeros("b_gate", {ffn});
    }
    w_up_ = init.normal("w_up", {ffn, hidden});
    if (bias) b_up_ = init.zeros("b_up", {ffn});
    w_down_ = init.normal("w_down", {hidden, ffn});
    if (bias) b_down_ = init.zeros("b_down", {hidden});
  }

  at::Tensor operator()(const at::Tensor& x) const {
    at::Tensor up = affine(x, w_up_, b_up_);
    at::Tensor inner = w_gate_.defined() ? activate(activation_, affine(x, w_gate_, b_gate_)) * up
                                         : activate(activation_, up);
    return affine(inner, w_down_, b_down_);
  }

 private:
  Activation activation_;
  at::Tensor w_gate_, b_gate_, w_up_, b_up_, w_down_, b_down_;
};

// x: [b, heads, s, d]; rotates pairs (i, i + d/2) by position * theta^(-2i/d).
at::Tensor apply_rope(const at::Tensor& x) {
  const int64_t s = x.size(2);
  const int64_t d = x.size(3);
  at::Tensor inv_freq =
      at::pow(kRopeTheta, at::arange(0, d, 2, at::kDouble) / static_cast<double>(d)).reciprocal();
  at::Tensor angles = at::outer(at::arange(s, at::kDouble), inv_freq).to(at::kFloat);
  at::Tensor cos = at::cat({angles.cos(), angles.cos()}, -1);
  at::Tensor sin = at::cat({angles.sin(), angles.sin()}, -1);
  at::Tensor x1 = x.narrow(-1, 0, d / 2);
  at::Tensor x2 = x.narrow(-1, d / 2, d / 2);
  return x * cos + at::cat({-x2, x1}, -1) * sin;
}

class Attention {
 public:
  Attention(Init& init, const AttentionShape& a, bool rotary) : a_(a), rotary_(rotary) {
    v_dim_ = a.v_head_dim > 0 ? a.v_head_dim : a.head_dim;
    wq_ = init.normal("wq", {a.num_heads * a.head_dim, a.hidden});
    wk_ = init.normal("wk", {a.num_kv_heads * a.head_dim, a.hidden});
    wv_ = init.normal("wv", {a.num_kv_heads * v_dim_, a.hidden});
    wo_ = init.normal("wo", {a.hidden, a.num_heads * v_dim_});
    if (a.qkv_bias) {
      bq_ = init.zeros("bq", {a.num_heads * a.head_dim});
      bk_ = init.zeros("bk", {a.num_kv_heads * a.head_dim});
      bv_ = init.zeros("bv", {a.num_kv_heads * v_dim_});
    }
    if (a.output_bias) bo_ = init.zeros("bo", {a.hidden});
    if (a.qk_norm) {
      q_norm_ = init.ones("q_norm", {a.head_dim});
      k_norm_ = init.ones("k_norm", {a.head_dim});
    }
    if (a.sinks) sinks_ = init.zeros("sinks", {a.num_heads});
  }

  at::Tensor operator()(const at::Tensor& x) const {
    const int64_t b = x.size(0);
    const int64_t s = x.size(1);
    const int64_t nh = a_.num_heads;
    const int64_t nkv = a_.num_kv_heads;
    at::Tensor q = affine(x, wq_, bq_).view({b, s, nh, a_.head_dim}).transpose(1, 2);
    at::Tensor k = affine(x, wk_, bk_).view({b, s, nkv, a_.head_dim}).transpose(1, 2);
    at::Tensor v = affine(x, wv_, bv_).view({b, s, nkv, v_dim_}).transpose(1, 2);
    if (q_norm_.defined()) {
      q = rms_norm(q, q_norm_);
      k = rms_norm(k, k_norm_);
    }
    if (rotary_) {
      q = apply_rope(q);
      k = apply_rope(k);
    }
    if (nkv < nh) {  // grouped-query: each key/value head serves nh / nkv query heads
      k = k.repeat_interleave(nh / nkv, 1);
      v = v.repeat_interleave(nh / nkv, 1);
    }
    at::Tensor scores =
        at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(a_.head_dim));
    scores = scores + mask(s);
    at::Tensor probs;
    if (sinks_.defined()) {
      // A learned logit per head competes in the softmax and is then dropped.
      at::Tensor sink = sinks_.view({1, nh, 1, 1}).expand({b, nh, s, 1});
      probs = at::softmax(at::cat({scores, sink}, -1), -1).narrow(-1, 0, s);
    } else {
      probs = at::softmax(scores, -1);
    }
    at::Tensor out = at::matmul(probs, v).transpose(1, 2).reshape({b, s, nh * v_dim_});
    return affine(out, wo_, bo_);
  }

 private:
  // 0 where query i may see key j, -inf elsewhere: causal (j <= i) and, with a window w,
  // i - j < w (bidirectional: |i - j| < w).
  at::Tensor mask(int64_t s) const {
    at::Tensor i = at::arange(s, at::kLong).unsqueeze(1);
    at::Tensor j = at::arange(s, at::kLong).unsqueeze(0);
    at::Tensor allowed = at::ones({s, s}, at::kBool);
    if (a_.causal) allowed = allowed.logical_and(j.le(i));
    if (a_.sliding_window > 0) allowed = allowed.logical_and((i - j).abs().lt(a_.sliding_window));
    return at::zeros({s, s}, at::kFloat)
        .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  }

  AttentionShape a_;
  bool rotary_;
  int64_t v_dim_ = 0;
  at::Tensor wq_, wk_, wv_, wo_, bq_, bk_, bv_, bo_, q_norm_, k_norm_, sinks_;
};

// Top-k routing over softmax probabilities, renormalized over the chosen experts (Mixtral's
// rule); each expert runs on the tokens routed to it; shared experts run on every token.
class Moe {
 public:
  Moe(Init& init, const MoeShape& m) : m_(m) {
    router_ = init.normal("router", {m.num_experts, m.hidden});
    if (m.router_bias) router_bias_ = init.zeros("router_bias", {m.num_experts});
    for (int64_t e = 0; e < m.num_experts; ++e) {
      Init scope = init.scope("experts." + std::to_string(e));
      experts_.emplace_back(scope, m.hidden, m.expert_ffn_size, m.activation, m.expert_bias);
    }
    for (int64_t e = 0; e < m.num_shared_experts; ++e) {
      Init scope = init.scope("shared." + std::to_string(e));
      shared_.emplace_back(scope, m.hidden, m.shared_ffn_size, m.activation, m.expert_bias);
    }
    if (m.shared_expert_gate && m.num_shared_experts > 0) {
      shared_gate_ = init.normal("shared_gate", {1, m.hidden});
    }
  }

  at::Tensor operator()(const at::Tensor& x) const {
    const auto shape = x.sizes().vec();
    at::Tensor tokens = x.reshape({-1, m_.hidden});
    // Routing probabilities in fp32 also under autocast (as Hugging Face's Mixtral computes them):
    // bf16 would round near-ties in the top-k choice, and index_add below needs the weighted
    // expert outputs in the fp32 of `out`.
    at::Tensor probs = at::softmax(affine(tokens, router_, router_bias_), -1, at::kFloat);
    auto [top_probs, top_index] = at::topk(probs, m_.top_k, -1);
    at::Tensor weights = top_probs / top_probs.sum(-1, /*keepdim=*/true);
    at::Tensor out = at::zeros_like(tokens);
    for (int64_t e = 0; e < m_.num_experts; ++e) {
      at::Tensor chosen = top_index.eq(e);  // [T, k]
      at::Tensor rows = chosen.any(-1).nonzero().squeeze(1);
      if (rows.numel() == 0) continue;
      at::Tensor w = (weights * chosen).sum(-1).index_select(0, rows).unsqueeze(1);
      out = out.index_add(0, rows, experts_[e](tokens.index_select(0, rows)) * w);
    }
    if (!shared_.empty()) {
      at::Tensor s = shared_[0](tokens);
      for (size_t e = 1; e < shared_.size(); ++e) s = s + shared_[e](tokens);
      if (shared_gate_.defined()) s = s * at::sigmoid(affine(tokens, shared_gate_, at::Tensor()));
      out = out + s;
    }
    return out.view(shape);
  }

 private:
  MoeShape m_;
  at::Tensor router_, router_bias_, shared_gate_;
  std::vector<FeedForward> experts_;
  std::vector<FeedForward> shared_;
};

// Mamba-2's mixer (Dao & Gu 2024) with a sequential scan, as the reference implementation in
// Hugging Face transformers' Mamba2 computes it without its chunked kernels: in_proj to z, x,
// B, C, dt; causal depthwise convolution over x, B and C; per head a scalar decay exp(dt * A);
// state h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T, output y_t = h_t C_t + D x_t; RMSNorm of
// y * silu(z) (over the whole inner width); out_proj.
class Mamba2 {
 public:
  Mamba2(Init& init, const MambaShape& m) : m_(m) {
    const int64_t bc = 2 * m.n_groups * m.d_state;
    const int64_t conv_channels = m.d_inner + bc;
    in_proj_ = init.normal("in_proj", {2 * m.d_inner + bc + m.n_heads, m.hidden});
    if (m.proj_bias) in_proj_bias_ = init.zeros("in_proj_bias", {2 * m.d_inner + bc + m.n_heads});
    conv_ = init.normal("conv", {conv_channels, 1, m.conv_kernel});
    if (m.conv_bias) conv_bias_ = init.zeros("conv_bias", {conv_channels});
    // dt starts log-uniform in [1e-3, 1e-1]; dt_bias is its inverse softplus (Mamba's init).
    dt_bias_ = init.from_uniform("dt_bias", {m.n_heads}, [](const at::Tensor& u) {
      at::Tensor dt = at::exp(u * (std::log(0.1) - std::log(1e-3)) + std::log(1e-3));
      return dt + at::log(-at::expm1(-dt));
    });
    a_log_ = init.value("A_log", at::log(at::arange(1, m.n_heads + 1, at::kFloat)));
    d_ = init.ones("D", {m.n_heads});
    if (m.gated_norm) norm_ = init.ones("norm", {m.d_inner});
    out_proj_ = init.normal("out_proj", {m.hidden, m.d_inner});
    if (m.proj_bias) out_proj_bias_ = init.zeros("out_proj_bias", {m.hidden});
  }

  at::Tensor operator()(const at::Tensor& u) const {
    const int64_t b = u.size(0);
    const int64_t s = u.size(1);
    const int64_t gn = m_.n_groups * m_.d_state;
    const int64_t nh = m_.n_heads;
    at::Tensor proj = affine(u, in_proj_, in_proj_bias_);
    at::Tensor z = proj.narrow(-1, 0, m_.d_inner);
    at::Tensor xbc = proj.narrow(-1, m_.d_inner, m_.d_inner + 2 * gn);
    at::Tensor dt = proj.narrow(-1, 2 * m_.d_inner + 2 * gn, nh);
    // Causal depthwise convolution: pad K-1 on the left by padding both sides and keeping the
    // first s outputs.
    xbc = at::conv1d(xbc.transpose(1, 2), conv_,
                     conv_bias_.defined() ? c10::optional<at::Tensor>(conv_bias_) : c10::nullopt,
                     /*stride=*/1, /*padding=*/m_.conv_kernel - 1, /*dilation=*/1,
                     /*groups=*/xbc.size(-1))
              .narrow(-1, 0, s)
              .transpose(1, 2);
    xbc = at::silu(xbc);
    at::Tensor x = xbc.narrow(-1, 0, m_.d_inner).reshape({b, s, nh, m_.head_dim});
    const int64_t heads_per_group = nh / m_.n_groups;
    auto per_head = [&](const at::Tensor& t) {  // [b, s, G*N] -> [b, s, nh, N]
      return t.reshape({b, s, m_.n_groups, 1, m_.d_state})
          .expand({b, s, m_.n_groups, heads_per_group, m_.d_state})
          .reshape({b, s, nh, m_.d_state});
    };
    at::Tensor bmat = per_head(xbc.narrow(-1, m_.d_inner, gn));
    at::Tensor cmat = per_head(xbc.narrow(-1, m_.d_inner + gn, gn));
    dt = at::softplus(dt + dt_bias_);  // [b, s, nh]
    at::Tensor a = -at::exp(a_log_);   // [nh]
    at::Tensor state = at::zeros({b, nh, m_.head_dim, m_.d_state}, u.options());
    std::vector<at::Tensor> ys;
    ys.reserve(static_cast<size_t>(s));
    for (int64_t t = 0; t < s; ++t) {
      at::Tensor dt_t = dt.select(1, t);  // [b, nh]
      at::Tensor decay = at::exp(dt_t * a).unsqueeze(-1).unsqueeze(-1);
      at::Tensor x_t = x.select(1, t) * dt_t.unsqueeze(-1);  // [b, nh, hd]
      state = state * decay + x_t.unsqueeze(-1) * bmat.select(1, t).unsqueeze(2);
      at::Tensor y_t = at::matmul(state, cmat.select(1, t).unsqueeze(-1)).squeeze(-1) +
                       x.select(1, t) * d_.unsqueeze(-1);
      ys.push_back(y_t.reshape({b, m_.d_inner}));
    }
    at::Tensor y = at::stack(ys, 1);  // [b, s, d_inner]
    y = y * at::silu(z);
    if (norm_.defined()) y = rms_norm(y, norm_);
    return affine(y, out_proj_, out_proj_bias_);
  }

 private:
  MambaShape m_;
  at::Tensor in_proj_, in_proj_bias_, conv_, conv_bias_, dt_bias_, a_log_, d_, norm_, out_proj_,
      out_proj_bias_;
};

class LayerImpl {
 public:
  virtual ~LayerImpl() = default;
  virtual at::Tensor forward(const at::Tensor& x, const at::Tensor& targets) = 0;
};

class EmbeddingLayer final : public LayerImpl {
 public:
  EmbeddingLayer(Init& init, const EmbeddingShape& e) {
    weight_ = init.normal("weight", {e.vocab, e.hidden});
    if (e.learned_positions > 0)
      positions_ = init.normal("positions", {e.learned_positions, e.hidden});
  }
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor&) override {
    at::Tensor h = at::embedding(weight_, tokens);
    if (positions_.defined()) h = h + positions_.narrow(0, 0, tokens.size(1));
    return h;
  }

 private:
  at::Tensor weight_, positions_;
};

// Residual sub-layers with one norm before (and, with two norms, one after) the sub-layer:
// x + post(f(pre(x))).
class ResidualLayer final : public LayerImpl {
 public:
  using Body = std::function<at::Tensor(const at::Tensor&)>;
  ResidualLayer(std::vector<std::pair<Norm, Norm>> norms, std::vector<Body> bodies)
      : norms_(std::move(norms)), bodies_(std::move(bodies)) {}
  at::Tensor forward(const at::Tensor& x, const at::Tensor&) override {
    at::Tensor h = x;
    for (size_t i = 0; i < bodies_.size(); ++i) {
      at::Tensor y = bodies_[i](norms_[i].first(h));
      if (norms_[i].second.weight.defined()) y = norms_[i].second(y);
      h = h + y;
    }
    return h;
  }

 private:
  std::vector<std::pair<Norm, Norm>> norms_;  // (pre, post); post undefined when absent
  std::vector<Body> bodies_;
};

class HeadLayer final : public LayerImpl {
 public:
  HeadLayer(Norm norm, at::Tensor weight) : norm_(std::move(norm)), weight_(std::move(weight)) {}
  at::Tensor forward(const at::Tensor& x, const at::Tensor& targets) override {
    at::Tensor logits = at::linear(norm_(x), weight_);
    return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
  }

 private:
  Norm norm_;
  at::Tensor weight_;
};

class TransformerStage final : public StageModule {
 public:
  TransformerStage(std::vector<std::unique_ptr<LayerImpl>> layers, bool takes_tokens,
                   bool produces_loss, std::vector<StageParameter> params)
      : layers_(std::move(layers)),
        takes_tokens_(takes_tokens),
        produces_loss_(produces_loss),
        params_(std::move(params)) {}

  bool takes_tokens() const override { return takes_tokens_; }
  bool produces_loss() const override { return produces_loss_; }
  at::Tensor forward(const at::Tensor& input, const at::Tensor& targets) override {
    at::Tensor h = input;
    for (auto& layer : layers_) {
      h = layer->forward(h, targets);
      // Every layer boundary in fp32, also under autocast: a stage boundary is one, so a stage's
      // output fits the fp32 receive buffers and any partition sees the whole model's numbers.
      if (h.scalar_type() != at::kFloat) h = h.to(at::kFloat);
    }
    return h;
  }
  std::vector<StageParameter> parameters() const override { return params_; }

 private:
  std::vector<std::unique_ptr<LayerImpl>> layers_;
  bool takes_tokens_;
  bool produces_loss_;
  std::vector<StageParameter> params_;
};

// The width of the hidden state a layer reads and writes.
int64_t layer_hidden(const Layer& l) {
  if (l.embedding) return l.embedding->hidden;
  if (l.attention) return l.attention->hidden;
  if (l.ffn) return l.ffn->hidden;
  if (l.moe) return l.moe->hidden;
  if (l.head) return l.head->hidden;
  if (l.mamba) return l.mamba->hidden;
  return 0;
}

std::string layer_label(const Layer& l, int index) {
  return "layer " + std::to_string(index) + " ('" + l.name + "', " + layer_kind_name(l.kind) + ")";
}

Status check_layer(const ModelSpec& model, int index, const StageModuleOptions& options) {
  const Layer& l = model.layers[index];
  const std::string label = layer_label(l, index);
  const int last = static_cast<int>(model.layers.size()) - 1;
  switch (l.kind) {
    case LayerKind::kEmbedding:
    case LayerKind::kAttention:
    case LayerKind::kFeedForward:
    case LayerKind::kMoe:
    case LayerKind::kMamba:
    case LayerKind::kDecoderBlock:
    case LayerKind::kHead:
      break;
    default:
      return invalid_argument(label +
                              ": the executor does not run this layer kind yet; it runs "
                              "embedding, attention, feed_forward, moe, mamba, decoder_block "
                              "and head");
  }
  if ((index == 0) != (l.kind == LayerKind::kEmbedding)) {
    return invalid_argument(label +
                            ": the executor feeds token ids to layer 0, which must be "
                            "the model's only embedding");
  }
  if ((index == last) != (l.kind == LayerKind::kHead)) {
    return invalid_argument(label +
                            ": the executor computes the loss in the last layer, which "
                            "must be the model's only head");
  }
  const bool needs_attention =
      l.kind == LayerKind::kAttention || l.kind == LayerKind::kDecoderBlock;
  const bool needs_mixer = l.kind == LayerKind::kFeedForward || l.kind == LayerKind::kMoe ||
                           l.kind == LayerKind::kDecoderBlock;
  if ((l.kind == LayerKind::kEmbedding && !l.embedding) ||
      (l.kind == LayerKind::kHead && !l.head) || (needs_attention && !l.attention) ||
      (needs_mixer && !l.ffn && !l.moe) || (l.kind == LayerKind::kFeedForward && !l.ffn) ||
      (l.kind == LayerKind::kMoe && !l.moe) || (l.kind == LayerKind::kMamba && !l.mamba)) {
    return invalid_argument(label + ": its shape is missing");
  }
  if (l.mamba) {
    const MambaShape& m = *l.mamba;
    if (m.version != 2 || m.n_heads <= 0 || m.n_groups <= 0 || m.n_heads % m.n_groups != 0 ||
        m.d_inner != m.n_heads * m.head_dim || m.conv_kernel < 1 || m.d_state <= 0) {
      return invalid_argument(label +
                              ": the executor runs Mamba-2 with n_heads a multiple of n_groups "
                              "and d_inner = n_heads * head_dim");
    }
  }
  if (l.attention) {
    const AttentionShape& a = *l.attention;
    if (a.mla) {
      return invalid_argument(label + ": multi-head latent attention is not run by the executor");
    }
    if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 ||
        a.head_dim <= 0 || a.head_dim % 2 != 0) {
      return invalid_argument(label +
                              ": attention needs num_heads a positive multiple of "
                              "num_kv_heads and an even head_dim");
    }
  }
  if (l.moe && (l.moe->latent_size > 0 || l.moe->top_k < 1 || l.moe->top_k > l.moe->num_experts)) {
    return invalid_argument(label + ": MoE needs 1 <= top_k <= num_experts and no latent_size");
  }
  if (l.embedding && l.embedding->learned_positions > 0 &&
      l.embedding->learned_positions < options.seq_len) {
    return invalid_argument(label + ": " + std::to_string(l.embedding->learned_positions) +
                            " learned positions cannot cover sequences of " +
                            std::to_string(options.seq_len) + " tokens");
  }
  if (index > 0 && layer_hidden(l) != layer_hidden(model.layers[index - 1])) {
    return invalid_argument(label + ": reads a hidden state of width " +
                            std::to_string(layer_hidden(l)) + " but the layer before writes " +
                            std::to_string(layer_hidden(model.layers[index - 1])));
  }
  if (l.head && l.head->tied && model.layers[0].embedding &&
      (model.layers[0].embedding->vocab != l.head->vocab ||
       model.layers[0].embedding->hidden != l.head->hidden)) {
    return invalid_argument(label + ": a tied head must have the embedding's shape");
  }
  return Status::ok();
}

std::pair<Norm, Norm> sublayer_norms(Init& init, const Layer& l, const std::string& pre,
                                     const std::string& post, bool with_post) {
  const int64_t h = layer_hidden(l);
  std::pair<Norm, Norm> norms;
  norms.first = Norm(init, pre, h, l.norm_bias);
  if (with_post) norms.second = Norm(init, post, h, l.norm_bias);
  return norms;
}

// The head of a model whose head reuses the embedding matrix, or -1.
int tied_head(const ModelSpec& model) {
  const int last = static_cast<int>(model.layers.size()) - 1;
  return model.layers[last].head && model.layers[last].head->tied ? last : -1;
}

std::unique_ptr<LayerImpl> build_layer(const ModelSpec& model, int index, uint64_t seed,
                                       ParameterStore& store, std::vector<StageParameter>* used) {
  const Layer& l = model.layers[index];
  const bool rotary =
      !(model.layers[0].embedding && model.layers[0].embedding->learned_positions > 0);
  const int tied = tied_head(model);
  Init init(store, l.name, seed + static_cast<uint64_t>(index), {index});
  std::unique_ptr<LayerImpl> out;
  auto mixer = [&](Init& scope) -> ResidualLayer::Body {
    if (l.moe) {
      auto moe = std::make_shared<Moe>(scope, *l.moe);
      return [moe](const at::Tensor& x) { return (*moe)(x); };
    }
    auto ffn = std::make_shared<FeedForward>(scope, l.ffn->hidden, l.ffn->ffn_size,
                                             l.ffn->activation, l.ffn->bias);
    return [ffn](const at::Tensor& x) { return (*ffn)(x); };
  };
  auto attention = [&](Init& scope) -> ResidualLayer::Body {
    Init attn_scope = scope.scope("attn");
    auto attn = std::make_shared<Attention>(attn_scope, *l.attention, rotary);
    return [attn](const at::Tensor& x) { return (*attn)(x); };
  };
  switch (l.kind) {
    case LayerKind::kEmbedding: {
      // With a tied head the embedding matrix (drawn first) is read by the head too.
      Init embed(store, l.name, seed + static_cast<uint64_t>(index),
                 tied >= 0 ? std::vector<int>{index, tied} : std::vector<int>{index});
      out = std::make_unique<EmbeddingLayer>(embed, *l.embedding);
      for (auto& p : embed.used()) init.used().push_back(p);
      break;
    }
    case LayerKind::kDecoderBlock: {
      // Two norms: one before each sub-layer; four: one before and one after each (Gemma 2).
      const bool post = l.num_norms >= 4;
      auto attn_norms = sublayer_norms(init, l, "attn_norm", "attn_post_norm", post);
      auto attn = attention(init);
      auto mlp_norms = sublayer_norms(init, l, "mlp_norm", "mlp_post_norm", post);
      Init mlp_scope = init.scope(l.moe ? "moe" : "mlp");
      auto mlp = mixer(mlp_scope);
      out = std::make_unique<ResidualLayer>(std::vector{attn_norms, mlp_norms},
                                            std::vector{attn, mlp});
      break;
    }
    case LayerKind::kAttention:
    case LayerKind::kFeedForward:
    case LayerKind::kMoe:
    case LayerKind::kMamba: {
      auto norms = sublayer_norms(init, l, "norm", "post_norm", l.num_norms >= 2);
      ResidualLayer::Body body;
      if (l.kind == LayerKind::kAttention) {
        body = attention(init);
      } else if (l.kind == LayerKind::kMamba) {
        Init scope = init.scope("mixer");
        auto mamba = std::make_shared<Mamba2>(scope, *l.mamba);
        body = [mamba](const at::Tensor& x) { return (*mamba)(x); };
      } else {
        Init scope = init.scope(l.kind == LayerKind::kMoe ? "moe" : "mlp");
        body = mixer(scope);
      }
      out = std::make_unique<ResidualLayer>(std::vector{norms}, std::vector{body});
      break;
    }
    case LayerKind::kHead: {
      Norm norm(init, "norm", l.head->hidden, l.norm_bias);
      at::Tensor weight;
      if (l.head->tied) {
        // The embedding's matrix: drawn as the embedding layer draws it, shared by name.
        const Layer& e = model.layers[0];
        Init embed(store, e.name, seed, {0, index});
        weight = embed.normal("weight", {e.embedding->vocab, e.embedding->hidden});
        for (auto& p : embed.used()) init.used().push_back(p);
      } else {
        weight = init.normal("weight", {l.head->vocab, l.head->hidden});
      }
      out = std::make_unique<HeadLayer>(norm, weight);
      break;
    }
    default:
      break;
  }
  for (auto& p : init.used()) used->push_back(p);
  return out;
}

}  // namespace

Result<std::unique_ptr<StageModule>> make_transformer_stage(const ModelSpec& model, int layer_begin,
                                                            int layer_end,
                                                            const StageModuleOptions& options,
                                                            ParameterStore& store) {
  if (layer_begin < 0 || layer_begin >= layer_end ||
      layer_end > static_cast<int>(model.layers.size())) {
    return invalid_argument("model '" + model.name + "': no layers [" +
                            std::to_string(layer_begin) + ", " + std::to_string(layer_end) +
                            ") in a model of " + std::to_string(model.layers.size()) + " layers");
  }
  for (int i = layer_begin; i < layer_end; ++i) {
    MOTLEY_RETURN_IF_ERROR(
        check_layer(model, i, options).with_context("model '" + model.name + "'"));
  }
  std::vector<std::unique_ptr<LayerImpl>> layers;
  std::vector<StageParameter> used;
  try {
    for (int i = layer_begin; i < layer_end; ++i) {
      layers.push_back(build_layer(model, i, options.seed, store, &used));
    }
  } catch (const std::exception& e) {
    return internal_error("model '" + model.name + "': building layers [" +
                          std::to_string(layer_begin) + ", " + std::to_string(layer_end) +
                          "): " + e.what());
  }
  std::sort(used.begin(), used.end(),
            [](const StageParameter& a, const StageParameter& b) { return a.name < b.name; });
  used.erase(std::unique(
                 used.begin(), used.end(),
                 [](const StageParameter& a, const StageParameter& b) { return a.name == b.name; }),
             used.end());
  const int last = static_cast<int>(model.layers.size()) - 1;
  return std::unique_ptr<StageModule>(new TransformerStage(std::move(layers), layer_begin == 0,
                                                           layer_end - 1 == last, std::move(used)));
}

std::vector<int64_t> boundary_shape(const ModelSpec& model, int layer, int64_t micro_batch_size,
                                    int64_t seq_len) {
  MOTLEY_CHECK(layer >= 0 && layer < static_cast<int>(model.layers.size()), "no such layer");
  return {micro_batch_size, seq_len, layer_hidden(model.layers[layer])};
}

void micro_batch_tensors(const TokenStream& tokens, int64_t g, int64_t micro_batch_size,
                         int64_t seq_len, at::Tensor* inputs, at::Tensor* targets) {
  *inputs = at::empty({micro_batch_size, seq_len}, at::kLong);
  *targets = at::empty({micro_batch_size, seq_len}, at::kLong);
  auto in = inputs->accessor<int64_t, 2>();
  auto out = targets->accessor<int64_t, 2>();
  for (int64_t row = 0; row < micro_batch_size; ++row) {
    const std::vector<int64_t> sample = tokens.sample(g * micro_batch_size + row, seq_len);
    for (int64_t i = 0; i < seq_len; ++i) {
      in[row][i] = sample[i];
      out[row][i] = sample[i + 1];
    }
  }
}

}  // namespace motley
