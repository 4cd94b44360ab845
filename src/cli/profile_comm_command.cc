// `motley profile comm`: the communication benchmarks (profile/comm_benchmark.h) as one rank of
// a distributed job over Gloo, started by motley launch, torchrun or mpirun; rank 0 prints the
// tables (or JSON) and writes the links file. docs/profile-comm.md describes the method.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "motley/cluster/limits.h"
#include "motley/cluster/measured_links.h"
#include "motley/core/output_files.h"
#include "motley/exec/gloo_transport.h"
#include "motley/profile/comm_benchmark.h"
#include "option_checks.h"
#include "profile_commands.h"
#include "rank_environment.h"

namespace motley::cli {

namespace {

const char* env_value(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

Result<GlooOptions> rank_gloo_options(const std::string& command) {
  const bool torch_style = env_value("WORLD_SIZE") != nullptr;
  const bool mpi = !torch_style && env_value("OMPI_COMM_WORLD_SIZE") != nullptr;
  if (!torch_style && !mpi) {
    return invalid_argument(fmt::format(
        "{0} measures between ranks: start it as N >= 2 ranks, e.g. 'motley launch --nproc 2 -- "
        "{0}', or under torchrun / mpirun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)",
        command));
  }
  auto get = [mpi](const char* name) -> const char* {
    const std::string n = name;
    if (mpi && n == "RANK") return env_value("OMPI_COMM_WORLD_RANK");
    if (mpi && n == "WORLD_SIZE") return env_value("OMPI_COMM_WORLD_SIZE");
    return env_value(name);
  };
  MOTLEY_ASSIGN_OR_RETURN(GlooOptions gloo, gloo_options_from_env(get));
  // Every rank meets at a loopback address only when all run on this machine.
  if (gloo.interface.empty() &&
      (gloo.master_addr == "127.0.0.1" || gloo.master_addr == "localhost")) {
    gloo.hostname = "127.0.0.1";
  }
  return gloo;
}

namespace {

constexpr int64_t kMaxCommBytes = int64_t{1} << 30;  // per buffer; a few buffers per rank
constexpr size_t kMaxCommSizes = 64;

struct ProfileCommOptions {
  std::string sizes;  // "MIN:MAX"
  std::string min_bytes = "1K";
  std::string max_bytes = "64M";
  double factor = 2.0;
  int iters = 20;
  int warmup = 5;
  std::vector<std::string> ops;
  std::string out;
  bool json = false;
  int first_device = 0;
  double timeout_s = 60;
};

Result<CommBenchOptions> bench_options(const ProfileCommOptions& opt) {
  CommBenchOptions o;
  std::string min = opt.min_bytes;
  std::string max = opt.max_bytes;
  if (!opt.sizes.empty()) {
    const size_t colon = opt.sizes.find(':');
    if (colon == std::string::npos) {
      min = max = opt.sizes;
    } else {
      min = opt.sizes.substr(0, colon);
      max = opt.sizes.substr(colon + 1);
    }
  }
  const char* option = opt.sizes.empty() ? "--min-bytes/--max-bytes" : "--sizes";
  MOTLEY_ASSIGN_OR_RETURN(int64_t lo, parse_byte_size(min, option));
  MOTLEY_ASSIGN_OR_RETURN(int64_t hi, parse_byte_size(max, option));
  if (lo < 4 || hi > kMaxCommBytes || lo > hi) {
    return invalid_argument(fmt::format(
        "{}: expected sizes from 4 B (one float) to {} B (1G) with min <= max, got {} to {}",
        option, kMaxCommBytes, lo, hi));
  }
  if (!(opt.factor > 1.0)) {
    return invalid_argument(fmt::format("--factor: expected a number above 1, got {}", opt.factor));
  }
  o.sizes = size_sweep(lo, hi, opt.factor);
  if (o.sizes.size() > kMaxCommSizes) {
    return invalid_argument(fmt::format("--sizes/--factor: the sweep has {} sizes; at most {}",
                                        o.sizes.size(), kMaxCommSizes));
  }
  o.iters = opt.iters;
  o.warmup = opt.warmup;
  if (!opt.ops.empty()) {
    o.ops.clear();
    for (const std::string& name : opt.ops) {
      std::optional<CommOp> op = parse_comm_op(name);
      if (!op) {
        std::vector<std::string> names;
        for (CommOp c : all_comm_ops()) names.push_back(comm_op_name(c));
        return invalid_argument(
            fmt::format("--ops: expected {}, got '{}'", join_alternatives(names), name));
      }
      o.ops.push_back(*op);
    }
  }
  o.all_reduce_implementation = "c10d ProcessGroupGloo allreduce (Transport::all_reduce_sum)";
  return o;
}

Status profile_comm(const ProfileCommOptions& opt) {
  MOTLEY_ASSIGN_OR_RETURN(const CommBenchOptions bench, bench_options(opt));
  if (!opt.out.empty()) MOTLEY_RETURN_IF_ERROR(check_output_file("--out", opt.out));
  MOTLEY_ASSIGN_OR_RETURN(GlooOptions gloo, rank_gloo_options("profile comm"));
  if (gloo.world_size < 2) {
    return invalid_argument("profile comm measures between ranks: WORLD_SIZE must be at least 2");
  }
  if (opt.first_device + gloo.world_size > kMaxClusterDevices) {
    return invalid_argument(
        fmt::format("--first-device: {} + {} ranks passes the {} devices a cluster may have",
                    opt.first_device, gloo.world_size, kMaxClusterDevices));
  }
  gloo.transport.timeout = Seconds(opt.timeout_s);
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, connect_gloo(gloo));
  MOTLEY_ASSIGN_OR_RETURN(const CommBenchResult result, run_comm_benchmark(bench, *transport));
  if (transport->rank() != 0) return Status::ok();

  const std::string transport_name = "gloo (c10d ProcessGroupGloo over TCP)";
  if (!opt.out.empty()) {
    MOTLEY_RETURN_IF_ERROR(write_file_atomically(
        opt.out, links_to_yaml(comm_links_file(result, "gloo", opt.first_device))));
  }
  std::string text = opt.json ? comm_report_json(result, transport_name).dump(2) + "\n"
                              : comm_report_text(result, transport_name);
  if (!opt.out.empty() && !opt.json) {
    text += fmt::format("# links: {} (rank r as device {} + r)\n", opt.out, opt.first_device);
  }
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  return Status::ok();
}

}  // namespace

void add_profile_comm_command(CLI::App& profile, Action* action) {
  auto opt = std::make_shared<ProfileCommOptions>();
  CLI::App* cmd = profile.add_subcommand(
      "comm", "Point-to-point and collective bandwidth between ranks (nccl-tests' conventions)");
  cmd->footer(
      "Run as N >= 2 ranks: motley launch --nproc N -- profile comm ..., or under torchrun /\n"
      "mpirun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; OMPI_COMM_WORLD_*). Every ordered\n"
      "pair gets a one-way p2p sweep and a fitted latency + bandwidth; all-reduce, all-gather,\n"
      "reduce-scatter and all-to-all run over all ranks. Each size's result is checked. Rank 0\n"
      "prints nccl-tests-style tables (size, count, type, redop, time, algbw, busbw) and writes\n"
      "--out, a motley.links/1 file a cluster file includes with 'measured_links: FILE'; rank r\n"
      "is device --first-device + r of that cluster. See docs/profile-comm.md.\n"
      "Example: motley launch --nproc 2 -- profile comm --sizes 1K:16M --out links.yaml");
  cmd->add_option("--sizes", opt->sizes,
                  "Size sweep MIN:MAX in bytes (K, M, G: binary), multiplied by --factor")
      ->excludes(cmd->add_option("--min-bytes", opt->min_bytes, "Smallest size (default 1K)"))
      ->excludes(cmd->add_option("--max-bytes", opt->max_bytes, "Largest size (default 64M)"));
  cmd->add_option("--factor", opt->factor, "Step between sizes (default 2)")
      ->check(positive_number(1024));
  cmd->add_option("--iters", opt->iters, "Timed iterations per size (default 20)")
      ->check(integer_in(1, 1000000));
  cmd->add_option("--warmup", opt->warmup, "Untimed iterations per size first (default 5)")
      ->check(integer_in(0, 1000000));
  cmd->add_option("--ops", opt->ops,
                  "Comma-separated: p2p, all_reduce, all_gather, reduce_scatter, all_to_all "
                  "(default all)")
      ->delimiter(',');
  cmd->add_option("--out", opt->out, "Write the link measurements (motley.links/1 YAML)");
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of the tables");
  cmd->add_option("--first-device", opt->first_device,
                  "Cluster device id of rank 0 in --out (rank r is this + r; default 0)")
      ->check(integer_in(0, kMaxClusterDevices - 1));
  cmd->add_option("--timeout", opt->timeout_s, "Seconds any one wait may take (default 60)")
      ->check(wait_seconds());
  cmd->callback([opt, action] { *action = [opt] { return profile_comm(*opt); }; });
}

}  // namespace motley::cli
