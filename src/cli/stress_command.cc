// `motley stress`: the burn-in (profile/stress.h) as one rank of a distributed job over Gloo,
// started by motley launch, torchrun or mpirun. Rank 0 prints the report and writes the files;
// a wrong result anywhere ends the command with exit 1 after the report. docs/stress.md.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/cluster/limits.h"
#include "motley/core/output_files.h"
#include "motley/exec/gloo_transport.h"
#include "motley/profile/comm_benchmark.h"
#include "motley/profile/stress.h"
#include "option_checks.h"
#include "profile_commands.h"
#include "rank_environment.h"

namespace motley::cli {
namespace {

struct StressCliOptions {
  double seconds = 10;
  int64_t gemm_size = 512;
  std::string message = "4M";
  double slow_below = 0.8;
  std::string cluster;
  int first_device = 0;
  std::string out;
  std::string links;
  bool json = false;
  double timeout_s = 120;
};

// Each rank's device peak and each pair's path bandwidth from the cluster, rank r as device
// first + r.
Result<StressExpectations> expectations(const StressCliOptions& opt, int world) {
  StressExpectations e;
  if (opt.cluster.empty()) return e;
  MOTLEY_ASSIGN_OR_RETURN(const ClusterSpec cluster, load_cluster(opt.cluster));
  const Topology topology(cluster);
  const int devices = static_cast<int>(topology.devices().size());
  if (opt.first_device + world > devices) {
    return invalid_argument(fmt::format(
        "--cluster {}: {} devices, but ranks 0..{} stand for devices {}..{} (--first-device {})",
        opt.cluster, devices, world - 1, opt.first_device, opt.first_device + world - 1,
        opt.first_device));
  }
  e.link_bytes_per_s.assign(world, std::vector<double>(world, 0.0));
  for (int a = 0; a < world; ++a) {
    e.flops_per_s.push_back(topology.device_type(opt.first_device + a).peak_fp32.value());
    for (int b = 0; b < world; ++b) {
      if (a != b) {
        e.link_bytes_per_s[a][b] =
            topology.path(opt.first_device + a, opt.first_device + b).bandwidth.value();
      }
    }
  }
  return e;
}

Status stress_command(const StressCliOptions& opt) {
  StressOptions o;
  o.compute_time = Seconds(opt.seconds);
  o.link_time = Seconds(opt.seconds);
  o.collective_time = Seconds(opt.seconds / 2);
  o.gemm_size = opt.gemm_size;
  MOTLEY_ASSIGN_OR_RETURN(o.message_bytes, parse_byte_size(opt.message, "--message-bytes"));
  o.slow_below = opt.slow_below;
  if (Status s = check_stress_options(o); !s.is_ok()) {
    return invalid_argument("--gemm-size/--message-bytes: " + s.message());
  }
  if (!opt.out.empty()) MOTLEY_RETURN_IF_ERROR(check_output_file("--out", opt.out));
  if (!opt.links.empty()) MOTLEY_RETURN_IF_ERROR(check_output_file("--links", opt.links));
  MOTLEY_ASSIGN_OR_RETURN(GlooOptions gloo, rank_gloo_options("stress"));
  if (opt.first_device + gloo.world_size > kMaxClusterDevices) {
    return invalid_argument(
        fmt::format("--first-device: {} + {} ranks passes the {} devices a cluster may have",
                    opt.first_device, gloo.world_size, kMaxClusterDevices));
  }
  MOTLEY_ASSIGN_OR_RETURN(const StressExpectations expected, expectations(opt, gloo.world_size));
  // Ranks sharing this machine share its cores, as motley run's do.
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int local_ranks = local != nullptr ? std::max(1, std::atoi(local)) : 1;
  const int cores = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / local_ranks));

#if MOTLEY_TEST_HOOKS
  // Tests make one rank's device compute wrong: MOTLEY_TEST_FAULT=stress-wrong:RANK.
  const char* fault = std::getenv("MOTLEY_TEST_FAULT");
  if (fault != nullptr && std::string(fault) == "stress-wrong:" + std::to_string(gloo.rank)) {
    o.matmul = [](const at::Tensor& a, const at::Tensor& b) {
      at::Tensor c = at::mm(a, b);
      c[0][1] += 1;
      return c;
    };
  }
#endif
  gloo.transport.timeout = Seconds(opt.timeout_s);
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, connect_gloo(gloo));
  MOTLEY_ASSIGN_OR_RETURN(StressResult result, run_stress(o, *transport));
  if (transport->rank() != 0) {
    return result.faulty() ? io_error("stress: wrong results (rank 0 prints which)") : Status::ok();
  }
  apply_expectations(expected, &result);

  const std::string name = "gloo (c10d ProcessGroupGloo over TCP)";
  OutputFiles files;
  if (!opt.out.empty()) files.add(opt.out, stress_report_json(result, name).dump(2) + "\n");
  if (!opt.links.empty()) {
    files.add(opt.links, links_to_yaml(stress_links_file(result, "gloo", opt.first_device)));
  }
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::string text =
      opt.json ? stress_report_json(result, name).dump(2) + "\n" : stress_report_text(result, name);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  if (result.faulty()) {
    return io_error("stress: wrong results; the report's verdict names the devices and links");
  }
  return Status::ok();
}

}  // namespace

