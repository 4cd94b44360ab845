#include "motley/report/timeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <utility>

#include "motley/core/enum_names.h"

namespace motley {
namespace {

// Identifies a task of one iteration: kind, replica, group, stage, micro-batch, peer group.
using TaskKey = std::tuple<int, int, int, int, int, int>;
TaskKey key_of(const SimTask& t) {
  return {static_cast<int>(t.kind), t.replica, t.group, t.stage, t.micro_batch, t.peer_group};
}

int role_order(TrackRole role) {
  switch (role) {
    case TrackRole::kCompute:
      return 0;
    case TrackRole::kCollective:
      return 1;
    case TrackRole::kLink:
      return 2;
  }
  return 3;
}

class Builder {
 public:
  Builder(const Plan& plan, const SimResult& result, const Topology& topology)
      : plan_(plan), result_(result), topology_(topology) {}

  Timeline build() {
    add_compute_tracks();
    for (const SimTask& t : result_.critical_path) critical_.insert(key_of(t));
    for (const SimTask& t : result_.timeline) add_task(t);
    out_.span = result_.iteration_time;
    for (const TimelineEvent& e : out_.events) out_.span = std::max(out_.span, e.end);
    order_tracks(&out_);
    return std::move(out_);
  }

 private:
  std::string device_type_name(int device) const {
    if (device < 0 || device >= static_cast<int>(topology_.devices().size())) return "?";
    return topology_.device_type(device).name;
  }

  void add_compute_tracks() {
    const bool several = plan_.replicas.size() > 1;
    for (size_t r = 0; r < plan_.replicas.size(); ++r) {
      const Replica& rep = plan_.replicas[r];
      for (size_t g = 0; g < rep.groups.size(); ++g) {
        const std::vector<int>& devices = rep.groups[g].devices;
        TimelineTrack track;
        track.role = TrackRole::kCompute;
        track.replica = static_cast<int>(r);
        track.group = static_cast<int>(g);
        track.sort_key = devices.empty() ? std::numeric_limits<int>::max()
                                         : *std::min_element(devices.begin(), devices.end());
        const std::string type = devices.empty() ? "?" : device_type_name(devices.front());
        if (devices.size() == 1) {
          track.name = fmt::format("device {} ({})", devices.front(), type);
        } else {
          track.name = fmt::format("{}group {}: devices {} ({})",
                                   several ? fmt::format("replica {} ", r) : std::string(), g,
                                   format_id_list(devices), type);
        }
        // Chunks: the group's stages in increasing order.
        std::vector<int>& stages = group_stages_[{static_cast<int>(r), static_cast<int>(g)}];
        for (size_t s = 0; s < rep.stage_group.size(); ++s) {
          if (rep.stage_group[s] == static_cast<int>(g)) stages.push_back(static_cast<int>(s));
        }
        track.first_stage = stages.empty() ? -1 : stages.front();
        compute_track_[{static_cast<int>(r), static_cast<int>(g)}] = new_track(std::move(track));
      }
    }
  }

  int new_track(TimelineTrack track) {
    out_.tracks.push_back(std::move(track));
    return static_cast<int>(out_.tracks.size()) - 1;
  }

  int compute_track(const SimTask& t) {
    auto it = compute_track_.find({t.replica, t.group});
    if (it != compute_track_.end()) return it->second;
    TimelineTrack track;
    track.name = fmt::format("replica {} group {}", t.replica, t.group);
    track.sort_key = t.device >= 0 ? t.device : std::numeric_limits<int>::max();
    track.replica = t.replica;
    track.group = t.group;
    const int id = new_track(std::move(track));
    compute_track_[{t.replica, t.group}] = id;
    unplanned_.insert(id);
    return id;
  }

  // A track the plan does not describe learns its first stage from its tasks.
  void note_stage(int track, int stage) {
    if (stage < 0 || unplanned_.count(track) == 0) return;
    int& first = out_.tracks[track].first_stage;
    if (first < 0 || stage < first) first = stage;
  }

  int named_track(std::map<int, int>& tracks, int key, TrackRole role, const std::string& name) {
    auto it = tracks.find(key);
    if (it != tracks.end()) return it->second;
    TimelineTrack track;
    track.name = name;
    track.role = role;
    track.sort_key = key;
    const int id = new_track(std::move(track));
    tracks[key] = id;
    return id;
  }

