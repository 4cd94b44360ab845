// StageModule: the layers of one pipeline stage as a differentiable function — tokens or a
// hidden state in, a hidden state or the loss out — and the rank's ParameterStore that owns
// their weights. make_transformer_stage builds one from a ModelSpec (embedding, attention with
// GQA / sliding window / qk-norm / sinks, multi-head latent attention, RMSNorm, dense and gated
// feed-forward, MoE with a top-k router and shared experts, Mamba-1 and -2, decoder blocks and
// their split forms, LM head with cross-entropy), fp32 on the CPU (under bf16 autocast,
// precision.h, the matrix products run in bf16 and every layer's output is fp32), whole or as one
// rank's slice of a tensor-parallel group (Megatron-LM's column / row split, vocabulary-parallel
// embedding and cross-entropy), its MoE layers' routed experts optionally split over an
// expert-parallel group. It does not schedule, send pipeline messages or optimize (executor.h);
// a tensor-parallel stage calls the group's all-reduce from its forward and backward, and an
// expert- or context-parallel one its group's all-to-all (and, for experts, all-reduce).
// Thread-compatible: one rank's thread uses its modules and store.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "motley/core/status.h"
#include "motley/model/model.h"

namespace motley {

struct NamedTensor {
  std::string name;
  at::Tensor tensor;
};

// The parameters of one rank by name ("<layer name>.<parameter>", e.g. "layers.3.attn.wq").
// Stages on one rank that name the same parameter share it: a head tied to an embedding on the
// same rank uses the embedding's tensor; on another rank it holds an identical copy whose
// gradient the executor sums with the embedding's.
class ParameterStore {
 public:
  // Parameters live on `device` (a rank's GPU, or the CPU).
  explicit ParameterStore(c10::Device device = c10::kCPU) : device_(device) {}

  // Returns the parameter `name`, adopting a copy of `initial` on the store's device (made a
  // leaf that requires grad) the first time the name is asked for; later calls return the
  // first tensor and ignore `initial`.
  at::Tensor get_or_create(const std::string& name, at::Tensor initial);
  c10::Device device() const { return device_; }
  // All parameters in increasing name order.
  std::vector<NamedTensor> parameters() const;
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }

 private:
  c10::Device device_;
  std::map<std::string, at::Tensor> tensors_;
};

// Which part of a model parameter one rank of a tensor-parallel group holds: the rows `rows` (in
// the local tensor's order) of the full tensor along dimension `dim`. Rows held by several ranks
// of the group have the same value on each; their gradient on one rank is either complete
// (replicated computation, e.g. a norm on the replicated hidden state) or a partial sum over the
// rank's heads (e.g. qk-norm weights); `grad_rows` says which local rows add their gradient into
// the full one, `value_rows` which local rows this rank writes when the full value is assembled
// (each full row by exactly one rank of the group). Unsplit (t = 1): every row, all three.
struct TensorSlice {
  int64_t dim = 0;
  std::vector<int64_t> full_shape;
  at::Tensor rows;        // int64 [local rows]: full-tensor index of each local row
  at::Tensor grad_rows;   // int64: local positions whose gradient is added into the full one
  at::Tensor value_rows;  // int64: local positions this rank contributes to the full value
  // True when the group's ranks hold disjoint rows and add every local row's gradient: the
  // slice is a plain shard (Megatron's column or row split), so a shard-wise sum suffices.
  bool exclusive = true;
};

// A parameter as a stage sees it, with every layer of the model that reads it (its own layer;
// for the embedding matrix of a model with a tied head, also the head), so the executor can sum
// its gradient over all ranks that hold any of those layers.
struct StageParameter {
  std::string name;
  at::Tensor tensor;
  std::vector<int> layers;  // increasing
  TensorSlice slice;
  // A routed expert's parameter split over an expert-parallel group
  // (StageModuleOptions::expert_parallel): one member of each group holds it, and its gradient is
  // summed over those members only.
  bool expert_shard = false;
};

