// The fidelity report (fidelity.h): the simulated iteration's figures from its timeline, the
// measured ones as medians over the steps after the warm-up, side by side.
#include "motley/calibrate/fidelity.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <utility>

namespace motley {
namespace {

// FidelityReport::kinds, in order: the measured kinds, then what is left of the iteration.
constexpr std::array<const char*, 11> kKindNames = {
    "F",         "B (input grad)", "W (weight grad)",
    "B (fused)", "R (recompute)",  "input wait",
    "send post", "send wait",      "gradient all-reduce (exposed)",
    "optimizer", "other"};
constexpr size_t kOther = kKindNames.size() - 1;
constexpr size_t kKinds = kKindNames.size();

size_t kind_index(MeasuredKind kind) { return static_cast<size_t>(kind); }

bool is_compute_kind(MeasuredKind kind) {
  return kind == MeasuredKind::kForward || kind == MeasuredKind::kBackwardInput ||
         kind == MeasuredKind::kBackwardWeight || kind == MeasuredKind::kBackward ||
         kind == MeasuredKind::kRecompute;
}

std::optional<MeasuredKind> compute_kind_of(SimTaskKind kind) {
  switch (kind) {
    case SimTaskKind::kForward:
      return MeasuredKind::kForward;
    case SimTaskKind::kBackwardInput:
      return MeasuredKind::kBackwardInput;
    case SimTaskKind::kBackwardWeight:
      return MeasuredKind::kBackwardWeight;
    case SimTaskKind::kBackward:
      return MeasuredKind::kBackward;
    case SimTaskKind::kRecompute:
      return MeasuredKind::kRecompute;
    default:
      return std::nullopt;
  }
}

// The predicted figures of one device group's stream: seconds per kind (kKinds, "other" last)
// and the end of its last task.
struct PredictedStream {
  std::array<double, kKinds> kinds{};
  double last_end = 0;
};

// Input waits are the gaps before each compute task (from the iteration's start); the exposed
// all-reduce is the gap between the last compute task and the optimizer step (or the
// iteration's end); sends cost the stream nothing in the simulator.
PredictedStream predicted_stream(const std::vector<const SimTask*>& tasks, double iteration) {
  PredictedStream p;
  std::vector<const SimTask*> compute;
  double optimizer_start = -1;
  for (const SimTask* t : tasks) {
    if (compute_kind_of(t->kind)) {
      compute.push_back(t);
    } else if (t->kind == SimTaskKind::kOptimizerStep) {
      p.kinds[kind_index(MeasuredKind::kOptimizer)] += (t->end - t->start).value();
      optimizer_start =
          optimizer_start < 0 ? t->start.value() : std::min(optimizer_start, t->start.value());
      p.last_end = std::max(p.last_end, t->end.value());
    }
  }
  std::sort(compute.begin(), compute.end(),
            [](const SimTask* a, const SimTask* b) { return a->start < b->start; });
  double previous_end = 0;
  for (const SimTask* t : compute) {
    p.kinds[kind_index(*compute_kind_of(t->kind))] += (t->end - t->start).value();
    p.kinds[kind_index(MeasuredKind::kInputWait)] += std::max(0.0, t->start.value() - previous_end);
    previous_end = std::max(previous_end, t->end.value());
  }
  p.last_end = std::max(p.last_end, previous_end);
  const double all_reduce_until = optimizer_start >= 0 ? optimizer_start : iteration;
  p.kinds[kind_index(MeasuredKind::kAllReduceWait)] =
      std::max(0.0, all_reduce_until - previous_end);
  double accounted = 0;
  for (size_t k = 0; k < kOther; ++k) accounted += p.kinds[k];
  p.kinds[kOther] = iteration - accounted;
  return p;
}

FidelityFigure figure(std::string name, double predicted, double measured) {
  return FidelityFigure{std::move(name), predicted, measured, error_pct(predicted, measured)};
}

Json figure_json(const FidelityFigure& f) {
  Json j{{"name", f.name}, {"predicted_s", f.predicted_s}, {"measured_s", f.measured_s}};
  j["error_pct"] = f.error_pct ? Json(*f.error_pct) : Json(nullptr);
  return j;
}

}  // namespace

const char* measured_kind_name(MeasuredKind kind) { return kKindNames[kind_index(kind)]; }

std::vector<std::string> fidelity_kind_names() {
  return std::vector<std::string>(kKindNames.begin(), kKindNames.end());
}

std::optional<double> error_pct(double predicted, double measured) {
  if (measured == 0) return std::nullopt;
  return 100.0 * (predicted - measured) / measured;
}

double median(std::vector<double> values) {
  MOTLEY_CHECK(!values.empty(), "median of no values");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

Result<FidelityReport> fidelity_report(const FidelityOptions& options, const SimResult& predicted,
                                       const MeasuredTrace& measured) {
  if (predicted.timeline.empty()) {
    return invalid_argument(
        "fidelity: the simulation has no timeline (simulate with SimOptions::record_timeline)");
  }
  if (measured.ranks.empty()) return invalid_argument("fidelity: the measured trace has no rank");
  if (options.warmup_steps < 0) {
    return invalid_argument(
        fmt::format("fidelity: warm-up steps: expected 0 or more, got {}", options.warmup_steps));
  }
  const size_t steps = measured.ranks.front().step_times.size();
  for (const MeasuredRank& r : measured.ranks) {
    if (r.step_times.size() != steps) {
      return invalid_argument(fmt::format(
          "fidelity: rank {} measured {} steps, rank {} measured {}; a trace's ranks run the same "
          "steps",
          r.rank, r.step_times.size(), measured.ranks.front().rank, steps));
    }
  }
  if (steps <= static_cast<size_t>(options.warmup_steps)) {
    return invalid_argument(fmt::format(
        "fidelity: the trace has {} step{} and {} {} dropped as warm-up: run more steps than "
        "warm-up steps",
        steps, steps == 1 ? "" : "s", options.warmup_steps,
        options.warmup_steps == 1 ? "is" : "are"));
  }
  const size_t first = static_cast<size_t>(options.warmup_steps);

  // The predicted side: per device group, its tasks; per device, its stats.
  std::map<std::pair<int, int>, std::vector<const SimTask*>> tasks_of_group;
  for (const SimTask& t : predicted.timeline) tasks_of_group[{t.replica, t.group}].push_back(&t);
  std::map<int, const DeviceStats*> stats_of_device;
  for (const DeviceStats& d : predicted.devices) stats_of_device[d.device] = &d;
  const double iteration = predicted.iteration_time.value();

  // The measured side: per step, the iteration (the slowest rank's step).
  std::vector<double> measured_iteration(steps, 0.0);
  for (const MeasuredRank& r : measured.ranks) {
    for (size_t k = 0; k < steps; ++k) {
      measured_iteration[k] = std::max(measured_iteration[k], r.step_times[k].value());
    }
  }

  FidelityReport report;
  report.steps_measured = static_cast<int>(steps);
  report.steps_used = static_cast<int>(steps - first);
  report.iteration = figure(
      "iteration", iteration,
      median(std::vector<double>(measured_iteration.begin() + first, measured_iteration.end())));

  report.iteration_min_s =
      *std::min_element(measured_iteration.begin() + first, measured_iteration.end());
  report.iteration_max_s =
      *std::max_element(measured_iteration.begin() + first, measured_iteration.end());

  std::array<double, kKinds> predicted_kinds{};
  // [step][kind], summed over ranks.
  std::vector<std::array<double, kKinds>> measured_kinds(steps);
  std::vector<const MeasuredRank*> ranks;
  for (const MeasuredRank& r : measured.ranks) ranks.push_back(&r);
  std::sort(ranks.begin(), ranks.end(),
            [](const MeasuredRank* a, const MeasuredRank* b) { return a->rank < b->rank; });
  for (const MeasuredRank* r : ranks) {
    auto stats = stats_of_device.find(r->device);
    if (stats == stats_of_device.end()) {
      return invalid_argument(fmt::format(
          "fidelity: measured rank {} stands for device {}, which the simulated plan does not "
          "have",
          r->rank, r->device));
    }
    auto group_tasks = tasks_of_group.find({r->replica, r->group});
    const PredictedStream p = predicted_stream(
        group_tasks == tasks_of_group.end() ? std::vector<const SimTask*>{} : group_tasks->second,
        iteration);
    for (size_t k = 0; k < kKinds; ++k) predicted_kinds[k] += p.kinds[k];

    std::vector<std::array<double, kKinds>> per_step(steps);
    for (const MeasuredEvent& e : r->events) {
      if (e.step < 0 || static_cast<size_t>(e.step) >= steps) continue;
      per_step[static_cast<size_t>(e.step)][kind_index(e.kind)] += e.duration.value();
    }
    std::vector<double> busy, idle;
    for (size_t k = 0; k < steps; ++k) {
      double accounted = 0, step_busy = 0;
      for (size_t i = 0; i < kOther; ++i) {
        accounted += per_step[k][i];
        if (i == kind_index(MeasuredKind::kOptimizer) ||
            is_compute_kind(static_cast<MeasuredKind>(i))) {
          step_busy += per_step[k][i];
        }
      }
      per_step[k][kOther] = measured_iteration[k] - accounted;
      for (size_t i = 0; i < kKinds; ++i) measured_kinds[k][i] += per_step[k][i];
      if (k >= first) {
        busy.push_back(step_busy);
        idle.push_back(measured_iteration[k] - step_busy);
      }
    }
    DeviceFidelity d;
    d.device = r->device;
    d.rank = r->rank;
    d.replica = r->replica;
    d.group = r->group;
    std::vector<double> own_steps;
    for (size_t k = first; k < steps; ++k) own_steps.push_back(r->step_times[k].value());
    d.step = figure("step", p.last_end, median(own_steps));
    d.busy = figure("busy", stats->second->busy.value(), median(busy));
    d.idle = figure("idle", stats->second->idle.value(), median(idle));
    for (size_t i = 0; i < kKinds; ++i) {
      std::vector<double> values;
      for (size_t k = first; k < steps; ++k) values.push_back(per_step[k][i]);
      d.kinds.push_back(figure(kKindNames[i], p.kinds[i], median(values)));
    }
    report.devices.push_back(d);
  }
  for (size_t i = 0; i < kKinds; ++i) {
    std::vector<double> values;
    for (size_t k = first; k < steps; ++k) values.push_back(measured_kinds[k][i]);
    report.kinds.push_back(figure(kKindNames[i], predicted_kinds[i], median(values)));
  }
  double sum = 0;
  for (const DeviceFidelity& d : report.devices) {
    const double e = std::abs(d.step.error_pct.value_or(0));
    sum += e;
    report.max_abs_device_error_pct = std::max(report.max_abs_device_error_pct, e);
  }
  report.mean_abs_device_error_pct = sum / static_cast<double>(report.devices.size());
  return report;
}

Json fidelity_report_to_json(const FidelityReport& report) {
  Json out = figure_json(report.iteration);
  out.erase("name");
  out["measured_min_s"] = report.iteration_min_s;
  out["measured_max_s"] = report.iteration_max_s;
  out["steps_measured"] = report.steps_measured;
  out["steps_used"] = report.steps_used;
  Json devices = Json::array();
  for (const DeviceFidelity& d : report.devices) {
    Json kinds = Json::array();
    for (const FidelityFigure& f : d.kinds) kinds.push_back(figure_json(f));
    devices.push_back(Json{{"device", d.device},
                           {"rank", d.rank},
                           {"replica", d.replica},
                           {"group", d.group},
                           {"step", figure_json(d.step)},
                           {"busy", figure_json(d.busy)},
                           {"idle", figure_json(d.idle)},
                           {"kinds", kinds}});
  }
  out["devices"] = devices;
  Json kinds = Json::array();
  for (const FidelityFigure& f : report.kinds) kinds.push_back(figure_json(f));
  out["kinds"] = kinds;
  out["mean_abs_device_error_pct"] = report.mean_abs_device_error_pct;
  out["max_abs_device_error_pct"] = report.max_abs_device_error_pct;
  return out;
}

}  // namespace motley
