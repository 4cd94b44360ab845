// `motley cluster show|list`: devices, nodes, a summary of the link matrix, peak and price.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "commands.h"
#include "format.h"
#include "motley/cluster/cluster.h"
#include "motley/core/json.h"

namespace motley::cli {
namespace {

struct ClusterShowOptions {
  std::string cluster;
  bool json = false;
};

std::string path_class(const Topology& topo, const Path& p) {
  if (p.links.empty()) return "local";
  if (p.measured) return "measured";
  if (p.host_staged) return p.crosses_nodes ? "inter-node, host-staged" : "intra-node, host-staged";
  if (p.crosses_nodes) return "inter-node";
  return std::string("intra-node ") + link_kind_name(topo.links()[p.links.front()].kind);
}

double node_price(const NodeSpec& n) { return n.price_per_hour; }

// Device pairs grouped by the kind of path between them, with bandwidth and latency.
struct PairClass {
  std::string kind;
  double bandwidth;
  double latency;
  auto operator<=>(const PairClass&) const = default;
};

// A node as its paths see it: the node without its name, price and preemption figures, so that
// two nodes equal under NodeSpec's operator== have the same paths to any other node (and a
// field added to NodeSpec counts unless cleared here).
NodeSpec path_shape(NodeSpec n) {
  n.name.clear();
  n.price_per_hour = 0;
  n.spot = false;
  n.mean_hours_between_preemptions.reset();
  n.on_demand_price_per_hour.reset();
  return n;
}

// Every ordered pair of distinct devices by the class of its path. The cluster's paths without
// measurements are counted on one node (or two) of each group of nodes with the same
// path shape and weighted by the pairs of nodes they stand for, so that a cluster of tens of
// thousands of devices does not resolve billions of paths; each measured pair then moves from
// the class its links give to its measured one.
std::map<PairClass, int64_t> pair_classes(const ClusterSpec& cluster, const Topology& topo) {
  ClusterSpec plain = cluster;
  plain.measured_links.clear();
  const Topology model(plain);
  std::vector<std::vector<int>> node_devices(cluster.nodes.size());
  for (const Device& d : topo.devices()) node_devices[static_cast<size_t>(d.node)].push_back(d.id);
  std::vector<NodeSpec> shapes;             // one per group, the group's path shape
  std::vector<std::vector<size_t>> groups;  // node indices of one path shape
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    NodeSpec shape = path_shape(cluster.nodes[n]);
    // `count: N` expands into consecutive nodes: the latest group is the likeliest.
    size_t g = shapes.size();
    while (g > 0 && !(shapes[g - 1] == shape)) --g;
    if (g == 0) {
      shapes.push_back(std::move(shape));
      groups.emplace_back();
      g = shapes.size();
    }
    groups[g - 1].push_back(n);
  }
  std::map<PairClass, int64_t> classes;
  auto add = [&](const Topology& t, int a, int b, int64_t weight) {
    const Path& p = t.path(a, b);
    // Latencies summed in another order (a's NIC, the network, b's NIC and back) may differ in
    // the last bit: to the picosecond they are one class. A measured one is shown as measured.
    const double latency =
        p.measured ? p.latency.value() : std::round(p.latency.value() * 1e12) / 1e12;
    classes[{path_class(t, p), p.bandwidth.value(), latency}] += weight;
  };
  auto add_nodes = [&](size_t na, size_t nb, int64_t weight) {
    for (int a : node_devices[na]) {
      for (int b : node_devices[nb]) {
        if (a != b) add(model, a, b, weight);
      }
    }
  };
  for (const std::vector<size_t>& g : groups) {
    const auto size = static_cast<int64_t>(g.size());
    add_nodes(g[0], g[0], size);
    if (size > 1) add_nodes(g[0], g[1], size * (size - 1));
    for (const std::vector<size_t>& h : groups) {
      if (&h != &g) add_nodes(g[0], h[0], size * static_cast<int64_t>(h.size()));
    }
  }
  std::set<std::pair<int, int>> measured;
  for (const MeasuredLink& m : cluster.measured_links) {
    if (m.src == m.dst || !measured.emplace(m.src, m.dst).second) continue;
    add(model, m.src, m.dst, -1);
    add(topo, m.src, m.dst, 1);
  }
  std::erase_if(classes, [](const auto& c) { return c.second == 0; });
  return classes;
}

Status show_cluster(const ClusterShowOptions& opt) {
  MOTLEY_ASSIGN_OR_RETURN(ClusterSpec cluster, load_cluster(opt.cluster));
  Topology topo(cluster);
  const auto& devices = topo.devices();

  FlopsPerSecond peak;
  Bytes memory;
  std::map<std::string, int> count_by_type;
  for (const auto& d : devices) {
    const DeviceType& t = topo.device_type(d.id);
    peak += t.peak_bf16;
    memory += t.memory;
    ++count_by_type[d.type];
  }
  double price = 0, spot_devices = 0;
  for (const auto& n : cluster.nodes) {
    price += node_price(n);
    if (n.spot) {
      for (const auto& g : n.devices) spot_devices += static_cast<double>(g.count);
    }
  }

  const std::map<PairClass, int64_t> classes = pair_classes(cluster, topo);

  std::string out;
  if (opt.json) {
    Json devs = Json::array();
    for (const auto& d : devices) {
      devs.push_back({{"id", d.id},
                      {"type", d.type},
                      {"node", d.node},
                      {"node_name", cluster.nodes[d.node].name},
                      {"local_index", d.local_index}});
    }
    Json nodes = Json::array();
    for (const auto& n : cluster.nodes) {
      Json groups = Json::array();
      for (const auto& g : n.devices) groups.push_back({{"type", g.type}, {"count", g.count}});
      nodes.push_back({{"name", n.name},
                       {"devices", groups},
                       {"interconnect",
                        {{"kind", link_kind_name(n.interconnect.kind)},
                         {"bandwidth_bytes_per_s", n.interconnect.bandwidth.value()},
                         {"latency_s", n.interconnect.latency.value()}}},
                       {"nic",
                        {{"bandwidth_bytes_per_s", n.nic.bandwidth.value()},
                         {"latency_s", n.nic.latency.value()},
                         {"count", n.nic_count}}},
                       {"price_per_hour", n.price_per_hour},
                       {"spot", n.spot}});
    }
    Json links = Json::array();
    for (const auto& [c, pairs] : classes) {
      links.push_back({{"kind", c.kind},
                       {"bandwidth_bytes_per_s", c.bandwidth},
                       {"latency_s", c.latency},
                       {"device_pairs", pairs}});
    }
    Json by_type = Json::object();
    for (const auto& [t, n] : count_by_type) by_type[t] = n;
    Json collectives = Json::array();
    for (const MeasuredCollective& c : cluster.measured_collectives) {
      const CollectiveSample& last = c.samples.back();
      collectives.push_back({{"op", c.op},
                             {"devices", c.devices},
                             {"sizes", c.samples.size()},
                             {"min_size_bytes", c.samples.front().size.value()},
                             {"max_size_bytes", last.size.value()},
                             {"max_size_time_s", last.time.value()},
                             {"max_size_busbw_bytes_per_s", last.busbw.value()}});
    }
    Json j{{"name", cluster.name},
           {"total_devices", devices.size()},
           {"devices_by_type", by_type},
           {"total_nodes", cluster.nodes.size()},
           {"total_peak_bf16_flops_per_s", peak.value()},
           {"total_memory_bytes", memory.value()},
           {"price_per_hour", price},
           {"devices", devs},
           {"nodes", nodes},
           {"links", links},
           {"measured_collectives", collectives}};
    out = j.dump(2) + "\n";
  } else {
    std::string types;
    for (const auto& [t, n] : count_by_type) {
      types += fmt::format("{}{} x {}", types.empty() ? "" : ", ", n, t);
    }
    out += fmt::format("cluster {}: {} devices ({}) in {} nodes\n", cluster.name, devices.size(),
                       types, cluster.nodes.size());
    out += fmt::format("peak {} bf16 dense, {} memory, {}/hour", format_flops_rate(peak),
                       format_bytes(memory), format_money(price));
    if (spot_devices > 0) out += fmt::format(", {} spot devices", spot_devices);
    out += "\n\n";

    Table nodes({"node", "devices", "ids", "interconnect", "nic", "price/h", "spot"});
    int next_id = 0;
    for (const auto& n : cluster.nodes) {
      std::string devs;
      int count = 0;
      for (const auto& g : n.devices) {
        devs += fmt::format("{}{} x {}", devs.empty() ? "" : " + ", g.count, g.type);
        count += static_cast<int>(g.count);
      }
      nodes.add_row({n.name, devs, fmt::format("{}-{}", next_id, next_id + count - 1),
                     fmt::format("{} {} {}", link_kind_name(n.interconnect.kind),
                                 format_bandwidth(n.interconnect.bandwidth),
                                 format_time(n.interconnect.latency)),
                     fmt::format("{} x {} {}", n.nic_count, format_bandwidth(n.nic.bandwidth),
                                 format_time(n.nic.latency)),
                     format_money(n.price_per_hour), n.spot ? "yes" : "no"});
      next_id += count;
    }
    out += nodes.to_string();

    out += "\nlinks between device pairs (one direction):\n";
    Table links({"path", "bandwidth", "latency", "pairs"});
    for (const auto& [c, pairs] : classes) {
      links.add_row({c.kind, format_bandwidth(BytesPerSecond(c.bandwidth)),
                     format_time(Seconds(c.latency)), std::to_string(pairs)});
    }
    out += links.to_string();
    if (!cluster.measured_collectives.empty()) {
      out += "\nmeasured collectives (priced from their sweeps over exactly these devices):\n";
      Table measured({"op", "devices", "sizes", "largest", "time", "busbw"});
      for (const MeasuredCollective& c : cluster.measured_collectives) {
        const CollectiveSample& last = c.samples.back();
        measured.add_row({c.op, fmt::format("{}", fmt::join(c.devices, ",")),
                          std::to_string(c.samples.size()), format_bytes(last.size),
                          format_time(last.time), format_bandwidth(last.busbw)});
      }
      out += measured.to_string();
    }
  }
  std::fputs(out.c_str(), stdout);
  return Status::ok();
}

Status list_clusters() {
  std::string out = "cluster presets (use with --cluster or 'motley cluster show NAME'):\n";
  for (const auto& name : cluster_preset_names()) out += "  " + name + "\n";
  out += "also accepted: a cluster YAML file (see docs/cluster-format.md)\n";
  out += "\ndevice types:\n";
  Table t({"type", "vendor", "bf16 peak", "memory", "mem bw", "link", "$/h", "spot $/h"});
  for (const auto& d : device_catalog()) {
    t.add_row({d.name, vendor_name(d.vendor), format_flops_rate(d.peak_bf16),
               format_bytes(d.memory), format_bandwidth(d.memory_bandwidth),
               fmt::format("{} {}", link_kind_name(d.intra_node_link),
                           format_bandwidth(d.intra_node_bandwidth)),
               format_money(d.price_on_demand_per_hour), format_money(d.price_spot_per_hour)});
  }
  out += t.to_string();
  std::fputs(out.c_str(), stdout);
  return Status::ok();
}

}  // namespace

void add_cluster_command(CLI::App& app, Action* action) {
  CLI::App* cluster = app.add_subcommand("cluster", "Inspect clusters and the device catalog");
  cluster->require_subcommand(1);

  auto opt = std::make_shared<ClusterShowOptions>();
  CLI::App* show =
      cluster->add_subcommand("show", "Devices, nodes, links, total peak throughput and price");
  show->add_option("cluster", opt->cluster, "Preset name or cluster YAML file")->required();
  show->add_flag("--json", opt->json, "Print one JSON object");
  show->callback([opt, action] { *action = [opt] { return show_cluster(*opt); }; });

  CLI::App* list = cluster->add_subcommand("list", "List cluster presets and device types");
  list->callback([action] { *action = [] { return list_clusters(); }; });
}

}  // namespace motley::cli