void add_stress_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<StressCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "stress", "Burn-in before scaling: every device's compute and every link, checked exactly");
  cmd->footer(
      "Run as N >= 2 ranks: motley launch --nproc N -- stress ..., or under torchrun / mpirun.\n"
      "Every rank multiplies float32 matrices for --seconds, each product checked by its exact\n"
      "row and column sums; every pair of ranks exchanges --message-bytes messages each way for\n"
      "--seconds in all (rounds of disjoint pairs), every message checked; all ranks all-reduce\n"
      "for half of --seconds, every sum checked exactly. Throughputs are set against the median "
      "of\n"
      "the peers (below --slow-below: slow) and, with --cluster, against each device's peak and\n"
      "each path's bandwidth (rank r = device --first-device + r). A wrong result exits 1 after\n"
      "the report. --links writes the pairs as a motley.links/1 file for measured_links.\n"
      "See docs/stress.md. Example: motley launch --nproc 4 -- stress --seconds 30");
  cmd->add_option("--seconds", opt->seconds,
                  "Seconds of compute, and of links; the all-reduce gets half (default 10)")
      ->check(positive_number(kMaxOptionSeconds));
  cmd->add_option("--gemm-size", opt->gemm_size, "n of the n x n x n products (default 512)")
      ->check(integer_in(2, 2048));
  cmd->add_option("--message-bytes", opt->message,
                  "Bytes per message and per all-reduce buffer, K/M/G binary (default 4M)");
  cmd->add_option("--slow-below", opt->slow_below,
                  "Flag a device or link below this fraction of its peers' median (default 0.8)")
      ->check(positive_number(1));
  cmd->add_option("--cluster", opt->cluster,
                  "Cluster (preset or file) the ranks run on, for expected throughputs");
  cmd->add_option("--first-device", opt->first_device,
                  "Cluster device id of rank 0 (rank r is this + r; default 0)")
      ->check(integer_in(0, kMaxClusterDevices - 1));
  cmd->add_option("--out", opt->out, "Write the report as JSON (motley.stress/1)");
  cmd->add_option("--links", opt->links, "Write the pairs' latency and bandwidth (motley.links/1)");
  cmd->add_flag("--json", opt->json, "Print the JSON report instead of the tables");
  cmd->add_option("--timeout", opt->timeout_s, "Seconds any one wait may take (default 120)")
      ->check(wait_seconds());
  cmd->callback([opt, action] { *action = [opt] { return stress_command(*opt); }; });
}

}  // namespace motley::cli
