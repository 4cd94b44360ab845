// The transformer layers the executor runs, written with ATen operations on explicit weight
// tensors (no torch::nn modules, so parameters live in the rank's ParameterStore under stable
// names and their initial values depend only on the layer's seed), whole or split over a
// tensor-parallel group, with the routed experts split over an expert-parallel group and every
// sequence over a context-parallel one. fp32 throughout.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "motley/exec/data.h"
#include "motley/exec/split_backward.h"
#include "motley/exec/stage_module.h"
#include "motley/model/model_json.h"

namespace motley {

at::Tensor ParameterStore::get_or_create(const std::string& name, at::Tensor initial) {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return it->second;
  initial = initial.detach().to(device_).contiguous();
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

// ---------------------------------------------------------------------------------------------
// Tensor parallelism (Shoeybi et al. 2019, Megatron-LM): the communication operators that mark
// where a rank's partial results meet the replicated hidden state. Each is the identity on one
// pass and a sum over the group on the other.

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const TensorParallelGroup& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<const TensorParallelGroup*>(ctx->saved_data["group"].toInt());
}

// Sums in fp32 whatever the operand's type (a bf16 partial product under autocast): the
// transports move fp32, and the sum of bf16 partials would round once per rank.
at::Tensor summed(const TensorParallelGroup& group, const at::Tensor& x) {
  at::Tensor out = x.to(at::kFloat).contiguous().clone();
  group.all_reduce(out);
  return out;
}

// Megatron's f: the replicated input of a column-split layer. Forward: identity. Backward: each
// rank's gradient covers only its columns' paths, so the input's gradient is their sum.
struct CopyToGroup : torch::autograd::Function<CopyToGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const TensorParallelGroup* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {summed(group_of(ctx), grads[0]), at::Tensor()};
  }
};

// Megatron's g: the partial output of a row-split layer summed into the replicated hidden state.
// Forward: sum. Backward: identity (every rank already holds the whole gradient).
struct ReduceFromGroup : torch::autograd::Function<ReduceFromGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const TensorParallelGroup* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return summed(*group, x);
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

// A sum whose result is used by split computations (the sum of squares of a norm over a split
// width): each rank's gradient of the sum is partial, so both passes sum.
struct SumOverGroup : torch::autograd::Function<SumOverGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const TensorParallelGroup* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return summed(*group, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {summed(group_of(ctx), grads[0]), at::Tensor()};
  }
};

// ---------------------------------------------------------------------------------------------
// Expert parallelism (Lepikhin et al. 2020, GShard; Megatron-LM's expert-model-parallel
// groups): each member of a group of e holds 1/e of every MoE layer's routed experts, sends each
// of its tokens to the member holding the expert it was routed to, and gets the expert's output
// back.

// The all-to-all of a group whose members each have `per` blocks for every member: block
// j * per + k of `send` (rows of width `width`, fp32) goes to member j, where it is block
// i * per + k of what `exchange_blocks` returns, i the sender. The blocks' row counts travel
// first, in a sum over the group, so each member knows how to split what it receives; then
// each member's blocks for one member go to it end to end, in one all-to-all.
variable_list exchange_blocks(const TensorParallelGroup& g, at::TensorList send, int64_t per,
                              int64_t width) {
  const int64_t e = g.size;
  const int64_t blocks = e * per;
  const at::TensorOptions options =
      at::TensorOptions()
          .dtype(at::kFloat)
          .device(send.empty() ? c10::Device(c10::kCPU) : send[0].device());
  at::Tensor counts = at::zeros({e, blocks}, options);
  for (int64_t b = 0; b < blocks; ++b) counts[g.rank][b] = static_cast<double>(send[b].size(0));
  g.all_reduce(counts);
  const at::Tensor rows = counts.to(at::kCPU, at::kLong).contiguous();
  const auto n = rows.accessor<int64_t, 2>();
  std::vector<at::Tensor> outgoing, incoming;
  for (int64_t j = 0; j < e; ++j) {
    outgoing.push_back(at::cat(send.slice(j * per, per), 0).contiguous());
    int64_t from = 0;
    for (int64_t k = 0; k < per; ++k) from += n[j][g.rank * per + k];
    incoming.push_back(at::empty({from, width}, options));
  }
  g.all_to_all(outgoing, incoming);
  variable_list received;
  for (int64_t i = 0; i < e; ++i) {
    int64_t offset = 0;
    for (int64_t k = 0; k < per; ++k) {
      const int64_t count = n[i][g.rank * per + k];
      received.push_back(incoming[i].narrow(0, offset, count));
      offset += count;
    }
  }
  return received;
}

// The exchange as an autograd operator: the backward sends every received block's gradient
// back to its sender, the same exchange the other way. Every member must call it for the same
// layer and micro-batch at once, in forward and backward alike.
struct ExchangeOverGroup : torch::autograd::Function<ExchangeOverGroup> {
  // `send` as a TensorList: autograd takes each of its tensors as an input.
  static variable_list forward(AutogradContext* ctx, at::TensorList send,
                               const TensorParallelGroup* group, int64_t per, int64_t width) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    ctx->saved_data["per"] = per;
    ctx->saved_data["width"] = width;
    variable_list received = exchange_blocks(*group, send, per, width);
    std::vector<int64_t> rows;
    for (const at::Tensor& r : received) rows.push_back(r.size(0));
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["device"] = send.empty() ? c10::Device(c10::kCPU) : send[0].device();
    return received;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t width = ctx->saved_data["width"].toInt();
    const std::vector<int64_t> rows = ctx->saved_data["rows"].toIntVector();
    for (size_t b = 0; b < grads.size(); ++b) {
      if (!grads[b].defined()) {
        grads[b] = at::zeros(
            {rows[b], width},
            at::TensorOptions().dtype(at::kFloat).device(ctx->saved_data["device"].toDevice()));
      }
      grads[b] = grads[b].to(at::kFloat).contiguous();
    }
    variable_list back =
        exchange_blocks(group_of(ctx), grads, ctx->saved_data["per"].toInt(), width);
    back.resize(back.size() + 3);  // the group, per and width take no gradient
    return back;
  }
};

// The group a layer runs on, shared by its closures (the autograd operators keep a pointer).
using Group = std::shared_ptr<const TensorParallelGroup>;

// ---------------------------------------------------------------------------------------------
// Context parallelism (Megatron-LM's context-parallel groups): each member of a group of c holds
// 2 of every sequence's 2c equal chunks (context_parallel_positions) for every layer; attention
// gathers the members' keys and values, so each member's queries see the whole sequence.

// Every member's x [b, h, n, d] (fp32), concatenated along dim 2 in member order: an
// all-gather, as an all-to-all sending x to every member. Backward: the gradient of the whole is
// partial on each member (its queries' share), so each member sends every member the part for
// that member's rows and sums the parts it receives, in member order (a reduce-scatter).
struct GatherOverGroup : torch::autograd::Function<GatherOverGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const TensorParallelGroup* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    const int64_t c = group->size;
    const at::Tensor mine = x.to(at::kFloat).contiguous();
    std::vector<at::Tensor> parts;
    for (int64_t m = 0; m < c; ++m) parts.push_back(at::empty_like(mine));
    group->all_to_all(std::vector<at::Tensor>(static_cast<size_t>(c), mine), parts);
    return at::stack(parts)
        .permute({1, 2, 0, 3, 4})
        .reshape({x.size(0), x.size(1), c * x.size(2), x.size(3)});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const TensorParallelGroup& group = group_of(ctx);
    const at::Tensor& g = grads[0];
    const int64_t n = g.size(2) / group.size;
    const at::Tensor theirs = g.to(at::kFloat)
                                  .reshape({g.size(0), g.size(1), group.size, n, g.size(3)})
                                  .permute({2, 0, 1, 3, 4})
                                  .contiguous();
    std::vector<at::Tensor> outgoing, incoming;
    for (int64_t m = 0; m < group.size; ++m) {
      outgoing.push_back(theirs.select(0, m));
      incoming.push_back(at::empty_like(outgoing.back()));
    }
    group.all_to_all(outgoing, incoming);
    at::Tensor sum = incoming[0];
    for (size_t m = 1; m < incoming.size(); ++m) sum = sum + incoming[m];
    return {sum, at::Tensor()};
  }
};

// A rank's share of every sequence: its context-parallel group (size 1: whole sequences) and,
// under context parallelism, the positions of its tokens and the order that puts the members'
// gathered keys by position.
struct SequenceShare {
  Group group;
  at::Tensor positions;  // int64 [seq_len / c], CPU
  at::Tensor order;      // int64 [seq_len], CPU
};
using Sequence = std::shared_ptr<const SequenceShare>;

Sequence make_sequence(const StageModuleOptions& options) {
  auto share = std::make_shared<SequenceShare>();
  share->group = std::make_shared<const TensorParallelGroup>(options.context_parallel);
  const int c = options.context_parallel.size;
  if (c > 1) {
    share->positions =
        context_parallel_positions(options.seq_len, c, options.context_parallel.rank);
    std::vector<at::Tensor> all;
    for (int m = 0; m < c; ++m) all.push_back(context_parallel_positions(options.seq_len, c, m));
    share->order = at::argsort(at::cat(all));
  }
  return share;
}

// The positions of a rank's `s` tokens of every sequence.
at::Tensor token_positions(const SequenceShare& seq, int64_t s) {
  return seq.group->size == 1 ? at::arange(s, at::kLong) : seq.positions;
}

// x [b, h, n, d] of this rank's tokens as [b, h, seq_len, d] of every member's, by position
// (x itself without context parallelism).
at::Tensor whole_sequence(const SequenceShare& seq, const at::Tensor& x) {
  if (seq.group->size == 1) return x;
  return GatherOverGroup::apply(x, seq.group.get()).index_select(2, seq.order.to(x.device()));
}

