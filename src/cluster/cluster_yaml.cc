// Cluster files: YAML (or JSON) into ClusterSpec with the catalog's defaults, and back. The
// format and every default are documented in docs/cluster-format.md; keep the two in step.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>

#include "motley/cluster/cluster.h"
#include "motley/cluster/limits.h"
#include "motley/core/checked_math.h"
#include "yaml_numbers.h"

namespace motley {
namespace cluster_internal {

// The shortest decimal that reads back as exactly `v`.
std::string yaml_number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  MOTLEY_CHECK(ec == std::errc(), "to_chars failed");
  return std::string(buf, end);
}

// The shortest decimal c that the loader's conversion `to_si` turns back into exactly x, so
// that 1e-05 s is written as 10 us and reads back bit for bit. `guess` is x in file units.
template <class ToSi>
std::string in_file_units(double x, double guess, ToSi to_si) {
  char buf[64];
  for (int digits = 1; digits <= 17; ++digits) {
    auto [end, ec] =
        std::to_chars(buf, buf + sizeof(buf), guess, std::chars_format::general, digits);
    MOTLEY_CHECK(ec == std::errc(), "to_chars failed");
    double c = 0.0;
    std::from_chars(buf, end, c);
    if (to_si(c) == x) return yaml_number(c);
  }
  // The guess can be off by a unit in the last place; look at its neighbours.
  double lo = guess;
  double hi = guess;
  for (int i = 0; i < 16; ++i) {
    lo = std::nextafter(lo, -std::numeric_limits<double>::infinity());
    if (to_si(lo) == x) return yaml_number(lo);
    hi = std::nextafter(hi, std::numeric_limits<double>::infinity());
    if (to_si(hi) == x) return yaml_number(hi);
  }
  return yaml_number(guess);
}

std::string yaml_gbps(BytesPerSecond b) {
  return in_file_units(b.value(), b.value() / kGiga,
                       [](double c) { return gigabytes_per_second(c).value(); });
}

std::string yaml_us(Seconds s) {
  return in_file_units(s.value(), s.value() * 1e6,
                       [](double c) { return microseconds(c).value(); });
}

}  // namespace cluster_internal

namespace {

using cluster_internal::yaml_gbps;
using cluster_internal::yaml_number;
using cluster_internal::yaml_us;

// Defaults for values a file leaves out (docs/cluster-format.md, "Format").
Seconds default_link_latency(LinkKind kind) {
  switch (kind) {
    case LinkKind::kNvlink:
      return microseconds(2.0);
    case LinkKind::kXgmi:
    case LinkKind::kGaudiRoce:
    case LinkKind::kPcie:
      return microseconds(3.0);
    case LinkKind::kInfiniband:
      return microseconds(2.0);
    case LinkKind::kEthernet:
      return microseconds(10.0);
    case LinkKind::kHostStaged:
      return kHostStagingLatency;
    case LinkKind::kLocal:
      return Seconds(0.0);
  }
  return Seconds(0.0);
}

Seconds default_nic_latency(LinkKind network_kind) {
  return network_kind == LinkKind::kEthernet ? microseconds(5.0) : microseconds(1.0);
}

BytesPerSecond default_network_bandwidth(LinkKind network_kind) {
  // NDR InfiniBand (400 Gb/s) and 100 GbE ports.
  return network_kind == LinkKind::kEthernet ? gigabytes_per_second(12.5)
                                             : gigabytes_per_second(50.0);
}

const std::vector<LinkKind> kIntraNodeKinds = {LinkKind::kNvlink, LinkKind::kXgmi,
                                               LinkKind::kGaudiRoce, LinkKind::kPcie};
const std::vector<LinkKind> kNetworkKinds = {LinkKind::kInfiniband, LinkKind::kEthernet};

std::string kind_names(const std::vector<LinkKind>& kinds) {
  std::vector<std::string> names;
  for (LinkKind k : kinds) names.push_back(link_kind_name(k));
  return join_alternatives(names);
}

Result<LinkKind> get_kind(const JsonField& parent, const std::vector<LinkKind>& allowed) {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, parent.get("kind"));
  MOTLEY_ASSIGN_OR_RETURN(std::string s, f.as_string());
  std::optional<LinkKind> kind = parse_link_kind(s);
  if (kind && std::find(allowed.begin(), allowed.end(), *kind) != allowed.end()) return *kind;
  return f.error(fmt::format("expected {}, got '{}'", kind_names(allowed), s));
}

