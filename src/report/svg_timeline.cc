#include "motley/report/svg_timeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>

#include "markup.h"
#include "motley/core/enum_names.h"
#include "motley/report/units_format.h"

namespace motley {
namespace {

using internal::escape_markup;

// Text is measured, not rendered, so widths are estimates: a monospace glyph is 0.6 em in
// every common monospace face; proportional faces average below 0.6 em on mixed text.
constexpr double kMonoCharWidth = 0.6;
constexpr double kSansCharWidth = 0.6;
constexpr const char* kMonoFont = "DejaVu Sans Mono,Menlo,Consolas,monospace";
constexpr const char* kSansFont = "DejaVu Sans,Helvetica,Arial,sans-serif";
constexpr double kMargin = 16;
constexpr const char* kIdleColor = "#e8e8e8";  // row background: idle time
constexpr const char* kTextColor = "#222222";
// The transfer yellow is light; an outline keeps thin transfers visible on the idle grey.
constexpr const char* kTransferOutline = "#8c8200";

// Coordinates with at most two decimals and no trailing zeros: small files, exact enough.
std::string num(double v) {
  std::string s = fmt::format("{:.2f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  if (s == "-0") s = "0";
  return s;
}

// UTF-8 characters (not bytes), for width estimates.
int text_length(const std::string& s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Indexed by TimelineKind, in declaration order.
constexpr const char* kKindClasses[] = {"F", "B", "W", "BW", "R", "send", "allreduce", "opt"};
static_assert(std::size(kKindClasses) == static_cast<size_t>(TimelineKind::kOptimizerStep) + 1);

const char* kind_class(TimelineKind kind) { return name_in(kKindClasses, kind, "x"); }

struct Rgb {
  int r = 0, g = 0, b = 0;
};

Rgb parse_rgb(const char* hex) {
  unsigned r = 0, g = 0, b = 0;
  std::sscanf(hex + 1, "%02x%02x%02x", &r, &g, &b);
  return Rgb{static_cast<int>(r), static_cast<int>(g), static_cast<int>(b)};
}

std::string to_hex(Rgb c) { return fmt::format("#{:02x}{:02x}{:02x}", c.r, c.g, c.b); }

// The kind's colour, darkened by a quarter for odd chunks.
Rgb fill_of(TimelineKind kind, int chunk, bool shade) {
  Rgb c = parse_rgb(svg_color(kind));
  if (shade && chunk % 2 == 1) {
    c.r = c.r * 3 / 4;
    c.g = c.g * 3 / 4;
    c.b = c.b * 3 / 4;
  }
  return c;
}

// Dark text on light fills, white on dark ones (relative luminance, sRGB weights).
const char* text_color_on(Rgb c) {
  const double y = 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b;
  return y > 140 ? "#000000" : "#ffffff";
}

struct Row {
  int track = 0;
  std::string label;
  double y = 0;
  double height = 0;
  int lanes = 1;
  std::vector<int> lane;  // per event of the row, parallel to `events`
  std::vector<const TimelineEvent*> events;
};

class Renderer {
 public:
  Renderer(const Timeline& timeline, const std::string& title, const std::string& subtitle,
           const SvgOptions& options)
      : tl_(timeline), title_(title), subtitle_(subtitle), opt_(options) {}

  std::string render() {
    collect_rows();
    layout();
    out_ += fmt::format(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
        "viewBox=\"0 0 {0} {1}\" font-family=\"{2}\">\n",
        num(width_), num(height_), kSansFont);
    out_ += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
                        num(width_), num(height_));
    draw_header();
    draw_rows();
    draw_events();
    draw_axis();
    out_ += "</svg>\n";
    return std::move(out_);
  }

 private:
  void collect_rows() {
    std::vector<std::vector<const TimelineEvent*>> by_track(tl_.tracks.size());
    for (const TimelineEvent& e : tl_.events) {
      if (e.track < 0 || static_cast<size_t>(e.track) >= tl_.tracks.size()) continue;
      by_track[e.track].push_back(&e);
      if (opt_.send_strips && e.kind == TimelineKind::kTransfer && e.primary &&
          e.source_track >= 0) {
        strip_events_.push_back(&e);
      }
    }
    for (size_t t = 0; t < tl_.tracks.size(); ++t) {
      const TimelineTrack& track = tl_.tracks[t];
      if (track.role == TrackRole::kCollective && !opt_.all_reduce_row) continue;
      if (track.role == TrackRole::kLink && !opt_.link_rows) continue;
      Row row;
      row.track = static_cast<int>(t);
      row.label = track.name;
      row.events = by_track[t];
      row.lane = assign_lanes(row.events, &row.lanes);
      if (track.role == TrackRole::kCompute) row.lanes = 1;  // a stream: overlaps are drawn over
      if (track.role == TrackRole::kCompute) row.lane.assign(row.events.size(), 0);
      rows_.push_back(std::move(row));
      for (const TimelineEvent* e : rows_.back().events) kinds_.insert(e->kind);
      if (track.role == TrackRole::kCompute) {
        for (const TimelineEvent* e : rows_.back().events) any_odd_chunk_ |= e->chunk % 2 == 1;
      }
    }
    if (!strip_events_.empty()) kinds_.insert(TimelineKind::kTransfer);
  }

  void layout() {
    width_ = std::max(400.0, opt_.width_px);
    const int n = std::max<int>(1, static_cast<int>(rows_.size()));
    const double lo = std::max(4.0, opt_.min_row_height_px);
    const double hi = std::max(lo, opt_.max_row_height_px);
    row_h_ = std::clamp(std::floor(opt_.rows_height_px / n), lo, hi);
    label_font_ = std::clamp(std::floor(row_h_ * 0.7), 7.0, 12.0);
    int longest = 0;
    for (const Row& r : rows_) longest = std::max(longest, text_length(r.label));
    max_label_chars_ =
        std::max(4, static_cast<int>((width_ * 0.35) / (kMonoCharWidth * label_font_)));
    longest = std::min(longest, max_label_chars_);
    const double label_w = longest * kMonoCharWidth * label_font_ + 10;
    plot_x0_ = kMargin + label_w;
    plot_w_ = std::max(100.0, width_ - plot_x0_ - kMargin - 16);
    const double span = std::max(tl_.span.value(), 1e-12);
    scale_ = plot_w_ / span;

    // Header: title, subtitle, legend (wrapped to the width).
    y_ = kMargin;
    title_y_ = y_ + 16;
    y_ = title_y_;
    if (!subtitle_.empty()) {
      subtitle_y_ = y_ + 20;
      y_ = subtitle_y_;
    }
    legend_y_ = y_ + 12;
    legend_lines_ = layout_legend(false);
    y_ = legend_y_ + legend_lines_ * 18 + 8;

    // Rows: compute rows, a gap between replicas, then the all-reduce and link rows.
    plot_y0_ = y_;
    int prev_replica = -2;
    TrackRole prev_role = TrackRole::kCompute;
    for (size_t i = 0; i < rows_.size(); ++i) {
      const TimelineTrack& track = tl_.tracks[rows_[i].track];
      if (i > 0) {
        if (track.role != prev_role) {
          y_ += 10;
        } else if (track.role == TrackRole::kCompute && track.replica != prev_replica) {
          y_ += 6;
        }
      }
      rows_[i].y = y_;
      // Rows of overlapping transfers or collectives grow with their lanes (up to four rows'
      // height) so that each lane stays a few pixels tall.
      rows_[i].height = track.role == TrackRole::kCompute
                            ? row_h_
                            : std::clamp(rows_[i].lanes * 4.0, row_h_, 4 * row_h_);
      y_ += rows_[i].height;
      prev_replica = track.replica;
      prev_role = track.role;
    }
    plot_y1_ = y_;
    axis_y_ = plot_y1_ + 4;
    height_ = axis_y_ + 44 + kMargin;
  }

  struct LegendItem {
    std::string swatch;  // fill
    std::string stroke;  // outline ("" none)
    std::string label;
  };

  std::vector<LegendItem> legend_items() const {
    std::vector<LegendItem> items;
    for (int k = 0; k < kTimelineKindCount; ++k) {
      const auto kind = static_cast<TimelineKind>(k);
      if (kinds_.count(kind)) {
        items.push_back({svg_color(kind), kind == TimelineKind::kTransfer ? kTransferOutline : "",
                         timeline_kind_label(kind)});
      }
    }
    items.push_back({kIdleColor, "", "idle"});
    if (opt_.shade_chunks && any_odd_chunk_) {
      items.push_back(
          {to_hex(fill_of(TimelineKind::kForward, 1, true)), "", "darker: 2nd, 4th, ... chunk"});
    }
    if (opt_.mark_critical_path) items.push_back({"#ffffff", "#000000", "critical path"});
    return items;
  }

  // Lays the legend out in lines; draws it when `draw`. Returns the number of lines.
  int layout_legend(bool draw) {
    const double font = 12;
    double x = kMargin;
    int line = 0;
    for (const LegendItem& item : legend_items()) {
      const double w = 14 + 5 + text_length(item.label) * kSansCharWidth * font + 16;
      if (x + w > width_ - kMargin && x > kMargin) {
        x = kMargin;
        ++line;
      }
      if (draw) {
        const double y = legend_y_ + line * 18;
        out_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"12\" fill=\"{}\"{}/>",
                            num(x), num(y), item.swatch,
                            item.stroke.empty()
                                ? std::string(" stroke=\"#999999\" stroke-width=\"0.5\"")
                                : fmt::format(" stroke=\"{}\" stroke-width=\"1\"", item.stroke));
        out_ += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\" fill=\"{}\">{}</text>\n",
                            num(x + 19), num(y + 10.5), num(font), kTextColor,
                            escape_markup(item.label));
      }
      x += w;
    }
    return line + 1;
  }