at::Tensor copy_to(const Group& g, const at::Tensor& x) {
  return g->size == 1 ? x : CopyToGroup::apply(x, g.get());
}
at::Tensor reduce_from(const Group& g, const at::Tensor& x) {
  return g->size == 1 ? x : ReduceFromGroup::apply(x, g.get());
}
at::Tensor sum_over(const Group& g, const at::Tensor& x) {
  return g->size == 1 ? x : SumOverGroup::apply(x, g.get());
}

// [begin, begin + count): a contiguous run of full-tensor rows.
struct RowRange {
  int64_t begin = 0;
  int64_t count = 0;
};

// Rank r's equal share of `total` rows (REQUIRES: size divides total), offset by `base`.
RowRange share(const TensorParallelGroup& g, int64_t total, int64_t base = 0) {
  const int64_t n = total / g.size;
  return {base + g.rank * n, n};
}

// Which rows of a parameter each rank holds, as a function of the rank, and whether a shared
// row's gradient is complete on every holder (replicated computation) or partial.
struct SplitSpec {
  int64_t dim = 0;
  std::function<std::vector<RowRange>(int rank)> rows_of;
  bool complete_gradient = false;
};

std::vector<int64_t> expand_rows(const std::vector<RowRange>& ranges) {
  std::vector<int64_t> rows;
  for (const RowRange& r : ranges) {
    for (int64_t i = 0; i < r.count; ++i) rows.push_back(r.begin + i);
  }
  return rows;
}

at::Tensor index_tensor(const std::vector<int64_t>& v) {
  return at::tensor(v.empty() ? std::vector<int64_t>{} : v, at::kLong);
}

TensorSlice make_slice(const TensorParallelGroup& g, at::IntArrayRef shape, const SplitSpec& spec) {
  TensorSlice slice;
  slice.dim = spec.dim;
  slice.full_shape = shape.vec();
  std::vector<std::set<int64_t>> held(static_cast<size_t>(g.size));
  for (int r = 0; r < g.size; ++r) {
    for (int64_t row : expand_rows(spec.rows_of(r))) held[r].insert(row);
  }
  const std::vector<int64_t> mine = expand_rows(spec.rows_of(g.rank));
  std::vector<int64_t> value_rows, grad_rows;
  bool shared_anywhere = false;
  for (int r = 0; r < g.size && !shared_anywhere; ++r) {
    for (int q = r + 1; q < g.size && !shared_anywhere; ++q) {
      for (int64_t row : held[r]) {
        if (held[q].count(row)) {
          shared_anywhere = true;
          break;
        }
      }
    }
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    bool lower_holds = false;
    for (int r = 0; r < g.rank; ++r) lower_holds = lower_holds || held[r].count(mine[i]) > 0;
    if (!lower_holds) value_rows.push_back(static_cast<int64_t>(i));
    if (!lower_holds || !spec.complete_gradient) grad_rows.push_back(static_cast<int64_t>(i));
  }
  slice.rows = index_tensor(mine);
  slice.value_rows = index_tensor(value_rows);
  slice.grad_rows = index_tensor(grad_rows);
  slice.exclusive = !shared_anywhere;
  return slice;
}

// Draws one layer's parameters, in a fixed order, from a generator of its own seed. A
// tensor-parallel rank draws every full tensor (so the draws and values match the unsplit
// model's) and keeps its rows.
class Init {
 public:
  // `layers`: every layer that reads the parameters drawn here (StageParameter::layers).
  Init(ParameterStore& store, std::string prefix, uint64_t seed, std::vector<int> layers,
       Group group)
      : store_(store),
        prefix_(std::move(prefix)),
        generator_(at::make_generator<at::CPUGeneratorImpl>(seed)),
        layers_(std::move(layers)),
        group_(std::move(group)) {}

  // Every parameter below takes an optional split; without one, every rank holds the whole
  // tensor and computes its whole gradient (replicated).
  at::Tensor normal(const std::string& name, at::IntArrayRef shape,
                    const std::optional<SplitSpec>& split = std::nullopt) {
    at::Tensor t = at::empty(shape, at::kFloat);
    t.normal_(0.0, kInitStd, generator_);
    return adopt(name, t, split);
  }
  at::Tensor ones(const std::string& name, at::IntArrayRef shape,
                  const std::optional<SplitSpec>& split = std::nullopt) {
    return adopt(name, at::ones(shape, at::kFloat), split);
  }
  at::Tensor zeros(const std::string& name, at::IntArrayRef shape,
                   const std::optional<SplitSpec>& split = std::nullopt) {
    return adopt(name, at::zeros(shape, at::kFloat), split);
  }
  // A parameter computed from a uniform draw on [0, 1) by `transform`.
  at::Tensor from_uniform(const std::string& name, at::IntArrayRef shape,
                          const std::function<at::Tensor(const at::Tensor&)>& transform,
                          const std::optional<SplitSpec>& split = std::nullopt) {
    at::Tensor u = at::empty(shape, at::kFloat);
    u.uniform_(0.0, 1.0, generator_);
    return adopt(name, transform(u), split);
  }
  // A parameter of fixed value.
  at::Tensor value(const std::string& name, const at::Tensor& t,
                   const std::optional<SplitSpec>& split = std::nullopt) {
    return adopt(name, t, split);
  }
  // A sub-scope: "<prefix>.<name>".
  Init scope(const std::string& name) { return Init(*this, name); }
  // The sub-scope of a routed expert split over an expert-parallel group: its parameters are
  // marked StageParameter::expert_shard, and a member that does not `hold` the expert draws them
  // (every member keeps the reference's draw sequence) but keeps nothing (undefined tensors).
  Init expert_scope(const std::string& name, bool hold) {
    Init out(*this, name);
    out.expert_shard_ = true;
    out.held_ = hold;
    return out;
  }

  const Group& group() const { return group_; }
  std::vector<StageParameter>& used() { return *used_; }

 private:
  Init(Init& parent, const std::string& name)
      : store_(parent.store_),
        prefix_(parent.prefix_ + "." + name),
        generator_(parent.generator_),
        layers_(parent.layers_),
        group_(parent.group_),
        used_(parent.used_),
        expert_shard_(parent.expert_shard_),
        held_(parent.held_) {}

  at::Tensor adopt(const std::string& name, const at::Tensor& full,
                   const std::optional<SplitSpec>& split) {
    const std::string path = prefix_ + "." + name;
    const TensorParallelGroup& g = *group_;
    SplitSpec spec;
    if (split) {
      spec = *split;
    } else {
      const int64_t rows = full.size(0);
      spec = SplitSpec{0, [rows](int) { return std::vector<RowRange>{{0, rows}}; }, true};
    }
    TensorSlice slice = make_slice(g, full.sizes(), spec);
    if (!held_) {
      // Recorded without a tensor (StageModule::held_elsewhere).
      slice.rows = slice.rows.to(store_.device());
      slice.grad_rows = slice.grad_rows.to(store_.device());
      slice.value_rows = slice.value_rows.to(store_.device());
      used_->push_back({path, at::Tensor(), layers_, std::move(slice), expert_shard_});
      return at::Tensor();
    }
    at::Tensor local = full;
    if (slice.rows.numel() != full.size(slice.dim)) {
      local = full.index_select(slice.dim, slice.rows);
    }
    // Drawn on the CPU (the same weights on any device); the store moves the parameter, and the
    // slice's row indices go where the parameter is.
    at::Tensor p = store_.get_or_create(path, local);
    slice.rows = slice.rows.to(p.device());
    slice.grad_rows = slice.grad_rows.to(p.device());
    slice.value_rows = slice.value_rows.to(p.device());
    used_->push_back({path, p, layers_, std::move(slice), expert_shard_});
    return p;
  }

  ParameterStore& store_;
  std::string prefix_;
  at::Generator generator_;  // shared with sub-scopes: one draw sequence per layer
  std::vector<int> layers_;
  Group group_;
  std::shared_ptr<std::vector<StageParameter>> used_ =
      std::make_shared<std::vector<StageParameter>>();
  bool expert_shard_ = false;
  bool held_ = true;
};

// Rank r's equal share of the rows `rows` of a dimension, split in contiguous blocks.
SplitSpec split_rows(int64_t dim, RowRange rows, const Group& g) {
  const int size = g->size;
  return SplitSpec{dim, [rows, size](int r) {
                     const int64_t n = rows.count / size;
                     return std::vector<RowRange>{{rows.begin + r * n, n}};
                   }};
}

// Rank r's equal share of a dimension of `total` rows split in contiguous blocks.
SplitSpec split_evenly(int64_t dim, int64_t total, const Group& g) {
  return split_rows(dim, RowRange{0, total}, g);
}

// Replicated values whose gradient on each rank covers only its share of the work (the qk-norm
// weights, applied to each rank's heads): summed over the group.
SplitSpec replicated_partial(int64_t total) {
  return SplitSpec{0, [total](int) { return std::vector<RowRange>{{0, total}}; }, false};
}