Result<BytesPerSecond> get_bandwidth_or(const JsonField& f, BytesPerSecond fallback) {
  if (!f.has("bandwidth_GBps")) return fallback;
  MOTLEY_ASSIGN_OR_RETURN(double v, f.get_double_in("bandwidth_GBps", kMinLinkGBps, kMaxLinkGBps));
  return gigabytes_per_second(v);
}

Result<Seconds> get_latency_or(const JsonField& f, Seconds fallback) {
  if (!f.has("latency_us")) return fallback;
  MOTLEY_ASSIGN_OR_RETURN(double v, f.get_double_in("latency_us", 0.0, kMaxLinkLatencyUs));
  return microseconds(v);
}

// A JsonField over an empty object, for optional sections that are absent.
const Json& empty_object() {
  static const Json kEmpty = Json::object();
  return kEmpty;
}

JsonField section_or_empty(const JsonField& parent, std::string_view key) {
  std::optional<JsonField> f = parent.find(key);
  if (f) return *f;
  return JsonField(
      empty_object(), parent.source(),
      parent.path().empty() ? std::string(key) : fmt::format("{}.{}", parent.path(), key));
}

Result<LinkSpec> parse_network(const JsonField& root) {
  LinkSpec net;
  std::optional<JsonField> f = root.find("network");
  if (!f) {
    net.kind = LinkKind::kInfiniband;
    net.bandwidth = default_network_bandwidth(net.kind);
    net.latency = default_link_latency(net.kind);
    return net;
  }
  MOTLEY_RETURN_IF_ERROR(f->check_keys({"kind", "bandwidth_GBps", "latency_us"}));
  // Without a kind the fabric is InfiniBand, as when the whole `network` entry is absent.
  net.kind = LinkKind::kInfiniband;
  if (f->has("kind")) {
    MOTLEY_ASSIGN_OR_RETURN(net.kind, get_kind(*f, kNetworkKinds));
  }
  MOTLEY_ASSIGN_OR_RETURN(net.bandwidth, get_bandwidth_or(*f, default_network_bandwidth(net.kind)));
  MOTLEY_ASSIGN_OR_RETURN(net.latency, get_latency_or(*f, default_link_latency(net.kind)));
  return net;
}

struct ParsedDevices {
  std::vector<NodeDevices> groups;
  std::vector<const DeviceType*> types;  // one per group
  int64_t count = 0;                     // devices over all groups
};

Result<ParsedDevices> parse_devices(const JsonField& node) {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, node.get("devices"));
  std::vector<JsonField> entries;
  if (f.is_object()) {
    entries.push_back(f);
  } else if (f.is_array()) {
    MOTLEY_ASSIGN_OR_RETURN(entries, f.items());
    if (entries.empty()) return f.error("expected at least one {type, count} entry");
  } else {
    return f.error(fmt::format("expected {{type, count}} or a list of them, got {}",
                               describe_json_value(f.json())));
  }
  ParsedDevices out;
  for (const JsonField& e : entries) {
    MOTLEY_RETURN_IF_ERROR(e.check_keys({"type", "count"}));
    MOTLEY_ASSIGN_OR_RETURN(JsonField type_field, e.get("type"));
    // YAML reads `type: 4090` as a number; it still names a device.
    std::string type_name;
    if (type_field.json().is_number_integer()) {
      type_name = type_field.json().dump();
    } else {
      MOTLEY_ASSIGN_OR_RETURN(type_name, type_field.as_string());
    }
    auto type = find_device_type(type_name);
    if (!type.is_ok()) return type_field.error(type.status().message());
    for (const DeviceType* seen : out.types) {
      if (seen == type.value()) {
        return type_field.error(fmt::format(
            "device type {} is listed twice in this node; give one entry with the total count",
            seen->name));
      }
    }
    MOTLEY_ASSIGN_OR_RETURN(int64_t count, e.get_int_in("count", IntRange{1, kMaxDevicesPerNode}));
    out.groups.push_back(NodeDevices{type.value()->name, count});
    out.types.push_back(type.value());
    out.count += count;  // at most kMaxDevicesPerNode per catalog type: no overflow
  }
  if (out.count > kMaxDevicesPerNode) {
    return f.error(fmt::format("gives the node {} devices; at most {} are supported", out.count,
                               kMaxDevicesPerNode));
  }
  return out;
}

