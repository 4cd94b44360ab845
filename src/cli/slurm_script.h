// `motley export slurm`'s script: an sbatch file with one heterogeneous-job component per kind
// of node the plan uses (its devices' types and counts: --nodes, --ntasks-per-node,
// --gres=gpu:TYPE:N), and an srun step that starts one task per plan device and gives each the
// rank the executor's RankLayout gives that device (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, MOTLEY_LOCAL_DEVICE). Pure text; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/plan/plan.h"

namespace motley::cli {

struct SlurmOptions {
  std::string plan_path;  // the plan as the job's nodes see it
  std::string job_name;   // empty: "motley-<model>"
  std::string model_name;
  std::string partition;  // empty: the site's default
  std::string account;
  std::string time;  // sbatch --time, e.g. "04:00:00"; empty: the partition's default
  // Device type -> the site's GRES type name; unset types: the catalog name's first word in
  // lower case ("H100-SXM" -> "h100").
  std::map<std::string, std::string> gres_names;
  std::vector<std::string> command;  // what each task runs; empty: run --plan <plan_path>
  int master_port = 29500;
};

// The GRES type name a device type gets by default.
std::string default_gres_name(const std::string& device_type);

// The sbatch script. REQUIRES: the plan validates against `cluster`.
std::string slurm_script(const Plan& plan, const ClusterSpec& cluster, const SlurmOptions& options);

}  // namespace motley::cli
