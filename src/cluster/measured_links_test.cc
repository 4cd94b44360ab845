// The links file (`motley.links/1`): round trip, errors naming file and field, its inclusion in
// a cluster file (by path and inline), and Topology using the measured figures for a pair.
#include "motley/cluster/measured_links.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "motley/cluster/cluster.h"

namespace motley {
namespace {

Result<LinksFile> parse_links_text(std::string_view yaml, int64_t devices = -1) {
  auto doc = parse_yaml(yaml, "links.yaml");
  if (!doc.is_ok()) return doc.status();
  return links_from_json(JsonField(doc.value(), "links.yaml"), devices);
}

void expect_links_error(std::string_view yaml, const std::string& message, int64_t devices = -1) {
  auto r = parse_links_text(yaml, devices);
  ASSERT_FALSE(r.is_ok()) << yaml;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), message);
}

// A directory of its own under the system's temporary directory, removed at the end.
class MeasuredLinksDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("motley-measured-links-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

const char* const kTwoDeviceNode =
    "nodes:\n"
    "  - name: box\n"
    "    devices: {type: RTX-4090, count: 2}\n";

LinksFile sample_links_file() {
  LinksFile f;
  f.transport = "gloo";
  f.links.push_back({0, 1, microseconds(12.5), gigabytes_per_second(3.25)});
  f.links.push_back({1, 0, Seconds(1.0 / 3.0 * 1e-5), BytesPerSecond(1.0e9 / 7.0)});
  MeasuredCollective c;
  c.op = "all_reduce";
  c.implementation = "c10d ProcessGroupGloo allreduce";
  c.ranks = 2;
  c.samples.push_back({Bytes(1024), microseconds(30.1), BytesPerSecond(1024 / 30.1e-6),
                       BytesPerSecond(1024 / 30.1e-6)});
  c.samples.push_back({Bytes(67108864), Seconds(0.0123), BytesPerSecond(67108864 / 0.0123),
                       BytesPerSecond(67108864 / 0.0123)});
  f.collectives.push_back(c);
  c.op = "all_gather";
  c.devices = {1, 0};
  f.collectives.push_back(c);
  return f;
}

TEST(MeasuredLinksTest, RoundTripsEveryBit) {
  const LinksFile f = sample_links_file();
  const std::string yaml = links_to_yaml(f);
  auto back = parse_links_text(yaml);
  ASSERT_TRUE(back.is_ok()) << back.status().message() << "\n" << yaml;
  EXPECT_EQ(back.value(), f) << yaml;
}

TEST(MeasuredLinksTest, ReadsTheFieldsInFileUnits) {
  auto r = parse_links_text(
      "format: motley.links/1\n"
      "links:\n"
      "  - {src: 2, dst: 0, latency_us: 40, bandwidth_GBps: 1.5}\n");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r.value().links.size(), 1u);
  EXPECT_EQ(r.value().links[0].src, 2);
  EXPECT_EQ(r.value().links[0].dst, 0);
  EXPECT_EQ(r.value().links[0].latency, microseconds(40));
  EXPECT_EQ(r.value().links[0].bandwidth, gigabytes_per_second(1.5));
  EXPECT_TRUE(r.value().collectives.empty());
}

