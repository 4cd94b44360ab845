// The link measurements file (`motley.links/1`) and its inline form inside a cluster file.
// Format and checks: docs/cluster-format.md, "Measured links"; keep the two in step.
#include "motley/cluster/measured_links.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

#include "motley/cluster/limits.h"
#include "yaml_numbers.h"

namespace motley {
namespace {

using cluster_internal::yaml_gbps;
using cluster_internal::yaml_number;
using cluster_internal::yaml_us;

const std::vector<std::string> kCollectiveOps = {"all_reduce", "all_gather", "reduce_scatter",
                                                 "all_to_all"};

// A global device id, checked against the cluster's `device_count` devices (any id up to the
// device limit when device_count < 0).
Result<int> device_id(const JsonField& v, int64_t device_count) {
  const int64_t max = device_count >= 0 ? device_count - 1 : kMaxClusterDevices - 1;
  if (device_count == 0) return v.error("the cluster has no devices");
  MOTLEY_ASSIGN_OR_RETURN(int64_t id, v.as_int());
  if (id < 0 || id > max) {
    if (device_count < 0) {
      return v.error(fmt::format("expected a device id from 0 to {}, got {}", max, id));
    }
    return v.error(
        fmt::format("unknown device {}; the cluster's {} devices are numbered 0 to {} "
                    "(global ids, in node order)",
                    id, device_count, max));
  }
  return static_cast<int>(id);
}

Result<int> get_device(const JsonField& f, std::string_view key, int64_t device_count) {
  MOTLEY_ASSIGN_OR_RETURN(JsonField v, f.get(key));
  return device_id(v, device_count);
}

Result<MeasuredLink> parse_link(const JsonField& f, int64_t device_count) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"src", "dst", "latency_us", "bandwidth_GBps"}));
  MeasuredLink link;
  MOTLEY_ASSIGN_OR_RETURN(link.src, get_device(f, "src", device_count));
  MOTLEY_ASSIGN_OR_RETURN(link.dst, get_device(f, "dst", device_count));
  if (link.src == link.dst) {
    return f.child_error(
        "dst", fmt::format("equals src ({}); a device to itself is not a link", link.src));
  }
  MOTLEY_ASSIGN_OR_RETURN(double latency, f.get_double_in("latency_us", 0.0, kMaxLinkLatencyUs));
  MOTLEY_ASSIGN_OR_RETURN(double bandwidth,
                          f.get_double_in("bandwidth_GBps", kMinLinkGBps, kMaxLinkGBps));
  link.latency = microseconds(latency);
  link.bandwidth = gigabytes_per_second(bandwidth);
  return link;
}

Result<CollectiveSample> parse_sample(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"size_bytes", "time_us", "algbw_GBps", "busbw_GBps"}));
  CollectiveSample s;
  MOTLEY_ASSIGN_OR_RETURN(int64_t size, f.get_nonnegative_int("size_bytes"));
  MOTLEY_ASSIGN_OR_RETURN(double time,
                          f.get_double_in("time_us", kMinCollectiveUs, kMaxCollectiveUs));
  MOTLEY_ASSIGN_OR_RETURN(double algbw, f.get_double_in("algbw_GBps", 0.0, kMaxLinkGBps));
  MOTLEY_ASSIGN_OR_RETURN(double busbw, f.get_double_in("busbw_GBps", 0.0, kMaxLinkGBps));
  s.size = Bytes(static_cast<double>(size));
  s.time = microseconds(time);
  s.algbw = gigabytes_per_second(algbw);
  s.busbw = gigabytes_per_second(busbw);
  return s;
}