Vendor vendor_of_kind(LinkKind kind) {
  switch (kind) {
    case LinkKind::kXgmi:
      return Vendor::kAmd;
    case LinkKind::kGaudiRoce:
      return Vendor::kIntel;
    default:
      return Vendor::kNvidia;
  }
}

LinkKind own_link(Vendor vendor) {
  switch (vendor) {
    case Vendor::kAmd:
      return LinkKind::kXgmi;
    case Vendor::kIntel:
      return LinkKind::kGaudiRoce;
    case Vendor::kNvidia:
      return LinkKind::kNvlink;
  }
  return LinkKind::kNvlink;
}

Result<LinkSpec> parse_interconnect(const JsonField& node, const ParsedDevices& devices,
                                    const LinkSpec& pcie) {
  const JsonField f = section_or_empty(node, "interconnect");
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"kind", "bandwidth_GBps", "latency_us"}));
  bool one_vendor = true;
  for (const DeviceType* t : devices.types) one_vendor &= t->vendor == devices.types[0]->vendor;

  LinkSpec ic;
  if (f.has("kind")) {
    MOTLEY_ASSIGN_OR_RETURN(ic.kind, get_kind(f, kIntraNodeKinds));
  } else {
    // Different models never share NVLink or xGMI: they meet over PCIe.
    ic.kind = devices.types.size() == 1 ? devices.types[0]->intra_node_link : LinkKind::kPcie;
  }
  if (ic.kind != LinkKind::kPcie) {
    const std::string kind = link_kind_name(ic.kind);
    if (!one_vendor) {
      return f.child_error("kind", fmt::format("this node mixes {} and other vendors' devices, "
                                               "which meet through host memory; expected pcie, "
                                               "got {}",
                                               vendor_name(devices.types[0]->vendor), kind));
    }
    const Vendor vendor = devices.types[0]->vendor;
    if (vendor_of_kind(ic.kind) != vendor) {
      return f.child_error(
          "kind", fmt::format("{} connects {} devices only, but this node has {} ({}); expected "
                              "pcie or {}, got {}",
                              kind, vendor_name(vendor_of_kind(ic.kind)), devices.types[0]->name,
                              vendor_name(vendor), link_kind_name(own_link(vendor)), kind));
    }
  }
  if (ic.kind == LinkKind::kPcie) {
    for (std::string_view key : {"bandwidth_GBps", "latency_us"}) {
      if (f.has(key)) {
        return f.child_error(key,
                             "with kind pcie, devices talk over the node's PCIe links; set "
                             "bandwidth_GBps and latency_us under 'pcie' instead");
      }
    }
    ic.bandwidth = pcie.bandwidth;
    ic.latency = pcie.latency;
    return ic;
  }
  if (f.has("bandwidth_GBps")) {
    MOTLEY_ASSIGN_OR_RETURN(ic.bandwidth, get_bandwidth_or(f, BytesPerSecond(0.0)));
  } else {
    double bandwidth = std::numeric_limits<double>::infinity();
    for (const DeviceType* t : devices.types) {
      if (t->intra_node_link != ic.kind) {
        return f.child_error("bandwidth_GBps",
                             fmt::format("is missing, and the catalog gives {} no {} rate; set it",
                                         t->name, link_kind_name(ic.kind)));
      }
      bandwidth = std::min(bandwidth, t->intra_node_bandwidth.value());
    }
    ic.bandwidth = BytesPerSecond(bandwidth);
  }
  MOTLEY_ASSIGN_OR_RETURN(ic.latency, get_latency_or(f, default_link_latency(ic.kind)));
  return ic;
}

// One entry of `nodes`, before `count: N` makes N of it.
struct NodeEntry {
  NodeSpec node;
  int64_t count = 1;
  int64_t devices = 0;  // in one copy
};

