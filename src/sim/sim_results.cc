// Result assembly; docs/simulator.md, "Metrics", defines each figure.
#include "sim_results.h"

#include <algorithm>
#include <vector>

#include "motley/plan/dependencies.h"

namespace motley::sim_internal {

SimResult assemble_results(const SimOptions& options, const Plan& plan, const Topology& topology,
                           const SimGraph& graph) {
  SimResult out;
  const std::vector<TaskState>& tasks = graph.tasks;
  const int32_t n = static_cast<int32_t>(tasks.size());
  const size_t stages = plan.stages.size();
  out.tasks = n;
  out.replicas_simulated = static_cast<int64_t>(graph.folding.members.size());
  int32_t last = -1;
  double iteration = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (last < 0 || tasks[i].end >= iteration) {
      iteration = tasks[i].end;
      last = i;
    }
  }
  out.iteration_time = Seconds(iteration);
  if (iteration > 0) {
    out.throughput_tokens_per_s =
        static_cast<double>(plan.global_batch) * static_cast<double>(plan.seq_len) / iteration;
  }

  // Per simulated (replica, group) stream: busy and exposed communication of its compute tasks
  // and optimizer step (the tasks that are neither messages nor all-reduces, which span
  // replicas).
  const Plan& sim = *graph.simulated;
  std::vector<size_t> first_stream(sim.replicas.size() + 1, 0);
  for (size_t r = 0; r < sim.replicas.size(); ++r) {
    first_stream[r + 1] = first_stream[r] + sim.replicas[r].groups.size();
  }
  std::vector<double> busy(first_stream.back(), 0), exposed(first_stream.back(), 0);
  for (int32_t i = 0; i < n; ++i) {
    const TaskNode& node = graph.graph.node(i);
    // (A tied sum is the only other task of a replica with a peer group.)
    if (is_message(node.kind) || node.replica < 0 || node.peer_group >= 0) continue;
    const TaskState& t = tasks[i];
    const size_t k = first_stream[node.replica] + node.group;
    busy[k] += t.duration;
    exposed[k] += std::max(0.0, t.start - t.data_ready);
  }

  // Memory follows each simulated group's order (dependencies.h: what allocates and frees).
  struct GroupMemory {
    double fixed = 0, peak = 0;
    int64_t peak_in_flight = 0;
  };
  std::vector<GroupMemory> memory(first_stream.back());
  for (size_t ri = 0; ri < sim.replicas.size(); ++ri) {
    const Replica& rep = sim.replicas[ri];
    for (size_t gi = 0; gi < rep.groups.size(); ++gi) {
      GroupMemory& gm = memory[first_stream[ri] + gi];
      double live = 0;
      int64_t in_flight = 0;
      for (size_t s = 0; s < stages; ++s) {
        if (rep.stage_group[s] != static_cast<int>(gi)) continue;
        StageMemory m = graph.stage_memory[ri * stages + s];
        m.activations = Bytes(0);
        gm.fixed += m.total().value();
      }
      const RecomputedMicroBatches recomputed(sim.stages, rep.groups[gi].actions);
      for (const Action& a : rep.groups[gi].actions) {
        const StageMemory& m = graph.stage_memory[ri * stages + a.stage];
        const double change = recomputed.change(a, m.activations_per_micro_batch.value(),
                                                m.recomputed_activations_per_micro_batch.value());
        live += change;
        if (allocates_activations(a.kind)) ++in_flight;
        if (frees_activations(a.kind)) --in_flight;
        if ((allocates_activations(a.kind) || change > 0) &&
            (live > gm.peak || (live == gm.peak && in_flight > gm.peak_in_flight))) {
          gm.peak = live;
          gm.peak_in_flight = in_flight;
        }
      }
    }
  }

  // Every replica of the plan, each with the figures of the replica simulated for it.
  double idle_total = 0;
  for (size_t ri = 0; ri < plan.replicas.size(); ++ri) {
    const int r = static_cast<int>(ri);
    const Replica& rep = plan.replicas[r];
    const size_t simulated_as = static_cast<size_t>(graph.folding.simulated_as[r]);
    for (size_t gi = 0; gi < rep.groups.size(); ++gi) {
      const size_t k = first_stream[simulated_as] + gi;
      const GroupMemory& gm = memory[k];
      for (int device : rep.groups[gi].devices) {
        DeviceStats d;
        d.device = device;
        d.replica = r;
        d.group = static_cast<int>(gi);
        d.busy = Seconds(busy[k]);
        d.idle = Seconds(iteration - busy[k]);
        d.exposed_communication = Seconds(exposed[k]);
        d.fixed_memory = Bytes(gm.fixed);
        d.peak_memory = Bytes(gm.fixed + gm.peak);
        d.peak_in_flight = gm.peak_in_flight;
        d.capacity = topology.device_type(device).memory;
        out.fits_memory = out.fits_memory && d.peak_memory <= d.capacity;
        idle_total += d.idle.value();
        out.devices.push_back(d);
      }
    }
  }
  if (iteration > 0 && !out.devices.empty()) {
    out.bubble_fraction = idle_total / (iteration * static_cast<double>(out.devices.size()));
  }

  for (int32_t t = last; t >= 0; t = tasks[t].critical_pred) {
    out.critical_path.push_back(graph.task(t));
  }
  std::reverse(out.critical_path.begin(), out.critical_path.end());
  if (options.record_timeline) {
    // A folded replica's tasks once for each replica it stands for, on that replica's devices.
    out.timeline.reserve(n);
    for (int32_t i = 0; i < n; ++i) {
      const SimTask t = graph.task(i);
      if (t.replica < 0) {
        out.timeline.push_back(t);
        continue;
      }
      for (int member : graph.folding.members[graph.folding.simulated_as[t.replica]]) {
        SimTask copy = t;
        const Replica& rep = plan.replicas[member];
        copy.replica = member;
        if (copy.device >= 0) copy.device = rep.groups[t.group].devices[0];
        if (copy.peer_device >= 0) copy.peer_device = rep.groups[t.peer_group].devices[0];
        out.timeline.push_back(copy);
      }
    }
  }
  return out;
}

}  // namespace motley::sim_internal
