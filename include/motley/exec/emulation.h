// Emulated heterogeneity: lets one CPU stand in for a cluster of unequal devices and links by
// slowing each rank's compute actions by a per-rank factor and holding back each message (and
// adding time to each all-reduce) by an emulated transfer time. Numbers and callbacks only: it
// knows nothing of clusters or cost models (motley derives the factors from them,
// emulation_factors.h, docs/executor.md, "Emulation"); what it measures is this CPU's time
// scale. Thread-safe free functions; a delayed transport follows the Transport contract (one
// thread at a time) and runs one helper thread of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/exec/data.h"
#include "motley/exec/emulation_factors.h"
#include "motley/exec/train.h"
#include "motley/exec/transport.h"

namespace motley {

// The emulated duration of moving `bytes` from rank `src` to rank `dst`.
using MessageTime = std::function<Seconds(int src, int dst, int64_t bytes)>;
// The emulated duration of a sum all-reduce of `bytes` per member over `ranks` (sorted).
using AllReduceTime = std::function<Seconds(const std::vector<int>& ranks, int64_t bytes)>;

struct EmulationOptions {
  // Per rank, at least 1: after each compute action the rank sleeps (factor - 1) x the action's
  // measured time, so the action takes factor x its native time. Missing ranks run natively.
  std::vector<double> compute_slowdown;
  // When set, a send is handed to the network only message_time(src, dst, bytes) after the
  // executor posted it, so its receiver cannot have it earlier (the sender is not blocked).
  MessageTime message_time;
  // When set, every all-reduce of two or more ranks is followed by a sleep of this duration on
  // each member.
  AllReduceTime all_reduce_time;
};

// The emulation `factors` describe, on a CPU that runs the cluster's seconds in `time_scale`
// of its own: each rank's compute slowdown, and messages and all-reduces delayed by
// time_scale x the factors' times (EmulatedNetwork).
EmulationOptions emulation_options(const EmulationFactors& factors, double time_scale);

// This CPU's seconds per second of the cluster: the sequential reference's time per step here,
// with this process's thread settings (best of two after a warm-up), over `cluster_step`, the
// cost model's time of the same work (EmulationFactors::cluster_step). With `world` (every rank
// of a distributed run calls it), the mean over the world's ranks, so all agree on one scale.
// REQUIRES: `plan` passed validate_plan for `model`. Errors: the reference's, the all-reduce's.
Result<double> emulation_time_scale(const ExecOptions& exec, const Plan& plan,
                                    const ModelSpec& model, const TokenStream& tokens,
                                    Seconds cluster_step, Transport* world);

// Installs `emulation` into `options`: chains the compute slowdown after any
// options->exec.after_action already set, and wraps each rank's transport when message_time or
// all_reduce_time is set (replacing options->decorate_transport).
void apply_emulation(const EmulationOptions& emulation, TrainOptions* options);

// A Transport over `inner` (which must outlive it) that delays sends and all-reduces as above.
// Sends are posted to `inner` by a helper thread when due, in due order (equal delays keep
// posting order); calls into `inner` are serialized. REQUIRES: every send has been waited on
// before all_reduce_sum or barrier is called (the executor does so), since those hold `inner`.
std::unique_ptr<Transport> make_delayed_transport(Transport& inner, MessageTime message_time,
                                                  AllReduceTime all_reduce_time);

}  // namespace motley