Result<NodeEntry> parse_node(const JsonField& f, const LinkSpec& network) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys(
      {"name", "count", "devices", "interconnect", "pcie", "devices_per_pcie_switch", "nic",
       "price_per_hour", "spot", "mean_hours_between_preemptions", "on_demand_price_per_hour"}));
  NodeSpec node;
  MOTLEY_ASSIGN_OR_RETURN(node.name, f.get_string("name"));
  if (node.name.empty()) return f.child_error("name", "expected a non-empty name");
  MOTLEY_ASSIGN_OR_RETURN(int64_t count,
                          f.get_int_in_or("count", IntRange{1, kMaxClusterDevices}, 1));
  MOTLEY_ASSIGN_OR_RETURN(ParsedDevices devices, parse_devices(f));
  node.devices = devices.groups;

  const JsonField pcie = section_or_empty(f, "pcie");
  MOTLEY_RETURN_IF_ERROR(pcie.check_keys({"bandwidth_GBps", "latency_us"}));
  node.pcie.kind = LinkKind::kPcie;
  double pcie_default = std::numeric_limits<double>::infinity();
  for (const DeviceType* t : devices.types) {
    pcie_default = std::min(pcie_default, t->pcie_bandwidth.value());
  }
  MOTLEY_ASSIGN_OR_RETURN(node.pcie.bandwidth,
                          get_bandwidth_or(pcie, BytesPerSecond(pcie_default)));
  MOTLEY_ASSIGN_OR_RETURN(node.pcie.latency,
                          get_latency_or(pcie, default_link_latency(LinkKind::kPcie)));

  MOTLEY_ASSIGN_OR_RETURN(node.interconnect, parse_interconnect(f, devices, node.pcie));
  MOTLEY_ASSIGN_OR_RETURN(
      node.devices_per_pcie_switch,
      f.get_int_in_or("devices_per_pcie_switch", IntRange{0, kMaxDevicesPerNode}, 0));

  const JsonField nic = section_or_empty(f, "nic");
  MOTLEY_RETURN_IF_ERROR(nic.check_keys({"bandwidth_GBps", "latency_us", "count"}));
  node.nic.kind = network.kind;
  MOTLEY_ASSIGN_OR_RETURN(node.nic.bandwidth, get_bandwidth_or(nic, network.bandwidth));
  MOTLEY_ASSIGN_OR_RETURN(node.nic.latency, get_latency_or(nic, default_nic_latency(network.kind)));
  MOTLEY_ASSIGN_OR_RETURN(node.nic_count,
                          nic.get_int_in_or("count", IntRange{1, kMaxNicsPerNode}, 1));

  MOTLEY_ASSIGN_OR_RETURN(node.spot, f.get_bool_or("spot", false));
  double price = 0.0;
  for (size_t i = 0; i < devices.types.size(); ++i) {
    const DeviceType& t = *devices.types[i];
    price += static_cast<double>(devices.groups[i].count) *
             (node.spot ? t.price_spot_per_hour : t.price_on_demand_per_hour);
  }
  node.price_per_hour = price;
  if (f.has("price_per_hour")) {
    MOTLEY_ASSIGN_OR_RETURN(node.price_per_hour,
                            f.get_double_in("price_per_hour", 0.0, kMaxNodePricePerHour));
  }
  if (f.has("mean_hours_between_preemptions")) {
    MOTLEY_ASSIGN_OR_RETURN(
        node.mean_hours_between_preemptions,
        f.get_double_in("mean_hours_between_preemptions", kMinHoursBetweenPreemptions,
                        kMaxHoursBetweenPreemptions));
  }
  if (f.has("on_demand_price_per_hour")) {
    if (!node.spot) {
      return f.child_error("on_demand_price_per_hour",
                           "is for spot nodes (spot: true); an on-demand node's price is "
                           "price_per_hour");
    }
    MOTLEY_ASSIGN_OR_RETURN(node.on_demand_price_per_hour,
                            f.get_double_in("on_demand_price_per_hour", 0.0, kMaxNodePricePerHour));
  }
  return NodeEntry{std::move(node), count, devices.count};
}

// The physical nodes an entry stands for: itself, or "<name>-0" .. "<name>-(N-1)".
std::vector<NodeSpec> expand(const NodeEntry& entry) {
  if (entry.count == 1) return {entry.node};
  std::vector<NodeSpec> out;
  out.reserve(static_cast<size_t>(entry.count));
  for (int64_t k = 0; k < entry.count; ++k) {
    NodeSpec copy = entry.node;
    copy.name = entry.node.name + "-" + std::to_string(k);
    out.push_back(std::move(copy));
  }
  return out;
}

