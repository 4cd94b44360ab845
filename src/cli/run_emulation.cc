#include "run_emulation.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "cost_options.h"
#include "motley/core/dtype.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/exec/data.h"
#include "motley/exec/rank_layout.h"
#include "motley/plan/plan_workload.h"
#include "motley/sim/simulator.h"

namespace motley::cli {

Result<EmulationFactors> compute_emulation_factors(const RunInputs& inputs, bool cost_speeds,
                                                   const std::string& source) {
  const Plan& plan = inputs.plan;
  const ModelSpec& model = inputs.model;
  // Priced as `motley simulate --plan` prices the plan by default: the cluster's stack.
  MOTLEY_ASSIGN_OR_RETURN(
      const AnalyticCostOptions cost_options,
      plan_cost_options(plan, model, inputs.cluster, StackChoice{}, "the plan"));
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<AnalyticCostModel> analytic,
      AnalyticCostModel::create(model, inputs.cluster, cost_options, model.name));
  const AnalyticCostModel& cost = *analytic;
  const Topology& topology = cost.topology();
  const RankLayout layout(plan);
  std::vector<int> device;  // per rank
  for (int r = 0; r < layout.world_size(); ++r) device.push_back(layout.place_of(r).device);
  auto peak = [&](int rank) { return topology.device_type(device[rank]).peak(model.dtype); };
  int fastest = 0;
  for (int r = 0; r < layout.world_size(); ++r) {
    if (peak(r).value() > peak(fastest).value()) fastest = r;
  }
  const DeviceGroup fastest_group{{device[fastest]}};
  auto work = [&](const std::vector<int>& stages, const DeviceGroup& group) {
    double total = 0;
    for (int s : stages) {
      const Stage& st = plan.stages[s];
      const ComputeTimes t =
          stage_compute(cost, LayerRange{st.layer_begin, st.layer_end, vocab_share(plan.stages, s)},
                        group, st.recompute, st.recompute_layers);
      total += (t.forward + t.backward() + t.recompute).value();
    }
    return total;
  };
  EmulationFactors f;
  f.speeds = cost_speeds ? "cost" : "peak";
  std::vector<double> ratio;
  for (int r = 0; r < layout.world_size(); ++r) {
    ratio.push_back(cost_speeds ? work(layout.stages_of(r), DeviceGroup{{device[r]}}) /
                                      work(layout.stages_of(r), fastest_group)
                                : peak(fastest).value() / peak(r).value());
    f.device_types.push_back(topology.device_type(device[r]).name);
  }
  const double native_ratio = *std::min_element(ratio.begin(), ratio.end());
  for (double x : ratio) f.compute_slowdown.push_back(x / native_ratio);
  std::vector<int> all_stages(plan.stages.size());
  for (size_t s = 0; s < all_stages.size(); ++s) all_stages[s] = static_cast<int>(s);
  f.cluster_step = Seconds(work(all_stages, fastest_group) * native_ratio *
                           static_cast<double>(total_micro_batches(plan)));
  // The executor moves fp32; the cluster would move the model's dtype.
  f.wire_bytes_per_byte = static_cast<double>(dtype_bytes(model.dtype)) / 4.0;
  // The cost model's point-to-point time is the path's latency + bytes / (its bandwidth times
  // the stack's p2p efficiency) (CostModel::p2p_time), so two numbers price every message.
  for (int src = 0; src < layout.world_size(); ++src) {
    for (int dst = 0; dst < layout.world_size(); ++dst) {
      if (device[src] == device[dst]) continue;
      const Path& path = topology.path(device[src], device[dst]);
      f.links.push_back(EmulatedLink{src, dst, path.latency,
                                     path.bandwidth * cost.options().stack.p2p_efficiency});
    }
  }
  const std::vector<double> grid = all_reduce_grid();
  for (const std::vector<int>& ranks : emulated_rank_sets(plan)) {
    EmulatedAllReduce priced;
    priced.ranks = ranks;
    std::vector<int> devices;
    for (int r : ranks) devices.push_back(device[r]);
    std::sort(devices.begin(), devices.end());
    for (double bytes : grid) {
      priced.bytes.push_back(bytes);
      priced.seconds.push_back(cost.collective_time(Collective::kAllReduce, devices, Bytes(bytes),
                                                    CollectiveAlgorithm::kAuto)
                                   .value());
    }
    f.all_reduces.push_back(std::move(priced));
  }
  SimOptions sim_options;
  sim_options.source = source;
  MOTLEY_ASSIGN_OR_RETURN(SimResult sim, simulate(sim_options, plan, cost));
  f.simulated_iteration = sim.iteration_time;
  return f;
}

