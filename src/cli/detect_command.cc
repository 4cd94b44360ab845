// `motley detect`: the local node as a cluster file (cluster/detect.h), from nvidia-smi,
// rocm-smi, lspci, /proc and /sys; or, with --from DIR, from those tools' outputs recorded on
// another node by scripts/collect-node.sh. Prints what it found; --out writes the cluster.
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "motley/cluster/cluster.h"
#include "motley/cluster/detect.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "output_options.h"

namespace motley::cli {
namespace {

namespace fs = std::filesystem;

struct DetectOptions {
  std::string from;
  std::string out;
  bool json = false;
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// What `command` prints on stdout; empty when the program is not installed or fails.
std::string run_tool(const std::string& program, const std::string& args) {
  if (std::system(("command -v " + program + " > /dev/null 2>&1").c_str()) != 0) return "";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(
      ::popen((program + " " + args + " 2>/dev/null").c_str(), "r"), ::pclose);
  if (!pipe) return "";
  std::string out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  return out;
}

// The NICs and InfiniBand ports under `root` (/ live, DIR with --from). Live, only interfaces
// backed by a device count (not lo, bridges or veths).
void read_network(const fs::path& root, bool live, NodeProbe* p) {
  std::error_code ec;
  const fs::path net = root / "sys/class/net";
  for (const auto& e : fs::directory_iterator(net, ec)) {
    if (live && !fs::exists(e.path() / "device")) continue;
    const std::string speed = trimmed(read_text(e.path() / "speed"));
    char* end = nullptr;
    const long long mbps = std::strtoll(speed.c_str(), &end, 10);
    p->ethernet.emplace_back(e.path().filename().string(),
                             !speed.empty() && *end == '\0' ? mbps : -1);
  }
  const fs::path ib = root / "sys/class/infiniband";
  for (const auto& dev : fs::directory_iterator(ib, ec)) {
    std::error_code ec2;
    for (const auto& port : fs::directory_iterator(dev.path() / "ports", ec2)) {
      p->infiniband.push_back(
          {dev.path().filename().string() + "/" + port.path().filename().string(),
           trimmed(read_text(port.path() / "rate")), trimmed(read_text(port.path() / "state"))});
    }
  }
  std::sort(p->ethernet.begin(), p->ethernet.end());
  std::sort(p->infiniband.begin(), p->infiniband.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
}

Result<NodeProbe> probe(const DetectOptions& opt) {
  NodeProbe p;
  if (!opt.from.empty()) {
    const fs::path dir(opt.from);
    if (!fs::is_directory(dir)) {
      return invalid_argument(fmt::format(
          "--from {}: not a directory (expected the outputs scripts/collect-node.sh records)",
          opt.from));
    }
    p.hostname = trimmed(read_text(dir / "hostname"));
    p.nvidia_smi = read_text(dir / "nvidia-smi.txt");
    p.nvidia_topology = read_text(dir / "nvidia-smi-topo.txt");
    p.rocm_smi = read_text(dir / "rocm-smi.txt");
    p.rocm_topology = read_text(dir / "rocm-smi-topo.txt");
    p.lspci = read_text(dir / "lspci.txt");
    p.cpuinfo = read_text(dir / "proc/cpuinfo");
    p.meminfo = read_text(dir / "proc/meminfo");
    read_network(dir, false, &p);
    return p;
  }
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) == 0) p.hostname = host.data();
  p.nvidia_smi =
      run_tool("nvidia-smi", "--query-gpu=index,name,memory.total --format=csv,noheader,nounits");
  if (!p.nvidia_smi.empty()) p.nvidia_topology = run_tool("nvidia-smi", "topo -m");
  p.rocm_smi = run_tool("rocm-smi", "--showproductname --showmeminfo vram");
  if (!p.rocm_smi.empty()) p.rocm_topology = run_tool("rocm-smi", "--showtopo");
  p.lspci = run_tool("lspci", "-nn");
  p.cpuinfo = read_text("/proc/cpuinfo");
  p.meminfo = read_text("/proc/meminfo");
  read_network("/", true, &p);
  return p;
}

Status detect_command(const DetectOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_output_options({{"--out", opt.out}}));
  MOTLEY_ASSIGN_OR_RETURN(const NodeProbe p, probe(opt));
  const std::string source = opt.from.empty() ? "this node" : opt.from;
  Result<DetectedNode> node = detect_node(p);
  if (!node.is_ok()) return node.status().with_context(source);
  Result<ClusterSpec> cluster = detected_cluster(*node);
  if (!opt.out.empty() && !cluster.is_ok()) return cluster.status().with_context("--out");
  std::string text;
  if (opt.json) {
    Json devices = Json::array();
    for (const DetectedDevice& d : node->devices) {
      devices.push_back({{"index", d.index},
                         {"product", d.product},
                         {"memory_bytes", d.memory.value()},
                         {"type", d.type}});
    }
    Json j{{"hostname", node->hostname},
           {"cpu", node->cpu},
           {"cpu_threads", node->cpu_threads},
           {"host_memory_bytes", node->host_memory.value()},
           {"source", node->source},
           {"devices", devices},
           {"network", link_kind_name(node->network)},
           {"nic_bandwidth_Bps", node->nic_bandwidth.value()},
           {"nic_count", node->nic_count},
           {"notes", node->notes}};
    if (node->nvlink.has_value()) j["nvlink"] = *node->nvlink;
    if (node->xgmi.has_value()) j["xgmi"] = *node->xgmi;
    j["devices_per_pcie_switch"] = node->devices_per_pcie_switch;
    if (cluster.is_ok()) j["cluster"] = parse_yaml(cluster_to_yaml(*cluster), "cluster").value();
    text = j.dump(2) + "\n";
  } else {
    text = detected_summary(*node);
    if (cluster.is_ok() && opt.out.empty()) text += "\n" + cluster_to_yaml(*cluster);
    if (!cluster.is_ok()) {
      text +=
          "no cluster file: motley plans for accelerators of its catalog; this node trains on "
          "its CPU with 'motley run' (docs/executor.md)\n";
    }
  }
  if (!opt.out.empty()) {
    OutputFiles files;
    files.add(opt.out, cluster_to_yaml(*cluster));
    MOTLEY_RETURN_IF_ERROR(files.commit());
    if (!opt.json) text += "wrote " + opt.out + "\n";
  }
  std::fputs(text.c_str(), stdout);
  return Status::ok();
}

}  // namespace

void add_detect_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<DetectOptions>();
  CLI::App* cmd =
      app.add_subcommand("detect", "Describe this node (accelerators, links, NICs) as a cluster");
  cmd->footer(
      "Reads nvidia-smi (--query-gpu=index,name,memory.total; topo -m), rocm-smi\n"
      "(--showproductname --showmeminfo vram; --showtopo), lspci -nn, /proc/cpuinfo,\n"
      "/proc/meminfo, /sys/class/net/*/speed and /sys/class/infiniband/*/ports/*/{rate,state}.\n"
      "With --from DIR it reads the same outputs recorded on another node by\n"
      "scripts/collect-node.sh.\n"
      "Prints what it found and the cluster YAML; --out writes the YAML. See\n"
      "docs/cluster-format.md, \"motley detect\".");
  cmd->add_option("--from", opt->from, "Read recorded tool outputs from this directory");
  cmd->add_option("--out", opt->out, "Write the cluster YAML here");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->callback([opt, action] { *action = [opt] { return detect_command(*opt); }; });
}

}  // namespace motley::cli
