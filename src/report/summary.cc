#include "motley/report/summary.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "motley/report/text_table.h"
#include "motley/report/timeline.h"
#include "motley/report/units_format.h"

namespace motley {
namespace {

// A table of `rows` without a header; `right[i]` aligns column i to the right.
std::string table(const std::vector<std::vector<std::string>>& rows,
                  const std::vector<bool>& right) {
  TextTable t;
  std::vector<TextTable::Align> alignment;
  for (bool r : right) alignment.push_back(r ? TextTable::Align::kRight : TextTable::Align::kLeft);
  t.set_alignment(std::move(alignment));
  for (const auto& row : rows) t.add_row(row);
  return t.to_string();
}

std::string ratio(double part, double whole) {
  return whole > 0 ? format_percent(part / whole) : std::string("-");
}

std::string memory_cell(const DeviceStats& d) {
  std::string s = fmt::format("{} / {}", format_bytes(d.peak_memory), format_bytes(d.capacity));
  if (d.capacity.value() > 0) {
    s += fmt::format(" ({})", format_percent(d.peak_memory / d.capacity, 0));
  }
  return s;
}

// "a 1.2 ms (40.0%), b ..." for the `top` largest entries.
std::string shares(std::vector<std::pair<std::string, double>> items, double total, int top) {
  // Largest first; equal shares (up to rounding noise) by name, so the order is stable.
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    const double tolerance = 1e-9 * std::max(std::fabs(a.second), std::fabs(b.second));
    if (std::fabs(a.second - b.second) > tolerance) return a.second > b.second;
    return a.first < b.first;
  });
  std::vector<std::string> parts;
  const size_t n = std::min(items.size(), static_cast<size_t>(std::max(top, 1)));
  for (size_t i = 0; i < n; ++i) {
    parts.push_back(fmt::format("{} {} ({})", items[i].first, format_time(Seconds(items[i].second)),
                                ratio(items[i].second, total)));
  }
  if (items.size() > n) parts.push_back(fmt::format("... ({} more)", items.size() - n));
  return parts.empty() ? "-" : fmt::format("{}", fmt::join(parts, ", "));
}

std::string critical_path_section(const Plan& plan, const SimResult& result,
                                  const Topology& topology, const SummaryOptions& options) {
  const std::vector<SimTask>& path = result.critical_path;
  if (path.empty()) return "Critical path: not recorded\n";
  // Reuse the timeline's track names by building a timeline of the path alone.
  SimResult only_path;
  only_path.iteration_time = result.iteration_time;
  only_path.timeline = path;
  const Timeline tl = timeline_from_simulation(plan, only_path, topology);

  double communication = 0;
  std::map<std::string, double> by_kind, by_track;
  for (const TimelineEvent& e : tl.events) {
    if (!e.primary) continue;
    const double d = std::max(0.0, (e.end - e.start).value());
    by_kind[timeline_kind_label(e.kind)] += d;
    if (tl.tracks[e.track].role == TrackRole::kCompute) {
      by_track[tl.tracks[e.track].name] += d;
    } else {
      communication += d;
    }
  }
  double waiting = std::max(0.0, path.front().start.value());
  for (size_t i = 1; i < path.size(); ++i) {
    waiting += std::max(0.0, (path[i].start - path[i - 1].end).value());
  }
  const double span = result.iteration_time.value();
  std::string out = fmt::format("Critical path: {} tasks, {} at {} to {} at {}\n", path.size(),
                                sim_task_name(path.front()), format_time(path.front().start),
                                sim_task_name(path.back()), format_time(path.back().end));
  const int top = options.critical_path_top;
  std::vector<std::pair<std::string, double>> kinds(by_kind.begin(), by_kind.end());
  std::vector<std::pair<std::string, double>> tracks(by_track.begin(), by_track.end());
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"  by kind", shares(kinds, span, kTimelineKindCount)});
  rows.push_back({"  compute by device", shares(tracks, span, top)});
  rows.push_back({"  communication", fmt::format("{} ({})", format_time(Seconds(communication)),
                                                 ratio(communication, span))});
  if (waiting > 0) {
    rows.push_back({"  not covered by tasks",
                    fmt::format("{} ({})", format_time(Seconds(waiting)), ratio(waiting, span))});
  }
  out += table(rows, {});
  return out;
}

}  // namespace