TEST(MeasuredLinksTest, BadInputNamesFileAndField) {
  expect_links_error("links: []\n", "links.yaml: field 'format': is missing");
  expect_links_error("format: motley.links/9\n",
                     "links.yaml: field 'format': expected motley.links/1, got 'motley.links/9'");
  expect_links_error(
      "format: motley.links/1\nlinks:\n  - {src: 0, dst: 1, latency_us: -1, bandwidth_GBps: 1}\n",
      "links.yaml: field 'links[0].latency_us': expected a number from 0 to 1e+06, got -1");
  expect_links_error(
      "format: motley.links/1\nlinks:\n  - {src: 0, dst: 1, latency_us: 1, bandwidth_GBps: .nan}\n",
      "links.yaml: field 'links[0].bandwidth_GBps': expected a number from 1e-06 to 1e+09, got "
      "NaN");
  expect_links_error(
      "format: motley.links/1\nlinks:\n  - {src: 0, dst: 1, latency_us: 1, bandwidth_GBps: 0}\n",
      "links.yaml: field 'links[0].bandwidth_GBps': expected a number from 1e-06 to 1e+09, got 0");
  expect_links_error(
      "format: motley.links/1\nlinks:\n  - {src: 1, dst: 1, latency_us: 1, bandwidth_GBps: 1}\n",
      "links.yaml: field 'links[0].dst': equals src (1); a device to itself is not a link");
  expect_links_error(
      "format: motley.links/1\nlinks:\n"
      "  - {src: 0, dst: 1, latency_us: 1, bandwidth_GBps: 1}\n"
      "  - {src: 1, dst: 0, latency_us: 1, bandwidth_GBps: 1}\n"
      "  - {src: 0, dst: 1, latency_us: 2, bandwidth_GBps: 1}\n",
      "links.yaml: field 'links[2]': duplicate pair 0 -> 1 (also given by links[0]); each ordered "
      "pair may be measured once");
  expect_links_error(
      "format: motley.links/1\nlinks:\n  - {src: 0, dst: 5, latency_us: 1, bandwidth_GBps: 1}\n",
      "links.yaml: field 'links[0].dst': unknown device 5; the cluster's 2 devices are numbered 0 "
      "to 1 (global ids, in node order)",
      2);
  expect_links_error(
      "format: motley.links/1\nlinks:\n  - {src: 0, dst: 1, latency: 1, bandwidth_GBps: 1}\n",
      "links.yaml: field 'links[0].latency': unknown field; allowed fields here: src, dst, "
      "latency_us or bandwidth_GBps");
  expect_links_error(
      "format: motley.links/1\ncollectives:\n  - {op: broadcast, ranks: 2}\n",
      "links.yaml: field 'collectives[0].op': expected all_reduce, all_gather, reduce_scatter or "
      "all_to_all, got 'broadcast'");
}

TEST(MeasuredLinksTest, CollectivesOverNamedDevicesAreChecked) {
  const char* const kHead = "format: motley.links/1\ncollectives:\n";
  auto ok =
      parse_links_text(std::string(kHead) +
                           "  - op: all_reduce\n    ranks: 2\n    devices: [3, 1]\n"
                           "    results:\n"
                           "      - {size_bytes: 8, time_us: 5, algbw_GBps: 0, busbw_GBps: 0}\n"
                           "      - {size_bytes: 64, time_us: 9, algbw_GBps: 0, busbw_GBps: 0}\n",
                       4);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok.value().collectives[0].devices, (std::vector<int>{3, 1}));

  expect_links_error(std::string(kHead) + "  - {op: all_reduce, ranks: 3, devices: [0, 1]}\n",
                     "links.yaml: field 'collectives[0].devices': lists 2 device(s) for 3 ranks; "
                     "expected one per rank");
  expect_links_error(std::string(kHead) + "  - {op: all_reduce, ranks: 2, devices: [1, 1]}\n",
                     "links.yaml: field 'collectives[0].devices[1]': device 1 is listed twice; "
                     "each rank is its own device");
  expect_links_error(std::string(kHead) + "  - {op: all_reduce, ranks: 2, devices: [0, 2]}\n",
                     "links.yaml: field 'collectives[0].devices[1]': unknown device 2; the "
                     "cluster's 2 devices are numbered 0 to 1 (global ids, in node order)",
                     2);
  expect_links_error(std::string(kHead) + "  - {op: all_reduce, ranks: 2, devices: [0, 1]}\n",
                     "links.yaml: field 'collectives[0]': names its devices but has no 'results'; "
                     "a collective that prices those devices needs at least one measured size");
  expect_links_error(
      std::string(kHead) +
          "  - op: all_to_all\n    ranks: 2\n    devices: [0, 1]\n    results:\n"
          "      - {size_bytes: 64, time_us: 5, algbw_GBps: 0, busbw_GBps: 0}\n"
          "      - {size_bytes: 64, time_us: 6, algbw_GBps: 0, busbw_GBps: 0}\n",
      "links.yaml: field 'collectives[0].results[1].size_bytes': 64 does not exceed the previous "
      "row's 64; a sweep that prices a collective lists each size once, in increasing order");
  const std::string row =
      "    results: [{size_bytes: 8, time_us: 5, algbw_GBps: 0, busbw_GBps: 0}]\n";
  expect_links_error(std::string(kHead) +
                         "  - op: all_reduce\n    ranks: 2\n    devices: [0, 1]\n" + row +
                         "  - op: all_reduce\n    ranks: 2\n    devices: [1, 0]\n" + row,
                     "links.yaml: field 'collectives[1].devices': all_reduce over these devices "
                     "is also given by collectives[0]; each op over one set of devices may be "
                     "measured once");
  // Without devices a sweep is informational: any order, repeated sizes and ops are read.
  auto informational =
      parse_links_text(std::string(kHead) +
                       "  - op: all_reduce\n    ranks: 2\n    results:\n"
                       "      - {size_bytes: 64, time_us: 5, algbw_GBps: 0, busbw_GBps: 0}\n"
                       "      - {size_bytes: 8, time_us: 6, algbw_GBps: 0, busbw_GBps: 0}\n"
                       "  - {op: all_reduce, ranks: 2}\n");
  ASSERT_TRUE(informational.is_ok()) << informational.status().message();
  EXPECT_TRUE(informational.value().collectives[0].devices.empty());
}

