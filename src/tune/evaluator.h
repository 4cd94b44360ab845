// Internal to tune/: evaluating candidates — assembling their plans and simulating them on
// several threads, each with its own Simulator — with a cache keyed by candidate, a count of the
// plans simulated and the search's budgets (a deadline on the context's clock, a number of
// simulations). Screening simulates two of a candidate's identical
// replicas (the all-reduce priced over all of them) and about 4p micro-batches per replica,
// extrapolating the rest at the steady state's period (docs/planner.md, "Screening").
// Results come back in input order whatever the thread count, so the search stays
// deterministic. An Evaluator is used from one thread at a time; it runs its workers inside
// evaluate().
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "candidate.h"
#include "context.h"
#include "motley/sim/simulator.h"

namespace motley::tune_internal {

// What the search keeps of one simulated group (its first device stands for the group).
struct GroupStat {
  double busy = 0;     // seconds of compute on its stream
  double exposed = 0;  // seconds waiting on communication
  double peak = 0;     // bytes
  double capacity = 0;
};

struct Evaluation {
  bool ok = false;  // assembled, simulated and within memory
  Status status;    // why not, when !ok
  double iteration_time = 0;
  // What the objective minimizes: seconds, or expected dollars per iteration (the price over
  // the goodput).
  double score = 0;
  double price_per_second = 0;  // of the devices the plan uses
  double goodput = 1;           // under interruptions (preemption.h)
  // Refused by TuneOptions' budget or deadline (status says how far off): then how far, the
  // price per second or the expected seconds for the tokens.
  enum class Refusal { kNone, kBudget, kDeadline } refusal = Refusal::kNone;
  double refused_at = 0;
  bool over_memory = false;  // simulated, and over a device's capacity (or its headroom)
  double bubble_fraction = 0;
  std::vector<std::vector<GroupStat>> groups;  // [replica][group]
};

enum class Fidelity {
  kFull,    // the whole plan
  kScreen,  // two replicas standing for d identical ones, ~4p micro-batches extrapolated
};

// Whether evaluate() simulates candidates once the search's deadline has passed.
enum class Deadline {
  kHonour,  // no: they come back !ok
  kIgnore,  // yes (the evaluation budget still holds): for the search's answer itself
};

class Evaluator {
 public:
  // `deadline` on ctx.now(); ctx.options().max_evaluations bounds simulated().
  Evaluator(const Context& ctx, Seconds deadline);
  ~Evaluator();

  // Evaluates every candidate (the cached ones are not simulated again); results in input
  // order. Candidates not reached before the deadline, and those past the evaluation budget
  // (the first uncached ones in input order are simulated), come back !ok with a status saying
  // which budget ran out.
  std::vector<std::shared_ptr<const Evaluation>> evaluate(const std::vector<Candidate>& batch,
                                                          Fidelity fidelity = Fidelity::kFull,
                                                          Deadline deadline = Deadline::kHonour);

  // The best screened candidates so far (by score, then key), at most `k`.
  std::vector<Candidate> best_screened(size_t k) const;

  // Whether either budget is spent: the search should stop. The time budget counts what must
  // follow the search (reserve_for) as spent already.
  bool out_of_time() const { return out_of_evaluations() || past_deadline(); }
  // Which budget out_of_time() found spent, in words: "the time budget (8.0 s) was spent" or
  // "the evaluation budget ('max_evaluations' N) was spent". REQUIRES: out_of_time().
  std::string budget_spent() const;
  // Holds back, from the deadline, the time of the search's answer simulated whole (the
  // longest whole-plan simulation so far: the answer is among the larger plans) and of
  // `simulations` more whole-plan simulations at their mean duration so far: what the caller
  // does after the search (replaying and validating the plans it reports), so that the whole
  // call keeps to the time budget. At most half the time from construction to the deadline,
  // and only once a feasible candidate is found.
  void reserve_for(int simulations) { reserved_simulations_ = simulations; }
  Seconds reserve() const;
  // Whether `share` (of 0 to 1) of the time budget is spent: of the time from construction to
  // the deadline, less the reserve.
  bool spent_time_share(double share) const;
  // The time until the deadline, less the reserve (0 past it).
  Seconds time_left() const;
  int64_t simulated() const { return simulated_; }
  // How many of them came out over a device's memory (or its headroom).
  int64_t over_memory() const { return over_memory_; }
  // Candidates left unsimulated because a budget ran out, and which budget it was last.
  int64_t unreached() const { return unreached_; }
  const std::string& unreached_why() const { return unreached_why_; }
  // The shortest iteration of a feasible candidate so far; 0 before the first.
  double best_iteration_time() const { return best_iteration_time_; }
  // Why the nearest candidate refused by the budget or the deadline was refused (the one
  // missing the deadline by least, else the cheapest over the budget); empty when none was.
  std::string constraint_refusal() const;

  // The plan and full simulation of an evaluated candidate (assembled and simulated again on
  // `sim`, one of for_each's).
  Result<std::pair<Plan, SimResult>> replay(const Candidate& c, Simulator& sim) const;
  // Runs work(i, sim) for every i below n on the evaluator's threads, each with its own
  // simulator, and returns when all are done. `work` must be safe to run concurrently.
  void for_each(size_t n, const std::function<void(size_t, Simulator&)>& work);

 private:
  // The refusal of a candidate whose devices cost more than the budget; nullopt when within it.
  std::optional<Evaluation> budget_refusal(const Candidate& c) const;
  // Keeps `e` as the nearest refusal when it is nearer than the one kept.
  void note_refusal(const std::shared_ptr<const Evaluation>& e);
  Evaluation run(const Candidate& c, Fidelity fidelity, Simulator& sim);
  // Whether the deadline, less the reserve, comes before `upcoming` more seconds pass.
  bool past_deadline(double upcoming = 0) const;
  // Mean seconds of one simulation at `fidelity` so far; 0 before the first.
  double mean_seconds(Fidelity fidelity) const;
  bool out_of_evaluations() const;

  const Context& ctx_;
  Seconds deadline_;
  Seconds start_;  // when the evaluator was made, on ctx_'s clock
  std::vector<std::unique_ptr<Simulator>> simulators_;
  std::map<std::string, std::shared_ptr<const Evaluation>> cache_;
  int64_t simulated_ = 0;
  int64_t over_memory_ = 0;  // of the simulated, those over a device's memory
  // Seconds spent simulating and simulations run, per Fidelity.
  std::array<double, 2> seconds_{0.0, 0.0};
  std::array<int64_t, 2> runs_{0, 0};
  double longest_full_ = 0;  // seconds of the longest whole-plan simulation so far
  int reserved_simulations_ = 0;
  int64_t unreached_ = 0;
  std::string unreached_why_;
  double best_iteration_time_ = 0;
  std::shared_ptr<const Evaluation> nearest_refused_;
  std::vector<std::pair<std::pair<double, std::string>, Candidate>> screened_;  // best first
};

}  // namespace motley::tune_internal