std::string simulation_summary(const Plan& plan, const SimResult& result, const Topology& topology,
                               const SummaryOptions& options) {
  const double iteration = result.iteration_time.value();
  const int n_devices = static_cast<int>(topology.devices().size());
  std::string out =
      fmt::format("Simulated iteration: {}", plan.schedule.empty() ? "plan" : plan.schedule);
  if (!plan.model.name.empty()) out += fmt::format(", {}", plan.model.name);
  if (!plan.cluster.name.empty()) out += fmt::format(" on {}", plan.cluster.name);
  out += "\n";

  std::set<size_t> group_counts;
  std::set<int64_t> micro_batches;
  for (const Replica& r : plan.replicas) {
    group_counts.insert(r.groups.size());
    micro_batches.insert(r.micro_batches);
  }
  auto joined = [](const auto& values) { return fmt::format("{}", fmt::join(values, "/")); };
  int over = 0;
  for (const DeviceStats& d : result.devices) over += d.peak_memory > d.capacity;

  std::vector<std::vector<std::string>> head;
  head.push_back({"  iteration time", format_time(result.iteration_time)});
  head.push_back(
      {"  throughput", fmt::format("{} ({} sequences x {} tokens per iteration)",
                                   format_tokens_per_second(result.throughput_tokens_per_s),
                                   plan.global_batch, plan.seq_len)});
  head.push_back(
      {"  bubble", fmt::format("{} of device time idle (idle / (iteration time x {} devices))",
                               format_percent(result.bubble_fraction), result.devices.size())});
  head.push_back(
      {"  layout",
       fmt::format("{} devices, {} {} of {} device groups, {} stages, {} "
                   "micro-batches per replica{}",
                   result.devices.size(), plan.replicas.size(),
                   plan.replicas.size() == 1 ? "replica" : "replicas", joined(group_counts),
                   plan.stages.size(), joined(micro_batches),
                   plan.context_parallel > 1
                       ? fmt::format(", in context-parallel groups of {} (every sequence split "
                                     "{} ways)",
                                     plan.context_parallel, plan.context_parallel)
                       : std::string())});
  head.push_back({"  memory", over == 0 ? std::string("fits on every device")
                                        : fmt::format("OVER CAPACITY on {} of {} devices", over,
                                                      result.devices.size())});
  std::string tasks = std::to_string(result.tasks);
  if (result.replicas_simulated > 0 &&
      result.replicas_simulated < static_cast<int64_t>(plan.replicas.size())) {
    tasks += fmt::format(" ({} of {} replicas; each stands for the identical ones)",
                         result.replicas_simulated, plan.replicas.size());
  }
  head.push_back({"  tasks simulated", tasks});
  out += table(head, {});

  if (options.device_table && !result.devices.empty()) {
    std::vector<std::vector<std::string>> rows;
    rows.push_back({"device", "type", "replica", "group", "stages", "busy", "util", "idle",
                    "exposed comm", "peak memory / capacity"});
    for (const DeviceStats& d : result.devices) {
      const std::string type =
          d.device >= 0 && d.device < n_devices ? topology.device_type(d.device).name : "?";
      std::vector<int> stages;
      if (d.replica >= 0 && d.replica < static_cast<int>(plan.replicas.size())) {
        const Replica& rep = plan.replicas[d.replica];
        for (size_t s = 0; s < rep.stage_group.size(); ++s) {
          if (rep.stage_group[s] == d.group) stages.push_back(static_cast<int>(s));
        }
      }
      std::string memory = memory_cell(d);
      if (d.peak_memory > d.capacity) memory += " OVER";
      rows.push_back({std::to_string(d.device), type, std::to_string(d.replica),
                      std::to_string(d.group), stages.empty() ? "-" : format_id_list(stages),
                      format_time(d.busy), ratio(d.busy.value(), iteration), format_time(d.idle),
                      format_time(d.exposed_communication), memory});
    }
    out += '\n';
    out += table(rows, {true, false, true, true, false, true, true, true, true, false});
  }

  if (over > 0) {
    out += "\nOver memory capacity:";
    for (const DeviceStats& d : result.devices) {
      if (!(d.peak_memory > d.capacity)) continue;
      out += fmt::format(" device {} ({});", d.device, memory_cell(d));
    }
    out.back() = '\n';
  }
  out += '\n';
  out += critical_path_section(plan, result, topology, options);
  return out;
}

}  // namespace motley
