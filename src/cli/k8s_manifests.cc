#include "k8s_manifests.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "motley/cluster/device_catalog.h"
#include "node_ranks.h"

namespace motley::cli {
namespace {

constexpr const char* kPlanPath = "/etc/motley/plan.json";
constexpr const char* kStartPath = "/etc/motley/start.sh";

// The product names nvidia-smi reports for the catalog's NVIDIA types (the common SKU), which GPU
// Feature Discovery writes as the nvidia.com/gpu.product label with spaces as '-'.
const std::map<std::string, std::string>& nvidia_products() {
  static const std::map<std::string, std::string> kProducts = {
      {"H100-SXM", "NVIDIA H100 80GB HBM3"},
      {"H200", "NVIDIA H200"},
      {"A100-80GB", "NVIDIA A100-SXM4-80GB"},
      {"A100-40GB", "NVIDIA A100-SXM4-40GB"},
      {"V100-32GB", "Tesla V100-SXM2-32GB"},
      {"L40S", "NVIDIA L40S"},
      {"RTX-4090", "NVIDIA GeForce RTX 4090"},
      {"A10", "NVIDIA A10"},
      {"T4", "Tesla T4"}};
  return kProducts;
}

// The extended resource a device type is requested by.
std::string device_resource(const std::string& type) {
  Result<const DeviceType*> t = find_device_type(type);
  const Vendor vendor = t.is_ok() ? t.value()->vendor : Vendor::kNvidia;
  if (vendor == Vendor::kAmd) return "amd.com/gpu";
  if (vendor == Vendor::kIntel) return "habana.ai/gaudi";
  return "nvidia.com/gpu";
}

// A DNS-1123 label from `text`: lower case, [a-z0-9-], at most 63 characters.
std::string dns_label(const std::string& text) {
  std::string out;
  for (char c : text) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += std::isalnum(static_cast<unsigned char>(l)) != 0 ? l : '-';
  }
  while (!out.empty() && out.front() == '-') out.erase(out.begin());
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.size() > 40) out.resize(40);
  return out.empty() ? "x" : out;
}

// The start script each pod runs: its plan node from its place in the job, then one motley
// process per device the plan uses there, with that device's rank; the first failure stops the
// others.
std::string start_script(const PlanRanks& ranks, const ClusterSpec& cluster,
                         const std::vector<std::string>& kind_names, bool jobset) {
  std::string s = "#!/bin/bash\n";
  s += "# Started in every pod by `motley export k8s` manifests (docs/exports.md, "
       "\"Kubernetes\").\n";
  s += "set -euo pipefail\n";
  s += jobset ? "place=\"$MOTLEY_NODE_KIND:$JOB_COMPLETION_INDEX\"\n"
              : "place=\"pods:$RANK\"  # the operator's pod rank: Master 0, Worker i is i + 1\n";
  s += "case \"$place\" in\n";
  // PyTorchJob's pod 0 (the Master, whose address the operator hands out) plays the node of
  // rank 0, which hosts the rendezvous; the other pods follow in cluster order.
  std::vector<std::pair<size_t, size_t>> order;  // (kind, index in kind)
  for (size_t k = 0; k < ranks.kinds.size(); ++k) {
    for (size_t i = 0; i < ranks.kinds[k].nodes.size(); ++i) order.emplace_back(k, i);
  }
  if (!jobset) {
    std::stable_partition(order.begin(), order.end(), [&](const auto& ki) {
      const auto& held = ranks.nodes[ranks.kinds[ki.first].nodes[ki.second]].local_rank;
      return std::any_of(held.begin(), held.end(), [](const auto& lr) { return lr.second == 0; });
    });
  }
  int pod = 0;
  for (const auto& [k, i] : order) {
    const NodeRanks& n = ranks.nodes[ranks.kinds[k].nodes[i]];
    std::string r, d;
    for (const auto& [device, rank] : n.local_rank) {
      r += fmt::format(" {}", rank);
      d += fmt::format(" {}", device);
    }
    const std::string key =
        jobset ? kind_names[k] + ":" + std::to_string(i) : "pods:" + std::to_string(pod);
    s += fmt::format("  {}) node={}; ranks=({} ); devices=({} ) ;;\n", shell_quote(key),
                     shell_quote(cluster.nodes[n.node].name), r, d);
    ++pod;
  }
  s += "  *) echo \"motley: no plan node for pod $place\" >&2; exit 2 ;;\n";
  s += "esac\n";
  s += fmt::format("export WORLD_SIZE={} LOCAL_WORLD_SIZE=${{#ranks[@]}}\n", ranks.world);
  s += "echo \"motley: pod $place plays plan node $node, ranks ${ranks[*]}\"\n";
  s += "pids=()\n";
  s += "for i in \"${!ranks[@]}\"; do\n";
  s += "  RANK=${ranks[i]} LOCAL_RANK=$i MOTLEY_LOCAL_DEVICE=${devices[i]} \\\n";
  s += "    \"${MOTLEY:-motley}\" \"$@\" &\n";
  s += "  pids+=($!)\n";
  s += "done\n";
  // The first rank to fail stops the others. `wait -n` reports the ranks as they end; bash may
  // lose one from its job table when several end at once (then `wait -n` finds none left and
  // returns 127: in a test under load, once in 1,500 runs, with every rank exited 0), so the
  // ranks it did not report are waited for by pid, which returns each one's saved status.
  s += "status=0\n";
  s += "declare -A left=()\n";
  s += "for pid in \"${pids[@]}\"; do left[$pid]=1; done\n";
  s += "while (( ${#left[@]} > 0 )); do\n";
  s += "  unset finished; rc=0\n";
  s += "  wait -n -p finished || rc=$?\n";
  s += "  [[ -n ${finished:-} ]] || break  # none left to report: the rest by pid, below\n";
  s += "  unset \"left[$finished]\"\n";
  s += "  if (( rc != 0 )); then status=1; kill \"${pids[@]}\" 2> /dev/null || true; fi\n";
  s += "done\n";
  s += "for pid in \"${!left[@]}\"; do wait \"$pid\" || status=1; done\n";
  s += "exit $status\n";
  return s;
}

}  // namespace

