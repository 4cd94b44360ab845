// Chrome trace: a Timeline as Trace Event Format JSON (the "JSON Object Format" that
// chrome://tracing and Perfetto open): metadata naming and ordering the tracks, one complete
// event per timeline event, reserved Chrome colour names per kind; and the merge of such
// documents into one. Layout and colours are documented in docs/report-formats.md. Reads and
// writes no files (the caller does, atomically).
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/plan/plan.h"
#include "motley/report/timeline.h"
#include "motley/sim/sim_result.h"

namespace motley {

struct TraceOptions {
  // Tracks for the links that carried transfers (each transfer on every link of its path).
  bool link_tracks = true;
  // Track for the data-parallel all-reduces.
  bool all_reduce_track = true;
  // Indent the JSON (2 spaces) instead of writing it on one line.
  bool pretty = false;
};

// The reserved trace-viewer colour name ("cname") of each kind: F "rail_response",
// B (input grad) "rail_idle", W "rail_load", fused B "rail_animation", R
// "detailed_memory_dump", send "cq_build_running", all-reduce "background_memory_dump",
// optimizer "generic_work".
const char* chrome_color_name(TimelineKind kind);

// The trace document of any Timeline (simulated or measured): {"traceEvents": [...],
// "displayTimeUnit": "ms", "otherData": other_data}. Process 1 "compute" holds the compute
// tracks, process 2 "communication" the collective and link tracks; a track whose events
// overlap is split into lanes (assign_lanes), lane k > 0 named "<track> #<k+1>". Thread ids
// number the lanes 1, 2, ... in Timeline::tracks order and thread_sort_index repeats them, so
// viewers keep that order. Each event: ph "X", ts = start and dur = end - start in
// microseconds, name, cat (the kind's label), cname, args. Tracks in `skip_roles` are dropped.
Json chrome_trace_document(const Timeline& timeline, const Json& other_data,
                           const std::vector<TrackRole>& skip_roles = {});

// OK when `document` has the shape merge_chrome_traces reads (chrome_trace_document's): an
// object whose "traceEvents" is an array of objects, each with integer "pid" and "tid" and a
// string "ph"; otherwise invalid_argument saying what is wrong (the caller adds the source).
Status check_chrome_trace(const Json& document);

// One document with every event of `documents`, each laid out by chrome_trace_document on one
// shared time axis (e.g. the per-rank traces of a distributed run): metadata first, then the
// other events in document order. Process metadata (tid 0) is kept once per (name, pid), the
// first document's; each document's thread ids (and their thread_sort_index values) are shifted
// past the largest thread id of the documents before it, so every thread keeps its name and
// relative order and no two documents share one. displayTimeUnit and otherData are the first
// document's. REQUIRES: check_chrome_trace(d) is OK for every d; documents is not empty.
Json merge_chrome_traces(const std::vector<Json>& documents);

// The simulated iteration as trace JSON text: timeline_from_simulation, then
// chrome_trace_document with otherData {model, cluster, schedule, iteration_time_ms,
// throughput_tokens_per_s, bubble_fraction, fits_memory}.
std::string chrome_trace_json(const Plan& plan, const SimResult& result, const Topology& topology,
                              const TraceOptions& options = {});

}  // namespace motley