Result<MeasuredCollective> parse_collective(const JsonField& f, int64_t device_count) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"op", "implementation", "ranks", "devices", "results"}));
  MeasuredCollective c;
  MOTLEY_ASSIGN_OR_RETURN(c.op, f.get_string("op"));
  if (std::find(kCollectiveOps.begin(), kCollectiveOps.end(), c.op) == kCollectiveOps.end()) {
    return f.child_error(
        "op", fmt::format("expected {}, got '{}'", join_alternatives(kCollectiveOps), c.op));
  }
  MOTLEY_ASSIGN_OR_RETURN(c.implementation, f.get_string_or("implementation", ""));
  MOTLEY_ASSIGN_OR_RETURN(int64_t ranks, f.get_int_in("ranks", IntRange{2, kMaxClusterDevices}));
  c.ranks = static_cast<int>(ranks);
  if (f.has("results")) {
    MOTLEY_ASSIGN_OR_RETURN(JsonField results, f.get("results"));
    MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> rows, results.items());
    for (const JsonField& row : rows) {
      MOTLEY_ASSIGN_OR_RETURN(CollectiveSample s, parse_sample(row));
      if (f.has("devices") && !c.samples.empty() && !(s.size > c.samples.back().size)) {
        return row.child_error(
            "size_bytes",
            fmt::format("{} does not exceed the previous row's {}; a sweep that prices a "
                        "collective lists each size once, in increasing order",
                        s.size.value(), c.samples.back().size.value()));
      }
      c.samples.push_back(s);
    }
  }
  if (f.has("devices")) {
    MOTLEY_ASSIGN_OR_RETURN(JsonField devices, f.get("devices"));
    MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> ids, devices.items());
    if (static_cast<int64_t>(ids.size()) != ranks) {
      return devices.error(
          fmt::format("lists {} device(s) for {} ranks; expected one per rank", ids.size(), ranks));
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      MOTLEY_ASSIGN_OR_RETURN(int id, device_id(ids[i], device_count));
      if (std::find(c.devices.begin(), c.devices.end(), id) != c.devices.end()) {
        return ids[i].error(
            fmt::format("device {} is listed twice; each rank is its own device", id));
      }
      c.devices.push_back(id);
    }
    if (c.samples.empty()) {
      return f.error(
          "names its devices but has no 'results'; a collective that prices those devices "
          "needs at least one measured size");
    }
  }
  return c;
}

// The devices of a measured collective as a set (sorted), its identity with the op.
std::vector<int> device_set(const MeasuredCollective& c) {
  std::vector<int> set = c.devices;
  std::sort(set.begin(), set.end());
  return set;
}

}  // namespace

Result<LinksFile> links_from_json(const JsonField& root, int64_t device_count) {
  if (!root.is_object()) {
    return root.error(fmt::format("expected a mapping with 'format: {}' and 'links', got {}",
                                  kLinksFormat, describe_json_value(root.json())));
  }
  MOTLEY_RETURN_IF_ERROR(root.check_keys({"format", "transport", "links", "collectives"}));
  // A file says what it is; the inline form inside a cluster file may leave it out.
  if (root.path().empty() || root.has("format")) {
    MOTLEY_ASSIGN_OR_RETURN(std::string format, root.get_string("format"));
    if (format != kLinksFormat) {
      return root.child_error("format", fmt::format("expected {}, got '{}'", kLinksFormat, format));
    }
  }
  LinksFile file;
  MOTLEY_ASSIGN_OR_RETURN(file.transport, root.get_string_or("transport", ""));
  if (root.has("links")) {
    MOTLEY_ASSIGN_OR_RETURN(JsonField links, root.get("links"));
    MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> entries, links.items());
    std::map<std::pair<int, int>, std::string> seen;  // pair -> the entry that gave it
    for (const JsonField& e : entries) {
      MOTLEY_ASSIGN_OR_RETURN(MeasuredLink link, parse_link(e, device_count));
      auto [it, inserted] = seen.emplace(std::make_pair(link.src, link.dst), e.path());
      if (!inserted) {
        return e.error(
            fmt::format("duplicate pair {} -> {} (also given by {}); each ordered "
                        "pair may be measured once",
                        link.src, link.dst, it->second));
      }
      file.links.push_back(link);
    }
  }
  if (root.has("collectives")) {
    MOTLEY_ASSIGN_OR_RETURN(JsonField collectives, root.get("collectives"));
    MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> entries, collectives.items());
    std::map<std::pair<std::string, std::vector<int>>, std::string> seen;
    for (const JsonField& e : entries) {
      MOTLEY_ASSIGN_OR_RETURN(MeasuredCollective c, parse_collective(e, device_count));
      if (!c.devices.empty()) {
        auto [it, inserted] = seen.emplace(std::make_pair(c.op, device_set(c)), e.path());
        if (!inserted) {
          return e.child_error(
              "devices", fmt::format("{} over these devices is also given by {}; each op over "
                                     "one set of devices may be measured once",
                                     c.op, it->second));
        }
      }
      file.collectives.push_back(std::move(c));
    }
  }
  return file;
}