  int chunk_of(const SimTask& t) const {
    auto it = group_stages_.find({t.replica, t.group});
    if (it == group_stages_.end()) return 0;
    const auto pos = std::find(it->second.begin(), it->second.end(), t.stage);
    return pos == it->second.end() ? 0 : static_cast<int>(pos - it->second.begin());
  }

  void add_task(const SimTask& t) {
    TimelineEvent e;
    e.name = sim_task_name(t);
    e.kind = timeline_kind(t.kind);
    e.start = t.start;
    e.end = t.end;
    e.critical = critical_.count(key_of(t)) > 0;
    switch (t.kind) {
      case SimTaskKind::kForward:
      case SimTaskKind::kBackwardInput:
      case SimTaskKind::kBackwardWeight:
      case SimTaskKind::kBackward:
      case SimTaskKind::kRecompute:
        e.track = compute_track(t);
        e.args = {{"stage", t.stage},
                  {"micro_batch", t.micro_batch},
                  {"replica", t.replica},
                  {"group", t.group}};
        e.label = std::to_string(t.micro_batch);
        e.chunk = chunk_of(t);
        note_stage(e.track, t.stage);
        break;
      case SimTaskKind::kOptimizerStep:
        e.track = compute_track(t);
        e.args = {{"replica", t.replica}, {"group", t.group}};
        e.label = "opt";
        break;
      case SimTaskKind::kGradientAllReduce:
        e.track = named_track(collective_track_, 0, TrackRole::kCollective, "all-reduce");
        e.args = {{"stage", t.stage}};
        e.label = fmt::format("s{}", t.stage);
        break;
      case SimTaskKind::kTiedGradientSum:
        e.track = named_track(collective_track_, 0, TrackRole::kCollective, "all-reduce");
        e.args = {{"replica", t.replica}, {"group", t.group}, {"peer_group", t.peer_group}};
        e.label = "tied";
        break;
      case SimTaskKind::kSendActivation:
      case SimTaskKind::kSendGradient:
        add_transfer(t, std::move(e));
        return;
    }
    if (e.critical) e.args["critical_path"] = true;
    out_.events.push_back(std::move(e));
  }

  void add_transfer(const SimTask& t, TimelineEvent e) {
    e.args = {{"stage", t.stage},
              {"micro_batch", t.micro_batch},
              {"replica", t.replica},
              {"payload", t.kind == SimTaskKind::kSendActivation ? "activation" : "gradient"},
              {"from_group", t.group},
              {"to_group", t.peer_group},
              {"from_device", t.device},
              {"to_device", t.peer_device}};
    if (e.critical) e.args["critical_path"] = true;
    e.label = std::to_string(t.micro_batch);
    auto source = compute_track_.find({t.replica, t.group});
    e.source_track = source == compute_track_.end() ? -1 : source->second;
    const int n = static_cast<int>(topology_.devices().size());
    const bool devices_ok =
        t.device >= 0 && t.device < n && t.peer_device >= 0 && t.peer_device < n;
    const PathLinks links =
        devices_ok ? topology_.path(t.device, t.peer_device).links : PathLinks{};
    const int n_links = static_cast<int>(topology_.links().size());
    bool first = true;
    for (int link : links) {
      if (link < 0 || link >= n_links) continue;
      TimelineEvent copy = e;
      copy.track = named_track(link_track_, link, TrackRole::kLink, topology_.links()[link].name);
      copy.args["link"] = topology_.links()[link].name;
      copy.primary = first;
      first = false;
      out_.events.push_back(std::move(copy));
    }
    if (first) {  // no link to draw it on: a copy inside one device or unknown devices
      e.track = named_track(link_track_, std::numeric_limits<int>::max(), TrackRole::kLink,
                            "transfers without a link");
      out_.events.push_back(std::move(e));
    }
  }

