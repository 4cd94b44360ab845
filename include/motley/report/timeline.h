// Timeline: the generic form every timeline view (Chrome trace, SVG) is drawn from — named
// tracks and (track, name, kind, start, end, args) events — and its construction from a
// simulated iteration. A measured trace converts to the same form and reuses the views. It
// neither runs simulations nor writes files. Plain data and pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/core/units.h"
#include "motley/plan/plan.h"
#include "motley/sim/sim_result.h"

namespace motley {

// What a timeline box is, for colours and legends.
enum class TimelineKind {
  kForward,         // F
  kBackwardInput,   // B: input gradient
  kBackwardWeight,  // W: weight gradient
  kBackward,        // fused B and W
  kRecompute,       // R
  kTransfer,        // an activation or gradient crossing between device groups
  kAllReduce,       // data-parallel gradient all-reduce
  kOptimizerStep,   // parameter update
};
inline constexpr int kTimelineKindCount = 8;
// "F", "B (input grad)", "W (weight grad)", "B (fused)", "R (recompute)", "send",
// "all-reduce", "optimizer".
const char* timeline_kind_label(TimelineKind kind);
TimelineKind timeline_kind(SimTaskKind kind);

enum class TrackRole {
  kCompute,     // one device group's compute stream
  kCollective,  // data-parallel collectives
  kLink,        // one shared transmission resource (a topology Link)
};

struct TimelineTrack {
  std::string name;  // "device 3 (H100-SXM)", "group 2: devices 4,5 (H100-SXM)", a Link name
  TrackRole role = TrackRole::kCompute;
  // Order among the tracks of its role (for compute tracks after replica and first_stage): the
  // first device id of a compute track, the Link id.
  int sort_key = 0;
  int replica = -1;  // compute tracks: the data-parallel replica; -1 otherwise
  // Compute tracks: the lowest pipeline stage the track runs; -1 when not known.
  int first_stage = -1;
  int group = -1;  // compute tracks: the device group within the replica; -1 when not known
};

struct TimelineEvent {
  int track = 0;     // index into Timeline::tracks
  std::string name;  // "F s3 mb7" (sim_task_name for simulated tasks)
  TimelineKind kind = TimelineKind::kForward;
  Seconds start;
  Seconds end;
  Json args = Json::object();  // shown by trace viewers: stage, micro_batch, replica, ...
  std::string label;           // short text for inside a box: the micro-batch number, "s3"
  int chunk = 0;               // which of its track's stages, 0 first (views shade odd chunks)
  // Communication: the compute track that issued it (-1: none or unknown). When one transfer
  // appears on several link tracks, only its first copy is `primary`, so views that draw
  // communication under its issuer draw it once.
  int source_track = -1;
  bool primary = true;
  bool critical = false;  // on the critical path
};

struct Timeline {
  std::vector<TimelineTrack> tracks;
  std::vector<TimelineEvent> events;
  Seconds span;  // the length views draw: the iteration time (at least the last event's end)
};

// The timeline of a simulated iteration (SimResult::timeline; empty when the simulation did
// not record it, in which case only the compute tracks exist). Tracks: one per device group
// compute stream of every replica (compute tasks and optimizer steps, named "device 3
// (H100-SXM)" for one device, "group 2: devices 4-5 (H100-SXM)" for a tensor-parallel group,
// "replica 1 group 2: ..." when there are several replicas), one "all-reduce" track when any
// all-reduce ran, and one per Link that carried a transfer (a transfer appears on every Link of
// its path, in path order). Tracks are in order_tracks' order. A task whose replica or group
// the plan lacks gets a track named after them, placed by the lowest stage of its tasks.
Timeline timeline_from_simulation(const Plan& plan, const SimResult& result,
                                  const Topology& topology);

// Puts the tracks in the order views list them, renumbering events to match, so that rows read
// in pipeline order: compute tracks replica by replica, within a replica by first_stage (the
// group running stage 0 first; unknown stages last), then by sort_key; then collective tracks;
// then link tracks by sort_key. Tracks with equal keys keep their relative order.
void order_tracks(Timeline* timeline);

// Splits a track's events into lanes in which no two events overlap (an event may start where
// the previous one ended): greedy by start time, the lowest free lane first. Returns one lane
// per element of `events` (same order) and sets `*lane_count` (at least 1).
std::vector<int> assign_lanes(const std::vector<const TimelineEvent*>& events, int* lane_count);

// "0-3,6,8-9": sorted ids with consecutive runs as ranges.
std::string format_id_list(std::vector<int> ids);

}  // namespace motley