// The tensor-parallel group a stage runs on: this rank's index in it, its size, and the sum
// over its ranks. A stage of t > 1 holds 1/t of the heads, feed-forward width, experts' widths,
// Mamba heads (Mamba-2) or channels (Mamba-1) and vocabulary, and sums partial results with
// `all_reduce` (which throws std::runtime_error on a transport failure; the executor reports it as
// the action's error).
struct TensorParallelGroup {
  int rank = 0;
  int size = 1;
  std::function<void(at::Tensor&)> all_reduce;  // in place; needed when size > 1
  // Transport::all_to_all over the group: send[j] to member j, recv[i] from member i. Needed
  // by an expert- or context-parallel group of size > 1.
  std::function<void(const std::vector<at::Tensor>& send, const std::vector<at::Tensor>& recv)>
      all_to_all = {};
};

class StageModule {
 public:
  virtual ~StageModule() = default;

  // A stage whose first layer is the embedding takes token ids [b, s] (int64); others take the
  // previous stage's hidden state [b, s, h] (float32).
  virtual bool takes_tokens() const = 0;
  // A stage whose last layer is the head returns the mean cross-entropy over the b*s `targets`
  // ([b, s], int64) as a scalar (a vocabulary shard of the head: its statistics, which
  // vocab_shard_loss combines); others return their hidden state and ignore `targets`. Both
  // come out in float32, also under autocast.
  virtual bool produces_loss() const = 0;
  virtual at::Tensor forward(const at::Tensor& input, const at::Tensor& targets) = 0;
  // The parameters this stage reads (from the rank's store), in increasing name order.
  virtual std::vector<StageParameter> parameters() const = 0;
  // The routed experts' parameters that other members of the stage's expert-parallel group hold
  // (StageModuleOptions::expert_parallel), with undefined tensors: their names, layers and the
  // slices this rank would hold, for assembling checkpoints. Increasing name order.
  virtual std::vector<StageParameter> held_elsewhere() const { return {}; }
};

struct StageModuleOptions {
  uint64_t seed = 0;  // layer i draws its initial weights from a generator seeded seed + i
  int64_t seq_len = 0;
  TensorParallelGroup tensor_parallel;
  // The expert-parallel group of this rank (size 1: none): the ranks with this rank's
  // tensor-parallel index in the groups running this stage in consecutive replicas. Member r
  // holds routed experts [r E / e, (r + 1) E / e) of every MoE layer (E experts, e members),
  // each split over the tensor-parallel group as without expert parallelism; tokens go to their
  // experts' members and back by `all_to_all`, after `all_reduce` has summed the block sizes
  // (docs/executor.md). Every member must run the same actions in the same order.
  TensorParallelGroup expert_parallel = {};
  // The context-parallel group of this rank (size 1: none), formed like the expert-parallel
  // one: member r of c holds the tokens at context_parallel_positions(seq_len, c, r) of every
  // sequence (its input has seq_len / c tokens), and attention gathers every member's keys and
  // values by `all_to_all` (docs/executor.md). seq_len must be a multiple of 2c; no Mamba
  // layer. Every member must run the same actions in the same order.
  TensorParallelGroup context_parallel = {};
  // A vocabulary shard (plan.h, Stage): the stage is the embedding or the head alone and uses
  // its rows [vocab_begin, vocab_end) only, split evenly over the tensor-parallel group. Both 0:
  // the whole layers. An embedding shard looks up the tokens of its rows (zeros for the others;
  // the shard from row 0 adds the learned positions), so the shards' outputs sum to the
  // embedding. A head shard's forward returns its statistics (vocab_shard_loss).
  int64_t vocab_begin = 0;
  int64_t vocab_end = 0;
};