  const Plan& plan_;
  const SimResult& result_;
  const Topology& topology_;
  Timeline out_;
  std::map<std::pair<int, int>, int> compute_track_;  // (replica, group) -> track
  std::map<std::pair<int, int>, std::vector<int>> group_stages_;
  std::map<int, int> collective_track_;
  std::map<int, int> link_track_;  // Link id -> track
  std::set<int> unplanned_;        // compute tracks of groups the plan lacks
  std::set<TaskKey> critical_;
};

}  // namespace

// Indexed by TimelineKind, in declaration order.
constexpr const char* kTimelineKindLabels[] = {"F",          "B (input grad)", "W (weight grad)",
                                               "B (fused)",  "R (recompute)",  "send",
                                               "all-reduce", "optimizer"};
static_assert(std::size(kTimelineKindLabels) ==
              static_cast<size_t>(TimelineKind::kOptimizerStep) + 1);

const char* timeline_kind_label(TimelineKind kind) { return name_in(kTimelineKindLabels, kind); }

TimelineKind timeline_kind(SimTaskKind kind) {
  switch (kind) {
    case SimTaskKind::kForward:
      return TimelineKind::kForward;
    case SimTaskKind::kBackwardInput:
      return TimelineKind::kBackwardInput;
    case SimTaskKind::kBackwardWeight:
      return TimelineKind::kBackwardWeight;
    case SimTaskKind::kBackward:
      return TimelineKind::kBackward;
    case SimTaskKind::kRecompute:
      return TimelineKind::kRecompute;
    case SimTaskKind::kSendActivation:
    case SimTaskKind::kSendGradient:
      return TimelineKind::kTransfer;
    case SimTaskKind::kGradientAllReduce:
    case SimTaskKind::kTiedGradientSum:
      return TimelineKind::kAllReduce;
    case SimTaskKind::kOptimizerStep:
      return TimelineKind::kOptimizerStep;
  }
  return TimelineKind::kForward;
}

Timeline timeline_from_simulation(const Plan& plan, const SimResult& result,
                                  const Topology& topology) {
  return Builder(plan, result, topology).build();
}

void order_tracks(Timeline* timeline) {
  std::vector<TimelineTrack>& tracks = timeline->tracks;
  auto key = [](const TimelineTrack& t) {
    if (t.role != TrackRole::kCompute) {
      return std::make_tuple(role_order(t.role), 0, 0, t.sort_key);
    }
    const int stage = t.first_stage >= 0 ? t.first_stage : std::numeric_limits<int>::max();
    return std::make_tuple(role_order(t.role), t.replica, stage, t.sort_key);
  };
  std::vector<int> order(tracks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return key(tracks[a]) < key(tracks[b]); });
  std::vector<int> new_index(order.size());
  std::vector<TimelineTrack> sorted;
  sorted.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    new_index[order[i]] = static_cast<int>(i);
    sorted.push_back(std::move(tracks[order[i]]));
  }
  tracks = std::move(sorted);
  const int n = static_cast<int>(tracks.size());
  for (TimelineEvent& e : timeline->events) {
    if (e.track >= 0 && e.track < n) e.track = new_index[e.track];
    if (e.source_track >= 0 && e.source_track < n) e.source_track = new_index[e.source_track];
  }
}

std::vector<int> assign_lanes(const std::vector<const TimelineEvent*>& events, int* lane_count) {
  std::vector<int> order(events.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return events[a]->start < events[b]->start; });
  std::vector<int> lane(events.size(), 0);
  std::vector<double> lane_end;  // when each lane is free again
  for (int i : order) {
    const double start = events[i]->start.value();
    const double end = std::max(start, events[i]->end.value());
    size_t l = 0;
    while (l < lane_end.size() && lane_end[l] > start) ++l;
    if (l == lane_end.size()) lane_end.push_back(end);
    lane_end[l] = end;
    lane[i] = static_cast<int>(l);
  }
  *lane_count = std::max<int>(1, static_cast<int>(lane_end.size()));
  return lane;
}

std::string format_id_list(std::vector<int> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ",";
    if (j - i >= 2) {
      out += fmt::format("{}-{}", ids[i], ids[j]);
    } else {
      out += fmt::format("{}", fmt::join(ids.begin() + i, ids.begin() + j + 1, ","));
    }
    i = j + 1;
  }
  return out;
}

}  // namespace motley
