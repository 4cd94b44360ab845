// Emulated heterogeneity: lets one CPU stand in for a cluster of unequal devices and links by
// slowing each rank's compute actions by a per-rank factor and holding back each message (and
// adding time to each all-reduce) by an emulated transfer time. Numbers and callbacks only: it
// knows nothing of clusters or cost models (the command line derives the factors from them,
// docs/executor.md, "Emulation"). Thread-safe free functions; a delayed transport follows the
// Transport contract (one thread at a time) and runs one helper thread of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "motley/core/units.h"
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