TEST(MeasuredLinksTest, ClusterKeepsTheCollectivesThatNameDevicesAndWritesThem) {
  auto doc =
      parse_yaml(std::string("measured_links:\n  collectives:\n"
                             "    - op: all_reduce\n      ranks: 2\n      devices: [0, 1]\n"
                             "      results:\n"
                             "        - {size_bytes: 1024, time_us: 61.5, algbw_GBps: 0.0167, "
                             "busbw_GBps: 0.0167}\n"
                             "    - op: all_gather\n      ranks: 2\n      results: []\n") +
                     kTwoDeviceNode,
                 "inline.yaml");
  ASSERT_TRUE(doc.is_ok());
  auto c = cluster_from_json(doc.value(), "inline.yaml");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  ASSERT_EQ(c.value().measured_collectives.size(), 1u);
  EXPECT_EQ(c.value().measured_collectives[0].op, "all_reduce");
  EXPECT_EQ(c.value().measured_collectives[0].samples[0].time, microseconds(61.5));
  EXPECT_TRUE(c.value().measured_links.empty());

  const std::string written = cluster_to_yaml(c.value());
  auto again = parse_yaml(written, "again.yaml");
  ASSERT_TRUE(again.is_ok()) << written;
  auto back = cluster_from_json(again.value(), "again.yaml");
  ASSERT_TRUE(back.is_ok()) << back.status().message() << "\n" << written;
  EXPECT_EQ(back.value(), c.value()) << written;
}

TEST_F(MeasuredLinksDirTest, ClusterIncludesAFileRelativeToItself) {
  write("links.yaml",
        "format: motley.links/1\nlinks:\n"
        "  - {src: 0, dst: 1, latency_us: 42.5, bandwidth_GBps: 2.75}\n");
  const std::string cluster_path =
      write("lab.yaml", std::string("measured_links: links.yaml\n") + kTwoDeviceNode);
  auto c = load_cluster_yaml(cluster_path);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  ASSERT_EQ(c.value().measured_links.size(), 1u);

  Topology measured(c.value());
  const Path& p = measured.path(0, 1);
  EXPECT_TRUE(p.measured);
  EXPECT_EQ(p.latency, microseconds(42.5));
  EXPECT_EQ(p.bandwidth, gigabytes_per_second(2.75));
  // The links crossed are those of the unmeasured path; the other direction is untouched.
  ClusterSpec plain = c.value();
  plain.measured_links.clear();
  Topology catalog(plain);
  EXPECT_EQ(p.links, catalog.path(0, 1).links);
  EXPECT_FALSE(measured.path(1, 0).measured);
  EXPECT_EQ(measured.path(1, 0).latency, catalog.path(1, 0).latency);
  EXPECT_EQ(measured.path(1, 0).bandwidth, catalog.path(1, 0).bandwidth);
  EXPECT_NE(catalog.path(0, 1).latency, p.latency);
}

