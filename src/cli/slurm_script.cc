#include "slurm_script.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "node_ranks.h"

namespace motley::cli {

std::string default_gres_name(const std::string& device_type) {
  std::string out;
  for (char c : device_type) {
    if (c == '-' || c == ' ' || c == '_') break;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out.empty() ? "gpu" : out;
}

std::string slurm_script(const Plan& plan, const ClusterSpec& cluster, const SlurmOptions& o) {
  const PlanRanks ranks = plan_ranks(plan, cluster);
  const std::vector<NodeRanks>& used = ranks.nodes;
  const std::vector<NodeKind>& components = ranks.kinds;
  const int world = ranks.world;
  const bool het = components.size() > 1;

  std::string s = "#!/bin/bash\n";
  s += fmt::format(
      "# motley plan {}: {} on {}, {} ranks on {} nodes (docs/exports.md, \"Slurm\").\n",
      o.plan_path, o.model_name, cluster.name, world, used.size());
  s += "# Submit with sbatch; MOTLEY names the motley binary on the nodes (default: motley).\n";
  for (size_t c = 0; c < components.size(); ++c) {
    std::string what, names;
    for (const auto& [type, n] : components[c].types) {
      what += fmt::format("{}{} {}", what.empty() ? "" : " + ", n, type);
    }
    for (int i : components[c].nodes) {
      names += fmt::format("{}{}", names.empty() ? "" : ", ", cluster.nodes[used[i].node].name);
    }
    s += fmt::format("# component {}: {} node{} of {} ({})\n", c, components[c].nodes.size(),
                     components[c].nodes.size() == 1 ? "" : "s", what, names);
  }
  const std::string job = o.job_name.empty() ? "motley-" + o.model_name : o.job_name;
  for (size_t c = 0; c < components.size(); ++c) {
    if (c > 0) s += "#SBATCH hetjob\n";
    if (c == 0) s += "#SBATCH --job-name=" + job + "\n";
    if (!o.partition.empty()) s += "#SBATCH --partition=" + o.partition + "\n";
    if (!o.account.empty()) s += "#SBATCH --account=" + o.account + "\n";
    if (!o.time.empty()) s += "#SBATCH --time=" + o.time + "\n";
    int tasks = 0;
    std::string gres;
    for (const auto& [type, n] : components[c].types) {
      auto named = o.gres_names.find(type);
      const std::string name =
          named != o.gres_names.end() ? named->second : default_gres_name(type);
      gres += fmt::format("{}gpu:{}:{}", gres.empty() ? "" : ",", name, n);
      tasks += n;
    }
    s += fmt::format("#SBATCH --nodes={}\n", components[c].nodes.size());
    s += fmt::format("#SBATCH --ntasks-per-node={}\n", tasks);
    s += "#SBATCH --gres=" + gres + "\n";
    s += "#SBATCH --exclusive\n";
  }
  s += "\nset -euo pipefail\n";
  s += "export MOTLEY=\"${MOTLEY:-motley}\"\n";
  s += fmt::format("export MASTER_PORT=\"${{MASTER_PORT:-{}}}\"\n", o.master_port);
  auto nodelist = [&](size_t c) {
    return het ? fmt::format("\"$SLURM_JOB_NODELIST_HET_GROUP_{}\"", c)
               : std::string("\"$SLURM_JOB_NODELIST\"");
  };
  s += "# Component c's k-th host plays the component's k-th plan node.\n";
  s += "MOTLEY_HOST_NODES=\"\"\n";
  for (size_t c = 0; c < components.size(); ++c) {
    std::string names;
    for (int i : components[c].nodes) {
      names += ' ';
      names += shell_quote(cluster.nodes[used[i].node].name);
    }
    s += fmt::format("plan_nodes=({} )\n", names);
    s += fmt::format("mapfile -t hosts < <(scontrol show hostnames {})\n", nodelist(c));
    if (c == 0) s += "export MASTER_ADDR=\"${hosts[0]}\"\n";
    s += fmt::format(
        "if (( ${{#hosts[@]}} != {} )); then echo \"motley: component {} has ${{#hosts[@]}} "
        "hosts, the plan {}\" >&2; exit 2; fi\n",
        components[c].nodes.size(), c, components[c].nodes.size());
    s += "for k in \"${!hosts[@]}\"; do MOTLEY_HOST_NODES+=\"${hosts[k]}=${plan_nodes[k]} \"; "
         "done\n";
  }
  s += "export MOTLEY_HOST_NODES\n\n";
  // The task: find this host's plan node, then the rank of its SLURM_LOCALID-th device.
  s += "read -r -d '' MOTLEY_TASK <<'TASK' || true\n";
  s += "set -euo pipefail\n";
  s += "node=\"\"\n";
  s += "for pair in $MOTLEY_HOST_NODES; do\n";
  s += "  if [[ \"${pair%%=*}\" == \"$SLURMD_NODENAME\" ]]; then node=\"${pair#*=}\"; fi\n";
  s += "done\n";
  s += "case \"$node:$SLURM_LOCALID\" in\n";
  for (const NodeRanks& n : used) {
    for (size_t k = 0; k < n.local_rank.size(); ++k) {
      s += fmt::format("  {}) rank={}; device={}; local={} ;;\n",
                       shell_quote(cluster.nodes[n.node].name + ":" + std::to_string(k)),
                       n.local_rank[k].second, n.local_rank[k].first, n.local_rank.size());
    }
  }
  s += "  *) echo \"motley: no plan device for task $SLURM_LOCALID on host $SLURMD_NODENAME "
       "(plan node '$node')\" >&2; exit 2 ;;\n";
  s += "esac\n";
  s += fmt::format(
      "export RANK=\"$rank\" WORLD_SIZE={} LOCAL_RANK=\"$SLURM_LOCALID\" "
      "LOCAL_WORLD_SIZE=\"$local\" MOTLEY_LOCAL_DEVICE=\"$device\"\n",
      world);
  s += "exec \"$MOTLEY\" \"$@\"\n";
  s += "TASK\n\n";
  std::vector<std::string> command = o.command;
  if (command.empty()) command = {"run", "--plan", o.plan_path};
  std::string args;
  for (const std::string& a : command) {
    args += ' ';
    args += shell_quote(a);
  }
  std::string groups;
  for (size_t c = 0; c < components.size(); ++c) groups += (c ? "," : "") + std::to_string(c);
  s += fmt::format("srun {}--kill-on-bad-exit=1 bash -c \"$MOTLEY_TASK\" motley-task{}\n",
                   het ? "--het-group=" + groups + " " : "", args);
  return s;
}

}  // namespace motley::cli
