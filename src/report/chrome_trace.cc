#include "motley/report/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "motley/core/check.h"
#include "motley/core/enum_names.h"

namespace motley {
namespace {

constexpr int kComputeProcess = 1;
constexpr int kCommunicationProcess = 2;

// An event's "name", or "" when it has none (or not a string).
std::string name_of(const Json& event) {
  const auto it = event.find("name");
  return it != event.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Json metadata(const char* name, int pid, int tid, Json args) {
  Json m = {{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
  return m;
}

}  // namespace

// Indexed by TimelineKind, in declaration order.
constexpr const char* kChromeColors[] = {"rail_response",
                                         "rail_idle",
                                         "rail_load",
                                         "rail_animation",
                                         "detailed_memory_dump",
                                         "cq_build_running",
                                         "background_memory_dump",
                                         "generic_work"};
static_assert(std::size(kChromeColors) == static_cast<size_t>(TimelineKind::kOptimizerStep) + 1);

const char* chrome_color_name(TimelineKind kind) {
  return name_in(kChromeColors, kind, "generic_work");
}

Json chrome_trace_document(const Timeline& timeline, const Json& other_data,
                           const std::vector<TrackRole>& skip_roles) {
  const size_t n_tracks = timeline.tracks.size();
  std::vector<std::vector<const TimelineEvent*>> by_track(n_tracks);
  std::vector<std::vector<size_t>> index_by_track(n_tracks);
  for (size_t i = 0; i < timeline.events.size(); ++i) {
    const TimelineEvent& e = timeline.events[i];
    if (e.track < 0 || static_cast<size_t>(e.track) >= n_tracks) continue;
    by_track[e.track].push_back(&e);
    index_by_track[e.track].push_back(i);
  }

  Json events = Json::array();
  events.push_back(metadata("process_name", kComputeProcess, 0, {{"name", "compute"}}));
  events.push_back(metadata("process_sort_index", kComputeProcess, 0, {{"sort_index", 1}}));
  events.push_back(metadata("process_name", kCommunicationProcess, 0, {{"name", "communication"}}));
  events.push_back(metadata("process_sort_index", kCommunicationProcess, 0, {{"sort_index", 2}}));

  // Where each event goes: (pid, tid); pid 0 marks a dropped event.
  std::vector<std::pair<int, int>> place(timeline.events.size(), {0, 0});
  int next_tid = 1;
  for (size_t t = 0; t < n_tracks; ++t) {
    const TimelineTrack& track = timeline.tracks[t];
    if (std::find(skip_roles.begin(), skip_roles.end(), track.role) != skip_roles.end()) continue;
    const int pid = track.role == TrackRole::kCompute ? kComputeProcess : kCommunicationProcess;
    int lanes = 1;
    const std::vector<int> lane = assign_lanes(by_track[t], &lanes);
    const int first_tid = next_tid;
    for (int l = 0; l < lanes; ++l) {
      const int tid = next_tid++;
      const std::string name = l == 0 ? track.name : fmt::format("{} #{}", track.name, l + 1);
      events.push_back(metadata("thread_name", pid, tid, {{"name", name}}));
      events.push_back(metadata("thread_sort_index", pid, tid, {{"sort_index", tid}}));
    }
    for (size_t k = 0; k < lane.size(); ++k)
      place[index_by_track[t][k]] = {pid, first_tid + lane[k]};
  }

  for (size_t i = 0; i < timeline.events.size(); ++i) {
    if (place[i].first == 0) continue;
    const TimelineEvent& e = timeline.events[i];
    const double ts = e.start.value() * 1e6;
    const double dur = std::max(0.0, e.end.value() * 1e6 - ts);
    Json x = {{"name", e.name},
              {"cat", timeline_kind_label(e.kind)},
              {"ph", "X"},
              {"ts", ts},
              {"dur", dur},
              {"pid", place[i].first},
              {"tid", place[i].second},
              {"cname", chrome_color_name(e.kind)},
              {"args", e.args.is_object() ? e.args : Json::object()}};
    events.push_back(std::move(x));
  }

  Json doc = {{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ms"},
              {"otherData", other_data.is_object() ? other_data : Json::object()}};
  return doc;
}

Status check_chrome_trace(const Json& document) {
  if (!document.is_object()) return invalid_argument("expected a JSON object (a Chrome trace)");
  const auto events = document.find("traceEvents");
  if (events == document.end() || !events->is_array()) {
    return invalid_argument("expected a \"traceEvents\" array");
  }
  for (size_t i = 0; i < events->size(); ++i) {
    const Json& e = (*events)[i];
    const bool ok = e.is_object() && e.contains("pid") && e["pid"].is_number_integer() &&
                    e.contains("tid") && e["tid"].is_number_integer() && e.contains("ph") &&
                    e["ph"].is_string();
    if (!ok) {
      return invalid_argument(fmt::format(
          "traceEvents[{}]: expected an object with integer \"pid\" and \"tid\" and a string "
          "\"ph\"",
          i));
    }
  }
  return Status::ok();
}

Json merge_chrome_traces(const std::vector<Json>& documents) {
  MOTLEY_CHECK(!documents.empty(), "merge_chrome_traces: no documents");
  Json metadata_events = Json::array();
  Json other_events = Json::array();
  std::set<std::pair<std::string, int64_t>> processes;  // (name, pid) of kept process metadata
  int64_t offset = 0;  // the largest thread id of the documents merged so far
  for (const Json& doc : documents) {
    int64_t largest = 0;
    for (const Json& event : doc.at("traceEvents")) {
      Json e = event;
      const int64_t tid = e["tid"].get<int64_t>();
      const bool is_metadata = e["ph"] == "M";
      if (is_metadata && tid == 0) {
        if (processes.insert({name_of(e), e["pid"].get<int64_t>()}).second) {
          metadata_events.push_back(std::move(e));
        }
        continue;
      }
      largest = std::max(largest, tid);
      e["tid"] = tid + offset;
      if (is_metadata && name_of(e) == "thread_sort_index" && e.contains("args") &&
          e["args"].is_object() && e["args"].contains("sort_index") &&
          e["args"]["sort_index"].is_number_integer()) {
        e["args"]["sort_index"] = e["args"]["sort_index"].get<int64_t>() + offset;
      }
      (is_metadata ? metadata_events : other_events).push_back(std::move(e));
    }
    offset += largest;
  }
  for (Json& e : other_events) metadata_events.push_back(std::move(e));
  const Json& first = documents.front();
  const bool has_unit = first.contains("displayTimeUnit") && first["displayTimeUnit"].is_string();
  Json merged = {{"traceEvents", std::move(metadata_events)},
                 {"displayTimeUnit", has_unit ? first["displayTimeUnit"] : Json("ms")},
                 {"otherData", first.contains("otherData") && first["otherData"].is_object()
                                   ? first["otherData"]
                                   : Json::object()}};
  return merged;
}

std::string chrome_trace_json(const Plan& plan, const SimResult& result, const Topology& topology,
                              const TraceOptions& options) {
  const Timeline timeline = timeline_from_simulation(plan, result, topology);
  Json other = {{"model", plan.model.name},
                {"cluster", plan.cluster.name},
                {"schedule", plan.schedule},
                {"iteration_time_ms", result.iteration_time.value() * 1e3},
                {"throughput_tokens_per_s", result.throughput_tokens_per_s},
                {"bubble_fraction", result.bubble_fraction},
                {"fits_memory", result.fits_memory}};
  std::vector<TrackRole> skip;
  if (!options.link_tracks) skip.push_back(TrackRole::kLink);
  if (!options.all_reduce_track) skip.push_back(TrackRole::kCollective);
  // Names come from user files: replace invalid UTF-8 rather than throw.
  return chrome_trace_document(timeline, other, skip)
      .dump(options.pretty ? 2 : -1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace motley