std::string default_gpu_product_label(const std::string& device_type) {
  auto it = nvidia_products().find(device_type);
  if (it == nvidia_products().end()) return "";
  std::string label = it->second;
  std::replace(label.begin(), label.end(), ' ', '-');
  return label;
}

K8sManifests k8s_manifests(const Plan& plan, const ClusterSpec& cluster, const K8sOptions& o) {
  K8sManifests out;
  const PlanRanks ranks = plan_ranks(plan, cluster);
  const bool jobset = o.jobset || ranks.kinds.size() > 1;
  const std::string name = dns_label(o.name);
  std::vector<std::string> kind_names;
  for (const NodeKind& k : ranks.kinds) {
    std::string n;
    for (const auto& [type, count] : k.types)
      n += fmt::format("{}{}", n.empty() ? "" : "-", dns_label(type));
    if (std::find(kind_names.begin(), kind_names.end(), n) != kind_names.end()) {
      n += "-" + std::to_string(kind_names.size());
    }
    kind_names.push_back(n);
  }
  auto metadata = [&](const std::string& object) {
    Json m{{"name", object},
           {"labels",
            Json{{"app.kubernetes.io/name", "motley"}, {"app.kubernetes.io/instance", name}}}};
    if (!o.namespace_name.empty()) m["namespace"] = o.namespace_name;
    return m;
  };

  out.objects.push_back(
      Json{{"apiVersion", "v1"},
           {"kind", "ConfigMap"},
           {"metadata", metadata(name + "-plan")},
           {"data", Json{{"plan.json", o.plan_text},
                         {"start.sh", start_script(ranks, cluster, kind_names, jobset)}}}});

  std::vector<std::string> command = o.command;
  if (command.empty()) command = {"run", "--plan", kPlanPath};
  // One pod template per kind of node.
  auto pod_template = [&](const NodeKind& kind, const std::string& kind_name) {
    Json limits = Json::object(), selector = Json::object();
    bool spot = false;
    for (int i : kind.nodes) spot = spot || cluster.nodes[ranks.nodes[i].node].spot;
    for (const auto& [type, count] : kind.types) {
      const std::string resource = device_resource(type);
      limits[resource] = limits.contains(resource) ? limits[resource].get<int>() + count : count;
      auto label = o.node_labels.find(type);
      if (label != o.node_labels.end()) {
        const size_t eq = label->second.find('=');
        selector[label->second.substr(0, eq)] = label->second.substr(eq + 1);
      } else if (!default_gpu_product_label(type).empty()) {
        selector["nvidia.com/gpu.product"] = default_gpu_product_label(type);
      } else {
        out.notes.push_back(fmt::format(
            "{} nodes are selected by their {} resource alone; give --node-label {}=KEY=VALUE "
            "for the label your cluster puts on them",
            type, resource, type));
      }
    }
    std::map<std::string, std::string> extra;  // the last value of each name
    for (const auto& [key, value] : o.env) extra[key] = value;
    Json env =
        Json::array({Json{{"name", "MASTER_PORT"}, {"value", std::to_string(o.master_port)}},
                     Json{{"name", "NCCL_DEBUG"},
                          {"value", extra.count("NCCL_DEBUG") ? extra["NCCL_DEBUG"] : "WARN"}},
                     Json{{"name", "MOTLEY_NODE_KIND"}, {"value", kind_name}}});
    std::set<std::string> added = {"NCCL_DEBUG"};
    for (const auto& [key, value] : o.env) {
      if (added.insert(key).second) env.push_back(Json{{"name", key}, {"value", extra[key]}});
    }
    if (jobset) {
      // The pod of the node holding rank 0: JobSet's hostname <jobset>-<job>-<job index>-<pod
      // index> in the JobSet's subdomain.
      std::string master;
      for (size_t k = 0; k < ranks.kinds.size(); ++k) {
        for (size_t i = 0; i < ranks.kinds[k].nodes.size(); ++i) {
          for (const auto& lr : ranks.nodes[ranks.kinds[k].nodes[i]].local_rank) {
            if (lr.second == 0) master = fmt::format("{}-{}-0-{}.{}", name, kind_names[k], i, name);
          }
        }
      }
      env.push_back(Json{{"name", "MASTER_ADDR"}, {"value", master}});
    }
    Json mounts = Json::array({Json{{"name", "motley"}, {"mountPath", "/etc/motley"}},
                               Json{{"name", "dshm"}, {"mountPath", "/dev/shm"}}});
    Json volumes =
        Json::array({Json{{"name", "motley"}, {"configMap", Json{{"name", name + "-plan"}}}},
                     Json{{"name", "dshm"}, {"emptyDir", Json{{"medium", "Memory"}}}}});
    if (!o.checkpoint_claim.empty()) {
      mounts.push_back(Json{{"name", "checkpoints"}, {"mountPath", "/checkpoints"}});
      volumes.push_back(Json{{"name", "checkpoints"},
                             {"persistentVolumeClaim", Json{{"claimName", o.checkpoint_claim}}}});
    }
    Json args = Json::array({kStartPath});
    for (const std::string& a : command) args.push_back(a);
    Json container{{"name", jobset ? "motley" : "pytorch"},
                   {"image", o.image},
                   {"command", Json::array({"bash"})},
                   {"args", args},
                   {"env", env},
                   {"resources", Json{{"limits", limits}}},
                   {"volumeMounts", mounts}};
    Json spec{{"containers", Json::array({container})}, {"volumes", volumes}};
    if (!selector.empty()) spec["nodeSelector"] = selector;
    if (spot) {
      // The taints GKE and AKS put on spot nodes; EKS's spot node groups have none by default.
      spec["tolerations"] = Json::array({Json{{"key", "cloud.google.com/gke-spot"},
                                              {"operator", "Equal"},
                                              {"value", "true"},
                                              {"effect", "NoSchedule"}},
                                         Json{{"key", "kubernetes.azure.com/scalesetpriority"},
                                              {"operator", "Equal"},
                                              {"value", "spot"},
                                              {"effect", "NoSchedule"}}});
    }
    if (jobset) spec["restartPolicy"] = "Never";
    return Json{{"metadata", Json{{"labels", Json{{"app.kubernetes.io/name", "motley"},
                                                  {"app.kubernetes.io/instance", name}}}}},
                {"spec", spec}};
  };

  if (!jobset) {
    const NodeKind& kind = ranks.kinds[0];
    Json replicas{{"Master", Json{{"replicas", 1},
                                  {"restartPolicy", "OnFailure"},
                                  {"template", pod_template(kind, kind_names[0])}}}};
    if (kind.nodes.size() > 1) {
      replicas["Worker"] = Json{{"replicas", static_cast<int>(kind.nodes.size()) - 1},
                                {"restartPolicy", "OnFailure"},
                                {"template", pod_template(kind, kind_names[0])}};
    }
    out.objects.push_back(Json{{"apiVersion", "kubeflow.org/v1"},
                               {"kind", "PyTorchJob"},
                               {"metadata", metadata(name)},
                               {"spec", Json{{"pytorchReplicaSpecs", replicas}}}});
  } else {
    Json jobs = Json::array();
    for (size_t k = 0; k < ranks.kinds.size(); ++k) {
      const int pods = static_cast<int>(ranks.kinds[k].nodes.size());
      jobs.push_back(
          Json{{"name", kind_names[k]},
               {"replicas", 1},
               {"template",
                Json{{"spec", Json{{"parallelism", pods},
                                   {"completions", pods},
                                   {"completionMode", "Indexed"},
                                   {"backoffLimit", 0},
                                   {"template", pod_template(ranks.kinds[k], kind_names[k])}}}}}});
    }
    out.objects.push_back(
        Json{{"apiVersion", "jobset.x-k8s.io/v1alpha2"},
             {"kind", "JobSet"},
             {"metadata", metadata(name)},
             {"spec", Json{{"network", Json{{"enableDNSHostnames", true}, {"subdomain", name}}},
                           {"failurePolicy", Json{{"maxRestarts", 3}}},
                           {"replicatedJobs", jobs}}}});
  }
  if (o.checkpoint_claim.empty()) {
    out.notes.push_back(
        "no --checkpoint-claim: checkpoints written inside a pod are lost with it; give a "
        "PersistentVolumeClaim and run with --checkpoint-dir /checkpoints");
  }
  return out;
}

std::string k8s_yaml(const K8sManifests& manifests) {
  std::string out;
  for (const Json& o : manifests.objects) out += "---\n" + o.dump(2) + "\n";
  return out;
}

}  // namespace motley::cli