// x·wᵀ + b (b may be undefined): a weight product, whose weight gradient a split backward
// leaves for W (split_backward.h).
at::Tensor affine(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return weight_product(x, w, b);
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

// Split: gate and up by rows (columns of the product), down by columns; the down bias is added
// once, after the sum.
class FeedForward {
 public:
  FeedForward(Init& init, int64_t hidden, int64_t ffn, Activation activation, bool bias)
      : activation_(activation), group_(init.group()) {
    const SplitSpec rows = split_evenly(0, ffn, group_);
    if (is_gated(activation)) {
      w_gate_ = init.normal("w_gate", {ffn, hidden}, rows);
      if (bias) b_gate_ = init.zeros("b_gate", {ffn}, rows);
    }
    w_up_ = init.normal("w_up", {ffn, hidden}, rows);
    if (bias) b_up_ = init.zeros("b_up", {ffn}, rows);
    w_down_ = init.normal("w_down", {hidden, ffn}, split_evenly(1, ffn, group_));
    if (bias) b_down_ = init.zeros("b_down", {hidden});
  }

  at::Tensor operator()(const at::Tensor& x) const {
    if (group_->size == 1) return affine(inner(x), w_down_, b_down_);
    return add_bias(reduce_from(group_, partial(copy_to(group_, x))));
  }
  // The row-split product before the group's sum and the bias: this rank's share of the output.
  // `x` is already the group's copy (copy_to).
  at::Tensor partial(const at::Tensor& x) const { return weight_product(inner(x), w_down_); }
  at::Tensor add_bias(const at::Tensor& y) const { return b_down_.defined() ? y + b_down_ : y; }

 private:
  at::Tensor inner(const at::Tensor& x) const {
    at::Tensor up = affine(x, w_up_, b_up_);
    return w_gate_.defined() ? activate(activation_, affine(x, w_gate_, b_gate_)) * up
                             : activate(activation_, up);
  }

  Activation activation_;
  Group group_;
  at::Tensor w_gate_, b_gate_, w_up_, b_up_, w_down_, b_down_;
};

// x: [b, heads, s, d]; rotates pairs (i, i + d/2) by position * theta^(-2i/d), the positions of
// the s tokens given by `positions` (int64, CPU).
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& positions) {
  const int64_t d = x.size(3);
  at::Tensor inv_freq =
      at::pow(kRopeTheta, at::arange(0, d, 2, at::kDouble) / static_cast<double>(d)).reciprocal();
  at::Tensor angles = at::outer(positions.to(at::kDouble), inv_freq).to(at::kFloat);
  // Computed on the CPU in double, so every device rotates by the same angles.
  at::Tensor cos = at::cat({angles.cos(), angles.cos()}, -1).to(x.device());
  at::Tensor sin = at::cat({angles.sin(), angles.sin()}, -1).to(x.device());
  at::Tensor x1 = x.narrow(-1, 0, d / 2);
  at::Tensor x2 = x.narrow(-1, d / 2, d / 2);
  return x * cos + at::cat({-x2, x1}, -1) * sin;
}

// 0 where the query at position i may see the key at position j, -inf elsewhere: causal
// (j <= i) and, with a window w, i - j < w (bidirectional: |i - j| < w). The queries' positions
// are `queries` (int64, CPU); the keys are the whole sequence of `keys` positions.
at::Tensor attention_mask(const AttentionShape& a, const at::Tensor& queries, int64_t keys) {
  at::Tensor i = queries.unsqueeze(1);
  at::Tensor j = at::arange(keys, at::kLong).unsqueeze(0);
  at::Tensor allowed = at::ones({queries.size(0), keys}, at::kBool);
  if (a.causal) allowed = allowed.logical_and(j.le(i));
  if (a.sliding_window > 0) allowed = allowed.logical_and((i - j).abs().lt(a.sliding_window));
  return at::zeros({queries.size(0), keys}, at::kFloat)
      .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
}

// Scaled dot-product attention of q [b, nh, s, d] at positions `positions` over the whole
// sequence's k [b, nh, S, d] and v [b, nh, S, dv] with the shape's mask and, when `sinks` is
// defined, a learned logit per head that competes in the softmax and is then dropped. Returns
// [b, s, nh * dv].
at::Tensor attend(const AttentionShape& a, const at::Tensor& q, const at::Tensor& k,
                  const at::Tensor& v, const at::Tensor& sinks, const at::Tensor& positions) {
  const int64_t b = q.size(0);
  const int64_t nh = q.size(1);
  const int64_t s = q.size(2);
  const int64_t keys = k.size(2);
  at::Tensor scores =
      at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  scores = scores + attention_mask(a, positions, keys).to(scores.device());
  at::Tensor probs;
  if (sinks.defined()) {
    at::Tensor sink = sinks.view({1, nh, 1, 1}).expand({b, nh, s, 1});
    probs = at::softmax(at::cat({scores, sink}, -1), -1).narrow(-1, 0, keys);
  } else {
    probs = at::softmax(scores, -1);
  }
  return at::matmul(probs, v).transpose(1, 2).reshape({b, s, nh * v.size(-1)});
}

// The output projection of this rank's heads (wo split by columns), summed over the group; the
// bias is added once, after the sum.
at::Tensor project_out(const Group& group, const at::Tensor& heads, const at::Tensor& wo,
                       const at::Tensor& bo) {
  if (group->size == 1) return affine(heads, wo, bo);
  at::Tensor out = reduce_from(group, weight_product(heads, wo));
  return bo.defined() ? out + bo : out;
}

// Split by heads: rank r holds query heads [r nh/t, (r+1) nh/t) and the key/value heads they
// read, [r nkv/t, (r+1) nkv/t); the output projection by the matching columns.
class Attention {
 public:
  Attention(Init& init, const AttentionShape& a, bool rotary, Sequence seq)
      : a_(a), rotary_(rotary), group_(init.group()), seq_(std::move(seq)) {
    v_dim_ = a.v_head_dim > 0 ? a.v_head_dim : a.head_dim;
    const int64_t t = group_->size;
    heads_ = a.num_heads / t;
    kv_heads_ = a.num_kv_heads / t;
    const SplitSpec q_rows = split_evenly(0, a.num_heads * a.head_dim, group_);
    const SplitSpec k_rows = split_evenly(0, a.num_kv_heads * a.head_dim, group_);
    const SplitSpec v_rows = split_evenly(0, a.num_kv_heads * v_dim_, group_);
    wq_ = init.normal("wq", {a.num_heads * a.head_dim, a.hidden}, q_rows);
    wk_ = init.normal("wk", {a.num_kv_heads * a.head_dim, a.hidden}, k_rows);
    wv_ = init.normal("wv", {a.num_kv_heads * v_dim_, a.hidden}, v_rows);
    wo_ = init.normal("wo", {a.hidden, a.num_heads * v_dim_},
                      split_evenly(1, a.num_heads * v_dim_, group_));
    if (a.qkv_bias) {
      bq_ = init.zeros("bq", {a.num_heads * a.head_dim}, q_rows);
      bk_ = init.zeros("bk", {a.num_kv_heads * a.head_dim}, k_rows);
      bv_ = init.zeros("bv", {a.num_kv_heads * v_dim_}, v_rows);
    }
    if (a.output_bias) bo_ = init.zeros("bo", {a.hidden});
    if (a.qk_norm) {
      q_norm_ = init.ones("q_norm", {a.head_dim}, replicated_partial(a.head_dim));
      k_norm_ = init.ones("k_norm", {a.head_dim}, replicated_partial(a.head_dim));
    }
    if (a.sinks) sinks_ = init.zeros("sinks", {a.num_heads}, split_evenly(0, a.num_heads, group_));
  }

  at::Tensor operator()(const at::Tensor& input) const {
    const at::Tensor x = copy_to(group_, input);
    const int64_t b = x.size(0);
    const int64_t s = x.size(1);
    const int64_t nh = heads_;
    const int64_t nkv = kv_heads_;
    at::Tensor q = affine(x, wq_, bq_).view({b, s, nh, a_.head_dim}).transpose(1, 2);
    at::Tensor k = affine(x, wk_, bk_).view({b, s, nkv, a_.head_dim}).transpose(1, 2);
    at::Tensor v = affine(x, wv_, bv_).view({b, s, nkv, v_dim_}).transpose(1, 2);
    if (q_norm_.defined()) {
      q = rms_norm(q, q_norm_);
      k = rms_norm(k, k_norm_);
    }
    const at::Tensor positions = token_positions(*seq_, s);
    if (rotary_) {
      q = apply_rope(q, positions);
      k = apply_rope(k, positions);
    }
    k = whole_sequence(*seq_, k);
    v = whole_sequence(*seq_, v);
    if (nkv < nh) {  // grouped-query: each key/value head serves nh / nkv query heads
      k = k.repeat_interleave(nh / nkv, 1);
      v = v.repeat_interleave(nh / nkv, 1);
    }
    return project_out(group_, attend(a_, q, k, v, sinks_, positions), wo_, bo_);
  }

 private:
  AttentionShape a_;
  bool rotary_;
  Group group_;
  Sequence seq_;
  int64_t v_dim_ = 0;
  int64_t heads_ = 0;     // on this rank
  int64_t kv_heads_ = 0;  // on this rank
  at::Tensor wq_, wk_, wv_, wo_, bq_, bk_, bv_, bo_, q_norm_, k_norm_, sinks_;
};

// Multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2) as Hugging Face transformers'
// DeepseekV2 / DeepseekV3 attention computes it. Queries come from the hidden state directly
// (wq) or through a low-rank bottleneck (wq_a, RMSNorm, wq_b); per head q = [q_nope, q_pe].
// Keys and values come from one compressed latent: wkv_a maps the hidden state to the latent
// (kv_lora_rank) and a rotary key k_pe (qk_rope_head_dim) that all heads share; the latent is
// normed and wkv_b expands it to [k_nope, v] per head; k = [k_nope, k_pe]. The rotary embedding
// applies to q_pe and k_pe only; the softmax scale is 1/sqrt(qk_nope + qk_rope). apply_rope
// rotates the pairs (i, i + d/2) as the other attention here does, where DeepSeek's checkpoints
// rotate interleaved pairs (2i, 2i + 1): one fixed permutation of the rope rows of wq (wq_b) and
// wkv_a maps either onto the other, so both span the same functions.
// Split by heads: rank r holds heads [r nh/t, (r+1) nh/t): their rows of wq (wq_b) and wkv_b,
// their columns of wo, their sinks. The down projections wq_a and wkv_a and the two latent norms
// are replicated: every rank computes them from the group's copy of the hidden state, but each
// feeds only the rank's heads onwards, so their gradients (and the hidden state's, summed at
// copy_to) are partial per rank and summed over the group.
class LatentAttention {
 public:
  LatentAttention(Init& init, const AttentionShape& a, bool rotary, Sequence seq)
      : a_(a), rotary_(rotary), group_(init.group()), seq_(std::move(seq)) {
    v_dim_ = a.v_head_dim > 0 ? a.v_head_dim : a.head_dim;
    qk_dim_ = a.qk_nope_head_dim + a.qk_rope_head_dim;
    heads_ = a.num_heads / group_->size;
    const int64_t q_out = a.num_heads * qk_dim_;
    if (a.q_lora_rank > 0) {
      const int64_t r = a.q_lora_rank;
      wq_a_ = init.normal("wq_a", {r, a.hidden}, replicated_partial(r));
      if (a.qkv_bias) bq_a_ = init.zeros("bq_a", {r}, replicated_partial(r));
      q_a_norm_ = init.ones("q_a_norm", {r}, replicated_partial(r));
      wq_b_ = init.normal("wq_b", {q_out, r}, split_evenly(0, q_out, group_));
    } else {
      wq_ = init.normal("wq", {q_out, a.hidden}, split_evenly(0, q_out, group_));
    }
    const int64_t kv_a_out = a.kv_lora_rank + a.qk_rope_head_dim;
    wkv_a_ = init.normal("wkv_a", {kv_a_out, a.hidden}, replicated_partial(kv_a_out));
    if (a.qkv_bias) bkv_a_ = init.zeros("bkv_a", {kv_a_out}, replicated_partial(kv_a_out));
    kv_a_norm_ = init.ones("kv_a_norm", {a.kv_lora_rank}, replicated_partial(a.kv_lora_rank));
    const int64_t kv_b_out = a.num_heads * (a.qk_nope_head_dim + v_dim_);
    wkv_b_ = init.normal("wkv_b", {kv_b_out, a.kv_lora_rank}, split_evenly(0, kv_b_out, group_));
    wo_ = init.normal("wo", {a.hidden, a.num_heads * v_dim_},
                      split_evenly(1, a.num_heads * v_dim_, group_));
    if (a.output_bias) bo_ = init.zeros("bo", {a.hidden});
    if (a.sinks) sinks_ = init.zeros("sinks", {a.num_heads}, split_evenly(0, a.num_heads, group_));
  }

  at::Tensor operator()(const at::Tensor& input) const {
    // Every consumer of the hidden state, replicated or split, reads this copy: each rank's
    // gradient of it covers only the rank's heads, and copy_to's backward sums them.
    const at::Tensor x = copy_to(group_, input);
    const int64_t b = x.size(0);
    const int64_t s = x.size(1);
    const int64_t nh = heads_;
    const int64_t nope = a_.qk_nope_head_dim;
    const int64_t rope = a_.qk_rope_head_dim;
    at::Tensor q = wq_.defined()
                       ? weight_product(x, wq_)
                       : weight_product(rms_norm(affine(x, wq_a_, bq_a_), q_a_norm_), wq_b_);
    q = q.view({b, s, nh, qk_dim_}).transpose(1, 2);
    at::Tensor q_nope = q.narrow(-1, 0, nope);
    at::Tensor q_pe = q.narrow(-1, nope, rope);
    const at::Tensor kv_a = affine(x, wkv_a_, bkv_a_);
    const at::Tensor latent = rms_norm(kv_a.narrow(-1, 0, a_.kv_lora_rank), kv_a_norm_);
    at::Tensor k_pe = kv_a.narrow(-1, a_.kv_lora_rank, rope).unsqueeze(1);  // [b, 1, s, rope]
    const at::Tensor kv =
        weight_product(latent, wkv_b_).view({b, s, nh, nope + v_dim_}).transpose(1, 2);
    const at::Tensor k_nope = kv.narrow(-1, 0, nope);
    const at::Tensor v = kv.narrow(-1, nope, v_dim_);
    const at::Tensor positions = token_positions(*seq_, s);
    if (rotary_ && rope > 0) {
      q_pe = apply_rope(q_pe, positions);
      k_pe = apply_rope(k_pe, positions);
    }
    q = at::cat({q_nope, q_pe}, -1);
    const at::Tensor k =
        whole_sequence(*seq_, at::cat({k_nope, k_pe.expand({b, nh, s, rope})}, -1));
    return project_out(group_, attend(a_, q, k, whole_sequence(*seq_, v), sinks_, positions), wo_,
                       bo_);
  }

 private:
  AttentionShape a_;
  bool rotary_;
  Group group_;
  Sequence seq_;
  int64_t v_dim_ = 0;
  int64_t qk_dim_ = 0;
  int64_t heads_ = 0;  // on this rank
  at::Tensor wq_, wq_a_, bq_a_, q_a_norm_, wq_b_, wkv_a_, bkv_a_, kv_a_norm_, wkv_b_, wo_, bo_,
      sinks_;
};

