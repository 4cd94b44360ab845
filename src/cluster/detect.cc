#include "motley/cluster/detect.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "motley/cluster/device_catalog.h"
#include "motley/core/json.h"

namespace motley {
namespace {

// Upper-case alphanumeric words: "NVIDIA A100-SXM4-80GB" -> NVIDIA, A100, SXM4, 80GB.
std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  std::string word;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) {
      word += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (!word.empty()) {
      out.push_back(word);
      word.clear();
    }
  }
  if (!word.empty()) out.push_back(word);
  return out;
}

// The word of a catalog name that names the model: its first word holding a digit (H100-SXM ->
// H100, RTX-4090 -> 4090, Gaudi2 -> GAUDI2).
std::string model_word(const std::string& name) {
  for (const std::string& w : words_of(name)) {
    if (std::any_of(w.begin(), w.end(), [](char c) { return std::isdigit(c) != 0; })) return w;
  }
  return "";
}

bool contains_run(const std::vector<std::string>& words, const std::vector<std::string>& run) {
  if (run.empty() || run.size() > words.size()) return false;
  for (size_t i = 0; i + run.size() <= words.size(); ++i) {
    if (std::equal(run.begin(), run.end(), words.begin() + static_cast<std::ptrdiff_t>(i))) {
      return true;
    }
  }
  return false;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

Result<std::vector<DetectedDevice>> parse_nvidia_smi(const std::string& text) {
  std::vector<DetectedDevice> out;
  int n = 0;
  for (const std::string& raw : lines_of(text)) {
    ++n;
    const std::string line = trim(raw);
    if (line.empty()) continue;
    std::vector<std::string> fields;
    std::stringstream in(line);
    std::string f;
    while (std::getline(in, f, ',')) fields.push_back(trim(f));
    DetectedDevice d;
    char* end = nullptr;
    if (fields.size() == 3) {
      d.index = static_cast<int>(std::strtol(fields[0].c_str(), &end, 10));
    }
    if (fields.size() != 3 || end == nullptr || *end != '\0' || fields[0].empty() ||
        fields[1].empty()) {
      return invalid_argument(fmt::format(
          "nvidia-smi: line {}: expected 'index, name, memory.total' (--query-gpu=index,name,"
          "memory.total --format=csv,noheader,nounits), got '{}'",
          n, line));
    }
    d.product = fields[1];
    const double mib = std::strtod(fields[2].c_str(), &end);
    if (*end == '\0' && std::isfinite(mib) && mib > 0) d.memory = Bytes(mib * 1024 * 1024);
    out.push_back(d);
  }
  return out;
}

std::vector<DetectedDevice> parse_rocm_smi(const std::string& text) {
  std::map<int, DetectedDevice> by_index;
  const std::regex series(R"(GPU\[(\d+)\]\s*:\s*Card [Ss]eries:\s*(.*\S))");
  const std::regex vram(R"(GPU\[(\d+)\]\s*:\s*VRAM Total Memory \(B\):\s*(\d+))");
  for (const std::string& line : lines_of(text)) {
    std::smatch m;
    if (std::regex_search(line, m, series)) {
      DetectedDevice& d = by_index[std::stoi(m[1])];
      d.index = std::stoi(m[1]);
      d.product = m[2];
    } else if (std::regex_search(line, m, vram)) {
      by_index[std::stoi(m[1])].memory = Bytes(std::stod(m[2]));
    }
  }
  std::vector<DetectedDevice> out;
  for (auto& [i, d] : by_index) {
    if (!d.product.empty()) out.push_back(d);
  }
  return out;
}

// Accelerators in `lspci -nn`: NVIDIA [10de] VGA / 3D controllers, AMD [1002] 3D, display and
// processing accelerators (not its VGA, which is often a CPU's integrated graphics), Habana
// [1da3] processing accelerators.
int count_lspci(const std::string& text) {
  const std::regex device(R"(\[(0300|0302|0380|1200)\]:.*\[(10de|1002|1da3):[0-9a-f]{4}\])");
  int n = 0;
  for (const std::string& line : lines_of(text)) {
    std::smatch m;
    if (!std::regex_search(line, m, device)) continue;
    const std::string cls = m[1], vendor = m[2];
    if (vendor == "10de" && (cls == "0300" || cls == "0302")) ++n;
    if (vendor == "1002" && cls != "0300") ++n;
    if (vendor == "1da3" && cls == "1200") ++n;
  }
  return n;
}

// The words of a line.
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::istringstream in(line);
  std::string c;
  while (in >> c) cells.push_back(c);
  return cells;
}

