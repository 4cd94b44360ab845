// sim: the link-sharing model. Transfers sending at once share each Link they cross equally:
// rate = min(path bandwidth, min over its links of bandwidth / transfers on the link), settled
// and re-rated whenever a transfer starts or stops sending (docs/simulator.md, "Link
// sharing"). SimGrid's resource-model shape: the caller asks for next_occurring_event() and
// advances with update(). It knows nothing of tasks or latency. Thread-compatible.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "motley/cluster/cluster.h"

namespace motley::sim_internal {

// A transfer's completion. `order` breaks ties between events of equal time: it comes from a
// counter the caller shares with its own events, so simultaneous events run in the order they
// were scheduled, whichever side holds them.
struct LinkEvent {
  double time = 0;
  uint64_t order = 0;
  int32_t transfer = -1;  // -1: no transfer is sending
};

class LinkModel {
 public:
  // Forgets every transfer. Transfer ids are 0 .. transfers - 1; `links` (indexed by Path::links)
  // and `*order` must outlive the run.
  void reset(const std::vector<Link>& links, size_t transfers, uint64_t* order);

  // Transfer `id` starts sending `bytes` over `path` at `now`: it and every transfer sharing a
  // link with it are re-rated from `now` on. REQUIRES: bytes > 0, `id` not sending, `path`
  // outlives the transfer.
  void start(int32_t id, const Path& path, double bytes, double now);

  // The earliest completion not yet reported. The event loop asks before every event, so it
  // only reads.
  LinkEvent next_occurring_event() const {
    if (heap_.empty()) return LinkEvent{};
    const Sending& x = sending_[heap_.front()];
    return LinkEvent{x.finish, x.order, heap_.front()};
  }

  // Completes the transfer next_occurring_event() named, at its time `now`: it stops sending
  // and the transfers that shared a link with it are re-rated. Returns its id.
  int32_t update(double now);

  // While `id` sends: its current rate in bytes per second.
  double rate(int32_t id) const { return sending_[id].rate; }

 private:
  struct Sending {
    const Path* path = nullptr;
    double remaining = 0;
    double rate = 0;
    double last_update = 0;
    double finish = 0;   // when the current rate would finish it
    uint64_t order = 0;  // taken from the shared counter when `finish` was last set
  };

  double rate_of(const Sending& x) const;
  void rerate_around(const Path& path, double now);
  // Sets transfer `id`'s completion to x.finish, in the heap once (moved if already there).
  void schedule(int32_t id, Sending& x);
  // The heap's order: earliest finish first, then first scheduled.
  bool earlier(int32_t a, int32_t b) const {
    const Sending& x = sending_[a];
    const Sending& y = sending_[b];
    return x.finish < y.finish || (x.finish == y.finish && x.order < y.order);
  }
  void sift_up(size_t i);
  void sift_down(size_t i);
  void place(size_t i, int32_t id) {
    heap_[i] = id;
    position_[id] = static_cast<int32_t>(i);
  }

  const std::vector<Link>* links_ = nullptr;
  uint64_t* order_ = nullptr;
  std::vector<Sending> sending_;
  std::vector<std::vector<int32_t>> active_;  // link id -> transfers sending on it
  std::vector<uint32_t> mark_;                // per transfer: epoch of the last re-rate
  uint32_t epoch_ = 0;
  std::vector<int32_t> affected_;
  // A binary min-heap of the sending transfers by completion, indexed by `position_` (per
  // transfer, -1 when not in it), so a re-rate moves a transfer's one entry in place.
  std::vector<int32_t> heap_;
  std::vector<int32_t> position_;
};

}  // namespace motley::sim_internal