// Top-k routing over softmax probabilities, renormalized over the chosen experts (Mixtral's
// rule); each expert runs on the tokens routed to it; shared experts run on every token. Split:
// every rank routes (the router reads the replicated hidden state) and holds 1/t of every
// expert's width; the experts' partial outputs are summed in one all-reduce before the routing
// weights apply, so the router's gradient is complete on every rank. Over an expert-parallel
// group (StageModuleOptions::expert_parallel) each member holds a contiguous 1/e of the routed
// experts and exchanges tokens with the others (expert_parallel below).
class Moe {
 public:
  Moe(Init& init, const MoeShape& m, Group experts_group)
      : m_(m), group_(init.group()), ep_(std::move(experts_group)) {
    router_ = init.normal("router", {m.num_experts, m.hidden});
    if (m.router_bias) router_bias_ = init.zeros("router_bias", {m.num_experts});
    const int64_t per = m.num_experts / ep_->size;
    for (int64_t e = 0; e < m.num_experts; ++e) {
      const std::string name = "experts." + std::to_string(e);
      Init scope =
          ep_->size == 1 ? init.scope(name) : init.expert_scope(name, e / per == ep_->rank);
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
    // Every expert's rows and weights when the experts are exchanged (each member's graph must
    // have the same operators); otherwise the chosen experts' only.
    const bool every_expert = ep_->size > 1;
    std::vector<int64_t> chosen_experts;
    std::vector<at::Tensor> rows_of, weight_of;
    for (int64_t e = 0; e < m_.num_experts; ++e) {
      at::Tensor chosen = top_index.eq(e);  // [T, k]
      at::Tensor rows = chosen.any(-1).nonzero().squeeze(1);
      if (rows.numel() == 0 && !every_expert) continue;
      chosen_experts.push_back(e);
      rows_of.push_back(rows);
      weight_of.push_back((weights * chosen).sum(-1).index_select(0, rows).unsqueeze(1));
    }
    at::Tensor out = at::zeros_like(tokens);
    if (every_expert) {
      out = expert_parallel(tokens, rows_of, weight_of, out);
      if (!shared_.empty()) out = out + shared_output(tokens);
      return out.view(shape);
    }
    if (group_->size == 1) {
      for (size_t i = 0; i < chosen_experts.size(); ++i) {
        const FeedForward& expert = experts_[chosen_experts[i]];
        out =
            out.index_add(0, rows_of[i], expert(tokens.index_select(0, rows_of[i])) * weight_of[i]);
      }
      if (!shared_.empty()) out = out + shared_output(tokens);
      return out.view(shape);
    }
    // Every expert's and shared expert's partial output in one tensor, summed once.
    const at::Tensor in = copy_to(group_, tokens);
    std::vector<at::Tensor> partials;
    for (size_t i = 0; i < chosen_experts.size(); ++i) {
      partials.push_back(experts_[chosen_experts[i]].partial(in.index_select(0, rows_of[i])));
    }
    for (const FeedForward& s : shared_) partials.push_back(s.partial(in));
    const at::Tensor sums = reduce_from(group_, at::cat(partials, 0));
    int64_t offset = 0;
    for (size_t i = 0; i < chosen_experts.size(); ++i) {
      const int64_t n = rows_of[i].numel();
      const at::Tensor y = experts_[chosen_experts[i]].add_bias(sums.narrow(0, offset, n));
      out = out.index_add(0, rows_of[i], y * weight_of[i]);
      offset += n;
    }
    if (!shared_.empty()) {
      const int64_t n = tokens.size(0);
      at::Tensor s;
      for (const FeedForward& shared : shared_) {
        at::Tensor y = shared.add_bias(sums.narrow(0, offset, n));
        s = s.defined() ? s + y : y;
        offset += n;
      }
      out = out + gate(tokens, s);
    }
    return out.view(shape);
  }

 private:
  // The routed experts over the expert-parallel group: expert E's rows of `tokens` go to the
  // member holding it, which runs each of its experts on each member's rows separately (the
  // rows a micro-batch without expert parallelism would give it, so the same products), and the
  // outputs come back to be weighted and added in expert order, as without the group. Every
  // member sends a block for every expert and runs every held expert, empty blocks included, so
  // that all members' backward passes make the same exchanges.
  at::Tensor expert_parallel(const at::Tensor& tokens, const std::vector<at::Tensor>& rows_of,
                             const std::vector<at::Tensor>& weight_of, at::Tensor out) const {
    const int64_t members = ep_->size;
    const int64_t per = m_.num_experts / members;
    const int64_t first = ep_->rank * per;
    const at::Tensor in = copy_to(group_, tokens);
    variable_list send;
    for (const at::Tensor& rows : rows_of) send.push_back(in.index_select(0, rows).to(at::kFloat));
    const variable_list received =
        ExchangeOverGroup::apply(at::TensorList(send), ep_.get(), per, m_.hidden);
    variable_list results(received.size());
    if (group_->size == 1) {
      for (size_t b = 0; b < received.size(); ++b) {
        results[b] = experts_[first + static_cast<int64_t>(b) % per](received[b]).to(at::kFloat);
      }
    } else {
      std::vector<at::Tensor> partials;
      for (size_t b = 0; b < received.size(); ++b) {
        partials.push_back(experts_[first + static_cast<int64_t>(b) % per].partial(received[b]));
      }
      const at::Tensor sums = reduce_from(group_, at::cat(partials, 0));
      int64_t offset = 0;
      for (size_t b = 0; b < received.size(); ++b) {
        const int64_t n = received[b].size(0);
        results[b] = experts_[first + static_cast<int64_t>(b) % per]
                         .add_bias(sums.narrow(0, offset, n))
                         .to(at::kFloat);
        offset += n;
      }
    }
    const variable_list back =
        ExchangeOverGroup::apply(at::TensorList(results), ep_.get(), per, m_.hidden);
    for (size_t e = 0; e < back.size(); ++e) {
      out = out.index_add(0, rows_of[e], back[e] * weight_of[e]);
    }
    return out;
  }

  // The shared experts' output (each one a whole feed-forward: split, it sums its own partial
  // output) times the optional gate.
  at::Tensor shared_output(const at::Tensor& tokens) const {
    at::Tensor s = shared_[0](tokens);
    for (size_t e = 1; e < shared_.size(); ++e) s = s + shared_[e](tokens);
    return gate(tokens, s);
  }

  // The shared experts' output times the optional gate (read from the replicated tokens).
  at::Tensor gate(const at::Tensor& tokens, const at::Tensor& s) const {
    if (!shared_gate_.defined()) return s;
    return s * at::sigmoid(affine(tokens, shared_gate_, at::Tensor()));
  }

  MoeShape m_;
  Group group_;
  Group ep_;
  at::Tensor router_, router_bias_, shared_gate_;
  std::vector<FeedForward> experts_;  // every routed expert; those held elsewhere hold nothing
  std::vector<FeedForward> shared_;
};

// Mamba's time-step bias (Gu & Dao 2023; both versions): dt starts log-uniform in
// [1e-3, 1e-1] (from a uniform draw `u` on [0, 1)), and the bias is its inverse softplus, so
// that softplus(bias) is that dt.
at::Tensor initial_dt_bias(const at::Tensor& u) {
  at::Tensor dt = at::exp(u * (std::log(0.1) - std::log(1e-3)) + std::log(1e-3));
  return dt + at::log(-at::expm1(-dt));
}

// The causal depthwise convolution of Mamba's mixers over x: [b, s, c] with weight [c, 1, K]:
// pads K-1 on both sides and keeps the first s outputs.
at::Tensor causal_conv(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const int64_t s = x.size(1);
  const int64_t kernel = weight.size(-1);
  return at::conv1d(x.transpose(1, 2), weight,
                    bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt,
                    /*stride=*/1, /*padding=*/kernel - 1, /*dilation=*/1, /*groups=*/x.size(-1))
      .narrow(-1, 0, s)
      .transpose(1, 2);
}

// Mamba-2's mixer (Dao & Gu 2024) with a sequential scan, as the reference implementation in
// Hugging Face transformers' Mamba2 computes it without its chunked kernels: in_proj to z, x,
// B, C, dt; causal depthwise convolution over x, B and C; per head a scalar decay exp(dt * A);
// state h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T, output y_t = h_t C_t + D x_t; RMSNorm of
// y * silu(z) (over the whole inner width); out_proj. Split by heads as Megatron-LM's Mamba
// mixer is: rank r holds heads [r nh/t, (r+1) nh/t), their channels of z, x, the convolution,
// dt, A, D and the norm, and the B / C groups those heads read (shared by several ranks when
// t > n_groups, their gradients then partial); the norm's mean square is summed over the group.
class Mamba2 {
 public:
  Mamba2(Init& init, const MambaShape& m) : m_(m), group_(init.group()) {
    const int t = group_->size;
    const int64_t gn = m.n_groups * m.d_state;
    const int64_t bc = 2 * gn;
    const int64_t conv_channels = m.d_inner + bc;
    heads_ = m.n_heads / t;
    inner_ = m.d_inner / t;
    // The groups rank r's heads read: [first, last] of heads [r nh/t, (r+1) nh/t).
    const int64_t heads_per_group = m.n_heads / m.n_groups;
    auto groups_of = [heads = heads_, heads_per_group](int r) {
      const int64_t first = r * heads / heads_per_group;
      const int64_t last = ((r + 1) * heads - 1) / heads_per_group;
      return RowRange{first, last - first + 1};
    };
    groups_ = groups_of(group_->rank).count;
    const int64_t inner = inner_;
    const int64_t heads = heads_;
    const int64_t d_inner = m.d_inner;
    const int64_t n = m.d_state;
    auto group_rows = [groups_of, n](int r, int64_t base) {
      const RowRange g = groups_of(r);
      return RowRange{base + g.begin * n, g.count * n};
    };
    // in_proj's rows: z, x, B, C, dt.
    const SplitSpec in_rows{0, [=](int r) {
                              return std::vector<RowRange>{{r * inner, inner},
                                                           {d_inner + r * inner, inner},
                                                           group_rows(r, 2 * d_inner),
                                                           group_rows(r, 2 * d_inner + gn),
                                                           {2 * d_inner + bc + r * heads, heads}};
                            }};
    // The convolution's channels: x, B, C.
    const SplitSpec conv_rows{0, [=](int r) {
                                return std::vector<RowRange>{{r * inner, inner},
                                                             group_rows(r, d_inner),
                                                             group_rows(r, d_inner + gn)};
                              }};
    const SplitSpec head_rows = split_evenly(0, m.n_heads, group_);
    in_proj_ = init.normal("in_proj", {2 * m.d_inner + bc + m.n_heads, m.hidden}, in_rows);
    if (m.proj_bias) {
      in_proj_bias_ = init.zeros("in_proj_bias", {2 * m.d_inner + bc + m.n_heads}, in_rows);
    }
    conv_ = init.normal("conv", {conv_channels, 1, m.conv_kernel}, conv_rows);
    if (m.conv_bias) conv_bias_ = init.zeros("conv_bias", {conv_channels}, conv_rows);
    dt_bias_ = init.from_uniform("dt_bias", {m.n_heads}, initial_dt_bias, head_rows);
    a_log_ = init.value("A_log", at::log(at::arange(1, m.n_heads + 1, at::kFloat)), head_rows);
    d_ = init.ones("D", {m.n_heads}, head_rows);
    if (m.gated_norm) norm_ = init.ones("norm", {m.d_inner}, split_evenly(0, m.d_inner, group_));
    out_proj_ = init.normal("out_proj", {m.hidden, m.d_inner}, split_evenly(1, m.d_inner, group_));
    if (m.proj_bias) out_proj_bias_ = init.zeros("out_proj_bias", {m.hidden});
  }

  at::Tensor operator()(const at::Tensor& input) const {
    const at::Tensor u = copy_to(group_, input);
    const int64_t b = u.size(0);
    const int64_t s = u.size(1);
    const int64_t gn = groups_ * m_.d_state;  // this rank's B (and C) width
    const int64_t nh = heads_;
    const int64_t inner = inner_;
    at::Tensor proj = affine(u, in_proj_, in_proj_bias_);
    at::Tensor z = proj.narrow(-1, 0, inner);
    at::Tensor xbc = proj.narrow(-1, inner, inner + 2 * gn);
    at::Tensor dt = proj.narrow(-1, 2 * inner + 2 * gn, nh);
    xbc = at::silu(causal_conv(xbc, conv_, conv_bias_));
    at::Tensor x = xbc.narrow(-1, 0, inner).reshape({b, s, nh, m_.head_dim});
    const int64_t heads_per_group = nh / groups_;
    auto per_head = [&](const at::Tensor& t) {  // [b, s, G*N] -> [b, s, nh, N]
      return t.reshape({b, s, groups_, 1, m_.d_state})
          .expand({b, s, groups_, heads_per_group, m_.d_state})
          .reshape({b, s, nh, m_.d_state});
    };
    at::Tensor bmat = per_head(xbc.narrow(-1, inner, gn));
    at::Tensor cmat = per_head(xbc.narrow(-1, inner + gn, gn));
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
      ys.push_back(y_t.reshape({b, inner}));
    }
    at::Tensor y = at::stack(ys, 1);  // [b, s, inner]
    y = y * at::silu(z);
    if (group_->size == 1) {
      if (norm_.defined()) y = rms_norm(y, norm_);
      return affine(y, out_proj_, out_proj_bias_);
    }
    if (norm_.defined()) {
      // The mean square over the whole inner width: this rank's channels' sum, summed.
      const at::Tensor squares = sum_over(group_, y.pow(2).sum({-1}, /*keepdim=*/true));
      y = y * at::rsqrt(squares / static_cast<double>(m_.d_inner) + kNormEps) * norm_;
    }
    at::Tensor out = reduce_from(group_, weight_product(y, out_proj_));
    return out_proj_bias_.defined() ? out + out_proj_bias_ : out;
  }

 private:
  MambaShape m_;
  Group group_;
  int64_t heads_ = 0;   // on this rank
  int64_t inner_ = 0;   // on this rank: heads_ * head_dim
  int64_t groups_ = 0;  // B / C groups this rank's heads read
  at::Tensor in_proj_, in_proj_bias_, conv_, conv_bias_, dt_bias_, a_log_, d_, norm_, out_proj_,
      out_proj_bias_;
};

