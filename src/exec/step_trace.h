// StepTrace: the measured events of one step on one rank (TraceEvent, executor.h), timed by the
// rank's steady clock from the step's start, for the pieces of a step to record into. It does
// not decide what is recorded. Internal to exec/. Not thread-safe: one rank's thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "motley/exec/executor.h"

namespace motley::internal {

class StepTrace {
 public:
  using Clock = std::chrono::steady_clock;

  // `enabled` false (ExecOptions::record_trace unset) keeps no events.
  explicit StepTrace(bool enabled) : enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  // Starts a step: drops its events and sets the clock's zero to now.
  void begin() {
    events_.clear();
    start_ = Clock::now();
  }
  Seconds since_start(Clock::time_point t) const {
    return Seconds(std::chrono::duration<double>(t - start_).count());
  }
  // Records an event from `start` to now whose inputs were there at `ready` (not before start).
  void record(TraceEvent::Kind kind, std::optional<Action> action, std::string name,
              Clock::time_point start, Clock::time_point ready) {
    if (!enabled_) return;
    const auto end = Clock::now();
    TraceEvent e;
    e.kind = kind;
    e.action = action;
    e.name = std::move(name);
    e.start = since_start(start);
    e.ready = since_start(std::max(start, ready));
    e.end = since_start(end);
    events_.push_back(std::move(e));
  }
  void record(TraceEvent::Kind kind, std::string name, Clock::time_point start) {
    record(kind, std::nullopt, std::move(name), start, start);
  }
  void add(TraceEvent e) {
    if (enabled_) events_.push_back(std::move(e));
  }
  // The step's events in recording order; leaves none.
  std::vector<TraceEvent> take() { return std::exchange(events_, {}); }

 private:
  bool enabled_;
  Clock::time_point start_ = Clock::now();
  std::vector<TraceEvent> events_;
};

}  // namespace motley::internal
