#include "motley/exec/data.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "motley/core/check.h"
#include "motley/core/json.h"

namespace motley {
namespace {

// splitmix64 (Steele, Lea and Flood 2014): a tiny generator whose output is fixed by the
// standard, unlike std::uniform_int_distribution's.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr std::array<const char*, 64> kWords = {
    "the",   "a",     "river", "stone",  "light",   "house", "over",   "under", "green",  "old",
    "small", "quick", "slow",  "bird",   "field",   "wind",  "moves",  "holds", "sees",   "keeps",
    "and",   "or",    "but",   "while",  "when",    "after", "before", "north", "south",  "east",
    "west",  "road",  "tree",  "water",  "fire",    "cloud", "rain",   "sun",   "moon",   "star",
    "walks", "runs",  "sings", "builds", "carries", "finds", "turns",  "rests", "bright", "dark",
    "long",  "short", "high",  "low",    "near",    "far",   "with",   "from",  "into",   "upon",
    "every", "some",  "many",  "one"};

}  // namespace

std::string synthetic_corpus(int64_t bytes, uint64_t seed) {
  std::string text;
  text.reserve(static_cast<size_t>(bytes) + 16);
  uint64_t state = seed;
  while (static_cast<int64_t>(text.size()) < bytes) {
    const int words = 4 + static_cast<int>(splitmix64(state) % 9);
    for (int w = 0; w < words; ++w) {
      std::string word = kWords[splitmix64(state) % kWords.size()];
      if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      text += word;
      text += (w + 1 == words) ? ". " : " ";
    }
  }
  text.resize(static_cast<size_t>(bytes));
  return text;
}

Result<TokenStream> TokenStream::from_text(std::string text, const std::string& source) {
  if (text.size() < 2) {
    return invalid_argument(fmt::format("{}: a token stream needs at least 2 bytes of text, got {}",
                                        source, text.size()));
  }
  if (text.size() >= (size_t{1} << 32)) {
    return invalid_argument(fmt::format("{}: texts of 4 GiB or more are not supported", source));
  }
  std::vector<int64_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return TokenStream(std::move(tokens));
}

Result<TokenStream> TokenStream::from_file(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return from_text(std::move(text), path);
}

std::vector<int64_t> TokenStream::sample(int64_t n, int64_t seq_len) const {
  MOTLEY_CHECK(n >= 0 && seq_len >= 1, "bad sample request");
  const int64_t size = this->size();
  // (n * seq_len) mod size; both factors are reduced first, and size < 2^32 keeps the product
  // inside 64 bits.
  const auto usize = static_cast<uint64_t>(size);
  const int64_t start = static_cast<int64_t>((static_cast<uint64_t>(n) % usize) *
                                             (static_cast<uint64_t>(seq_len) % usize) % usize);
  std::vector<int64_t> out(static_cast<size_t>(seq_len + 1));
  for (int64_t i = 0; i <= seq_len; ++i) out[i] = tokens_[(start + i) % size];
  return out;
}

int64_t total_micro_batches(const Plan& plan) {
  int64_t total = 0;
  for (const Replica& r : plan.replicas) total += r.micro_batches;
  return total;
}

int64_t distinct_micro_batches(const Plan& plan) {
  const size_t c = static_cast<size_t>(std::max(plan.context_parallel, 1));
  int64_t total = 0;
  for (size_t r = 0; r < plan.replicas.size(); r += c) total += plan.replicas[r].micro_batches;
  return total;
}

int64_t global_micro_batch(const Plan& plan, int64_t step, int replica, int64_t micro_batch) {
  MOTLEY_CHECK(replica >= 0 && replica < static_cast<int>(plan.replicas.size()), "no replica");
  MOTLEY_CHECK(micro_batch >= 0 && micro_batch < plan.replicas[replica].micro_batches,
               "no such micro-batch");
  const int c = std::max(plan.context_parallel, 1);
  int64_t offset = 0;
  for (int r = 0; r < replica / c * c; r += c) offset += plan.replicas[r].micro_batches;
  return step * distinct_micro_batches(plan) + offset + micro_batch;
}

}  // namespace motley