TEST_F(MeasuredLinksDirTest, IncludedFileErrorsNameThatFile) {
  const std::string links = write(
      "links.yaml",
      "format: motley.links/1\nlinks:\n  - {src: 0, dst: 2, latency_us: 1, bandwidth_GBps: 1}\n");
  const std::string cluster_path =
      write("lab.yaml", std::string("measured_links: links.yaml\n") + kTwoDeviceNode);
  auto c = load_cluster_yaml(cluster_path);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().message(),
            links +
                ": field 'links[0].dst': unknown device 2; the cluster's 2 devices are "
                "numbered 0 to 1 (global ids, in node order)");

  const std::string missing =
      write("missing.yaml", std::string("measured_links: nowhere.yaml\n") + kTwoDeviceNode);
  auto m = load_cluster_yaml(missing);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find(missing + ": field 'measured_links': links file "
                                                "'nowhere.yaml' not found"),
            std::string::npos)
      << m.status().message();
}

TEST(MeasuredLinksTest, InlineLinksRoundTripThroughTheClusterWriter) {
  auto doc =
      parse_yaml(std::string("measured_links:\n  links:\n"
                             "    - {src: 1, dst: 0, latency_us: 7, bandwidth_GBps: 0.3}\n") +
                     kTwoDeviceNode,
                 "inline.yaml");
  ASSERT_TRUE(doc.is_ok());
  auto c = cluster_from_json(doc.value(), "inline.yaml");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  ASSERT_EQ(c.value().measured_links.size(), 1u);
  EXPECT_EQ(c.value().measured_links[0].latency, microseconds(7));

  auto again = parse_yaml(cluster_to_yaml(c.value()), "again.yaml");
  ASSERT_TRUE(again.is_ok());
  auto back = cluster_from_json(again.value(), "again.yaml");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), c.value());

  Topology t(c.value());
  EXPECT_EQ(t.path(1, 0).latency, microseconds(7));
  EXPECT_EQ(t.path(1, 0).bandwidth, gigabytes_per_second(0.3));
}

TEST(MeasuredLinksTest, ClusterWithoutMeasurementsWritesNoSection) {
  auto c = cluster_preset("h100x8");
  ASSERT_TRUE(c.is_ok());
  EXPECT_TRUE(c.value().measured_links.empty());
  EXPECT_EQ(cluster_to_yaml(c.value()).find("measured_links"), std::string::npos);
}

TEST(MeasuredLinksTest, InlineErrorsNameTheClusterFile) {
  auto doc = parse_yaml(std::string("measured_links:\n  links:\n"
                                    "    - {src: 0, dst: 1, latency_us: 7, bandwidth_GBps: -2}\n") +
                            kTwoDeviceNode,
                        "inline.yaml");
  ASSERT_TRUE(doc.is_ok());
  auto c = cluster_from_json(doc.value(), "inline.yaml");
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().message(),
            "inline.yaml: field 'measured_links.links[0].bandwidth_GBps': expected a number from "
            "1e-06 to 1e+09, got -2");
  auto bad = parse_yaml(std::string("measured_links: 3\n") + kTwoDeviceNode, "n.yaml");
  ASSERT_TRUE(bad.is_ok());
  auto b = cluster_from_json(bad.value(), "n.yaml");
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().message().rfind("n.yaml: field 'measured_links': expected the path of a "
                                       "motley.links/1 file or its contents inline",
                                       0),
            0u)
      << b.status().message();
}

}  // namespace
}  // namespace motley
