// Identical replicas; docs/simulator.md, "Identical replicas", says why these conditions make
// the folded run's times equal to the whole run's.
#include "replica_folding.h"

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>

#include "motley/plan/task_graph.h"

namespace motley::sim_internal {
namespace {

// Everything a replica's simulation reads, with its links renamed in order of first use, so
// that two replicas on different links with the same sharing pattern compare equal.
struct Signature {
  std::vector<int64_t> ints;
  std::vector<double> reals;
  bool operator<(const Signature& o) const {
    return std::tie(ints, reals) < std::tie(o.ints, o.reals);
  }
};

class Folder {
 public:
  Folder(const Plan& plan, const CostModel& cost, std::span<const StageTimes> stage_times,
         std::span<const StageMemory> stage_memory,
         const std::function<double(int, int, int, int, bool)>& wire_bytes)
      : plan_(plan),
        topology_(cost.topology()),
        stage_times_(stage_times),
        stage_memory_(stage_memory),
        wire_bytes_(wire_bytes),
        stages_(static_cast<int>(plan.stages.size())) {}

  ReplicaFolding fold() {
    const int n_rep = static_cast<int>(plan_.replicas.size());
    std::vector<Signature> signatures(n_rep);
    std::vector<char> shares_links(n_rep, 0);
    std::map<int, int> link_user;  // link id -> the first replica whose messages cross it
    for (int r = 0; r < n_rep; ++r) {
      signatures[r] = signature(r);
      for (int link : links_) {
        auto [it, inserted] = link_user.emplace(link, r);
        if (!inserted && it->second != r) {
          shares_links[r] = 1;
          shares_links[it->second] = 1;
        }
      }
    }

    ReplicaFolding out;
    out.simulated_as.assign(n_rep, -1);
    // Signature -> the classes with it, by index into out.members.
    std::map<Signature, std::vector<int>> classes;
    for (int r = 0; r < n_rep; ++r) {
      int joined = -1;
      if (!shares_links[r]) {
        std::vector<int>& candidates = classes[signatures[r]];
        for (int k : candidates) {
          if (same_task_graph(plan_.replicas[out.members[k].front()], plan_.replicas[r])) {
            joined = k;
            break;
          }
        }
        if (joined < 0) candidates.push_back(static_cast<int>(out.members.size()));
      }
      if (joined < 0) {
        joined = static_cast<int>(out.members.size());
        out.members.emplace_back();
      }
      out.members[joined].push_back(r);
      out.simulated_as[r] = joined;
    }
    return out;
  }

 private:
  int64_t type_id(int device) {
    auto [it, inserted] =
        type_ids_.emplace(&topology_.device_type(device), static_cast<int64_t>(type_ids_.size()));
    return it->second;
  }

  // The signature of replica r; leaves the links its messages cross in links_.
  Signature signature(int r) {
    const Replica& rep = plan_.replicas[r];
    Signature sig;
    links_.clear();
    sig.ints.push_back(rep.micro_batches);
    sig.ints.push_back(static_cast<int64_t>(rep.groups.size()));
    sig.ints.insert(sig.ints.end(), rep.stage_group.begin(), rep.stage_group.end());
    for (const DeviceGroupSchedule& g : rep.groups) {
      sig.ints.push_back(static_cast<int64_t>(g.devices.size()));
      for (int d : g.devices) sig.ints.push_back(type_id(d));
    }
    for (int s = 0; s < stages_; ++s) {
      const size_t at = static_cast<size_t>(r) * stages_ + s;
      sig.reals.insert(sig.reals.end(), stage_times_[at].begin(), stage_times_[at].end());
      const StageMemory& m = stage_memory_[at];
      for (Bytes b : {m.weights, m.gradients, m.optimizer_state, m.activations_per_micro_batch,
                      m.communication_buffers}) {
        sig.reals.push_back(b.value());
      }
    }
    // The messages lowering derives: an activation after F(s) and a gradient after B(s + 1)
    // wherever stages s and s + 1 run on different groups; with vocabulary shards, between the
    // stage before them and each shard, and the statistics between every two shards.
    std::map<int, int64_t> renamed;
    const PipelineShape shape = pipeline_shape(plan_);
    const int b = shape.first_shard();
    const int e = shape.embedding_shards;
    for (int k = 0; k < e; ++k) {
      const int shard = rep.stage_group[k];
      const int after = rep.stage_group[e];
      if (shard == after) continue;
      add_message(r, shard, after, k, false, renamed, sig);
      add_message(r, after, shard, e, true, renamed, sig);
    }
    for (int s = e; s + 1 < b; ++s) {
      const int from = rep.stage_group[s];
      const int to = rep.stage_group[s + 1];
      if (from == to) continue;
      add_message(r, from, to, s, false, renamed, sig);
      add_message(r, to, from, s + 1, true, renamed, sig);
    }
    for (int k = b; k < shape.stages && b > 0; ++k) {
      const int before = rep.stage_group[b - 1];
      const int shard = rep.stage_group[k];
      if (before != shard) {
        add_message(r, before, shard, b - 1, false, renamed, sig);
        add_message(r, shard, before, k, true, renamed, sig);
      }
      for (int other = b; other < shape.stages; ++other) {
        if (other != k) add_message(r, shard, rep.stage_group[other], k, false, renamed, sig);
      }
    }
    return sig;
  }

  void add_message(int r, int group, int peer, int stage, bool gradient,
                   std::map<int, int64_t>& renamed, Signature& sig) {
    const Replica& rep = plan_.replicas[r];
    const Path path = topology_.path(rep.groups[group].devices[0], rep.groups[peer].devices[0]);
    sig.reals.push_back(path.latency.value());
    sig.reals.push_back(path.bandwidth.value());
    sig.reals.push_back(wire_bytes_(r, group, peer, stage, gradient));
    sig.ints.push_back(path.host_staged ? 1 : 0);
    sig.ints.push_back(static_cast<int64_t>(path.links.size()));
    for (int link : path.links) {
      auto [it, inserted] = renamed.emplace(link, static_cast<int64_t>(renamed.size()));
      sig.ints.push_back(it->second);
      sig.reals.push_back(topology_.links()[link].bandwidth.value());
      if (inserted) links_.push_back(link);
    }
  }

  const Plan& plan_;
  const Topology& topology_;
  std::span<const StageTimes> stage_times_;
  std::span<const StageMemory> stage_memory_;
  const std::function<double(int, int, int, int, bool)>& wire_bytes_;
  const int stages_;
  std::map<const DeviceType*, int64_t> type_ids_;
  std::vector<int> links_;
};

}  // namespace

ReplicaFolding no_folding(const Plan& plan) {
  ReplicaFolding out;
  const int n_rep = static_cast<int>(plan.replicas.size());
  for (int r = 0; r < n_rep; ++r) {
    out.members.push_back({r});
    out.simulated_as.push_back(r);
  }
  return out;
}

ReplicaFolding fold_identical_replicas(
    const Plan& plan, const CostModel& cost, std::span<const StageTimes> stage_times,
    std::span<const StageMemory> stage_memory,
    const std::function<double(int replica, int group, int peer_group, int stage, bool gradient)>&
        wire_bytes) {
  return Folder(plan, cost, stage_times, stage_memory, wire_bytes).fold();
}

void folded_plan(const Plan& plan, const ReplicaFolding& folding, Plan& out) {
  out.stages = plan.stages;
  out.replicas.resize(folding.members.size());
  for (size_t k = 0; k < folding.members.size(); ++k) {
    out.replicas[k] = plan.replicas[folding.members[k].front()];
  }
}

}  // namespace motley::sim_internal
