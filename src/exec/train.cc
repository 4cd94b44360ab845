#include "motley/exec/train.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "motley/exec/rank_layout.h"

namespace motley {

void set_intra_op_threads(int threads) {
  at::set_num_threads(threads);
  // Looked up at run time: the system chooses the BLAS behind libtorch (Debian alternatives), and
  // OpenBLAS reads OPENBLAS_NUM_THREADS only when it is loaded, before main.
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(threads);
  }
}

Result<TrainReport> train_rank(const TrainOptions& options, const Plan& plan,
                               const ModelSpec& model, const TokenStream& tokens,
                               Transport& transport) {
  std::unique_ptr<Transport> decorated;
  if (options.decorate_transport) decorated = options.decorate_transport(transport);
  Transport& net = decorated ? *decorated : transport;
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<RankExecutor> executor,
                          RankExecutor::create(options.exec, plan, model, tokens, net));
  if (!options.resume_from.empty()) {
    MOTLEY_RETURN_IF_ERROR(executor->load_checkpoint(options.resume_from));
  }
  TrainReport report;
  report.first_step = executor->steps_done();
  for (int64_t s = 0; s < options.steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    MOTLEY_ASSIGN_OR_RETURN(StepResult result, executor->step());
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    report.step_times.push_back(Seconds(elapsed.count()));
    if (options.on_rank_step) options.on_rank_step(net.rank(), result, Seconds(elapsed.count()));
    if (result.loss) {
      report.losses.push_back(*result.loss);
      if (options.on_step) options.on_step(net.rank(), result);
    }
    const bool last = s + 1 == options.steps;
    const bool periodic =
        options.checkpoint_every > 0 && executor->steps_done() % options.checkpoint_every == 0;
    if (!options.checkpoint_dir.empty() && (last || periodic)) {
      MOTLEY_RETURN_IF_ERROR(
          executor->save_checkpoint(options.checkpoint_dir, options.checkpoint_keep));
    }
  }
  return report;
}

Result<TrainReport> train_in_process(const TrainOptions& options, const Plan& plan,
                                     const ModelSpec& model, const TokenStream& tokens) {
  const int world = RankLayout(plan).world_size();
  if (world == 0) return invalid_argument("the plan has no device groups to run");
  InProcessNetwork network(world, options.transport);
  std::mutex mu;
  std::optional<Status> first_failure;
  std::map<int, TrainReport> loss_reports;  // by rank; every replica's last stage has the sums
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Transport> transport = network.endpoint(rank);
      Result<TrainReport> result = train_rank(options, plan, model, tokens, *transport);
      std::lock_guard<std::mutex> lock(mu);
      if (!result.is_ok()) {
        if (!first_failure) {
          first_failure = result.status();
          network.shut_down(fmt::format("rank {} failed", rank));
        }
      } else if (!result->losses.empty()) {
        loss_reports.emplace(rank, std::move(result).value());
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first_failure) return *first_failure;
  return loss_reports.empty() ? TrainReport{} : loss_reports.begin()->second;
}

}  // namespace motley
