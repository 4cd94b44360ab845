// Internal to tune/: the strategies — the named baselines (Megatron-LM's rule with its
// schedules, Metis, and the three single-dimension optimizers), motley's full search (layouts,
// schedules and micro-batch sizes ranked by the estimate, the best simulated, then improved by
// bubble-aware local search) and the exhaustive enumeration for small instances. All of them
// price candidates through one Evaluator, so cached plans are shared. Used from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "candidate.h"
#include "context.h"
#include "evaluator.h"
#include "space.h"

namespace motley::tune_internal {

// A strategy's best candidate.
struct Found {
  bool ok = false;
  Candidate candidate;
  std::shared_ptr<const Evaluation> eval;
  std::string detail;    // what the strategy chose, in words
  std::string why_not;   // when !ok
  bool not_run = false;  // a budget was spent before it started
  int64_t simulated = 0;
  double seconds = 0;  // search time
};

// Moves the local search may make.
enum MoveSet : unsigned {
  kMovePartition = 1,     // shift a stage boundary by a layer
  kMoveRecompute = 2,     // lower a stage's recompute
  kMoveMicroBatches = 4,  // move micro-batches between replicas of different speed
  kMoveSchedule = 8,      // switch the adaptive scheduler's priorities
  kMoveExperts = 16,      // change the expert-parallel degree (equal micro-batch counts)
  kMoveVocab = 32,        // split the head over the groups, or stop splitting it (adaptive)
  kMoveContext = 64,      // change a context-parallel candidate's degree (the batch kept)
  kMoveAll = 127,
};

class Searcher {
 public:
  // Called after every evaluated batch with the current phase ("baselines", "structures",
  // "local search", "exhaustive").
  using ProgressFn = std::function<void(const std::string& phase)>;
  Searcher(const Context& ctx, Evaluator& evaluator, ProgressFn progress);

  // Megatron-LM's rule: its layer split (megatron_bounds: the decoder layers evenly over the
  // stages, embedding first, head last), devices in Megatron-LM's rank order (global rank =
  // device in cluster order, a stage's replicas side by side), TP the smallest power of two
  // that fits (GPUs per node with recompute when nothing fits without), the smallest PP that
  // fits, DP the rest, the same micro-batch count per replica.
  Found megatron(const ScheduleSpec& schedule);
  // What a Megatron-LM user finds by sweeping: the best of TP x PP x DP (its rank order and
  // layer split) x 1F1B or interleaved 1F1B (v = 2, 4) x micro-batch size x uniform
  // recompute x the distributed optimizer, ranked by the estimate, screened until eight fit
  // and the best four simulated whole, with `defaults` (the default layouts a sweep starts
  // from: megatron-1f1b, megatron-interleaved), so it is never slower than they are.
  Found megatron_tuned(const std::vector<Found>& defaults);
  // Metis (ATC'24): heterogeneity-aware device grouping, TP/DP degrees and layer partition,
  // chosen by its cost model (m-1) max(stage) + sum(stage) + all-reduce, with 1F1B.
  Found metis();
  // One dimension optimized, the others as megatron-1f1b (`base`): the layer split is
  // Megatron-LM's wherever the partition is not the dimension optimized.
  Found partition_only(const Found& base);
  Found placement_only();
  Found schedule_only(const Found& base);
  // `c` itself, simulated whole (with more recompute when it does not fit memory as it is);
  // its detail starts with `detail_prefix`.
  Found given(const Candidate& c, const std::string& detail_prefix);
  // The full search; `seeds` (e.g. the baselines' plans) join the candidates it improves.
  Found motley(const std::vector<Found>& seeds);
  // The phase progress reports name from now on ("baselines" again after the search).
  void set_phase(const std::string& phase) { phase_ = phase; }
  // Every partition x placement x named schedule (small instances), branch and bound on the
  // busiest group's compute.
  Found exhaustive();

  // Hill climbing from `start` with the given moves, then `kicks` random perturbations (from
  // the seed) each followed by hill climbing; keeps the best.
  Found improve(const Found& start, unsigned moves, int kicks);
  // The candidates one of `moves` away from `c` (evaluated as `e`), as climb() tries them.
  std::vector<Candidate> neighbors(const Candidate& c, const Evaluation& e, unsigned moves) const;

 private:
  std::vector<std::shared_ptr<const Evaluation>> evaluate(const std::vector<Candidate>& batch);
  // Candidates that ran out of memory are evaluated again with every stage one recompute
  // policy further (none -> selective -> full), up to twice; `cands` and `evals` are updated
  // in place.
  void retry_with_more_recompute(std::vector<Candidate>& cands,
                                 std::vector<std::shared_ptr<const Evaluation>>& evals);
  Found best_of(const std::vector<Candidate>& cands,
                const std::vector<std::shared_ptr<const Evaluation>>& evals,
                const std::string& detail_prefix) const;
  // Evaluates `cands` (at the current fidelity) and returns the best.
  Found best_of(const std::vector<Candidate>& cands, const std::string& detail_prefix);
  // The improved candidate and the best screened ones (up to four in all), to be simulated
  // whole before a strategy reports its choice.
  std::vector<Candidate> finalists(const std::vector<Candidate>& cands,
                                   const std::vector<std::shared_ptr<const Evaluation>>& screened,
                                   const Found& improved);
  Found climb(const Found& start, unsigned moves);
  // `from`'s schedule, micro-batch size and options (ZeRO, expert, context, sequence and
  // vocabulary parallelism) built on each of `layouts[kept]` but its own and those of its
  // replica count and groups in another order, with `options`' partition settings, screened;
  // the best of them (not ok where none builds and screens).
  Found on_other_layouts(const Candidate& from, const std::vector<Layout>& layouts,
                         const std::vector<size_t>& kept, const BuildOptions& options);
  std::string describe(const Candidate& c) const;
  // The expert-parallel degrees above 1 the search tries on `layout`: those dividing its
  // replicas and every MoE layer's experts (the options' degree alone when they fix one);
  // none for a model without MoE layers.
  std::vector<int> expert_degrees(int replicas) const;
  // The context-parallel degrees above 1 the search tries on a layout of `replicas` replicas:
  // the context's (Context::context_degrees) that divide them.
  std::vector<int> context_degrees(int replicas) const;
  // Why a search found nothing: memory, or the budget or deadline that refused the nearest.
  std::string no_plan() const;

  const Context& ctx_;
  Evaluator& evaluator_;
  ProgressFn progress_;
  PartitionCache partitions_;
  uint64_t rng_state_;
  Fidelity fidelity_ = Fidelity::kFull;  // of evaluate(); motley's search screens
  std::string phase_ = "baselines";      // reported with each evaluated batch
};

}  // namespace motley::tune_internal
