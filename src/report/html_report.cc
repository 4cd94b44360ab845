#include "motley/report/html_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "html_assets.h"
#include "markup.h"
#include "motley/cluster/device_catalog.h"
#include "motley/report/svg_timeline.h"

namespace motley {
namespace {

// Times in the page's data: microseconds rounded to the nanosecond, short in JSON and exact
// enough for any box a screen can draw.
double micros(Seconds t) { return std::round(t.value() * 1e9) / 1e3; }

bool close(double a, double b, double tolerance) { return std::abs(a - b) <= tolerance; }

// The compute and transfer tasks of one replica, in a canonical order for comparison.
using TaskOrder = std::tuple<int, int, int, int, int>;
TaskOrder task_order(const SimTask& t) {
  return {t.group, t.stage, t.micro_batch, static_cast<int>(t.kind), t.peer_group};
}

std::vector<std::vector<SimTask>> tasks_by_replica(const Plan& plan, const SimResult& result) {
  std::vector<std::vector<SimTask>> out(plan.replicas.size());
  for (const SimTask& t : result.timeline) {
    if (t.replica >= 0 && t.replica < static_cast<int>(out.size())) out[t.replica].push_back(t);
  }
  for (std::vector<SimTask>& tasks : out) {
    std::sort(tasks.begin(), tasks.end(),
              [](const SimTask& a, const SimTask& b) { return task_order(a) < task_order(b); });
  }
  return out;
}

std::vector<std::vector<const DeviceStats*>> stats_by_replica(const Plan& plan,
                                                              const SimResult& result) {
  std::vector<std::vector<const DeviceStats*>> out(plan.replicas.size());
  for (const DeviceStats& d : result.devices) {
    if (d.replica >= 0 && d.replica < static_cast<int>(out.size())) out[d.replica].push_back(&d);
  }
  return out;
}

// Whether replica b is drawn exactly as replica a: same structure and device types, the same
// tasks at the same times, the same device statistics.
bool same_replica(const Plan& plan, const Topology& topology, int a, int b,
                  const std::vector<std::vector<SimTask>>& tasks,
                  const std::vector<std::vector<const DeviceStats*>>& stats, double tolerance) {
  const Replica& ra = plan.replicas[a];
  const Replica& rb = plan.replicas[b];
  if (ra.micro_batches != rb.micro_batches || ra.stage_group != rb.stage_group ||
      ra.groups.size() != rb.groups.size()) {
    return false;
  }
  for (size_t g = 0; g < ra.groups.size(); ++g) {
    const std::vector<int>& da = ra.groups[g].devices;
    const std::vector<int>& db = rb.groups[g].devices;
    if (da.size() != db.size() || ra.groups[g].actions != rb.groups[g].actions) return false;
    for (size_t i = 0; i < da.size(); ++i) {
      if (topology.device_type(da[i]).name != topology.device_type(db[i]).name) return false;
    }
  }
  const std::vector<SimTask>& ta = tasks[a];
  const std::vector<SimTask>& tb = tasks[b];
  if (ta.size() != tb.size()) return false;
  for (size_t i = 0; i < ta.size(); ++i) {
    if (task_order(ta[i]) != task_order(tb[i]) ||
        !close(ta[i].start.value(), tb[i].start.value(), tolerance) ||
        !close(ta[i].end.value(), tb[i].end.value(), tolerance)) {
      return false;
    }
  }
  const std::vector<const DeviceStats*>& sa = stats[a];
  const std::vector<const DeviceStats*>& sb = stats[b];
  if (sa.size() != sb.size()) return false;
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i]->group != sb[i]->group ||
        !close(sa[i]->busy.value(), sb[i]->busy.value(), tolerance) ||
        !close(sa[i]->exposed_communication.value(), sb[i]->exposed_communication.value(),
               tolerance) ||
        sa[i]->peak_memory.value() != sb[i]->peak_memory.value() ||
        sa[i]->capacity.value() != sb[i]->capacity.value()) {
      return false;
    }
  }
  return true;
}