// Whether `cell` is "GPU<digits>".
bool is_gpu_label(const std::string& cell) {
  return cell.size() > 3 && cell.rfind("GPU", 0) == 0 &&
         std::all_of(cell.begin() + 3, cell.end(),
                     [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; });
}

// The GPU-to-GPU part of a topology matrix: the rows "GPUi c0 c1 ..." in order, each cut to
// `gpus` cells; empty when there are none, or when a row is short. Rows start at the line's
// first column; the header of GPU names (and nvidia-smi's legend) is indented.
std::vector<std::vector<std::string>> gpu_matrix(const std::vector<std::string>& rows_text,
                                                 int gpus) {
  std::vector<std::vector<std::string>> m;
  for (const std::string& line : rows_text) {
    if (line.empty() || std::isspace(static_cast<unsigned char>(line[0])) != 0) continue;
    std::vector<std::string> cells = cells_of(line);
    if (cells.empty() || !is_gpu_label(cells[0])) continue;
    if (static_cast<int>(cells.size()) < gpus + 1) return {};
    m.emplace_back(cells.begin() + 1, cells.begin() + 1 + gpus);
  }
  if (static_cast<int>(m.size()) != gpus) return {};
  return m;
}

std::string gpu_list(const std::vector<int>& gpus) {
  std::vector<std::string> names;
  for (int g : gpus) names.push_back(std::to_string(g));
  return fmt::format("{}", fmt::join(names, ", "));
}

// `nvidia-smi topo -m`: whether every pair of GPUs is connected by NVLink ("NV<n>"); without,
// the PCIe switches (pairs PIX or PXB share one) and what the cluster format cannot hold, as
// notes.
void read_nvidia_topology(const std::string& text, int gpus, DetectedNode* node) {
  const std::vector<std::vector<std::string>> m = gpu_matrix(lines_of(text), gpus);
  if (m.empty()) return;
  bool all_nvlink = true, some_nvlink = false, sockets = false;
  for (int i = 0; i < gpus; ++i) {
    for (int j = 0; j < gpus; ++j) {
      if (i == j) continue;
      const bool nv = m[i][j].rfind("NV", 0) == 0;
      all_nvlink = all_nvlink && nv;
      some_nvlink = some_nvlink || nv;
      sockets = sockets || m[i][j] == "SYS";
    }
  }
  node->nvlink = all_nvlink;
  if (all_nvlink || gpus < 2) return;
  if (some_nvlink) {
    node->notes.push_back(
        "NVLink joins only some pairs of GPUs (nvidia-smi topo -m: NV<n> cells); a node has one "
        "kind of link between its devices, so it is described with PCIe and the NVLink pairs are "
        "priced as PCIe (measure them with 'motley profile comm' to use their rate)");
  }
  // GPUs on one switch: runs of consecutive GPUs that are PIX or PXB to one another.
  std::vector<int> run_of(gpus, 0);
  std::vector<std::vector<int>> runs;
  for (int i = 0; i < gpus; ++i) {
    const bool joins = i > 0 && (m[i - 1][i] == "PIX" || m[i - 1][i] == "PXB");
    if (!joins) runs.emplace_back();
    runs.back().push_back(i);
  }
  bool consistent = true;
  for (const auto& r : runs) {
    for (int a : r) {
      for (int b = 0; b < gpus; ++b) {
        const bool same_run = std::find(r.begin(), r.end(), b) != r.end();
        const bool switched = m[a][b] == "PIX" || m[a][b] == "PXB";
        if (a != b && same_run != switched) consistent = false;
      }
    }
  }
  const size_t size = runs.front().size();
  const bool even = std::all_of(runs.begin(), runs.end(),
                                [&](const std::vector<int>& r) { return r.size() == size; });
  if (consistent && even && size > 1) {
    node->devices_per_pcie_switch = static_cast<int>(size);
  } else if (!consistent || !even) {
    std::vector<std::string> groups;
    for (const auto& r : runs) groups.push_back("[" + gpu_list(r) + "]");
    node->notes.push_back(fmt::format(
        "the GPUs' PCIe switches (nvidia-smi topo -m: PIX and PXB pairs) are not runs of equal "
        "size in device order ({}); the cluster format cannot hold them, so every GPU is "
        "described on the root complex",
        fmt::join(groups, " ")));
  }
  if (sockets) {
    node->notes.push_back(
        "some pairs of GPUs cross CPU sockets (nvidia-smi topo -m: SYS); they are priced as "
        "PCIe through one root complex, which is optimistic for them");
  }
}

