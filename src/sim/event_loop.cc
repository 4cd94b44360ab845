// The event loop; docs/simulator.md, "Task graph" and "Metrics", say when a task starts and
// what data_ready means. The loop holds compute and latency events in one binary heap and asks
// the link model for transfer completions; whichever is earlier, by time and then by the order
// they were scheduled, runs next.
#include "event_loop.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace motley::sim_internal {

void EventLoop::start(int32_t id, double now) {
  TaskState& t = graph_->tasks[id];
  t.start = now;
  const int32_t x = t.transfer;
  if (x >= 0 && t.duration > 0) {
    push(now + t.duration, id, EventType::kLatencyDone);
  } else if (x >= 0) {
    begin_data(x, now);
  } else {
    push(now + t.duration, id, EventType::kFinish);
  }
}

void EventLoop::begin_data(int32_t xi, double now) {
  const Transfer& x = graph_->transfers[xi];
  if (x.bytes <= 0) {
    push(now, x.task, EventType::kFinish);
    return;
  }
  links_.start(xi, x.path, x.bytes, now);
}

void EventLoop::finish(int32_t id, double now) {
  std::vector<TaskState>& tasks = graph_->tasks;
  TaskState& t = tasks[id];
  t.end = now;
  ++finished_;
  const bool comm = t.communication;
  const double carried = comm ? t.data_ready : now;
  for (int32_t s : graph_->graph.successors(id)) {
    TaskState& st = tasks[s];
    // A communication task's data_ready counts only the compute it carries.
    if (!(comm && st.communication)) {
      st.data_ready = std::max(st.data_ready, carried);
    }
    if (--st.pending == 0) {
      st.critical_pred = id;
      start(s, now);
    }
  }
}

Status EventLoop::run(const SimOptions& options, const Topology& topology, SimGraph& graph) {
  graph_ = &graph;
  const int32_t n = static_cast<int32_t>(graph.tasks.size());
  heap_.clear();
  order_ = 0;
  finished_ = 0;
  links_.reset(topology.links(), graph.transfers.size(), &order_);
  for (int32_t i = 0; i < n; ++i) {
    if (graph.tasks[i].pending == 0) start(i, 0.0);
  }
  while (true) {
    const LinkEvent link = links_.next_occurring_event();
    const bool from_heap =
        !heap_.empty() && (link.transfer < 0 || heap_.front().time < link.time ||
                           (heap_.front().time == link.time && heap_.front().order < link.order));
    if (from_heap) {
      std::pop_heap(heap_.begin(), heap_.end(), Later());
      const Event ev = heap_.back();
      heap_.pop_back();
      if (ev.type == EventType::kFinish) {
        finish(ev.task, ev.time);
      } else {
        begin_data(graph.tasks[ev.task].transfer, ev.time);
      }
    } else if (link.transfer >= 0) {
      finish(graph.transfers[links_.update(link.time)].task, link.time);
    } else {
      break;
    }
  }
  if (finished_ == n) return Status::ok();
  for (int32_t i = 0; i < n; ++i) {
    if (graph.tasks[i].pending == 0) continue;
    const SimTask t = graph.task(i);
    const std::string where = t.replica >= 0 ? fmt::format("replicas[{}].groups[{}]", t.replica,
                                                           t.group < 0 ? 0 : t.group)
                                             : std::string("replicas");
    return infeasible(
        fmt::format("{}: field '{}': the orders deadlock: {} of {} tasks never start, the first "
                    "being {} (each device group must list an action after the actions it needs "
                    "from other groups can run)",
                    options.source, where, n - finished_, n, sim_task_name(t)));
  }
  return internal_error("the event loop ended with unfinished tasks that all had started");
}

}  // namespace motley::sim_internal