// A JSON text that is safe inside <script>: no '<' at all (a JSON string may write it as
// \u003c), so nothing in the data can close the element or open a comment in it.
std::string script_safe(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

// "embedding, 7 x decoder_block, head": runs of one kind counted.
std::string layer_summary(const std::vector<ReportLayer>& layers, int begin, int end) {
  std::string out;
  for (int i = begin; i < end && i < static_cast<int>(layers.size());) {
    int j = i;
    while (j + 1 < end && j + 1 < static_cast<int>(layers.size()) &&
           layers[j + 1].kind == layers[i].kind) {
      ++j;
    }
    if (!out.empty()) out += ", ";
    const int n = j - i + 1;
    out += n == 1 ? layers[i].kind : fmt::format("{} \u00d7 {}", n, layers[i].kind);
    i = j + 1;
  }
  return out;
}

class DataBuilder {
 public:
  explicit DataBuilder(const HtmlReportInput& in)
      : in_(in), plan_(*in.plan), result_(*in.result), topology_(*in.topology) {}

  Json build() {
    if (in_.measured) {
      fold_.resize(plan_.replicas.size());
      for (size_t r = 0; r < fold_.size(); ++r) fold_[r] = static_cast<int>(r);
    } else {
      fold_ = fold_identical_replicas(plan_, result_, topology_);
    }
    Json out{{"format", "motley.report/1"}, {"generator", in_.generator}, {"title", title()},
             {"summary", summary()},        {"kinds", kinds()},           {"timeline", timeline()},
             {"layout", layout()},          {"devices", devices()},       {"folds", folds()}};
    if (!in_.strategies.empty()) out["strategies"] = strategies();
    if (in_.cost.dollars_per_hour > 0 || in_.cost.on_demand_dollars_per_hour > 0) {
      out["cost"] = cost();
    }
    return out;
  }

 private:
  std::string title() const {
    if (!in_.title.empty()) return in_.title;
    return fmt::format("{} on {}: {}", plan_.model.name.empty() ? "model" : plan_.model.name,
                       plan_.cluster.name.empty() ? "cluster" : plan_.cluster.name,
                       plan_.schedule.empty() ? "plan" : plan_.schedule);
  }

  std::string device_type(int device) const {
    if (device < 0 || device >= static_cast<int>(topology_.devices().size())) return "?";
    return topology_.device_type(device).name;
  }

  Json summary() const {
    std::set<int64_t> micro_batches;
    for (const Replica& r : plan_.replicas) micro_batches.insert(r.micro_batches);
    Json j{{"model", plan_.model.name},
           {"cluster", plan_.cluster.name},
           {"schedule", plan_.schedule},
           {"devices", result_.devices.size()},
           {"replicas", plan_.replicas.size()},
           {"stages", plan_.stages.size()},
           {"micro_batches", std::vector<int64_t>(micro_batches.begin(), micro_batches.end())},
           {"micro_batch_size", plan_.micro_batch_size},
           {"seq_len", plan_.seq_len},
           {"global_batch", plan_.global_batch},
           {"zero_stage", plan_.zero_stage},
           {"sequence_parallel", plan_.sequence_parallel},
           {"expert_parallel", plan_.expert_parallel},
           {"context_parallel", plan_.context_parallel},
           {"iteration_s", result_.iteration_time.value()},
           {"tokens_per_s", result_.throughput_tokens_per_s},
           {"bubble_fraction", result_.bubble_fraction},
           {"fits_memory", result_.fits_memory}};
    if (in_.lower_bound_s) {
      j["lower_bound_s"] = *in_.lower_bound_s;
      j["efficiency"] = *in_.lower_bound_s / result_.iteration_time.value();
    }
    if (in_.measured) {
      j["measured_iteration_s"] = in_.measured->iteration_s;
      j["measured_source"] = in_.measured->source;
      j["measured_step"] = in_.measured->step;
      const auto err =
          in_.measured->iteration_s > 0
              ? std::optional<double>(100 *
                                      (result_.iteration_time.value() - in_.measured->iteration_s) /
                                      in_.measured->iteration_s)
              : std::nullopt;
      j["iteration_error_pct"] = err ? Json(*err) : Json(nullptr);
    }
    return j;
  }

  static Json kinds() {
    Json list = Json::array();
    for (int k = 0; k < kTimelineKindCount; ++k) {
      const auto kind = static_cast<TimelineKind>(k);
      list.push_back(Json{{"label", timeline_kind_label(kind)}, {"color", svg_color(kind)}});
    }
    return list;
  }

  // [kind, start_us, end_us, stage, micro_batch, flags]; flags: 1 critical, 2 odd chunk,
  // 4 a transfer the row issued (drawn in the row's strip).
  static Json event_json(const TimelineEvent& e, int flags) {
    const int stage = e.args.is_object() ? e.args.value("stage", -1) : -1;
    const int mb = e.args.is_object() ? e.args.value("micro_batch", -1) : -1;
    if (e.critical) flags |= 1;
    if (e.chunk % 2 == 1) flags |= 2;
    return Json::array(
        {static_cast<int>(e.kind), micros(e.start), micros(e.end), stage, mb, flags});
  }

  Json group_stages(int replica, int group) const {
    Json stages = Json::array();
    if (replica < 0 || replica >= static_cast<int>(plan_.replicas.size())) return stages;
    const Replica& r = plan_.replicas[replica];
    for (size_t s = 0; s < r.stage_group.size(); ++s) {
      if (r.stage_group[s] == group) stages.push_back(s);
    }
    return stages;
  }

  // The timeline rows of `tl` (simulated or measured) keyed by (replica, group).
  std::map<std::pair<int, int>, Json> compute_rows(const Timeline& tl, const std::string& source,
                                                   Json* collective) const {
    std::map<std::pair<int, int>, Json> rows;
    std::vector<Json> by_track(tl.tracks.size());
    for (size_t i = 0; i < tl.tracks.size(); ++i) {
      const TimelineTrack& t = tl.tracks[i];
      if (t.role == TrackRole::kCompute) {
        by_track[i] = Json{{"source", source}, {"name", t.name},         {"replica", t.replica},
                           {"group", t.group}, {"stage", t.first_stage}, {"events", Json::array()}};
      } else if (t.role == TrackRole::kCollective && collective != nullptr &&
                 collective->is_null()) {
        *collective =
            Json{{"source", source}, {"name", t.name},          {"replica", -1},     {"group", -1},
                 {"stage", -1},      {"events", Json::array()}, {"collective", true}};
      }
    }
    for (const TimelineEvent& e : tl.events) {
      if (e.track < 0 || e.track >= static_cast<int>(tl.tracks.size())) continue;
      const TimelineTrack& t = tl.tracks[e.track];
      if (t.role == TrackRole::kCompute) {
        by_track[e.track]["events"].push_back(event_json(e, 0));
      } else if (t.role == TrackRole::kCollective && collective != nullptr &&
                 t.name == (*collective)["name"].get<std::string>()) {
        (*collective)["events"].push_back(event_json(e, 0));
      } else if (e.kind == TimelineKind::kTransfer && e.primary && e.source_track >= 0 &&
                 e.source_track < static_cast<int>(tl.tracks.size()) &&
                 tl.tracks[e.source_track].role == TrackRole::kCompute) {
        by_track[e.source_track]["events"].push_back(event_json(e, 4));
      }
    }
    for (size_t i = 0; i < tl.tracks.size(); ++i) {
      if (tl.tracks[i].role != TrackRole::kCompute) continue;
      rows[{tl.tracks[i].replica, tl.tracks[i].group}] = std::move(by_track[i]);
    }
    return rows;
  }

  // Rows in the simulated timeline's order (replica, then the group's first stage), each
  // measured row right after its simulated one; rows of folded replicas left out.
  Json timeline() const {
    const Timeline sim = timeline_from_simulation(plan_, result_, topology_);
    Json collective;
    std::map<std::pair<int, int>, Json> simulated = compute_rows(sim, "simulated", &collective);
    std::map<std::pair<int, int>, Json> measured;
    std::map<std::pair<int, int>, const ReportMeasured::DeviceError*> errors;
    Seconds span = sim.span;
    if (in_.measured) {
      measured = compute_rows(in_.measured->timeline, "measured", nullptr);
      span = std::max(span, in_.measured->timeline.span);
      for (const ReportMeasured::DeviceError& d : in_.measured->devices) {
        errors[{d.replica, d.group}] = &d;
      }
    }
    Json rows = Json::array();
    std::set<std::pair<int, int>> placed;
    for (const TimelineTrack& t : sim.tracks) {
      if (t.role != TrackRole::kCompute) continue;
      const std::pair<int, int> key{t.replica, t.group};
      if (t.replica >= 0 && t.replica < static_cast<int>(fold_.size()) &&
          fold_[t.replica] != t.replica) {
        continue;
      }
      Json row = simulated[key];
      decorate(&row);
      rows.push_back(row);
      placed.insert(key);
      auto m = measured.find(key);
      if (m != measured.end()) {
        Json mrow = m->second;
        decorate(&mrow);
        auto e = errors.find(key);
        if (e != errors.end()) {
          mrow["predicted_s"] = e->second->predicted_s;
          mrow["measured_s"] = e->second->measured_s;
          mrow["error_pct"] = e->second->error_pct ? Json(*e->second->error_pct) : Json(nullptr);
        }
        rows.push_back(mrow);
      }
    }
    // Measured ranks the simulation has no row for (a trace of another plan is refused before
    // this; kept so that nothing measured is silently dropped).
    for (auto& [key, row] : measured) {
      if (placed.count(key) == 0) {
        decorate(&row);
        rows.push_back(row);
      }
    }
    if (!collective.is_null()) rows.push_back(collective);
    return Json{{"span_us", micros(span)},
                {"iteration_us", micros(result_.iteration_time)},
                {"rows", rows}};
  }

  // The row's devices, type, stages and the replicas folded into it.
  void decorate(Json* row) const {
    const int r = (*row)["replica"].get<int>();
    const int g = (*row)["group"].get<int>();
    if (r < 0 || r >= static_cast<int>(plan_.replicas.size()) || g < 0 ||
        g >= static_cast<int>(plan_.replicas[r].groups.size())) {
      return;
    }
    const std::vector<int>& devices = plan_.replicas[r].groups[g].devices;
    (*row)["devices"] = format_id_list(devices);
    (*row)["type"] = devices.empty() ? "?" : device_type(devices.front());
    (*row)["tp"] = devices.size();
    (*row)["stages"] = group_stages(r, g);
    (*row)["folded"] = folded_into(r);
  }

  // The replicas drawn as `r` (r itself first).
  std::string folded_into(int r) const {
    std::vector<int> ids;
    for (size_t i = 0; i < fold_.size(); ++i) {
      if (fold_[i] == r) ids.push_back(static_cast<int>(i));
    }
    return format_id_list(ids);
  }

  int fold_count(int r) const {
    return static_cast<int>(std::count(fold_.begin(), fold_.end(), r));
  }

  Json link_json(int from_device, int to_device) const {
    const Path& p = topology_.path(from_device, to_device);
    std::vector<std::string> kinds;
    for (int id : p.links) {
      const std::string k = link_kind_name(topology_.links()[id].kind);
      if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
    }
    if (p.host_staged && std::find(kinds.begin(), kinds.end(), "host-staged") == kinds.end()) {
      kinds.push_back("host-staged");
    }
    const double bw = p.bandwidth.value();
    return Json{{"from_device", from_device},
                {"to_device", to_device},
                {"bandwidth_Bps", std::isfinite(bw) ? Json(bw) : Json(nullptr)},
                {"latency_s", p.latency.value()},
                {"kinds", kinds},
                {"crosses_nodes", p.crosses_nodes},
                {"measured", p.measured}};
  }

  // Per drawn replica: its stages in pipeline order and the links between consecutive stages
  // held by different groups; the slowest of those links marked.
  Json layout() const {
    // Forward time per stage and replica: the sum of its F boxes over its micro-batches.
    std::map<std::pair<int, int>, double> forward;
    for (const SimTask& t : result_.timeline) {
      if (t.kind == SimTaskKind::kForward)
        forward[{t.replica, t.stage}] += (t.end - t.start).value();
    }
    Json replicas = Json::array();
    double slowest = std::numeric_limits<double>::infinity();
    for (size_t r = 0; r < plan_.replicas.size(); ++r) {
      if (fold_[r] != static_cast<int>(r)) continue;
      const Replica& rep = plan_.replicas[r];
      Json stages = Json::array();
      Json links = Json::array();
      for (size_t s = 0; s < rep.stage_group.size() && s < plan_.stages.size(); ++s) {
        const int g = rep.stage_group[s];
        const std::vector<int>& devices = rep.groups[g].devices;
        const Stage& st = plan_.stages[s];
        double params = 0;
        bool head = false;
        bool embedding = false;
        for (int l = st.layer_begin; l < st.layer_end && l < static_cast<int>(in_.layers.size());
             ++l) {
          params += in_.layers[l].parameters;
          head = head || in_.layers[l].kind == "head";
          embedding = embedding || in_.layers[l].kind == "embedding";
        }
        const auto f = forward.find({static_cast<int>(r), static_cast<int>(s)});
        Json stage{{"stage", s},
                   {"group", g},
                   {"devices", format_id_list(devices)},
                   {"type", devices.empty() ? "?" : device_type(devices.front())},
                   {"tp", devices.size()},
                   {"layer_begin", st.layer_begin},
                   {"layer_end", st.layer_end},
                   {"layers", layer_summary(in_.layers, st.layer_begin, st.layer_end)},
                   {"parameters", params},
                   {"head", head},
                   {"embedding", embedding},
                   {"recompute", recompute_policy_name(st.recompute)},
                   {"recompute_layers", st.recompute_layers},
                   {"forward_per_micro_batch_s",
                    f == forward.end() || rep.micro_batches <= 0
                        ? 0.0
                        : f->second / static_cast<double>(rep.micro_batches)}};
        stages.push_back(stage);
        if (s + 1 < rep.stage_group.size() && rep.stage_group[s + 1] != g) {
          const std::vector<int>& next = rep.groups[rep.stage_group[s + 1]].devices;
          if (!devices.empty() && !next.empty()) {
            Json link = link_json(devices.front(), next.front());
            link["from_stage"] = s;
            link["to_stage"] = s + 1;
            if (link["bandwidth_Bps"].is_number()) {
              slowest = std::min(slowest, link["bandwidth_Bps"].get<double>());
            }
            links.push_back(link);
          }
        }
      }
      replicas.push_back(Json{{"replica", r},
                              {"folded", folded_into(static_cast<int>(r))},
                              {"count", fold_count(static_cast<int>(r))},
                              {"micro_batches", rep.micro_batches},
                              {"stages", stages},
                              {"links", links}});
    }
    for (Json& rep : replicas) {
      for (Json& link : rep["links"]) {
        link["slowest"] = link["bandwidth_Bps"].is_number() &&
                          link["bandwidth_Bps"].get<double>() <= slowest * (1 + 1e-12);
      }
    }
    Json out{{"replicas", replicas}};
    // The data-parallel all-reduce's narrowest path: replica 0's first device of each group to
    // the same device position in every other replica.
    if (plan_.replicas.size() > 1) {
      double narrowest = std::numeric_limits<double>::infinity();
      Json worst;
      const Replica& first = plan_.replicas.front();
      for (size_t r = 1; r < plan_.replicas.size(); ++r) {
        const Replica& other = plan_.replicas[r];
        for (size_t g = 0; g < first.groups.size() && g < other.groups.size(); ++g) {
          if (first.groups[g].devices.empty() || other.groups[g].devices.empty()) continue;
          const int a = first.groups[g].devices.front();
          const int b = other.groups[g].devices.front();
          const double bw = topology_.path(a, b).bandwidth.value();
          if (worst.is_null() || bw < narrowest) {
            narrowest = bw;
            worst = link_json(a, b);
          }
        }
      }
      if (!worst.is_null()) out["data_parallel_link"] = worst;
    }
    return out;
  }

  Json devices() const {
    Json list = Json::array();
    const double iteration = result_.iteration_time.value();
    for (const DeviceStats& d : result_.devices) {
      if (d.replica >= 0 && d.replica < static_cast<int>(fold_.size()) &&
          fold_[d.replica] != d.replica) {
        continue;
      }
      list.push_back(Json{{"device", d.device},
                          {"type", device_type(d.device)},
                          {"replica", d.replica},
                          {"group", d.group},
                          {"stages", group_stages(d.replica, d.group)},
                          {"folded", d.replica >= 0 ? folded_into(d.replica) : std::string()},
                          {"busy_s", d.busy.value()},
                          {"idle_s", d.idle.value()},
                          {"exposed_communication_s", d.exposed_communication.value()},
                          {"utilization", iteration > 0 ? d.busy.value() / iteration : 0.0},
                          {"peak_memory_bytes", d.peak_memory.value()},
                          {"capacity_bytes", d.capacity.value()}});
    }
    return list;
  }

  Json folds() const {
    Json list = Json::array();
    for (size_t r = 0; r < fold_.size(); ++r) {
      if (fold_[r] == static_cast<int>(r) && fold_count(static_cast<int>(r)) > 1) {
        list.push_back(Json{{"replica", r},
                            {"replicas", folded_into(static_cast<int>(r))},
                            {"count", fold_count(static_cast<int>(r))}});
      }
    }
    return list;
  }

  Json strategies() const {
    Json list = Json::array();
    for (const ReportStrategy& s : in_.strategies) {
      Json j{{"name", s.name}, {"feasible", s.feasible}, {"detail", s.detail}};
      if (s.not_run) j["not_run"] = true;
      if (s.feasible) {
        j["iteration_s"] = s.iteration_s;
        j["tokens_per_s"] = s.tokens_per_s;
        j["bubble_fraction"] = s.bubble_fraction;
        j["peak_memory_ratio"] = s.peak_memory_ratio;
        j["dollars_per_million_tokens"] = s.dollars_per_million_tokens;
        j["on_demand_dollars_per_million_tokens"] = s.on_demand_dollars_per_million_tokens;
        j["goodput"] = s.goodput;
        if (in_.lower_bound_s) j["efficiency"] = *in_.lower_bound_s / s.iteration_s;
      }
      list.push_back(j);
    }
    return list;
  }

  Json cost() const {
    const ReportCost& c = in_.cost;
    Json j{{"dollars_per_hour", c.dollars_per_hour},
           {"on_demand_dollars_per_hour", c.on_demand_dollars_per_hour},
           {"dollars_per_million_tokens", c.dollars_per_million_tokens},
           {"on_demand_dollars_per_million_tokens", c.on_demand_dollars_per_million_tokens},
           {"interruptible", c.interruptible}};
    if (c.interruptible) {
      j["goodput"] = c.goodput;
      j["mean_hours_between_interruptions"] = c.mean_hours_between_interruptions;
      j["checkpoint_interval_s"] = c.checkpoint_interval_s;
    }
    return j;
  }

  const HtmlReportInput& in_;
  const Plan& plan_;
  const SimResult& result_;
  const Topology& topology_;
  std::vector<int> fold_;
};

}  // namespace

