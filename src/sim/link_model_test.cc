#include "link_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace motley::sim_internal {
namespace {

Path path(const std::vector<int>& links, double bytes_per_s) {
  Path p;
  p.bandwidth = BytesPerSecond(bytes_per_s);
  for (int id : links) p.links.push_back(id);
  return p;
}

// A model over links of the given bandwidths (ids 0, 1, ...), ready for `transfers`; it
// keeps pointers to its links and counter, so it stays where it was made.
struct Links {
  Links(const std::vector<double>& bytes_per_s, size_t transfers) {
    for (size_t i = 0; i < bytes_per_s.size(); ++i) {
      const int id = static_cast<int>(i);
      links.push_back(Link{id, "link" + std::to_string(id), LinkKind::kInfiniband,
                           BytesPerSecond(bytes_per_s[i])});
    }
    model.reset(links, transfers, &order);
  }
  Links(const Links&) = delete;
  Links& operator=(const Links&) = delete;

  std::vector<Link> links;
  uint64_t order = 0;
  LinkModel model;
};

// Runs the model to the end; the completion time of each transfer.
std::vector<double> finish_all(LinkModel& model, size_t transfers) {
  std::vector<double> done(transfers, -1);
  for (LinkEvent e = model.next_occurring_event(); e.transfer >= 0;
       e = model.next_occurring_event()) {
    done[model.update(e.time)] = e.time;
  }
  return done;
}

TEST(LinkModel, NothingSending) {
  Links l({1}, 0);
  EXPECT_EQ(l.model.next_occurring_event().transfer, -1);
}

// Two transfers that start together on one link each get half of it.
TEST(LinkModel, TwoTransfersShareALink) {
  Links l({100}, 2);
  LinkModel& model = l.model;
  const Path p = path({0}, 100);
  model.start(0, p, 100, 0.0);
  EXPECT_EQ(model.rate(0), 100);
  model.start(1, p, 100, 0.0);
  EXPECT_EQ(model.rate(0), 50);
  EXPECT_EQ(model.rate(1), 50);
  // The first started is completed first at equal times; the stale completion at 1 s is gone.
  const LinkEvent first = model.next_occurring_event();
  EXPECT_EQ(first.time, 2.0);
  EXPECT_EQ(first.transfer, 0);
  EXPECT_EQ(first.order, 1u);  // 0: transfer 0 alone; 1, 2: both re-rated
  EXPECT_EQ(model.update(2.0), 0);
  const LinkEvent second = model.next_occurring_event();
  EXPECT_EQ(second.time, 2.0);
  EXPECT_EQ(second.transfer, 1);
  EXPECT_EQ(model.update(2.0), 1);
  EXPECT_EQ(model.next_occurring_event().transfer, -1);
  EXPECT_EQ(l.order, 4u);
}

// Link of 3 B/s, two transfers of 7 bytes from 0 s, a third of 1 byte joining at 2 s:
// 1.5 B/s each until 2 s (4 bytes left each), 1 B/s each until the third is done at 3 s
// (3 bytes left), then 1.5 B/s each: done at 5 s.
TEST(LinkModel, AThirdTransferJoiningMidwaySlowsTheOthers) {
  Links l({3}, 3);
  LinkModel& model = l.model;
  const Path p = path({0}, 3);
  model.start(0, p, 7, 0.0);
  model.start(1, p, 7, 0.0);
  const LinkEvent before = model.next_occurring_event();
  EXPECT_EQ(before.time, 7 / 1.5);
  // The caller advances to 2 s on its own events, then the third starts.
  model.start(2, p, 1, 2.0);
  EXPECT_EQ(model.rate(0), 1);
  EXPECT_EQ(finish_all(model, 3), (std::vector<double>{5, 5, 3}));
}

// A transfer across links of 10 and 4 B/s goes at 4; one sharing only the 10 B/s link gets
// half of it, 5, although the first uses only 4 (an equal share, not max-min fair). When the
// first is done at 2 s the second has 5 bytes left at 10 B/s: done at 2.5 s.
TEST(LinkModel, ATransferCrossingTwoLinksIsHeldByTheSlower) {
  Links l({10, 4}, 2);
  LinkModel& model = l.model;
  const Path both = path({0, 1}, 100);
  const Path fast = path({0}, 10);
  model.start(0, both, 8, 0.0);
  EXPECT_EQ(model.rate(0), 4);
  model.start(1, fast, 15, 0.0);
  EXPECT_EQ(model.rate(0), 4);
  EXPECT_EQ(model.rate(1), 5);
  EXPECT_EQ(finish_all(model, 2), (std::vector<double>{2, 2.5}));
}

// The path's own bandwidth caps the rate (a fabric port, no link of its own).
TEST(LinkModel, PathBandwidthCapsTheRate) {
  Links l({100}, 2);
  LinkModel& model = l.model;
  const Path capped = path({0}, 20);
  const Path local = path({}, 8);  // no shared link: alone at its path's bandwidth
  model.start(0, capped, 40, 1.0);
  model.start(1, local, 4, 1.0);
  EXPECT_EQ(model.rate(0), 20);
  EXPECT_EQ(finish_all(model, 2), (std::vector<double>{3, 1.5}));
}

// Completions of equal time come out in the order they were scheduled, counted on the
// caller's counter: the caller's own events interleave with them by that order.
TEST(LinkModel, OrderIsTheSharedCounter) {
  Links l({1, 1}, 2);
  LinkModel& model = l.model;
  l.order = 10;
  const Path on0 = path({0}, 1);
  const Path on1 = path({1}, 1);
  model.start(1, on1, 1, 0.0);
  model.start(0, on0, 1, 0.0);
  LinkEvent e = model.next_occurring_event();
  EXPECT_EQ(e.transfer, 1);
  EXPECT_EQ(e.order, 10u);
  model.update(1.0);
  e = model.next_occurring_event();
  EXPECT_EQ(e.transfer, 0);
  EXPECT_EQ(e.order, 11u);
}

// Sixteen transfers of 1, 2, ..., 16 bytes start together on a link of 16 B/s: processor
// sharing, so the j-th (1-based) finishes after sum_{m <= j} (17 - m) / 16 seconds. Every start
// and finish re-rates all of them, which moves each one's completion in the heap.
TEST(LinkModel, ManyTransfersOnOneLinkFinishAsProcessorSharing) {
  constexpr int kTransfers = 16;
  Links l({16}, kTransfers);
  LinkModel& model = l.model;
  const Path p = path({0}, 16);
  for (int i = 0; i < kTransfers; ++i) model.start(i, p, i + 1, 0.0);
  EXPECT_EQ(model.rate(0), 1);
  const std::vector<double> done = finish_all(model, kTransfers);
  double expected = 0;
  for (int j = 1; j <= kTransfers; ++j) {
    expected += (17.0 - j) / 16.0;
    EXPECT_NEAR(done[j - 1], expected, 1e-12) << "transfer " << j - 1;
  }
}

// Equal transfers finish at the same instant, one event each, in the order their completions
// were last scheduled: each finish re-rates the others in the link's list order, where the
// finished one's place is taken by the list's last.
TEST(LinkModel, SimultaneousCompletionsComeInScheduledOrder) {
  Links l({8}, 8);
  LinkModel& model = l.model;
  const Path p = path({0}, 8);
  for (int i = 0; i < 8; ++i) model.start(i, p, 4, 0.0);
  std::vector<int32_t> order;
  for (LinkEvent e = model.next_occurring_event(); e.transfer >= 0;
       e = model.next_occurring_event()) {
    EXPECT_EQ(e.time, 4.0);
    order.push_back(model.update(e.time));
  }
  EXPECT_EQ(order, (std::vector<int32_t>{0, 7, 6, 5, 4, 3, 2, 1}));
}

// Reset forgets everything, including transfers still sending.
TEST(LinkModel, ResetStartsOver) {
  Links l({2}, 2);
  LinkModel& model = l.model;
  const Path p = path({0}, 2);
  model.start(0, p, 100, 0.0);
  model.start(1, p, 100, 0.0);
  model.reset(l.links, 1, &l.order);
  model.start(0, p, 4, 0.0);
  EXPECT_EQ(model.rate(0), 2);
  EXPECT_EQ(finish_all(model, 1), (std::vector<double>{2}));
}

}  // namespace
}  // namespace motley::sim_internal