// Mamba-1's mixer (Gu & Dao 2023) with a sequential scan, as Hugging Face transformers'
// MambaMixer computes it without its CUDA kernels, and with JambaMambaMixer's learned RMSNorms
// of dt, B and C when the shape has inner norms: in_proj to x and z; causal depthwise
// convolution over x, then SiLU; x_proj to a low-rank dt, B and C; dt_proj back to d_inner
// (with its bias), then softplus; per channel and state a decay exp(dt A); state
// h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t, output y_t = C_t h_t + D x_t; y * silu(z); out_proj.
// Split by channels as Megatron-LM's Mamba mixer is: rank r holds channels [r d/t, (r+1) d/t)
// of x, z, the convolution, dt_proj, A and D, and the matching columns of x_proj and out_proj.
// dt, B and C read every channel: each rank's x_proj product over its channels is summed over
// the group, in both passes (sum_over), since the channels that use them are split; for the
// same reason the inner norms' weights are replicated with partial gradients.
class Mamba1 {
 public:
  Mamba1(Init& init, const MambaShape& m) : m_(m), group_(init.group()) {
    inner_ = m.d_inner / group_->size;
    const int64_t inner = inner_;
    const int64_t d_inner = m.d_inner;
    const int64_t xp = m.dt_rank + 2 * m.d_state;
    // in_proj's rows: x, then z.
    const SplitSpec in_rows{
        0, [=](int r) {
          return std::vector<RowRange>{{r * inner, inner}, {d_inner + r * inner, inner}};
        }};
    const SplitSpec channels = split_evenly(0, d_inner, group_);
    in_proj_ = init.normal("in_proj", {2 * d_inner, m.hidden}, in_rows);
    if (m.proj_bias) in_proj_bias_ = init.zeros("in_proj_bias", {2 * d_inner}, in_rows);
    conv_ = init.normal("conv", {d_inner, 1, m.conv_kernel}, channels);
    if (m.conv_bias) conv_bias_ = init.zeros("conv_bias", {d_inner}, channels);
    x_proj_ = init.normal("x_proj", {xp, d_inner}, split_evenly(1, d_inner, group_));
    if (m.inner_norms) {
      dt_norm_ = init.ones("dt_norm", {m.dt_rank}, replicated_partial(m.dt_rank));
      b_norm_ = init.ones("b_norm", {m.d_state}, replicated_partial(m.d_state));
      c_norm_ = init.ones("c_norm", {m.d_state}, replicated_partial(m.d_state));
    }
    // Mamba's init: dt_proj's weight uniform in [-dt_rank^-1/2, dt_rank^-1/2], its bias the
    // inverse softplus of a log-uniform dt; A_log = log(1..N) in every channel (S4D-real).
    const double dt_scale = 1.0 / std::sqrt(static_cast<double>(m.dt_rank));
    dt_proj_ = init.from_uniform(
        "dt_proj", {d_inner, m.dt_rank},
        [dt_scale](const at::Tensor& u) { return (u * 2.0 - 1.0) * dt_scale; }, channels);
    dt_proj_bias_ = init.from_uniform("dt_proj_bias", {d_inner}, initial_dt_bias, channels);
    a_log_ = init.value(
        "A_log", at::log(at::arange(1, m.d_state + 1, at::kFloat)).repeat({d_inner, 1}), channels);
    d_ = init.ones("D", {d_inner}, channels);
    out_proj_ = init.normal("out_proj", {m.hidden, d_inner}, split_evenly(1, d_inner, group_));
    if (m.proj_bias) out_proj_bias_ = init.zeros("out_proj_bias", {m.hidden});
  }

  at::Tensor operator()(const at::Tensor& input) const {
    const at::Tensor u = copy_to(group_, input);
    const int64_t b = u.size(0);
    const int64_t s = u.size(1);
    const int64_t inner = inner_;  // this rank's channels
    const int64_t n = m_.d_state;
    const int64_t rank = m_.dt_rank;
    const at::Tensor proj = affine(u, in_proj_, in_proj_bias_);
    const at::Tensor x = at::silu(causal_conv(proj.narrow(-1, 0, inner), conv_, conv_bias_));
    const at::Tensor z = proj.narrow(-1, inner, inner);
    // [b, s, R + 2N]: every channel's contribution, summed over the group.
    const at::Tensor ssm = sum_over(group_, weight_product(x, x_proj_));
    at::Tensor dt = ssm.narrow(-1, 0, rank);
    at::Tensor bmat = ssm.narrow(-1, rank, n);
    at::Tensor cmat = ssm.narrow(-1, rank + n, n);
    if (dt_norm_.defined()) {
      dt = rms_norm(dt, dt_norm_);
      bmat = rms_norm(bmat, b_norm_);
      cmat = rms_norm(cmat, c_norm_);
    }
    dt = at::softplus(affine(dt, dt_proj_, dt_proj_bias_));  // [b, s, inner]
    const at::Tensor a = -at::exp(a_log_);                   // [inner, N]
    at::Tensor state = at::zeros({b, inner, n}, u.options());
    std::vector<at::Tensor> ys;
    ys.reserve(static_cast<size_t>(s));
    for (int64_t t = 0; t < s; ++t) {
      const at::Tensor dt_t = dt.select(1, t);  // [b, inner]
      const at::Tensor x_t = x.select(1, t);
      const at::Tensor decay = at::exp(dt_t.unsqueeze(-1) * a);  // [b, inner, N]
      state = state * decay + (dt_t * x_t).unsqueeze(-1) * bmat.select(1, t).unsqueeze(1);
      ys.push_back(at::matmul(state, cmat.select(1, t).unsqueeze(-1)).squeeze(-1) + x_t * d_);
    }
    const at::Tensor y = at::stack(ys, 1) * at::silu(z);  // [b, s, inner]
    if (group_->size == 1) return affine(y, out_proj_, out_proj_bias_);
    at::Tensor out = reduce_from(group_, weight_product(y, out_proj_));
    return out_proj_bias_.defined() ? out + out_proj_bias_ : out;
  }

 private:
  MambaShape m_;
  Group group_;
  int64_t inner_ = 0;  // channels on this rank
  at::Tensor in_proj_, in_proj_bias_, conv_, conv_bias_, x_proj_, dt_norm_, b_norm_, c_norm_,
      dt_proj_, dt_proj_bias_, a_log_, d_, out_proj_, out_proj_bias_;
};

class LayerImpl {
 public:
  virtual ~LayerImpl() = default;
  virtual at::Tensor forward(const at::Tensor& x, const at::Tensor& targets) = 0;
};

// Which rows of a vocabulary matrix a stage uses, and which the parameter holds: the rows of a
// vocabulary shard (StageModuleOptions::vocab_begin, vocab_end) or the whole vocabulary, each
// split evenly over the group. A shard of a tied matrix holds the whole matrix on every rank of
// its group (the embedding and the head may use different rows of it on one rank), reads its
// rows of it, and its gradient covers only those rows (summed over every holder).
struct VocabRows {
  RowRange used;  // of the stage, before the group's split
  RowRange held;  // of the parameter, before the group's split (unless `replicated`)
  bool shard = false;
  bool replicated = false;  // every rank of the group holds all of `held`
  // This rank's used rows, and where they start in its local parameter.
  RowRange mine(const TensorParallelGroup& g) const { return share(g, used.count, used.begin); }
  int64_t offset(const TensorParallelGroup& g) const {
    return mine(g).begin - (replicated ? held.begin : share(g, held.count, held.begin).begin);
  }
  // How the parameter's rows are held over the group.
  SplitSpec held_split(const Group& g) const {
    return replicated ? replicated_partial(held.count) : split_rows(0, held, g);
  }
  // The local parameter's rows this rank uses.
  at::Tensor narrow(const TensorParallelGroup& g, const at::Tensor& weight) const {
    const int64_t n = mine(g).count;
    return n == weight.size(0) ? weight : weight.narrow(0, offset(g), n);
  }
};

// Split by vocabulary (Megatron's VocabParallelEmbedding): rank r holds rows
// [r V/t, (r+1) V/t), looks up the tokens that fall there (zeros for the others) and the group
// sums the lookups. A vocabulary shard does the same over its rows and leaves the sum over the
// shards to the stage after them; the shard from row 0 adds the learned positions.
class EmbeddingLayer final : public LayerImpl {
 public:
  EmbeddingLayer(Init& init, const EmbeddingShape& e, VocabRows rows, Sequence seq)
      : group_(init.group()), rows_(rows), seq_(std::move(seq)) {
    weight_ = init.normal("weight", {e.vocab, e.hidden}, rows.held_split(group_));
    // Every shard holds the table (its gradient is summed over all of them); one adds it.
    if (e.learned_positions > 0)
      positions_ = init.normal("positions", {e.learned_positions, e.hidden});
  }
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor&) override {
    at::Tensor h;
    if (group_->size == 1 && !rows_.shard) {
      h = at::embedding(weight_, tokens);
    } else {
      const at::Tensor weight = rows_.narrow(*group_, weight_);
      const at::Tensor local = tokens - rows_.mine(*group_).begin;
      const at::Tensor here = local.ge(0).logical_and(local.lt(weight.size(0)));
      const at::Tensor found =
          at::embedding(weight, local.masked_fill(here.logical_not(), 0)) * here.unsqueeze(-1);
      h = reduce_from(group_, found);
    }
    if (positions_.defined() && rows_.used.begin == 0) {
      h = h + (seq_->group->size == 1
                   ? positions_.narrow(0, 0, tokens.size(1))
                   : positions_.index_select(0, seq_->positions.to(positions_.device())));
    }
    return h;
  }

 private:
  Group group_;
  VocabRows rows_;
  Sequence seq_;
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