// `rocm-smi --showtopo`: whether every pair of GPUs is xGMI-connected, from its "Link Type
// between two GPUs" table (cells XGMI or PCIE); unset when the table is absent.
void read_rocm_topology(const std::string& text, int gpus, DetectedNode* node) {
  std::vector<std::string> rows;
  bool inside = false;
  for (const std::string& line : lines_of(text)) {
    if (line.find("Link Type between two GPUs") != std::string::npos) {
      inside = true;
      continue;
    }
    if (inside && line.rfind("====", 0) == 0) break;
    if (inside) rows.push_back(line);
  }
  const std::vector<std::vector<std::string>> m = gpu_matrix(rows, gpus);
  if (m.empty()) return;
  bool all = true;
  std::vector<std::string> pcie;
  for (int i = 0; i < gpus; ++i) {
    for (int j = i + 1; j < gpus; ++j) {
      if (m[i][j] != "XGMI") {
        all = false;
        pcie.push_back(fmt::format("{}-{} {}", i, j, m[i][j]));
      }
    }
  }
  node->xgmi = all;
  if (!all && pcie.size() < static_cast<size_t>(gpus) * (gpus - 1) / 2) {
    node->notes.push_back(fmt::format(
        "xGMI joins only some pairs of GPUs (rocm-smi --showtopo; not: {}); a node has one kind "
        "of link between its devices, so it is described with PCIe",
        fmt::join(pcie, ", ")));
  }
}

}  // namespace

std::optional<std::string> match_device_type(const std::string& product, Bytes memory) {
  const std::vector<std::string> words = words_of(product);
  const DeviceType* best = nullptr;
  double distance = 0;
  for (const DeviceType& t : device_catalog()) {
    bool match = std::find(words.begin(), words.end(), model_word(t.name)) != words.end();
    for (const std::string& alias : t.aliases)
      match = match || contains_run(words, words_of(alias));
    if (!match) continue;
    const double d = memory > Bytes(0) ? std::abs((t.memory - memory).value()) : 0;
    if (best == nullptr || d < distance) {
      best = &t;
      distance = d;
    }
  }
  if (best == nullptr) return std::nullopt;
  return best->name;
}