// Adds an entry's devices and shared links to the cluster's before it is expanded; an error
// names the entry.
Status count_devices(const JsonField& f, const NodeEntry& entry, int64_t* total,
                     int64_t* total_links) {
  const std::optional<int64_t> devices = checked_mul(entry.count, entry.devices);
  const std::optional<int64_t> sum = devices ? checked_add(*total, *devices) : std::nullopt;
  if (!sum || *sum > kMaxClusterDevices) {
    return f.error(
        fmt::format("brings the cluster past {} devices ({} nodes of {}), the most "
                    "supported",
                    kMaxClusterDevices, entry.count, entry.devices));
  }
  // One node's links are at most about a million (1,024 xGMI devices, 1,024 NICs): no overflow.
  const int64_t per_node = topology_link_count(entry.node);
  const std::optional<int64_t> links = checked_mul(entry.count, per_node);
  const std::optional<int64_t> links_sum = links ? checked_add(*total_links, *links) : std::nullopt;
  if (!links_sum || *links_sum > kMaxClusterLinks) {
    return f.error(fmt::format(
        "brings the cluster past {} shared links ({} nodes of {}: device ports, PCIe links and "
        "switch uplinks, xGMI device pairs, two per NIC), the most supported",
        kMaxClusterLinks, entry.count, per_node));
  }
  *total = *sum;
  *total_links = *links_sum;
  return Status::ok();
}

std::string quoted(const std::string& s) { return Json(s).dump(); }

// The links and the collectives that name their devices; the others are informational.
LinksFile priced_part(LinksFile file) {
  std::erase_if(file.collectives, [](const MeasuredCollective& c) { return c.devices.empty(); });
  return file;
}

// `measured_links`: the path of a links file (relative to the cluster file's directory) or the
// same document inline. Device ids are checked against the cluster's `devices`.
Result<LinksFile> parse_measured_links(const JsonField& root, int64_t devices) {
  std::optional<JsonField> f = root.find("measured_links");
  if (!f) return LinksFile();
  if (f->is_object()) {
    MOTLEY_ASSIGN_OR_RETURN(LinksFile file, links_from_json(*f, devices));
    return priced_part(std::move(file));
  }
  if (!f->json().is_string()) {
    return f->error(fmt::format("expected the path of a {} file or its contents inline, got {}",
                                kLinksFormat, describe_json_value(f->json())));
  }
  const std::string name = f->json().get<std::string>();
  if (name.empty()) return f->error("expected the path of a links file, got an empty string");
  std::filesystem::path path(name);
  if (path.is_relative()) path = std::filesystem::path(root.source()).parent_path() / path;
  if (!std::filesystem::is_regular_file(path)) {
    return f->error(
        fmt::format("links file '{}' not found (looked for {}; a relative path is "
                    "relative to this file's directory)",
                    name, path.string()));
  }
  MOTLEY_ASSIGN_OR_RETURN(LinksFile file, load_links_file(path.string(), devices));
  return priced_part(std::move(file));
}

// `checkpoint: {write_GBps, restart_s}`; absent fields stay unset (the defaults apply).
Result<CheckpointStorage> parse_checkpoint_storage(const JsonField& root) {
  CheckpointStorage out;
  const JsonField f = section_or_empty(root, "checkpoint");
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"write_GBps", "restart_s"}));
  if (f.has("write_GBps")) {
    MOTLEY_ASSIGN_OR_RETURN(const double gbps,
                            f.get_double_in("write_GBps", kMinLinkGBps, kMaxLinkGBps));
    out.write_bandwidth = gigabytes_per_second(gbps);
  }
  if (f.has("restart_s")) {
    MOTLEY_ASSIGN_OR_RETURN(const double s, f.get_double_in("restart_s", 0.0, kMaxRestartSeconds));
    out.restart = Seconds(s);
  }
  return out;
}

}  // namespace

std::optional<double> node_hours_between_preemptions(const NodeSpec& node) {
  if (node.mean_hours_between_preemptions) return node.mean_hours_between_preemptions;
  if (node.spot) return kDefaultSpotHoursBetweenPreemptions;
  return std::nullopt;
}