  void draw_header() {
    out_ += "<g id=\"header\">\n";
    out_ += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"16\" font-weight=\"bold\" fill=\"{}\">{}</text>\n",
        num(kMargin), num(title_y_), kTextColor, escape_markup(title_));
    if (!subtitle_.empty()) {
      out_ += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"{}\">{}</text>\n",
                          num(kMargin), num(subtitle_y_), kTextColor, escape_markup(subtitle_));
    }
    out_ += "</g>\n<g id=\"legend\">\n";
    layout_legend(true);
    out_ += "</g>\n";
  }

  std::string label_text(const std::string& label) const {
    if (text_length(label) <= max_label_chars_) return label;
    // Keep the end: device ids and link directions are at the end of the names.
    std::string out = "...";
    int keep = max_label_chars_ - 3;
    size_t pos = label.size();
    while (keep > 0 && pos > 0) {
      --pos;
      while (pos > 0 && (static_cast<unsigned char>(label[pos]) & 0xC0) == 0x80) --pos;
      --keep;
    }
    return out + label.substr(pos);
  }

  void draw_rows() {
    out_ += "<g id=\"rows\">\n";
    for (const Row& r : rows_) {
      out_ += fmt::format(
          "<rect class=\"row\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n",
          num(plot_x0_), num(r.y), num(plot_w_), num(r.height), kIdleColor);
      out_ += fmt::format(
          "<text class=\"label\" x=\"{}\" y=\"{}\" font-size=\"{}\" font-family=\"{}\" "
          "text-anchor=\"end\" fill=\"{}\">{}</text>\n",
          num(plot_x0_ - 6), num(r.y + r.height / 2 + 0.35 * label_font_), num(label_font_),
          kMonoFont, kTextColor, escape_markup(label_text(r.label)));
    }
    // Grid lines at the axis ticks, under the boxes: visible in idle time only.
    ticks_ = time_axis_ticks(tl_.span, std::max(2, static_cast<int>(plot_w_ / 90)));
    for (double t : ticks_.ticks_ms) {
      const double x = plot_x0_ + t * 1e-3 * scale_;
      out_ += fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#ffffff\" "
          "stroke-width=\"1\"/>\n",
          num(x), num(plot_y0_), num(plot_y1_));
    }
    out_ += "</g>\n";
  }

  // One box (and its number when it fits) in [y, y + h).
  void box(const TimelineEvent& e, double y, double h, bool with_text) {
    const double x = plot_x0_ + e.start.value() * scale_;
    const double w = std::max(1.0, (e.end - e.start).value() * scale_);
    const Rgb fill = fill_of(e.kind, e.chunk, opt_.shade_chunks);
    std::string attrs;
    if (opt_.mark_critical_path && e.critical) {
      attrs = " stroke=\"#000000\" stroke-width=\"1.2\"";
    } else if (e.kind == TimelineKind::kTransfer) {
      attrs = fmt::format(" stroke=\"{}\" stroke-width=\"0.6\"", kTransferOutline);
    } else if (w >= 4 && h >= 4) {
      attrs = " stroke=\"#ffffff\" stroke-width=\"0.6\"";  // separates equal neighbours
    }
    out_ += fmt::format(
        "<rect class=\"task {}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
        "fill=\"{}\"{}",
        kind_class(e.kind), num(x), num(y), num(w), num(h), to_hex(fill), attrs);
    if (opt_.tooltips) {
      out_ += fmt::format("><title>{}: {} - {} ms</title></rect>\n", escape_markup(e.name),
                          format_milliseconds(e.start, 3), format_milliseconds(e.end, 3));
    } else {
      out_ += "/>\n";
    }
    if (!with_text || e.label.empty()) return;
    // The largest font up to 11 px that fits the box's height and, with two pixels of fill
    // either side, its width; below 7 px the number is left out.
    const double fit_w = (w - 4) / (text_length(e.label) * kMonoCharWidth);
    const double font = std::floor(std::min({11.0, h - 3, fit_w}));
    if (font < 7) return;
    out_ += fmt::format(
        "<text class=\"mb\" x=\"{}\" y=\"{}\" font-size=\"{}\" font-family=\"{}\" "
        "text-anchor=\"middle\" fill=\"{}\">{}</text>\n",
        num(x + w / 2), num(y + h / 2 + 0.35 * font), num(font), kMonoFont, text_color_on(fill),
        escape_markup(e.label));
  }

  void draw_events() {
    out_ += "<g id=\"tasks\">\n";
    std::vector<const Row*> row_of_track(tl_.tracks.size(), nullptr);
    for (const Row& r : rows_) row_of_track[r.track] = &r;
    const double strip_h = strip_events_.empty() ? 0 : std::max(2.0, std::round(row_h_ * 0.2));
    for (const Row& r : rows_) {
      const bool compute = tl_.tracks[r.track].role == TrackRole::kCompute;
      const double inner = r.height - 2;  // one pixel of background above and below
      for (size_t i = 0; i < r.events.size(); ++i) {
        if (compute) {
          box(*r.events[i], r.y + 1, inner - (strip_h > 0 ? strip_h + 1 : 0), true);
        } else {
          const double lane_h = inner / r.lanes;
          box(*r.events[i], r.y + 1 + r.lane[i] * lane_h, lane_h, true);
        }
      }
    }
    // Transfers under the compute row that issued them.
    for (const TimelineEvent* e : strip_events_) {
      const Row* r = row_of_track[e->source_track];
      if (r == nullptr) continue;
      box(*e, r->y + r->height - 1 - strip_h, strip_h, false);
    }
    out_ += "</g>\n";
  }

  void draw_axis() {
    out_ += "<g id=\"axis\">\n";
    out_ += fmt::format(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"1\"/>\n",
        num(plot_x0_), num(axis_y_), num(plot_x0_ + plot_w_), num(axis_y_), kTextColor);
    for (double t : ticks_.ticks_ms) {
      const double x = plot_x0_ + t * 1e-3 * scale_;
      out_ += fmt::format(
          "<line class=\"tick\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"{3}\" "
          "stroke-width=\"1\"/>\n",
          num(x), num(axis_y_), num(axis_y_ + 5), kTextColor);
      out_ += fmt::format(
          "<text class=\"tick-label\" x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" "
          "fill=\"{}\">{}</text>\n",
          num(x), num(axis_y_ + 17), kTextColor,
          format_milliseconds(Seconds(t * 1e-3), ticks_.decimals));
    }
    out_ += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\" fill=\"{}\">time "
        "(ms)</text>\n",
        num(plot_x0_ + plot_w_ / 2), num(axis_y_ + 34), kTextColor);
    out_ += "</g>\n";
  }

  const Timeline& tl_;
  const std::string& title_;
  const std::string& subtitle_;
  const SvgOptions& opt_;
  std::string out_;
  std::vector<Row> rows_;
  std::vector<const TimelineEvent*> strip_events_;
  std::set<TimelineKind> kinds_;
  bool any_odd_chunk_ = false;
  AxisTicks ticks_;
  double width_ = 0, height_ = 0, y_ = 0;
  double title_y_ = 0, subtitle_y_ = 0, legend_y_ = 0;
  int legend_lines_ = 1;
  double row_h_ = 0, label_font_ = 0;
  int max_label_chars_ = 0;
  double plot_x0_ = 0, plot_w_ = 0, plot_y0_ = 0, plot_y1_ = 0, axis_y_ = 0, scale_ = 0;
};

}  // namespace