Result<DetectedNode> detect_node(const NodeProbe& p) {
  DetectedNode node;
  node.hostname = p.hostname.empty() ? "node" : p.hostname;
  for (const std::string& line : lines_of(p.cpuinfo)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon));
    if (key == "processor") ++node.cpu_threads;
    if (key == "model name" && node.cpu.empty()) node.cpu = trim(line.substr(colon + 1));
  }
  for (const std::string& line : lines_of(p.meminfo)) {
    if (line.rfind("MemTotal:", 0) == 0) {
      node.host_memory = Bytes(std::strtod(line.c_str() + 9, nullptr) * 1024);
    }
  }
  node.lspci_accelerators = count_lspci(p.lspci);
  node.lspci_listed = !trim(p.lspci).empty();
  if (!trim(p.nvidia_smi).empty()) {
    MOTLEY_ASSIGN_OR_RETURN(node.devices, parse_nvidia_smi(p.nvidia_smi));
    node.source = "nvidia-smi";
    read_nvidia_topology(p.nvidia_topology, static_cast<int>(node.devices.size()), &node);
    if (!node.nvlink && node.devices.size() > 1) {
      node.notes.push_back(
          "no 'nvidia-smi topo -m' output: the catalog's link between the GPUs is assumed");
    }
  } else if (!trim(p.rocm_smi).empty()) {
    node.devices = parse_rocm_smi(p.rocm_smi);
    node.source = "rocm-smi";
    if (node.devices.empty()) {
      return invalid_argument(
          "rocm-smi: no 'GPU[i] : Card series: NAME' line (run rocm-smi --showproductname "
          "--showmeminfo vram)");
    }
    read_rocm_topology(p.rocm_topology, static_cast<int>(node.devices.size()), &node);
    if (!node.xgmi && node.devices.size() > 1) {
      node.notes.push_back(
          "no 'rocm-smi --showtopo' output: the catalog's link between the GPUs is assumed");
    }
  }
  for (DetectedDevice& d : node.devices) {
    std::optional<std::string> type = match_device_type(d.product, d.memory);
    if (!type) {
      std::vector<std::string> names;
      for (const DeviceType& t : device_catalog()) names.push_back(t.name);
      return invalid_argument(fmt::format(
          "{}: device {} is '{}', which matches no type of motley's catalog ({}); add it to the "
          "catalog (docs/devices.md) or write the cluster file by hand",
          node.source, d.index, d.product, join_alternatives(names)));
    }
    d.type = *type;
  }
  if (node.xgmi.value_or(false) && !node.devices.empty()) {
    Result<const DeviceType*> t = find_device_type(node.devices.front().type);
    if (t.is_ok() && t.value()->intra_node_link != LinkKind::kXgmi) {
      node.notes.push_back(fmt::format(
          "rocm-smi --showtopo reports xGMI between every pair, but motley's catalog has no xGMI "
          "rate for {}: the node is described with the catalog's link; measure the pairs with "
          "'motley profile comm'",
          node.devices.front().type));
    }
  }
  if (node.devices.empty() && node.lspci_accelerators > 0) {
    node.notes.push_back(fmt::format(
        "lspci lists {} accelerator{}, but neither nvidia-smi nor rocm-smi answered: install the "
        "vendor's tools, or pass their recorded output with --from",
        node.lspci_accelerators, node.lspci_accelerators == 1 ? "" : "s"));
  }
  // NICs: active InfiniBand ports first, else the fastest Ethernet interfaces.
  const std::regex rate(R"(^\s*([0-9.]+)\s*Gb/sec)");
  double best = 0;
  int count = 0;
  for (const NodeProbe::IbPort& port : p.infiniband) {
    std::smatch m;
    if (port.state.find("ACTIVE") == std::string::npos || !std::regex_search(port.rate, m, rate)) {
      continue;
    }
    const double bytes = std::stod(m[1]) * 1e9 / 8;
    if (bytes > best) {
      best = bytes;
      count = 0;
    }
    if (bytes == best) ++count;
  }
  if (count > 0) {
    node.network = LinkKind::kInfiniband;
  } else {
    for (const auto& [name, mbps] : p.ethernet) {
      const double bytes = static_cast<double>(mbps) * 1e6 / 8;
      if (mbps <= 0) continue;
      if (bytes > best) {
        best = bytes;
        count = 0;
      }
      if (bytes == best) ++count;
    }
  }
  node.nic_bandwidth = BytesPerSecond(best);
  node.nic_count = count;
  if (count == 0) node.notes.push_back("no network interface with a known speed was found");
  return node;
}

