// The fidelity report on hand-built simulations and traces, with the figures in closed form.
#include "motley/calibrate/fidelity.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

SimTask fidelity_task(SimTaskKind kind, double start, double end) {
  SimTask t;
  t.kind = kind;
  t.start = Seconds(start);
  t.end = Seconds(end);
  t.device = 0;
  return t;
}

// One device: F [0, 1], a 0.5 s gap, B [1.5, 3.5], W [3.5, 4.5], optimizer [5, 5.5]; the
// iteration ends at 6.
SimResult one_device_simulation() {
  SimResult r;
  r.iteration_time = Seconds(6);
  r.timeline = {fidelity_task(SimTaskKind::kForward, 0, 1),
                fidelity_task(SimTaskKind::kBackwardInput, 1.5, 3.5),
                fidelity_task(SimTaskKind::kBackwardWeight, 3.5, 4.5),
                fidelity_task(SimTaskKind::kOptimizerStep, 5, 5.5)};
  DeviceStats d;
  d.device = 0;
  d.busy = Seconds(4.5);
  d.idle = Seconds(1.5);
  r.devices = {d};
  return r;
}

MeasuredEvent fidelity_event(MeasuredKind kind, int64_t step, double duration) {
  MeasuredEvent e;
  e.kind = kind;
  e.step = step;
  e.duration = Seconds(duration);
  return e;
}

// Three steps of 10, 5 and 7 s; the first (the warm-up) is dropped, so figures are the means
// of steps 1 and 2 (the median of two).
MeasuredTrace one_rank_trace() {
  MeasuredRank r;
  r.step_times = {Seconds(10), Seconds(5), Seconds(7)};
  r.events = {fidelity_event(MeasuredKind::kForward, 0, 9),
              fidelity_event(MeasuredKind::kForward, 1, 1.0),
              fidelity_event(MeasuredKind::kInputWait, 1, 0.5),
              fidelity_event(MeasuredKind::kBackwardInput, 1, 2.5),
              fidelity_event(MeasuredKind::kForward, 2, 1.5),
              fidelity_event(MeasuredKind::kInputWait, 2, 1.5),
              fidelity_event(MeasuredKind::kBackwardInput, 2, 2.5)};
  return MeasuredTrace{{r}};
}

const FidelityFigure& kind_figure(const FidelityReport& report, const std::string& name) {
  for (const FidelityFigure& f : report.kinds) {
    if (f.name == name) return f;
  }
  ADD_FAILURE() << "no kind " << name;
  return report.kinds.front();
}

TEST(FidelityTest, ErrorIsRelativeToTheMeasurement) {
  EXPECT_DOUBLE_EQ(*error_pct(11, 10), 10.0);
  EXPECT_DOUBLE_EQ(*error_pct(9, 10), -10.0);
  EXPECT_FALSE(error_pct(1, 0).has_value());
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
}

