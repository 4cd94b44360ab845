// SVG timeline: a Timeline drawn as a self-contained SVG image (no external fonts, styles or
// scripts) — one row per compute track, an optional all-reduce row and link rows, boxes
// coloured by kind with a legend, micro-batch numbers where they fit, a time axis in ms.
// Layout rules are documented in docs/report-formats.md. Writes no files.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/plan/plan.h"
#include "motley/report/timeline.h"
#include "motley/sim/sim_result.h"

namespace motley {

struct SvgOptions {
  double width_px = 1600;  // the whole image
  // Rows share this height; each row gets between min_row_height_px and max_row_height_px, so
  // a long list of devices makes the image taller rather than the rows unreadable.
  double rows_height_px = 960;
  double min_row_height_px = 10;
  double max_row_height_px = 30;
  bool all_reduce_row = true;
  bool link_rows = false;    // one row per link that carried transfers
  bool send_strips = true;   // each compute row shows the transfers it issued in a thin strip
  bool shade_chunks = true;  // odd chunks (a group's second, fourth, ... stage) drawn darker
  bool tooltips = true;      // <title> on every box (hover text in browsers)
  bool mark_critical_path = false;  // outline the boxes on the critical path
  std::string title;  // empty: "Simulated iteration: <schedule>, <model> on <cluster>"
};

// The fill colour ("#rrggbb") of each kind, from the Okabe-Ito palette, which stays
// distinguishable under the common colour-vision deficiencies: F #56B4E9 sky blue,
// B (input grad) #E69F00 orange, W #009E73 bluish green, fused B #D55E00 vermillion,
// R #CC79A7 reddish purple, send #F0E442 yellow, all-reduce #0072B2 blue, optimizer #666666.
const char* svg_color(TimelineKind kind);

// Tick positions of a time axis over [0, span] with at most `max_ticks` intervals: the step is
// the smallest of 1, 2 or 5 times a power of ten (in ms) that needs no more, and the ticks are
// 0, step, 2 step, ... up to the span. Steps in milliseconds.
struct AxisTicks {
  double step_ms = 0;
  std::vector<double> ticks_ms;
  int decimals = 0;  // digits after the point that the labels need for this step
};
AxisTicks time_axis_ticks(Seconds span, int max_ticks);

// Any Timeline as an SVG document; `subtitle` is the line under the title.
std::string render_svg_timeline(const Timeline& timeline, const std::string& title,
                                const std::string& subtitle, const SvgOptions& options);

// The simulated iteration: timeline_from_simulation, titled with the schedule, model and
// cluster, and subtitled with iteration time, throughput, bubble fraction and the counts of
// devices, replicas and micro-batches.
std::string svg_timeline(const Plan& plan, const SimResult& result, const Topology& topology,
                         const SvgOptions& options = {});

}  // namespace motley
