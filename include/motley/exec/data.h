// Training data for the executor: a byte-level token stream over a text (a file, or a
// deterministic synthetic corpus), and the documented mapping from (step, replica, micro-batch)
// to the samples of the global batch, which every rank and the sequential reference apply alike.
// No tensors here (the executor builds them). Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "motley/core/status.h"
#include "motley/plan/plan.h"

namespace motley {

// Tokens are the text's bytes (0..255), so any model with a vocabulary of at least 256 reads it.
inline constexpr int64_t kByteVocab = 256;

// A deterministic English-like text of exactly `bytes` bytes: sentences of 4 to 12 words drawn
// from a fixed list of 64 words by a splitmix64 generator seeded with `seed`, the first word
// capitalized, ending in '.', separated by one space. Same arguments, same text, everywhere.
std::string synthetic_corpus(int64_t bytes, uint64_t seed);

class TokenStream {
 public:
  // Error (invalid_argument) when `text` has fewer than 2 bytes; `source` names it.
  static Result<TokenStream> from_text(std::string text, const std::string& source);
  // Reads a whole file as text (not_found / io_error naming the path).
  static Result<TokenStream> from_file(const std::string& path);

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }

  // Sample n: the seq_len + 1 tokens starting at position (n * seq_len) mod size(), wrapping at
  // the end of the text; the first seq_len are the inputs, the last seq_len the targets.
  // REQUIRES: n >= 0, seq_len >= 1.
  std::vector<int64_t> sample(int64_t n, int64_t seq_len) const;

 private:
  explicit TokenStream(std::vector<int64_t> tokens) : tokens_(std::move(tokens)) {}
  std::vector<int64_t> tokens_;
};

// The global batch of step t is micro-batches t*M .. t*M + M-1 (M = the distinct micro-batches
// of all replicas, in replica order): replica r's micro-batch j is global micro-batch
// t*M + (m_0 + ... + m_{r-1}) + j. Global micro-batch g holds samples g*b .. g*b + b-1 (b =
// micro_batch_size). Under context parallelism (Plan::context_parallel c) the replicas of a
// context group run the same micro-batches: M and the offsets count a group's once (group k's
// offset is the micro-batches of groups 0 .. k-1). REQUIRES: valid replica and micro-batch
// indices.
int64_t distinct_micro_batches(const Plan& plan);
// Every replica's micro-batches, a context group's members each counted: what each pass's
// loss is divided by, so that the members' gradients sum to their group's.
int64_t total_micro_batches(const Plan& plan);
int64_t global_micro_batch(const Plan& plan, int64_t step, int replica, int64_t micro_batch);

}  // namespace motley