TEST(FidelityTest, ComparesIterationDevicesAndKindsAfterTheWarmUp) {
  auto report = fidelity_report(FidelityOptions{1}, one_device_simulation(), one_rank_trace());
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  const FidelityReport& r = *report;
  EXPECT_EQ(r.steps_measured, 3);
  EXPECT_EQ(r.steps_used, 2);
  EXPECT_DOUBLE_EQ(r.iteration.predicted_s, 6.0);
  EXPECT_DOUBLE_EQ(r.iteration.measured_s, 6.0);  // median of 5 and 7
  EXPECT_DOUBLE_EQ(*r.iteration.error_pct, 0.0);
  EXPECT_DOUBLE_EQ(r.iteration_min_s, 5.0);
  EXPECT_DOUBLE_EQ(r.iteration_max_s, 7.0);

  ASSERT_EQ(r.devices.size(), 1u);
  const DeviceFidelity& d = r.devices[0];
  EXPECT_DOUBLE_EQ(d.step.predicted_s, 5.5);  // the optimizer's end
  EXPECT_DOUBLE_EQ(d.step.measured_s, 6.0);
  EXPECT_DOUBLE_EQ(*d.step.error_pct, -100.0 * 0.5 / 6.0);
  EXPECT_DOUBLE_EQ(d.busy.predicted_s, 4.5);
  EXPECT_DOUBLE_EQ(d.busy.measured_s, 3.75);  // median of 3.5 and 4
  EXPECT_DOUBLE_EQ(*d.busy.error_pct, 20.0);
  EXPECT_DOUBLE_EQ(d.idle.measured_s, 2.25);  // median of 5 - 3.5 and 7 - 4
  EXPECT_DOUBLE_EQ(*d.idle.error_pct, 100.0 * (1.5 - 2.25) / 2.25);
  EXPECT_DOUBLE_EQ(r.mean_abs_device_error_pct, 100.0 * 0.5 / 6.0);
  EXPECT_DOUBLE_EQ(r.max_abs_device_error_pct, 100.0 * 0.5 / 6.0);

  ASSERT_EQ(r.kinds.size(), fidelity_kind_names().size());
  EXPECT_DOUBLE_EQ(kind_figure(r, "F").predicted_s, 1.0);
  EXPECT_DOUBLE_EQ(kind_figure(r, "F").measured_s, 1.25);
  EXPECT_DOUBLE_EQ(*kind_figure(r, "F").error_pct, -20.0);
  EXPECT_DOUBLE_EQ(*kind_figure(r, "B (input grad)").error_pct, -20.0);
  EXPECT_DOUBLE_EQ(kind_figure(r, "W (weight grad)").predicted_s, 1.0);
  EXPECT_FALSE(kind_figure(r, "W (weight grad)").error_pct.has_value());  // never measured
  EXPECT_DOUBLE_EQ(kind_figure(r, "input wait").predicted_s, 0.5);
  EXPECT_DOUBLE_EQ(kind_figure(r, "input wait").measured_s, 1.0);
  EXPECT_DOUBLE_EQ(kind_figure(r, "gradient all-reduce (exposed)").predicted_s, 0.5);
  EXPECT_DOUBLE_EQ(kind_figure(r, "optimizer").predicted_s, 0.5);
  EXPECT_DOUBLE_EQ(kind_figure(r, "other").predicted_s, 0.5);
  EXPECT_DOUBLE_EQ(kind_figure(r, "other").measured_s, 1.25);  // 5 - 4 and 7 - 5.5
  EXPECT_DOUBLE_EQ(kind_figure(r, "send post").predicted_s, 0.0);

  // Each side's kinds add up to its iteration time.
  double predicted = 0;
  for (const FidelityFigure& f : r.kinds) predicted += f.predicted_s;
  EXPECT_DOUBLE_EQ(predicted, 6.0);

  const Json j = fidelity_report_to_json(r);
  EXPECT_DOUBLE_EQ(j["predicted_s"].get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(j["measured_s"].get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(j["error_pct"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["measured_max_s"].get<double>(), 7.0);
  EXPECT_EQ(j["devices"].size(), 1u);
  EXPECT_EQ(j["devices"][0]["kinds"].size(), r.kinds.size());
  // With one device, its kinds are the totals.
  for (size_t i = 0; i < r.kinds.size(); ++i) {
    EXPECT_EQ(r.devices[0].kinds[i].predicted_s, r.kinds[i].predicted_s) << r.kinds[i].name;
    EXPECT_EQ(r.devices[0].kinds[i].measured_s, r.kinds[i].measured_s) << r.kinds[i].name;
  }
  EXPECT_TRUE(j["kinds"][2]["error_pct"].is_null());
}

TEST(FidelityTest, WithoutWarmUpEveryStepCounts) {
  auto report = fidelity_report(FidelityOptions{0}, one_device_simulation(), one_rank_trace());
  ASSERT_TRUE(report.is_ok());
  EXPECT_DOUBLE_EQ(report->iteration.measured_s, 7.0);  // median of 10, 5, 7
  EXPECT_DOUBLE_EQ(kind_figure(*report, "F").measured_s, 1.5);
}

TEST(FidelityTest, SlowestRankIsTheIterationAndDevicesAddUp) {
  SimResult sim = one_device_simulation();
  SimTask other = fidelity_task(SimTaskKind::kForward, 2, 3);
  other.group = 1;
  sim.timeline.push_back(other);
  DeviceStats d1;
  d1.device = 1;
  d1.group = 1;
  d1.busy = Seconds(1);
  d1.idle = Seconds(5);
  sim.devices.push_back(d1);
  MeasuredTrace trace = one_rank_trace();
  MeasuredRank r1;
  r1.rank = 1;
  r1.group = 1;
  r1.device = 1;
  r1.step_times = {Seconds(1), Seconds(8), Seconds(2)};
  trace.ranks.push_back(r1);
  auto report = fidelity_report(FidelityOptions{1}, sim, trace);
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  EXPECT_DOUBLE_EQ(report->iteration.measured_s, 7.5);  // median of max(5, 8), max(7, 2)
  ASSERT_EQ(report->devices.size(), 2u);
  EXPECT_DOUBLE_EQ(report->devices[1].step.predicted_s, 3.0);
  // Device 1: F [2, 3] after a 2 s wait, then nothing until the iteration ends at 6.
  ASSERT_EQ(report->devices[1].kinds.size(), fidelity_kind_names().size());
  EXPECT_EQ(report->devices[1].kinds[0].name, "F");
  EXPECT_DOUBLE_EQ(report->devices[1].kinds[0].predicted_s, 1.0);
  EXPECT_DOUBLE_EQ(report->devices[1].kinds[5].predicted_s, 2.0);        // input wait
  EXPECT_DOUBLE_EQ(report->devices[1].kinds[8].predicted_s, 6.0 - 3.0);  // no optimizer step
  EXPECT_DOUBLE_EQ(report->devices[1].kinds.back().measured_s, 7.5);     // nothing measured
  EXPECT_DOUBLE_EQ(report->devices[1].step.measured_s, 5.0);
  EXPECT_DOUBLE_EQ(kind_figure(*report, "input wait").predicted_s, 0.5 + 2.0);
  EXPECT_DOUBLE_EQ(kind_figure(*report, "F").predicted_s, 2.0);
}

TEST(FidelityTest, RefusesWhatCannotBeCompared) {
  const SimResult sim = one_device_simulation();
  EXPECT_EQ(fidelity_report(FidelityOptions{3}, sim, one_rank_trace()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(fidelity_report(FidelityOptions{1}, sim, MeasuredTrace{}).status().code(),
            StatusCode::kInvalidArgument);
  SimResult no_timeline = sim;
  no_timeline.timeline.clear();
  EXPECT_EQ(fidelity_report(FidelityOptions{1}, no_timeline, one_rank_trace()).status().code(),
            StatusCode::kInvalidArgument);
  MeasuredTrace stranger = one_rank_trace();
  stranger.ranks[0].device = 7;
  const Status s = fidelity_report(FidelityOptions{1}, sim, stranger).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("device 7"), std::string::npos) << s.message();
  MeasuredTrace uneven = one_rank_trace();
  uneven.ranks.push_back(uneven.ranks[0]);
  uneven.ranks[1].rank = 1;
  uneven.ranks[1].step_times.pop_back();
  EXPECT_EQ(fidelity_report(FidelityOptions{1}, sim, uneven).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace motley