// Split by vocabulary with Megatron's vocabulary-parallel cross-entropy: rank r computes the
// logits of its rows only; the row maximum, the sum of exponentials and the target's logit are
// combined over the group, so no rank ever holds the full logits. A vocabulary shard returns
// these three per token instead of the loss (vocab_shard_loss), its target logit unshifted.
class HeadLayer final : public LayerImpl {
 public:
  HeadLayer(Norm norm, at::Tensor weight, Group group, VocabRows rows, bool tied)
      : norm_(std::move(norm)),
        weight_(std::move(weight)),
        group_(std::move(group)),
        rows_(rows),
        first_row_(rows.mine(*group_).begin),
        tied_(tied) {}
  at::Tensor forward(const at::Tensor& x, const at::Tensor& targets) override {
    const at::Tensor weight = rows_.narrow(*group_, weight_);
    if (group_->size == 1 && !rows_.shard) {
      at::Tensor logits = logits_of(norm_(x), weight);
      return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
    }
    at::Tensor logits = logits_of(copy_to(group_, norm_(x)), weight).reshape({-1, weight.size(0)});
    if (rows_.shard) logits = logits.to(at::kFloat);  // statistics travel in fp32
    const at::Tensor target = targets.reshape({-1});
    const int64_t n = logits.size(0);
    // The row maximum over the group, for stability only (no gradient flows through it):
    // gathered by summing a zero tensor in which each rank fills its own row.
    at::Tensor maximum;
    {
      at::NoGradGuard no_grad;
      at::Tensor gathered = at::zeros({group_->size, n}, logits.options().dtype(at::kFloat));
      gathered.select(0, group_->rank).copy_(std::get<0>(logits.max(-1)));
      if (group_->size > 1) group_->all_reduce(gathered);
      maximum = std::get<0>(gathered.max(0));
    }
    const at::Tensor shifted = logits - maximum.unsqueeze(1);
    const at::Tensor sum_exp = reduce_from(group_, shifted.exp().sum(-1));
    const at::Tensor local = target - first_row_;
    const at::Tensor here = local.ge(0).logical_and(local.lt(weight.size(0)));
    const at::Tensor picked = (rows_.shard ? logits : shifted)
                                  .gather(1, local.masked_fill(here.logical_not(), 0).unsqueeze(1))
                                  .squeeze(1) *
                              here;
    const at::Tensor target_logit = reduce_from(group_, picked);
    if (rows_.shard) {
      return at::stack({maximum, sum_exp.to(at::kFloat), target_logit.to(at::kFloat)}, 1);
    }
    return (sum_exp.log() - target_logit).mean();
  }

 private:
  // This rank's rows of the logits. A weight product over the rows it uses, unless the matrix
  // is the embedding's: the engine sums a tied matrix's two gradients before accumulating them,
  // which a gradient left for W would not match bit for bit, so a tied head's weight gradient is
  // computed in B.
  at::Tensor logits_of(const at::Tensor& h, const at::Tensor& rows) const {
    if (tied_) return at::linear(h, rows);
    if (rows.size(0) == weight_.size(0)) return weight_product(h, weight_);
    return weight_product(h, weight_, at::Tensor(), rows_.offset(*group_), rows.size(0));
  }

  Norm norm_;
  at::Tensor weight_;
  Group group_;
  VocabRows rows_;
  int64_t first_row_ = 0;
  bool tied_ = false;
};

class TransformerStage final : public StageModule {
 public:
  TransformerStage(std::vector<std::unique_ptr<LayerImpl>> layers, bool takes_tokens,
                   bool produces_loss, std::vector<StageParameter> params)
      : layers_(std::move(layers)), takes_tokens_(takes_tokens), produces_loss_(produces_loss) {
    for (StageParameter& p : params) {
      (p.tensor.defined() ? params_ : held_elsewhere_).push_back(std::move(p));
    }
  }

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
  std::vector<StageParameter> held_elsewhere() const override { return held_elsewhere_; }

 private:
  std::vector<std::unique_ptr<LayerImpl>> layers_;
  bool takes_tokens_;
  bool produces_loss_;
  std::vector<StageParameter> params_;
  std::vector<StageParameter> held_elsewhere_;
};

std::string layer_label(const Layer& l, int index) {
  return fmt::format("layer {} ('{}', {})", index, l.name, layer_kind_name(l.kind));
}

// What a tensor-parallel degree t needs of a layer: every split width divisible by t.
// A vocabulary shard's rows are checked by check_vocab_shard instead (`vocabulary` false).
Status check_split(const Layer& l, const std::string& label, int t, bool vocabulary) {
  if (t < 1) return invalid_argument(fmt::format("{}: tensor-parallel degree {}", label, t));
  if (auto obstacle = tensor_parallel_obstacle(l, t, vocabulary)) {
    return invalid_argument(fmt::format(
        "{}: tensor parallelism over {} devices splits it evenly, but {}", label, t, *obstacle));
  }
  return Status::ok();
}

// What the executor cannot run of a model validate_model accepted.
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
      return invalid_argument(
          fmt::format("{}: the executor does not run this layer kind yet; it runs embedding, "
                      "attention, feed_forward, moe, mamba, decoder_block and head",
                      label));
  }
  if ((index == 0) != (l.kind == LayerKind::kEmbedding)) {
    return invalid_argument(fmt::format(
        "{}: the executor feeds token ids to layer 0, which must be the model's only embedding",
        label));
  }
  if ((index == last) != (l.kind == LayerKind::kHead)) {
    return invalid_argument(fmt::format(
        "{}: the executor computes the loss in the last layer, which must be the model's only "
        "head",
        label));
  }
  if (l.attention && l.attention->mla && l.attention->qk_norm) {
    return invalid_argument(
        fmt::format("{}: the executor runs multi-head latent attention without qk_norm", label));
  }
  if (l.attention && !l.attention->mla && l.attention->head_dim % 2 != 0) {
    return invalid_argument(fmt::format(
        "{}: the executor's rotary embedding turns whole heads and needs an even head_dim", label));
  }
  if (l.moe && l.moe->latent_size > 0) {
    return invalid_argument(fmt::format("{}: the executor runs MoE without latent_size", label));
  }
  const int c = options.context_parallel.size;
  if (c > 1 && (l.mamba || l.kind == LayerKind::kMamba)) {
    return invalid_argument(fmt::format(
        "{}: a Mamba scan carries its state along the whole sequence, so it cannot run on a "
        "context-parallel group's share of it",
        label));
  }
  const int members = options.expert_parallel.size;
  if (l.moe && (members < 1 || options.expert_parallel.rank < 0 ||
                options.expert_parallel.rank >= members || l.moe->num_experts % members != 0)) {
    return invalid_argument(
        fmt::format("{}: {} routed experts do not split over an expert-parallel group of {} (as "
                    "member {})",
                    label, l.moe->num_experts, members, options.expert_parallel.rank));
  }
  MOTLEY_RETURN_IF_ERROR(check_split(l, label, options.tensor_parallel.size,
                                     /*vocabulary=*/options.vocab_end <= options.vocab_begin));
  if (l.embedding && l.embedding->learned_positions > 0 &&
      l.embedding->learned_positions < options.seq_len) {
    return invalid_argument(
        fmt::format("{}: {} learned positions cannot cover sequences of {} tokens", label,
                    l.embedding->learned_positions, options.seq_len));
  }
  return Status::ok();
}

// The head of a model whose head reuses the embedding matrix, or -1.
int tied_head(const ModelSpec& model) {
  const int last = static_cast<int>(model.layers.size()) - 1;
  return model.layers[last].head && model.layers[last].head->tied ? last : -1;
}

// What the executor needs of a vocabulary shard (StageModuleOptions::vocab_begin, vocab_end).
Status check_vocab_shard(const ModelSpec& model, int layer_begin, int layer_end,
                         const StageModuleOptions& options) {
  if (options.vocab_end == 0 && options.vocab_begin == 0) return Status::ok();
  const Layer& l = model.layers[layer_begin];
  const int64_t vocab = l.embedding ? l.embedding->vocab : l.head ? l.head->vocab : 0;
  const std::string label = layer_label(l, layer_begin);
  if (layer_end - layer_begin != 1 || vocab == 0) {
    return invalid_argument(fmt::format(
        "layers [{}, {}): vocabulary rows [{}, {}) given to a stage that is not the embedding or "
        "the head alone",
        layer_begin, layer_end, options.vocab_begin, options.vocab_end));
  }
  if (options.vocab_begin < 0 || options.vocab_begin >= options.vocab_end ||
      options.vocab_end > vocab) {
    return invalid_argument(fmt::format("{}: vocabulary rows [{}, {}) outside its {} rows", label,
                                        options.vocab_begin, options.vocab_end, vocab));
  }
  const int t = options.tensor_parallel.size;
  const int64_t rows = options.vocab_end - options.vocab_begin;
  if (rows % t != 0) {
    return invalid_argument(fmt::format(
        "{}: the vocabulary shard of rows [{}, {}) ({} rows) does not split evenly over {} "
        "devices",
        label, options.vocab_begin, options.vocab_end, rows, t));
  }
  return Status::ok();
}

// The norms in front of (and, with_post, behind) a sublayer, over the width it reads.
std::pair<Norm, Norm> sublayer_norms(Init& init, const Layer& l, const std::string& pre,
                                     const std::string& post, bool with_post) {
  const int64_t h = hidden_width_read(l);
  std::pair<Norm, Norm> norms;
  norms.first = Norm(init, pre, h, l.norm_bias);
  if (with_post) norms.second = Norm(init, post, h, l.norm_bias);
  return norms;
}

// The rows of the vocabulary matrix of layer `l` a stage uses and holds (VocabRows).
VocabRows vocab_rows(const Layer& l, bool tied, const StageModuleOptions& options) {
  const int64_t vocab = l.embedding ? l.embedding->vocab : l.head ? l.head->vocab : 0;
  VocabRows rows;
  rows.shard = options.vocab_end > options.vocab_begin;
  rows.used = rows.shard ? RowRange{options.vocab_begin, options.vocab_end - options.vocab_begin}
                         : RowRange{0, vocab};
  rows.held = rows.shard && !tied ? rows.used : RowRange{0, vocab};
  rows.replicated = rows.shard && tied;
  return rows;
}

