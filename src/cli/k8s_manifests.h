// `motley export k8s`'s manifests: a ConfigMap holding the plan and a start script, and a
// Kubeflow PyTorchJob (nodes of one kind) or a JobSet (one replicated job per kind of node),
// one pod per plan node selected by GPU model, with the vendor's device resource, spot
// tolerations, a checkpoint volume and the NCCL / RCCL environment. The start script gives each
// process the rank the executor's RankLayout gives its device. Pure text; thread-safe.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/plan/plan.h"

namespace motley::cli {

struct K8sOptions {
  std::string name = "motley";  // of the job, the ConfigMap and the JobSet's DNS subdomain
  std::string namespace_name;   // empty: the kubectl context's
  std::string image;
  std::string plan_text;  // the plan file's content, put in the ConfigMap
  std::string model_name;
  bool jobset = false;           // a JobSet even when every node is of one kind
  std::string checkpoint_claim;  // a PersistentVolumeClaim mounted at /checkpoints; empty: none
  // Device type -> "KEY=VALUE" node label; unset NVIDIA types: GPU Feature Discovery's
  // nvidia.com/gpu.product with the product name nvidia-smi reports (spaces as '-').
  std::map<std::string, std::string> node_labels;
  std::vector<std::string>
      command;  // what each process runs; empty: run --plan /etc/motley/plan.json
  int master_port = 29500;
  // Extra environment of every process, in order (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...; RCCL
  // reads the same NCCL_ names); a name given twice keeps its last value, and NCCL_DEBUG
  // replaces the default. REQUIRES: names other than MASTER_ADDR, MASTER_PORT and
  // MOTLEY_NODE_KIND.
  std::vector<std::pair<std::string, std::string>> env;
};

// The label GPU Feature Discovery puts on nodes of a catalog type, "" when unknown.
std::string default_gpu_product_label(const std::string& device_type);

// Every manifest, in apply order (the ConfigMap first), and what they leave to the user.
struct K8sManifests {
  std::vector<Json> objects;
  std::vector<std::string> notes;
};
K8sManifests k8s_manifests(const Plan& plan, const ClusterSpec& cluster, const K8sOptions& options);

// The objects as one multi-document YAML stream (each document JSON, which is YAML).
std::string k8s_yaml(const K8sManifests& manifests);

}  // namespace motley::cli
