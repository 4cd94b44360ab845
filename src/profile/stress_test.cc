// The burn-in (stress.h) on in-process ranks: the tournament's rounds, a healthy run agreed on
// by every rank, and the faults it must catch — a device computing wrong, a slow device, a
// link delivering wrong bytes — plus its links file and expectations.
#include "motley/profile/stress.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace motley {
namespace {

TEST(StressTest, RoundsMeetEveryPairOnce) {
  for (int n = 1; n <= 9; ++n) {
    const auto rounds = stress_rounds(n);
    EXPECT_EQ(static_cast<int>(rounds.size()), n <= 1 ? 0 : (n % 2 == 0 ? n - 1 : n)) << n;
    std::set<std::pair<int, int>> seen;
    for (const auto& round : rounds) {
      std::set<int> busy;
      for (const auto& [a, b] : round) {
        EXPECT_LT(a, b);
        EXPECT_TRUE(busy.insert(a).second && busy.insert(b).second) << "rank twice in a round";
        EXPECT_TRUE(seen.insert({a, b}).second) << a << "-" << b << " twice";
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), n * (n - 1) / 2) << n;
  }
}

StressOptions short_stress() {
  StressOptions o;
  o.compute_time = Seconds(0.15);
  o.link_time = Seconds(0.15);
  o.collective_time = Seconds(0.1);
  o.gemm_size = 32;
  o.message_bytes = 4096;
  return o;
}

// Runs the burn-in on `world` in-process ranks, rank r with options[r]; every rank's result.
std::vector<StressResult> run_world(const std::vector<StressOptions>& options) {
  const int world = static_cast<int>(options.size());
  InProcessNetwork network(world, TransportOptions{Seconds(30)});
  std::vector<StressResult> results(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Transport> t = network.endpoint(r);
      Result<StressResult> res = run_stress(options[r], *t);
      if (res.is_ok()) {
        results[r] = std::move(res).value();
      } else {
        errors[r] = res.status().message();
        network.shut_down(errors[r]);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return results;
}

TEST(StressTest, AHealthyWorldIsExactAndAgreed) {
  const std::vector<StressResult> all = run_world(std::vector<StressOptions>(3, short_stress()));
  const StressResult& r = all[0];
  ASSERT_EQ(r.devices.size(), 3u);
  for (const DeviceStress& d : r.devices) {
    EXPECT_GT(d.products, 0);
    EXPECT_EQ(d.wrong, 0);
    EXPECT_GT(d.flops_per_s, 0);
  }
  ASSERT_EQ(r.links.size(), 3u);
  EXPECT_EQ(std::make_pair(r.links[2].a, r.links[2].b), std::make_pair(1, 2));
  for (const LinkStress& l : r.links) {
    EXPECT_GT(l.round_trips, 0);
    EXPECT_EQ(l.wrong, 0);
    EXPECT_GT(l.bytes_per_s, 0);
  }
  EXPECT_GT(r.all_reduce.iterations, 0);
  EXPECT_EQ(r.all_reduce.wrong, 0);
  EXPECT_FALSE(r.faulty());
  EXPECT_NE(stress_report_text(r, "in-process").find("# verdict:"), std::string::npos);
  // Every rank holds the same result.
  for (const StressResult& other : all) {
    EXPECT_EQ(stress_report_json(other, "x").dump(), stress_report_json(r, "x").dump());
  }
}

TEST(StressTest, AWrongProductOnOneDeviceIsFaulty) {
  std::vector<StressOptions> options(3, short_stress());
  options[1].matmul = [](const at::Tensor& a, const at::Tensor& b) {
    at::Tensor c = at::mm(a, b);
    c[3][5] += 1;  // one flipped result
    return c;
  };
  const StressResult r = run_world(options)[0];
  EXPECT_EQ(r.devices[0].wrong, 0);
  EXPECT_EQ(r.devices[1].wrong, r.devices[1].products);
  EXPECT_GT(r.devices[1].wrong, 0);
  EXPECT_EQ(r.devices[2].wrong, 0);
  EXPECT_TRUE(r.faulty());
  const std::string text = stress_report_text(r, "in-process");
  EXPECT_NE(text.find("FAULTY rank 1 ("), std::string::npos) << text;
}

TEST(StressTest, ASlowDeviceStandsOutAgainstItsPeers) {
  std::vector<StressOptions> options(3, short_stress());
  options[2].matmul = [](const at::Tensor& a, const at::Tensor& b) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return at::mm(a, b);
  };
  const StressResult r = run_world(options)[0];
  EXPECT_FALSE(r.devices[0].slow);
  EXPECT_FALSE(r.devices[1].slow);
  EXPECT_TRUE(r.devices[2].slow);
  EXPECT_LT(r.devices[2].vs_median, 0.5);
  EXPECT_FALSE(r.faulty());
  EXPECT_EQ(r.slow_count(),
            1 + static_cast<int>(std::count_if(r.links.begin(), r.links.end(),
                                               [](const LinkStress& l) { return l.slow; })));
  EXPECT_NE(stress_report_text(r, "x").find("slow (below 0.80 of the median) rank 2 ("),
            std::string::npos);
}

TEST(StressTest, WrongBytesOnALinkAreCaughtAtTheReceiver) {
  std::vector<StressOptions> options(3, short_stress());
  options[1].on_receive = [](at::Tensor& m) { m[0] += 1; };  // rank 1 receives wrong bytes
  const StressResult r = run_world(options)[0];
  for (const LinkStress& l : r.links) {
    const bool touches_1 = l.a == 1 || l.b == 1;
    EXPECT_EQ(l.wrong > 0, touches_1) << l.a << "-" << l.b;
    if (touches_1) {
      EXPECT_EQ(l.wrong, l.round_trips);
    }
  }
  EXPECT_EQ(r.all_reduce.wrong, r.all_reduce.iterations);
  for (const DeviceStress& d : r.devices) EXPECT_EQ(d.wrong, 0);
  const std::string text = stress_report_text(r, "x");
  // Link 0-1 is named faulty; link 0-2 is not (it may still be named slow: on a loaded machine
  // its timing is anybody's).
  EXPECT_TRUE(std::regex_search(text, std::regex("link 0-1 \\([0-9]+ wrong messages\\)"))) << text;
  EXPECT_FALSE(std::regex_search(text, std::regex("link 0-2 \\([0-9]+ wrong"))) << text;
}

TEST(StressTest, LinksFileAndExpectations) {
  StressResult r;
  r.world_size = 2;
  r.message_bytes = 1000000;
  LinkStress l;
  l.a = 0;
  l.b = 1;
  l.round_trips = 10;
  l.time = Seconds(0.1);  // 5 ms one way
  l.latency = Seconds(1e-3);
  l.bytes_per_s = 2e8;
  r.links = {l};
  r.devices = {DeviceStress{}, DeviceStress{}};
  r.devices[1].rank = 1;
  r.devices[1].flops_per_s = 5e10;
  const LinksFile f = stress_links_file(r, "gloo", 4);
  ASSERT_EQ(f.links.size(), 2u);
  EXPECT_EQ(f.links[0].src, 4);
  EXPECT_EQ(f.links[0].dst, 5);
  EXPECT_EQ(f.links[1].src, 5);
  EXPECT_DOUBLE_EQ(f.links[0].latency.value(), 1e-3);
  // 1 MB in the 4 ms a half round trip leaves after the latency.
  EXPECT_DOUBLE_EQ(f.links[0].bandwidth.value(), 2.5e8);
  Result<Json> doc = parse_yaml(links_to_yaml(f), "links.yaml");
  ASSERT_TRUE(doc.is_ok());
  Result<LinksFile> back = links_from_json(JsonField(*doc, "links.yaml"));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_TRUE(*back == f);

  StressExpectations e;
  e.flops_per_s = {0, 1e11};
  e.link_bytes_per_s = {{0, 4e8}, {4e8, 0}};
  apply_expectations(e, &r);
  EXPECT_EQ(r.devices[0].vs_expected, 0);
  EXPECT_DOUBLE_EQ(r.devices[1].vs_expected, 0.5);
  EXPECT_DOUBLE_EQ(r.links[0].vs_expected, 0.5);
}

TEST(StressTest, RefusesBadOptions) {
  StressOptions o = short_stress();
  o.gemm_size = 1;
  EXPECT_EQ(check_stress_options(o).code(), StatusCode::kInvalidArgument);
  o = short_stress();
  o.message_bytes = 4;
  EXPECT_EQ(check_stress_options(o).code(), StatusCode::kInvalidArgument);
  o = short_stress();
  o.slow_below = 1.5;
  EXPECT_EQ(check_stress_options(o).code(), StatusCode::kInvalidArgument);
  o = short_stress();
  o.link_time = Seconds(0);
  EXPECT_EQ(check_stress_options(o).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace motley