// Indexed by TimelineKind, in declaration order.
constexpr const char* kSvgColors[] = {"#56b4e9", "#e69f00", "#009e73", "#d55e00",
                                      "#cc79a7", "#f0e442", "#0072b2", "#666666"};
static_assert(std::size(kSvgColors) == static_cast<size_t>(TimelineKind::kOptimizerStep) + 1);

const char* svg_color(TimelineKind kind) { return name_in(kSvgColors, kind, "#000000"); }

AxisTicks time_axis_ticks(Seconds span, int max_ticks) {
  AxisTicks out;
  const double span_ms = span.value() * 1e3;
  max_ticks = std::max(1, max_ticks);
  if (!(span_ms > 0) || !std::isfinite(span_ms)) {
    out.step_ms = 1;
    out.ticks_ms = {0};
    return out;
  }
  // The smallest 1-2-5 step with span / step <= max_ticks.
  int exponent = static_cast<int>(std::floor(std::log10(span_ms / max_ticks)));
  for (;; ++exponent) {
    bool found = false;
    for (int mantissa : {1, 2, 5}) {
      const double step = mantissa * std::pow(10.0, exponent);
      // A small relative tolerance keeps exact multiples (100 ms / 10 ticks) on the 1-2-5 grid.
      if (span_ms / step <= max_ticks * (1 + 1e-9)) {
        out.step_ms = step;
        out.decimals = std::max(0, -exponent);
        found = true;
        break;
      }
    }
    if (found) break;
  }
  const int count = static_cast<int>(std::floor(span_ms / out.step_ms * (1 + 1e-9)));
  for (int i = 0; i <= count; ++i) out.ticks_ms.push_back(i * out.step_ms);
  return out;
}