double node_on_demand_price_per_hour(const NodeSpec& node) {
  if (!node.spot) return node.price_per_hour;
  if (node.on_demand_price_per_hour) return *node.on_demand_price_per_hour;
  double price = 0.0;
  for (const NodeDevices& g : node.devices) {
    Result<const DeviceType*> t = find_device_type(g.type);
    if (t.is_ok()) price += static_cast<double>(g.count) * t.value()->price_on_demand_per_hour;
  }
  return price;
}

Result<ClusterSpec> cluster_from_json(const Json& doc, const std::string& source) {
  return cluster_from_json(JsonField(doc, source));
}

Result<ClusterSpec> cluster_from_json(const JsonField& root) {
  if (!root.is_object()) {
    return root.error(fmt::format("expected a mapping with 'name', 'nodes' and 'network', got {}",
                                  describe_json_value(root.json())));
  }
  MOTLEY_RETURN_IF_ERROR(root.check_keys(
      {"name", "nodes", "network", "software_stack", "measured_links", "checkpoint"}));
  ClusterSpec cluster;
  std::string stem =
      root.path().empty() ? std::filesystem::path(root.source()).stem().string() : "";
  MOTLEY_ASSIGN_OR_RETURN(cluster.name,
                          root.get_string_or("name", stem.empty() ? "cluster" : stem));
  if (cluster.name.empty()) return root.child_error("name", "expected a non-empty name");
  MOTLEY_ASSIGN_OR_RETURN(cluster.software_stack, root.get_string_or("software_stack", ""));
  MOTLEY_ASSIGN_OR_RETURN(cluster.network, parse_network(root));

  MOTLEY_ASSIGN_OR_RETURN(JsonField nodes_field, root.get("nodes"));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> nodes, nodes_field.items());
  if (nodes.empty()) return nodes_field.error("expected at least one node");
  std::map<std::string, std::string> seen;  // node name -> the entry that made it
  int64_t devices = 0;
  int64_t links = 0;
  for (const JsonField& n : nodes) {
    MOTLEY_ASSIGN_OR_RETURN(NodeEntry entry, parse_node(n, cluster.network));
    MOTLEY_RETURN_IF_ERROR(count_devices(n, entry, &devices, &links));
    for (NodeSpec& node : expand(entry)) {
      auto [it, inserted] = seen.emplace(node.name, n.path());
      if (!inserted) {
        return n.child_error("name", fmt::format("duplicate node name '{}' (also made by {}); "
                                                 "names must be unique after 'count' expansion",
                                                 node.name, it->second));
      }
      cluster.nodes.push_back(std::move(node));
    }
  }
  if (!root.has("network") && cluster.nodes.size() > 1) {
    return root.child_error("network",
                            fmt::format("is missing, and a cluster of {} nodes needs the fabric "
                                        "between them, e.g. network: {{kind: infiniband, "
                                        "bandwidth_GBps: 50, latency_us: 2}}",
                                        cluster.nodes.size()));
  }
  MOTLEY_ASSIGN_OR_RETURN(LinksFile measured, parse_measured_links(root, devices));
  cluster.measured_links = std::move(measured.links);
  cluster.measured_collectives = std::move(measured.collectives);
  MOTLEY_ASSIGN_OR_RETURN(cluster.checkpoint, parse_checkpoint_storage(root));
  return cluster;
}

Result<ClusterSpec> load_cluster_yaml(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(Json doc, read_yaml_file(path));
  return cluster_from_json(doc, path);
}