namespace {

// The factors of the run `opt` describes, or the error met computing them.
Json emulation_document(const RunOptions& opt) {
  auto factors = [&opt]() -> Result<EmulationFactors> {
    MOTLEY_ASSIGN_OR_RETURN(RunInputs inputs, load_run_inputs(opt));
    MOTLEY_RETURN_IF_ERROR(validate_run_inputs(inputs, opt));
    return compute_emulation_factors(inputs, opt.emulate_speeds == "cost", opt.plan);
  }();
  return factors.is_ok() ? emulation_factors_to_json(*factors)
                         : emulation_error_to_json(factors.status());
}

// The run options `args` give, or nullopt when they ask for help or do not parse (motley-run
// answers).
std::optional<RunOptions> parsed_run_options(const std::vector<std::string>& args) {
  Result<std::optional<RunOptions>> parsed = parse_run_arguments(args);
  if (!parsed.is_ok()) return std::nullopt;
  return parsed.value();
}

}  // namespace

std::optional<std::string> predicted_memory_handover(const std::vector<std::string>& args) {
  const std::optional<RunOptions> opt = parsed_run_options(args);
  if (!opt || opt->device == "cpu") return std::nullopt;
  auto peaks = [&opt]() -> Result<std::string> {
    MOTLEY_ASSIGN_OR_RETURN(RunInputs inputs, load_run_inputs(*opt));
    MOTLEY_RETURN_IF_ERROR(validate_run_inputs(inputs, *opt));
    MOTLEY_ASSIGN_OR_RETURN(
        const AnalyticCostOptions cost_options,
        plan_cost_options(inputs.plan, inputs.model, inputs.cluster, StackChoice{}, "the plan"));
    MOTLEY_ASSIGN_OR_RETURN(
        std::unique_ptr<AnalyticCostModel> cost,
        AnalyticCostModel::create(inputs.model, inputs.cluster, cost_options, inputs.model.name));
    SimOptions sim_options;
    sim_options.source = opt->plan;
    MOTLEY_ASSIGN_OR_RETURN(SimResult sim, simulate(sim_options, inputs.plan, *cost));
    std::vector<double> bytes(cost->topology().devices().size(), 0.0);
    for (const DeviceStats& d : sim.devices) bytes.at(d.device) = d.peak_memory.value();
    return fmt::format("{:.0f}", fmt::join(bytes, ","));
  }();
  if (!peaks.is_ok()) return std::nullopt;
  return *peaks;
}

Result<std::optional<int>> emulation_handover(const std::vector<std::string>& args) {
  const std::optional<RunOptions> parsed = parsed_run_options(args);
  if (!parsed || !parsed->emulate) return std::optional<int>();
  const RunOptions& opt = *parsed;
  const std::string text = emulation_document(opt).dump() + "\n";
  // Anonymous memory: nothing on disk to remove, and only this process (and what it execs)
  // holds it. Not close-on-exec, so that motley-run inherits it.
  const int fd = ::memfd_create("motley-emulation", 0);
  if (fd < 0) {
    return io_error(std::string("cannot create the emulation's in-memory file: ") +
                    std::strerror(errno));
  }
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return io_error(fmt::format("cannot write the emulation's in-memory file: {}", why));
    }
    written += static_cast<size_t>(n);
  }
  if (::lseek(fd, 0, SEEK_SET) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return io_error(fmt::format("cannot rewind the emulation's in-memory file: {}", why));
  }
  return std::optional<int>(fd);
}

}  // namespace motley::cli