std::string render_svg_timeline(const Timeline& timeline, const std::string& title,
                                const std::string& subtitle, const SvgOptions& options) {
  return Renderer(timeline, title, subtitle, options).render();
}

std::string svg_timeline(const Plan& plan, const SimResult& result, const Topology& topology,
                         const SvgOptions& options) {
  const Timeline timeline = timeline_from_simulation(plan, result, topology);
  std::string title = options.title;
  if (title.empty()) {
    title = fmt::format("Simulated iteration: {}", plan.schedule.empty() ? "plan" : plan.schedule);
    if (!plan.model.name.empty()) title += fmt::format(", {}", plan.model.name);
    if (!plan.cluster.name.empty()) title += fmt::format(" on {}", plan.cluster.name);
  }
  std::set<size_t> group_counts;
  std::set<int64_t> micro_batches;
  for (const Replica& r : plan.replicas) {
    group_counts.insert(r.groups.size());
    micro_batches.insert(r.micro_batches);
  }
  const auto joined = [](const auto& values) { return fmt::format("{}", fmt::join(values, "/")); };
  std::string subtitle = fmt::format(
      "iteration {0} \u00b7 {1} \u00b7 bubble {2} \u00b7 {3} devices \u00b7 {4} {5} of {6} "
      "groups \u00b7 {7} micro-batches per replica",
      format_time(result.iteration_time), format_tokens_per_second(result.throughput_tokens_per_s),
      format_percent(result.bubble_fraction), result.devices.size(), plan.replicas.size(),
      plan.replicas.size() == 1 ? "replica" : "replicas", joined(group_counts),
      joined(micro_batches));
  if (!result.fits_memory) subtitle += " \u00b7 OVER MEMORY CAPACITY";
  return render_svg_timeline(timeline, title, subtitle, options);
}

}  // namespace motley