std::unique_ptr<LayerImpl> build_layer(const ModelSpec& model, int index,
                                       const StageModuleOptions& options, const Group& group,
                                       const Sequence& seq, ParameterStore& store,
                                       std::vector<StageParameter>* used) {
  const uint64_t seed = options.seed;
  const Layer& l = model.layers[index];
  const bool rotary =
      !(model.layers[0].embedding && model.layers[0].embedding->learned_positions > 0);
  const int tied = tied_head(model);
  Init init(store, l.name, seed + static_cast<uint64_t>(index), {index}, group);
  std::unique_ptr<LayerImpl> out;
  auto mixer = [&](Init& scope) -> ResidualLayer::Body {
    if (l.moe) {
      auto moe = std::make_shared<Moe>(
          scope, *l.moe, std::make_shared<const TensorParallelGroup>(options.expert_parallel));
      return [moe](const at::Tensor& x) { return (*moe)(x); };
    }
    auto ffn = std::make_shared<FeedForward>(scope, l.ffn->hidden, l.ffn->ffn_size,
                                             l.ffn->activation, l.ffn->bias);
    return [ffn](const at::Tensor& x) { return (*ffn)(x); };
  };
  auto attention = [&](Init& scope) -> ResidualLayer::Body {
    Init attn_scope = scope.scope("attn");
    if (l.attention->mla) {
      auto attn = std::make_shared<LatentAttention>(attn_scope, *l.attention, rotary, seq);
      return [attn](const at::Tensor& x) { return (*attn)(x); };
    }
    auto attn = std::make_shared<Attention>(attn_scope, *l.attention, rotary, seq);
    return [attn](const at::Tensor& x) { return (*attn)(x); };
  };
  switch (l.kind) {
    case LayerKind::kEmbedding: {
      // With a tied head the embedding matrix (drawn first) is read by the head too.
      Init embed(store, l.name, seed + static_cast<uint64_t>(index),
                 tied >= 0 ? std::vector<int>{index, tied} : std::vector<int>{index}, group);
      out = std::make_unique<EmbeddingLayer>(embed, *l.embedding, vocab_rows(l, tied >= 0, options),
                                             seq);
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
        if (l.mamba->version == 1) {
          auto mamba = std::make_shared<Mamba1>(scope, *l.mamba);
          body = [mamba](const at::Tensor& x) { return (*mamba)(x); };
        } else {
          auto mamba = std::make_shared<Mamba2>(scope, *l.mamba);
          body = [mamba](const at::Tensor& x) { return (*mamba)(x); };
        }
      } else {
        Init scope = init.scope(l.kind == LayerKind::kMoe ? "moe" : "mlp");
        body = mixer(scope);
      }
      out = std::make_unique<ResidualLayer>(std::vector{norms}, std::vector{body});
      break;
    }
    case LayerKind::kHead: {
      Norm norm(init, "norm", l.head->hidden, l.norm_bias);
      const VocabRows rows = vocab_rows(l, l.head->tied, options);
      at::Tensor weight;
      if (l.head->tied) {
        // The embedding's matrix: drawn as the embedding layer draws it, shared by name.
        const Layer& e = model.layers[0];
        Init embed(store, e.name, seed, {0, index}, group);
        weight = embed.normal("weight", {e.embedding->vocab, e.embedding->hidden},
                              rows.held_split(group));
        for (auto& p : embed.used()) init.used().push_back(p);
      } else {
        weight = init.normal("weight", {l.head->vocab, l.head->hidden}, rows.held_split(group));
      }
      out = std::make_unique<HeadLayer>(norm, weight, group, rows, l.head->tied);
      break;
    }
    default:
      break;
  }
  for (auto& p : init.used()) used->push_back(p);
  return out;
}

}  // namespace

at::Tensor context_parallel_positions(int64_t seq_len, int members, int member) {
  if (members == 1) return at::arange(seq_len, at::kLong);
  const int64_t n = seq_len / (2 * members);
  const int64_t last = 2 * members - 1 - member;
  return at::cat({at::arange(member * n, (member + 1) * n, at::kLong),
                  at::arange(last * n, (last + 1) * n, at::kLong)});
}

Result<std::unique_ptr<StageModule>> make_transformer_stage(const ModelSpec& model, int layer_begin,
                                                            int layer_end,
                                                            const StageModuleOptions& options,
                                                            ParameterStore& store) {
  if (layer_begin < 0 || layer_begin >= layer_end ||
      layer_end > static_cast<int>(model.layers.size())) {
    return invalid_argument(fmt::format("model '{}': no layers [{}, {}) in a model of {} layers",
                                        model.name, layer_begin, layer_end, model.layers.size()));
  }
  const std::string name = fmt::format("model '{}'", model.name);
  MOTLEY_RETURN_IF_ERROR(validate_model(model, name));
  for (int i = layer_begin; i < layer_end; ++i) {
    MOTLEY_RETURN_IF_ERROR(check_layer(model, i, options).with_context(name));
  }
  MOTLEY_RETURN_IF_ERROR(
      check_vocab_shard(model, layer_begin, layer_end, options).with_context(name));
  for (const auto& [group, what] : {std::pair{&options.expert_parallel, "expert"},
                                    std::pair{&options.context_parallel, "context"}}) {
    if (group->size > 1 && (!group->all_reduce || !group->all_to_all)) {
      return invalid_argument(
          fmt::format("{}: a {}-parallel group of {} needs its all-reduce and all-to-all", name,
                      what, group->size));
    }
  }
  const int c = options.context_parallel.size;
  if (c < 1 || options.context_parallel.rank < 0 || options.context_parallel.rank >= c ||
      (c > 1 && options.seq_len % (2 * c) != 0)) {
    return invalid_argument(fmt::format(
        "{}: a context-parallel group of {} (as member {}) splits every sequence into {} equal "
        "chunks, which sequences of {} tokens do not give",
        name, c, options.context_parallel.rank, 2 * c, options.seq_len));
  }
  std::vector<std::unique_ptr<LayerImpl>> layers;
  std::vector<StageParameter> used;
  const auto group = std::make_shared<const TensorParallelGroup>(options.tensor_parallel);
  try {
    const Sequence seq = make_sequence(options);
    for (int i = layer_begin; i < layer_end; ++i) {
      layers.push_back(build_layer(model, i, options, group, seq, store, &used));
    }
  } catch (const std::exception& e) {
    return internal_error(fmt::format("model '{}': building layers [{}, {}): {}", model.name,
                                      layer_begin, layer_end, e.what()));
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

Result<std::function<at::Tensor()>> attention_core_runner(const Layer& layer,
                                                          int64_t micro_batch_size, int64_t seq_len,
                                                          int tp, c10::Device device) {
  if (!layer.attention) {
    return invalid_argument(fmt::format("layer '{}' ({}) has no attention core", layer.name,
                                        layer_kind_name(layer.kind)));
  }
  const AttentionShape& a = *layer.attention;
  if (tp < 1 || a.num_heads % tp != 0) {
    return invalid_argument(
        fmt::format("layer '{}': {} attention heads do not split over {} devices", layer.name,
                    a.num_heads, tp));
  }
  const int64_t heads = a.num_heads / tp;
  // After grouped-query expansion every query head has its own key and value (Attention), and
  // latent attention's keys are [nope, rope] per head (LatentAttention).
  const int64_t qk_dim = a.mla ? a.qk_nope_head_dim + a.qk_rope_head_dim : a.head_dim;
  const int64_t v_dim = a.v_head_dim > 0 ? a.v_head_dim : a.head_dim;
  try {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(0);
    auto draw = [&](int64_t d) {
      at::Tensor t = at::empty({micro_batch_size, heads, seq_len, d}, at::kFloat);
      t.normal_(0.0, 1.0, generator);
      return t.to(device).requires_grad_(true);
    };
    at::Tensor q = draw(qk_dim), k = draw(qk_dim), v = draw(v_dim);
    at::Tensor sinks;
    if (a.sinks) {
      sinks = at::zeros({heads}, at::TensorOptions().dtype(at::kFloat).device(device))
                  .requires_grad_(true);
    }
    const at::Tensor positions = at::arange(seq_len, at::kLong);
    return std::function<at::Tensor()>(
        [a, q, k, v, sinks, positions] { return attend(a, q, k, v, sinks, positions); });
  } catch (const std::exception& e) {
    return internal_error(
        fmt::format("layer '{}': preparing its attention core: {}", layer.name, e.what()));
  }
}

std::vector<int64_t> boundary_shape(const ModelSpec& model, int layer, int64_t micro_batch_size,
                                    int64_t seq_len) {
  MOTLEY_CHECK(layer >= 0 && layer < static_cast<int>(model.layers.size()), "no such layer");
  return {micro_batch_size, seq_len, hidden_width_written(model.layers[layer])};
}

at::Tensor vocab_shard_loss(const std::vector<at::Tensor>& statistics) {
  MOTLEY_CHECK(!statistics.empty(), "a loss without statistics");
  std::vector<at::Tensor> maxima;
  for (const at::Tensor& s : statistics) maxima.push_back(s.select(1, 0).detach());
  const at::Tensor maximum = std::get<0>(at::stack(maxima, 0).max(0));
  at::Tensor sum_exp, target_logit;
  for (size_t k = 0; k < statistics.size(); ++k) {
    const at::Tensor rescaled = statistics[k].select(1, 1) * (maxima[k] - maximum).exp();
    sum_exp = k == 0 ? rescaled : sum_exp + rescaled;
    const at::Tensor target = statistics[k].select(1, 2);
    target_logit = k == 0 ? target : target_logit + target;
  }
  return (maximum + sum_exp.log() - target_logit).mean();
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