std::vector<int> fold_identical_replicas(const Plan& plan, const SimResult& result,
                                         const Topology& topology) {
  const int n = static_cast<int>(plan.replicas.size());
  std::vector<int> fold(n);
  const std::vector<std::vector<SimTask>> tasks = tasks_by_replica(plan, result);
  const std::vector<std::vector<const DeviceStats*>> stats = stats_by_replica(plan, result);
  const double tolerance = 1e-9 * std::max(result.iteration_time.value(), 1e-12);
  std::vector<int> drawn;  // replicas drawn so far
  for (int r = 0; r < n; ++r) {
    fold[r] = r;
    for (int d : drawn) {
      if (same_replica(plan, topology, d, r, tasks, stats, tolerance)) {
        fold[r] = d;
        break;
      }
    }
    if (fold[r] == r) drawn.push_back(r);
  }
  return fold;
}

Json html_report_data(const HtmlReportInput& input) { return DataBuilder(input).build(); }

std::string html_report(const HtmlReportInput& input) {
  const Json data = html_report_data(input);
  const std::string title = data["title"].get<std::string>();
  std::string page;
  page += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  page += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  // Nothing may load from anywhere: the page is one file that works offline.
  page +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n";
  page += "<title>" + internal::escape_markup(title) + "</title>\n";
  page += "<style>\n" + std::string(internal::kHtmlReportStyle) + "</style>\n</head>\n<body>\n";
  page += "<h1 id=\"title\">" + internal::escape_markup(title) + "</h1>\n";
  page +=
      "<noscript><p>This report draws its figures with JavaScript; the data is in the "
      "motley-data element of this file.</p></noscript>\n";
  page += "<div id=\"report\"></div>\n";
  page += "<script type=\"application/json\" id=\"motley-data\">" + script_safe(data.dump()) +
          "</script>\n";
  page += "<script>\n" + std::string(internal::kHtmlReportScript) + "</script>\n";
  page += "</body>\n</html>\n";
  return page;
}

}  // namespace motley
