#include "motley/exec/train.h"

#include <mutex>
#include <optional>
#include <thread>

namespace motley {

Result<TrainReport> train_rank(const TrainOptions& options, const Plan& plan,
                               const ModelSpec& model, const TokenStream& tokens,
                               Transport& transport) {
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<RankExecutor> executor,
                          RankExecutor::create(options.exec, plan, model, tokens, transport));
  TrainReport report;
  for (int64_t s = 0; s < options.steps; ++s) {
    MOTLEY_ASSIGN_OR_RETURN(StepResult result, executor->step());
    if (result.loss) {
      report.losses.push_back(*result.loss);
      if (options.on_step) options.on_step(transport.rank(), result);
    }
  }
  return report;
}

Result<TrainReport> train_in_process(const TrainOptions& options, const Plan& plan,
                                     const ModelSpec& model, const TokenStream& tokens) {
  int world = 0;
  for (const Replica& replica : plan.replicas) world += static_cast<int>(replica.groups.size());
  if (world == 0) return invalid_argument("the plan has no device groups to run");
  InProcessNetwork network(world, options.transport);
  std::mutex mu;
  std::optional<Status> first_failure;
  std::optional<TrainReport> report;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Transport> transport = network.endpoint(rank);
      Result<TrainReport> result = train_rank(options, plan, model, tokens, *transport);
      std::lock_guard<std::mutex> lock(mu);
      if (!result.is_ok()) {
        if (!first_failure) {
          first_failure = result.status();
          network.shut_down("rank " + std::to_string(rank) + " failed");
        }
      } else if (!result->losses.empty() && !report) {
        report = std::move(result).value();  // every replica's last stage reports the same sums
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first_failure) return *first_failure;
  return report ? *report : TrainReport{};
}

}  // namespace motley