Result<LinksFile> load_links_file(const std::string& path, int64_t device_count) {
  MOTLEY_ASSIGN_OR_RETURN(Json doc, read_yaml_file(path));
  return links_from_json(JsonField(doc, path), device_count);
}

std::string measured_links_yaml(const std::vector<MeasuredLink>& links, int indent) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  std::string out;
  for (const MeasuredLink& l : links) {
    out += fmt::format("{}- {{src: {}, dst: {}, latency_us: {}, bandwidth_GBps: {}}}\n", pad, l.src,
                       l.dst, yaml_us(l.latency), yaml_gbps(l.bandwidth));
  }
  return out;
}

// Round trips bit for bit for every value the reader can produce (a decimal in file units
// times 1e-6 or 1e9); not every double is one, which is why profile comm rounds before writing.
std::string links_to_yaml(const LinksFile& file) {
  std::ostringstream out;
  out << "# motley link measurements (docs/cluster-format.md, \"Measured links\")\n";
  out << "format: " << kLinksFormat << "\n";
  out << "transport: " << Json(file.transport).dump() << "\n";
  out << "# time(n) = latency + n / bandwidth, least squares over the size sweep\n";
  out << "links:" << (file.links.empty() ? " []\n" : "\n");
  out << measured_links_yaml(file.links, 2);
  out << "collectives:" << (file.collectives.empty() ? " []\n" : "\n");
  out << measured_collectives_yaml(file.collectives, 2);
  return out.str();
}

std::string measured_collectives_yaml(const std::vector<MeasuredCollective>& collectives,
                                      int indent) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  std::ostringstream out;
  for (const MeasuredCollective& c : collectives) {
    out << pad << "- op: " << c.op << "\n";
    out << pad << "  implementation: " << Json(c.implementation).dump() << "\n";
    out << pad << "  ranks: " << c.ranks << "\n";
    if (!c.devices.empty())
      out << pad << fmt::format("  devices: [{}]\n", fmt::join(c.devices, ", "));
    out << pad << "  results:" << (c.samples.empty() ? " []\n" : "\n");
    for (const CollectiveSample& s : c.samples) {
      out << pad
          << fmt::format("    - {{size_bytes: {}, time_us: {}, algbw_GBps: {}, busbw_GBps: {}}}\n",
                         yaml_number(s.size.value()), yaml_us(s.time), yaml_gbps(s.algbw),
                         yaml_gbps(s.busbw));
    }
  }
  return out.str();
}

bool operator==(const MeasuredLink& a, const MeasuredLink& b) {
  return a.src == b.src && a.dst == b.dst && a.latency == b.latency && a.bandwidth == b.bandwidth;
}

bool operator==(const CollectiveSample& a, const CollectiveSample& b) {
  return a.size == b.size && a.time == b.time && a.algbw == b.algbw && a.busbw == b.busbw;
}

bool operator==(const MeasuredCollective& a, const MeasuredCollective& b) {
  return a.op == b.op && a.implementation == b.implementation && a.ranks == b.ranks &&
         a.devices == b.devices && a.samples == b.samples;
}

bool operator==(const LinksFile& a, const LinksFile& b) {
  return a.transport == b.transport && a.links == b.links && a.collectives == b.collectives;
}

}  // namespace motley