// The positions of member `member`'s tokens in a sequence of `seq_len` split over a
// context-parallel group of `members`: chunks member and 2 members - 1 - member of 2 members
// equal chunks (Megatron-LM's load-balanced split), increasing; every position for one member.
// REQUIRES: seq_len a multiple of 2 members, 0 <= member < members.
at::Tensor context_parallel_positions(int64_t seq_len, int members, int member);

// Builds layers [layer_begin, layer_end) of `model`, taking parameters from `store`. Weights
// depend only on (seed, layer index) — a tensor-parallel rank draws the full tensor and keeps
// its slice — so any partition and any tensor-parallel degree start from the reference's
// weights.
// Errors (invalid_argument): validate_model's for an inconsistent model; then, naming the layer
// and what the executor supports: layer kinds other than those listed above (vision, projector,
// measured), multi-head latent attention with q/k norms, an odd head_dim (rotary embeddings turn
// whole heads), latent MoE, an embedding that is not layer 0 or a head that is not the last
// layer, a sequence longer than a learned position table, and widths the tensor-parallel degree
// does not divide (kv heads, feed-forward and expert widths, vocabulary, Mamba-2 heads, Mamba-1
// channels; Mamba-2 groups must divide or be divided by it); for a vocabulary shard, a stage
// that is not the embedding or the head alone, rows outside the vocabulary, or a row count the
// degree does not divide. (A shard of a tied embedding or head holds the whole matrix on every
// rank of its group and reads its rows.)
Result<std::unique_ptr<StageModule>> make_transformer_stage(const ModelSpec& model, int layer_begin,
                                                            int layer_end,
                                                            const StageModuleOptions& options,
                                                            ParameterStore& store);

// The mean cross-entropy of one micro-batch from the statistics of every vocabulary shard of the
// head, in shard order: each shard's forward gives, per token, [the largest logit of its rows,
// the sum of exp(logit - that largest) over its rows, the target's logit where the target is
// one of its rows and 0 elsewhere] ([b*s, 3], float32). The loss is max + log(sum over shards of
// their sums rescaled to the max) - the target's logit, the loss of the whole head; its gradient
// flows into the shards whose statistics carry one (a shard's own; the received ones are
// constants), which is that shard's exact share of the whole head's gradient (Yeung et al.,
// "Balancing Pipeline Parallelism with Vocabulary Parallelism", 2024).
at::Tensor vocab_shard_loss(const std::vector<at::Tensor>& statistics);

// The attention core of `layer` — scores, mask, softmax and the weighted sum of values, the part
// selective recomputation repeats before the backward pass (Korthikanti et al. 2022) — as the
// executor's layers compute it, on one rank of a tensor-parallel group of `tp` devices (1 / tp of
// the heads), for `micro_batch_size` sequences of `seq_len` tokens. Returns a function that runs
// it once, with autograd recording as a recompute does, on fixed random queries, keys and values
// (drawn once, here, on the CPU, and kept on `device`). Errors (invalid_argument): a layer without
// attention, a degree that does not divide its heads. The tensors are this call's only
// allocation; the caller bounds their size.
Result<std::function<at::Tensor()>> attention_core_runner(const Layer& layer,
                                                          int64_t micro_batch_size, int64_t seq_len,
                                                          int tp, c10::Device device = c10::kCPU);

// The shape of the hidden state leaving layer `layer` ([b, s, hidden]), what travels between
// stages. REQUIRES: `layer` is not the head.
std::vector<int64_t> boundary_shape(const ModelSpec& model, int layer, int64_t micro_batch_size,
                                    int64_t seq_len);

// Inputs and targets of global micro-batch `g` (data.h): rows are samples g*b .. g*b+b-1 of
// `tokens`, int64 tensors of shape [b, seq_len].
class TokenStream;
void micro_batch_tensors(const TokenStream& tokens, int64_t g, int64_t micro_batch_size,
                         int64_t seq_len, at::Tensor* inputs, at::Tensor* targets);

}  // namespace motley