std::string cluster_to_yaml(const ClusterSpec& cluster) {
  std::ostringstream out;
  out << "# motley cluster (docs/cluster-format.md)\n";
  out << "name: " << quoted(cluster.name) << "\n";
  if (!cluster.software_stack.empty()) {
    out << "software_stack: " << quoted(cluster.software_stack) << "\n";
  }
  out << "network: {kind: " << link_kind_name(cluster.network.kind)
      << ", bandwidth_GBps: " << yaml_gbps(cluster.network.bandwidth)
      << ", latency_us: " << yaml_us(cluster.network.latency) << "}\n";
  out << "nodes:\n";
  for (const NodeSpec& node : cluster.nodes) {
    out << "  - name: " << quoted(node.name) << "\n";
    auto group = [](const NodeDevices& g) {
      return "{type: " + quoted(g.type) + ", count: " + std::to_string(g.count) + "}";
    };
    if (node.devices.size() == 1) {
      out << "    devices: " << group(node.devices[0]) << "\n";
    } else {
      out << "    devices:\n";
      for (const NodeDevices& g : node.devices) out << "      - " << group(g) << "\n";
    }
    out << "    interconnect: {kind: " << link_kind_name(node.interconnect.kind);
    if (node.interconnect.kind != LinkKind::kPcie) {
      out << ", bandwidth_GBps: " << yaml_gbps(node.interconnect.bandwidth)
          << ", latency_us: " << yaml_us(node.interconnect.latency);
    }
    out << "}\n";
    out << "    pcie: {bandwidth_GBps: " << yaml_gbps(node.pcie.bandwidth)
        << ", latency_us: " << yaml_us(node.pcie.latency) << "}\n";
    out << "    devices_per_pcie_switch: " << node.devices_per_pcie_switch << "\n";
    out << "    nic: {bandwidth_GBps: " << yaml_gbps(node.nic.bandwidth)
        << ", latency_us: " << yaml_us(node.nic.latency) << ", count: " << node.nic_count << "}\n";
    out << "    price_per_hour: " << yaml_number(node.price_per_hour) << "\n";
    out << "    spot: " << (node.spot ? "true" : "false") << "\n";
    if (node.mean_hours_between_preemptions) {
      out << "    mean_hours_between_preemptions: "
          << yaml_number(*node.mean_hours_between_preemptions) << "\n";
    }
    if (node.on_demand_price_per_hour) {
      out << "    on_demand_price_per_hour: " << yaml_number(*node.on_demand_price_per_hour)
          << "\n";
    }
  }
  if (cluster.checkpoint.write_bandwidth || cluster.checkpoint.restart) {
    std::vector<std::string> fields;
    if (cluster.checkpoint.write_bandwidth) {
      fields.push_back("write_GBps: " + yaml_gbps(*cluster.checkpoint.write_bandwidth));
    }
    if (cluster.checkpoint.restart) {
      fields.push_back("restart_s: " + yaml_number(cluster.checkpoint.restart->value()));
    }
    std::string joined;
    for (const std::string& field : fields) joined += (joined.empty() ? "" : ", ") + field;
    out << "checkpoint: {" << joined << "}\n";
  }
  if (!cluster.measured_links.empty() || !cluster.measured_collectives.empty()) {
    out << "measured_links:\n";
    if (!cluster.measured_links.empty()) {
      out << "  links:\n" << measured_links_yaml(cluster.measured_links, 4);
    }
    if (!cluster.measured_collectives.empty()) {
      out << "  collectives:\n" << measured_collectives_yaml(cluster.measured_collectives, 4);
    }
  }
  return out.str();
}

bool operator==(const LinkSpec& a, const LinkSpec& b) {
  return a.kind == b.kind && a.bandwidth == b.bandwidth && a.latency == b.latency;
}

bool operator==(const NodeDevices& a, const NodeDevices& b) {
  return a.type == b.type && a.count == b.count;
}

bool operator==(const NodeSpec& a, const NodeSpec& b) {
  return a.name == b.name && a.devices == b.devices && a.interconnect == b.interconnect &&
         a.pcie == b.pcie && a.devices_per_pcie_switch == b.devices_per_pcie_switch &&
         a.nic == b.nic && a.nic_count == b.nic_count && a.price_per_hour == b.price_per_hour &&
         a.spot == b.spot && a.mean_hours_between_preemptions == b.mean_hours_between_preemptions &&
         a.on_demand_price_per_hour == b.on_demand_price_per_hour;
}

bool operator==(const ClusterSpec& a, const ClusterSpec& b) {
  return a.name == b.name && a.nodes == b.nodes && a.network == b.network &&
         a.measured_links == b.measured_links && a.measured_collectives == b.measured_collectives &&
         a.checkpoint.write_bandwidth == b.checkpoint.write_bandwidth &&
         a.checkpoint.restart == b.checkpoint.restart;
}

}  // namespace motley