Result<ClusterSpec> detected_cluster(const DetectedNode& node) {
  if (node.devices.empty()) {
    return invalid_argument(fmt::format(
        "host {} has no accelerator motley can plan for ({}); a cluster file needs GPUs or "
        "other accelerators of the catalog",
        node.hostname, node.cpu.empty() ? "CPU only" : node.cpu));
  }
  std::map<std::string, int> counts;
  std::vector<std::string> order;
  for (const DetectedDevice& d : node.devices) {
    if (counts[d.type]++ == 0) order.push_back(d.type);
  }
  Json devices = Json::array();
  for (const std::string& t : order) devices.push_back(Json{{"type", t}, {"count", counts[t]}});
  Json n{{"name", node.hostname}, {"devices", devices.size() == 1 ? devices[0] : devices}};
  if ((node.nvlink.has_value() && !*node.nvlink) || (node.xgmi.has_value() && !*node.xgmi)) {
    n["interconnect"] = Json{{"kind", "pcie"}};
  }
  if (node.devices_per_pcie_switch > 0) n["devices_per_pcie_switch"] = node.devices_per_pcie_switch;
  if (node.nic_count > 0) {
    n["nic"] =
        Json{{"bandwidth_GBps", node.nic_bandwidth.value() / 1e9}, {"count", node.nic_count}};
  }
  Json doc{{"name", node.hostname}, {"nodes", Json::array({n})}};
  if (node.nic_count > 0) {
    doc["network"] = Json{{"kind", link_kind_name(node.network)},
                          {"bandwidth_GBps", node.nic_bandwidth.value() / 1e9}};
  }
  return cluster_from_json(doc, "motley detect");
}

std::string detected_summary(const DetectedNode& node) {
  std::string out = fmt::format("host {}: {}, {} threads, {:.1f} GiB memory\n", node.hostname,
                                node.cpu.empty() ? "CPU model unknown" : node.cpu, node.cpu_threads,
                                node.host_memory.value() / (1 << 30));
  if (node.devices.empty()) {
    out += "accelerators: none";
    if (node.lspci_accelerators == 0) {
      out += node.lspci_listed ? " (no nvidia-smi or rocm-smi output; lspci lists none)"
                               : " (no nvidia-smi, rocm-smi or lspci output)";
    }
    out += "\n";
  } else {
    std::map<std::string, int> seen;
    std::vector<std::string> order;
    for (const DetectedDevice& d : node.devices) {
      const std::string key =
          fmt::format("{} ({:.1f} GiB) -> {}", d.product, d.memory.value() / (1 << 30), d.type);
      if (seen[key]++ == 0) order.push_back(key);
    }
    for (const std::string& k : order) {
      out += fmt::format("accelerators ({}): {} x {}\n", node.source, seen[k], k);
    }
    if (node.nvlink.has_value()) {
      out += *node.nvlink ? "links: NVLink between every pair of GPUs (nvidia-smi topo -m)\n"
                          : "links: PCIe (not every pair of GPUs is NVLink-connected, nvidia-smi "
                            "topo -m)\n";
    }
    if (node.xgmi.has_value()) {
      out += *node.xgmi ? "links: xGMI between every pair of GPUs (rocm-smi --showtopo)\n"
                        : "links: PCIe (not every pair of GPUs is xGMI-connected, rocm-smi "
                          "--showtopo)\n";
    }
    if (node.devices_per_pcie_switch > 0) {
      out += fmt::format("PCIe: {} GPUs per switch (nvidia-smi topo -m: PIX/PXB pairs)\n",
                         node.devices_per_pcie_switch);
    }
  }
  if (node.nic_count > 0) {
    out += fmt::format("network: {}, {} NIC{} of {:.1f} GB/s\n",
                       node.network == LinkKind::kInfiniband ? "InfiniBand" : "Ethernet",
                       node.nic_count, node.nic_count == 1 ? "" : "s",
                       node.nic_bandwidth.value() / 1e9);
  }
  for (const std::string& note : node.notes) out += "note: " + note + "\n";
  return out;
}

}  // namespace motley
