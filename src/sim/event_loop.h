// sim: the event loop — runs a SimGraph in simulated time. A task starts when its last
// predecessor ends; compute, all-reduce and optimizer tasks then take their duration, a
// transfer its path's latency and then its bytes under the link model (link_model.h). Events
// of equal time run in the order they were scheduled, so results are deterministic. It prices
// nothing and summarises nothing. Thread-compatible: one EventLoop per Simulator.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "link_model.h"
#include "motley/core/status.h"
#include "motley/plan/plan.h"
#include "motley/sim/simulator.h"
#include "sim_graph.h"

namespace motley::sim_internal {

class EventLoop {
 public:
  // Runs every task of `graph` from time 0, filling in each task's start, end, data_ready and
  // critical_pred. `topology` is the one the graph's paths belong to.
  // Errors: infeasible when some tasks never start (the orders deadlock), naming the first.
  Status run(const SimOptions& options, const Topology& topology, SimGraph& graph);

 private:
  enum class EventType : uint8_t { kFinish, kLatencyDone };
  // 24 bytes: the heap moves these around on every push and pop.
  struct Event {
    double time;
    uint64_t order;  // the scheduling order, shared with the link model's completions
    int32_t task;
    EventType type;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time > b.time || (a.time == b.time && a.order > b.order);
    }
  };

  void push(double time, int32_t task, EventType type) {
    heap_.push_back(Event{time, order_++, task, type});
    std::push_heap(heap_.begin(), heap_.end(), Later());
  }
  void start(int32_t id, double now);
  void begin_data(int32_t transfer, double now);
  void finish(int32_t id, double now);

  SimGraph* graph_ = nullptr;
  LinkModel links_;
  std::vector<Event> heap_;
  uint64_t order_ = 0;
  int32_t finished_ = 0;
};

}  // namespace motley::sim_internal
