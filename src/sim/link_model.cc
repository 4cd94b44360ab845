// Link sharing; docs/simulator.md, "Link sharing", says why the share is equal per link rather
// than max-min fair. Rates change only when a transfer starts or stops, so each change settles
// the bytes sent at the old rates and moves the affected transfers' completions in the heap,
// which holds each sending transfer once.
#include "link_model.h"

#include <algorithm>
#include <limits>

#include "motley/core/check.h"

namespace motley::sim_internal {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

}  // namespace

void LinkModel::reset(const std::vector<Link>& links, size_t transfers, uint64_t* order) {
  links_ = &links;
  order_ = order;
  if (active_.size() < links.size()) active_.resize(links.size());
  for (auto& active : active_) active.clear();
  // A transfer's state and heap position are written when it starts; the marks left by an
  // earlier run only need to differ from the epoch this run compares them with, which they do:
  // the epoch keeps counting.
  if (sending_.size() < transfers) sending_.resize(transfers);
  if (mark_.size() < transfers) mark_.resize(transfers, 0);
  if (position_.size() < transfers) position_.resize(transfers, -1);
  heap_.clear();
}

void LinkModel::schedule(int32_t id, Sending& x) {
  x.order = (*order_)++;
  if (position_[id] < 0) {
    heap_.push_back(id);
    position_[id] = static_cast<int32_t>(heap_.size() - 1);
    sift_up(heap_.size() - 1);
    return;
  }
  const size_t i = static_cast<size_t>(position_[id]);
  sift_up(i);
  sift_down(static_cast<size_t>(position_[id]));
}

void LinkModel::sift_up(size_t i) {
  const int32_t id = heap_[i];
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (!earlier(id, heap_[parent])) break;
    place(i, heap_[parent]);
    i = parent;
  }
  place(i, id);
}

void LinkModel::sift_down(size_t i) {
  const int32_t id = heap_[i];
  const size_t n = heap_.size();
  while (true) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && earlier(heap_[child + 1], heap_[child])) ++child;
    if (!earlier(heap_[child], id)) break;
    place(i, heap_[child]);
    i = child;
  }
  place(i, id);
}

double LinkModel::rate_of(const Sending& x) const {
  double rate = x.path->bandwidth.value();
  for (int link : x.path->links) {
    const double share =
        (*links_)[link].bandwidth.value() / static_cast<double>(active_[link].size());
    rate = std::min(rate, share);
  }
  return rate;
}

// Every transfer sending on a link of `path` gets its new rate from `now` on.
void LinkModel::rerate_around(const Path& path, double now) {
  if (++epoch_ == 0) {  // wrapped: no old mark may look current
    std::fill(mark_.begin(), mark_.end(), 0);
    epoch_ = 1;
  }
  affected_.clear();
  for (int link : path.links) {
    for (int32_t y : active_[link]) {
      if (mark_[y] != epoch_) {
        mark_[y] = epoch_;
        affected_.push_back(y);
      }
    }
  }
  for (int32_t yi : affected_) {
    Sending& y = sending_[yi];
    // Settle the bytes sent at the old rate; one due now is done (no rounding residue).
    y.remaining =
        y.finish <= now ? 0.0 : std::max(0.0, y.remaining - y.rate * (now - y.last_update));
    y.last_update = now;
    y.rate = rate_of(y);
    y.finish = y.remaining > 0 ? now + y.remaining / y.rate : now;
    schedule(yi, y);
  }
}

void LinkModel::start(int32_t id, const Path& path, double bytes, double now) {
  Sending& x = sending_[id];
  position_[id] = -1;  // not in this run's heap yet, whatever an earlier run left
  x.path = &path;
  x.remaining = bytes;
  x.last_update = now;
  x.finish = kInfinity;
  x.rate = 0;
  if (path.links.empty()) {
    x.rate = path.bandwidth.value();
    x.finish = now + x.remaining / x.rate;
    schedule(id, x);
    return;
  }
  for (int link : path.links) active_[link].push_back(id);
  rerate_around(path, now);
}

int32_t LinkModel::update(double now) {
  MOTLEY_CHECK(!heap_.empty() && sending_[heap_.front()].finish == now,
               "LinkModel::update: nothing due now");
  const int32_t id = heap_.front();
  position_[id] = -1;
  const int32_t last = heap_.back();
  heap_.pop_back();
  if (last != id) {
    place(0, last);
    sift_down(0);
  }
  Sending& x = sending_[id];
  for (int link : x.path->links) {
    std::vector<int32_t>& active = active_[link];
    auto it = std::find(active.begin(), active.end(), id);
    MOTLEY_CHECK(it != active.end(), "a finishing transfer is not on its link");
    *it = active.back();
    active.pop_back();
  }
  x.remaining = 0;
  if (!x.path->links.empty()) rerate_around(*x.path, now);
  return id;
}

}  // namespace motley::sim_internal
