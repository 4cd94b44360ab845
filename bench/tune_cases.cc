// Regenerates bench/RESULTS.md: tunes every case of bench/cases/ (files named case-*.yaml) with
// motley and every baseline, and writes each strategy's tokens/s, motley's speedups, its
// efficiency against the lower bound and the search times.
//
//   tune_cases [--cases DIR] [--out FILE] [--only NAME] [--budget SECONDS] [--no-scaling]
//
// It also runs the scaling sweep of bench/tune_bench.cc (search time as devices and
// micro-batches grow), unless --no-scaling or --only is given.
//
// A case file names a model and a cluster (a preset, or a file next to the case file) and the
// training step's shape:
//
//   name: gemma-h100x8
//   model: gemma-2-9b          # preset or path
//   cluster: h100x8            # preset or path
//   global_batch: 64           # sequences per step
//   seq_len: 4096              # optional, default the model's
//   micro_batch_size: 0        # optional, 0 = the tuner chooses
//   objective: throughput      # optional: throughput or cost
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/model/model_json.h"
#include "motley/model/presets.h"
#include "motley/report/explanation.h"
#include "motley/tune/tune.h"
#include "scaling_instance.h"

namespace motley {
namespace {

struct CaseFile {
  std::string path;
  std::string name;
  std::string description;  // the file's leading comment
  std::string model;
  std::string cluster;
  TuneOptions options;
};

// A name relative to the case file when such a file exists, else as given (a preset).
std::string resolve(const std::string& base_dir, const std::string& name) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::path(base_dir) / name;
  return std::filesystem::exists(p, ec) ? p.string() : name;
}

Result<CaseFile> load_case(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(Json doc, read_yaml_file(path));
  const JsonField f(doc, path);
  MOTLEY_RETURN_IF_ERROR(f.check_keys(
      {"name", "model", "cluster", "global_batch", "seq_len", "micro_batch_size", "objective"}));
  CaseFile c;
  c.path = path;
  const std::string dir = std::filesystem::path(path).parent_path().string();
  MOTLEY_ASSIGN_OR_RETURN(c.name, f.get_string("name"));
  MOTLEY_ASSIGN_OR_RETURN(std::string model, f.get_string("model"));
  MOTLEY_ASSIGN_OR_RETURN(std::string cluster, f.get_string("cluster"));
  c.model = resolve(dir, model);
  c.cluster = resolve(dir, cluster);
  MOTLEY_ASSIGN_OR_RETURN(c.options.global_batch, f.get_positive_int("global_batch"));
  MOTLEY_ASSIGN_OR_RETURN(c.options.seq_len, f.get_nonnegative_int_or("seq_len", 0));
  MOTLEY_ASSIGN_OR_RETURN(c.options.micro_batch_size,
                          f.get_nonnegative_int_or("micro_batch_size", 0));
  MOTLEY_ASSIGN_OR_RETURN(std::string objective, f.get_string_or("objective", "throughput"));
  if (objective == "cost") {
    c.options.objective = TuneObjective::kCost;
  } else if (objective != "throughput") {
    return f.child_error("objective", "expected throughput or cost, got \"" + objective + "\"");
  }
  MOTLEY_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  size_t pos = 0;
  while (pos < text.size() && text[pos] == '#') {
    const size_t end = text.find('\n', pos);
    std::string line = text.substr(pos + 1, end == std::string::npos ? end : end - pos - 1);
    if (!line.empty() && line[0] == ' ') line.erase(0, 1);
    c.description += (c.description.empty() ? "" : " ") + line;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return c;
}

struct Row {
  CaseFile file;
  int devices = 0;
  int layers = 0;
  bool mixed = false;  // the cluster holds more than one device type
  TuneResult result;
};

std::string num(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

double geomean(const std::vector<double>& xs) {
  double s = 0;
  for (double x : xs) s += std::log(x);
  return xs.empty() ? 0 : std::exp(s / static_cast<double>(xs.size()));
}

struct ScalingRow {
  int devices = 0;
  int64_t micro_batches = 0;
  double search_s = 0;
  int64_t evaluated = 0;
  double efficiency = 0;
};

std::vector<ScalingRow> scaling(double budget) {
  const ModelSpec model = model_128_layers();
  std::vector<std::pair<int, int64_t>> points = {{8, 64},   {16, 64},  {32, 64},  {64, 64},
                                                 {128, 64}, {256, 64}, {512, 64}, {1024, 64},
                                                 {64, 16},  {64, 256}, {64, 1024}};
  std::vector<ScalingRow> out;
  for (const auto& [devices, micro_batches] : points) {
    TuneOptions options;
    options.global_batch = micro_batches;
    options.micro_batch_size = 1;
    options.time_budget = Seconds(budget);
    std::fprintf(stderr, "tune_cases: scaling %d devices, %ld micro-batches ...", devices,
                 static_cast<long>(micro_batches));
    Result<TuneResult> r = tune(options, model, two_generations(devices));
    if (!r.is_ok()) {
      std::fprintf(stderr, " %s\n", r.status().message().c_str());
      continue;
    }
    std::fprintf(stderr, " %.2f s\n", r->search_time.value());
    out.push_back(ScalingRow{devices, micro_batches, r->search_time.value(),
                             r->candidates_evaluated, r->efficiency});
  }
  return out;
}

std::string markdown(const std::vector<Row>& rows, double budget,
                     const std::vector<ScalingRow>& scale) {
  const std::vector<std::string> names = tune_strategy_names();
  const std::vector<std::string> single = {"partition-only", "placement-only", "schedule-only"};
  std::string out;
  out += "# Tuning results\n\n";
  out +=
      "Generated by `scripts/bench-results.sh` (bench/tune_cases.cc) from the case files in "
      "`bench/cases/`; do not edit by hand. Every strategy's plan is priced by the same "
      "simulator and analytic cost model under the same memory limits. Times are simulated "
      "iteration times; search times are wall-clock seconds on the machine that ran the "
      "script (2 threads, time budget " +
      num(budget, 0) + " s).\n\n";
  out +=
      "motley may return the best of every candidate it evaluated, the baselines' plans "
      "included, so it is never slower than a baseline by construction; the speedups below "
      "show by how much its own search beats them.\n\n";

  // Summary.
  std::vector<double> vs_megatron, vs_single, efficiency, vs_tuned, vs_tuned_mixed;
  double worst = 1e300, worst_tuned = 1e300;
  for (const Row& r : rows) {
    const double t = r.result.simulation.iteration_time.value();
    double best_single = 1e300;
    for (const StrategyOutcome& b : r.result.baselines) {
      if (!b.feasible) continue;
      const double s = b.iteration_time.value() / t;
      worst = std::min(worst, s);
      if (b.strategy == "megatron-1f1b") vs_megatron.push_back(s);
      if (b.strategy == "megatron-tuned") {
        vs_tuned.push_back(s);
        if (r.mixed) vs_tuned_mixed.push_back(s);
        worst_tuned = std::min(worst_tuned, s);
      }
      if (std::find(single.begin(), single.end(), b.strategy) != single.end()) {
        best_single = std::min(best_single, s);
      }
    }
    if (best_single < 1e300) vs_single.push_back(best_single);
    efficiency.push_back(r.result.efficiency);
  }
  double mean_eff = 0;
  for (double e : efficiency) mean_eff += e / static_cast<double>(efficiency.size());
  out += "## Summary\n\n";
  out += "| measure | value |\n|---|---|\n";
  out += "| cases | " + std::to_string(rows.size()) + " |\n";
  out += "| geometric-mean speedup of motley over megatron-1f1b | " + num(geomean(vs_megatron), 2) +
         "x |\n";
  out += "| geometric-mean speedup of motley over megatron-tuned | " + num(geomean(vs_tuned), 2) +
         "x |\n";
  out += "| the same on the " + std::to_string(vs_tuned_mixed.size()) +
         " cases with more than one device type | " + num(geomean(vs_tuned_mixed), 2) + "x |\n";
  out += "| smallest speedup over megatron-tuned on any case | " + num(worst_tuned, 3) + "x |\n";
  out += "| geometric-mean speedup over the best single-dimension strategy of each case | " +
         num(geomean(vs_single), 2) + "x |\n";
  out += "| smallest speedup over any baseline on any case | " + num(worst, 3) + "x |\n";
  out += "| mean efficiency (lower bound / iteration time) | " + num(mean_eff, 3) + " |\n\n";

  out +=
      "## Cases\n\n| case | model | cluster | devices | layers | global batch | motley "
      "tokens/s | efficiency | search s | plans evaluated |\n|---|---|---|---|---|---|---|---|"
      "---|---|\n";
  for (const Row& r : rows) {
    out += "| " + r.file.name + " | " + r.result.plan.model.name + " | " +
           r.result.plan.cluster.name + " | " + std::to_string(r.devices) + " | " +
           std::to_string(r.layers) + " | " + std::to_string(r.file.options.global_batch) + " | " +
           num(r.result.simulation.throughput_tokens_per_s, 0) + " | " +
           num(r.result.efficiency, 3) + " | " + num(r.result.search_time.value(), 2) + " | " +
           std::to_string(r.result.candidates_evaluated) + " |\n";
  }

  out += "\n## Tokens per second\n\n| case |";
  for (const std::string& n : names) out += " " + n + " |";
  out += "\n|---|";
  for (size_t i = 0; i < names.size(); ++i) out += "---|";
  out += "\n";
  for (const Row& r : rows) {
    out += "| " + r.file.name + " | " + num(r.result.simulation.throughput_tokens_per_s, 0) + " |";
    for (const StrategyOutcome& b : r.result.baselines) {
      out += " " + (b.feasible ? num(b.tokens_per_s, 0) : std::string("n/a")) + " |";
    }
    out += "\n";
  }

  out += "\n## Speedup of motley over each strategy\n\n| case |";
  for (size_t i = 1; i < names.size(); ++i) out += " " + names[i] + " |";
  out += "\n|---|";
  for (size_t i = 1; i < names.size(); ++i) out += "---|";
  out += "\n";
  std::map<std::string, std::vector<double>> per_strategy;
  for (const Row& r : rows) {
    out += "| " + r.file.name + " |";
    for (const StrategyOutcome& b : r.result.baselines) {
      if (!b.feasible) {
        out += " n/a |";
        continue;
      }
      const double s = b.iteration_time.value() / r.result.simulation.iteration_time.value();
      per_strategy[b.strategy].push_back(s);
      out += " " + num(s, 2) + "x |";
    }
    out += "\n";
  }
  out += "| **geometric mean** |";
  for (size_t i = 1; i < names.size(); ++i)
    out += " " + num(geomean(per_strategy[names[i]]), 2) + "x |";
  out += "\n";

  out += "\n## Search time (seconds)\n\n| case |";
  for (const std::string& n : names) out += " " + n + " |";
  out += "\n|---|";
  for (size_t i = 0; i < names.size(); ++i) out += "---|";
  out += "\n";
  for (const Row& r : rows) {
    out += "| " + r.file.name + " | " + num(r.result.search_time.value(), 2) + " |";
    for (const StrategyOutcome& b : r.result.baselines)
      out += " " + num(b.search_time.value(), 2) + " |";
    out += "\n";
  }

  if (!scale.empty()) {
    out +=
        "\n## Search time as the problem grows\n\nThe sweep of `bench/tune_bench.cc`: a "
        "128-layer model (embedding, 126 Llama-3-8B blocks, head), micro-batches of one "
        "sequence, on clusters of half H100 and half A100 nodes, default options.\n\n"
        "| devices | micro-batches | search s | plans evaluated | efficiency |\n"
        "|---|---|---|---|---|\n";
    for (const ScalingRow& r : scale) {
      out += "| " + std::to_string(r.devices) + " | " + std::to_string(r.micro_batches) + " | " +
             num(r.search_s, 2) + " | " + std::to_string(r.evaluated) + " | " +
             num(r.efficiency, 3) + " |\n";
    }
  }

  out += "\n## What motley chose\n";
  for (const Row& r : rows) {
    out += "\n### " + r.file.name + "\n\n" + r.file.description + "\n\n";
    for (const std::string& line : explanation_lines(r.result.explanation)) {
      out += "- " + line + "\n";
    }
    out += "\nBaselines:\n\n";
    for (const StrategyOutcome& b : r.result.baselines) {
      out += "- " + b.strategy + ": " + b.detail + "\n";
    }
  }
  return out;
}

int run(int argc, char** argv) {
  std::string dir = "bench/cases", out_path = "bench/RESULTS.md", only;
  bool with_scaling = true;
  double budget = TuneOptions{}.time_budget.value();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 < argc && arg == "--cases") {
      dir = argv[++i];
    } else if (i + 1 < argc && arg == "--out") {
      out_path = argv[++i];
    } else if (i + 1 < argc && arg == "--only") {
      only = argv[++i];
    } else if (i + 1 < argc && arg == "--budget") {
      budget = std::atof(argv[++i]);
    } else if (arg == "--no-scaling") {
      with_scaling = false;
    } else {
      std::fprintf(stderr,
                   "usage: tune_cases [--cases DIR] [--out FILE] [--only NAME] [--budget S] "
                   "[--no-scaling]\n");
      return 2;
    }
  }
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("case-", 0) == 0 && entry.path().extension() == ".yaml") {
      files.push_back(entry.path().string());
    }
  }
  if (ec || files.empty()) {
    std::fprintf(stderr, "tune_cases: no case-*.yaml files in %s\n", dir.c_str());
    return 2;
  }
  std::sort(files.begin(), files.end());
  std::vector<Row> rows;
  for (const std::string& path : files) {
    Result<CaseFile> c = load_case(path);
    if (!c.is_ok()) {
      std::fprintf(stderr, "tune_cases: %s\n", c.status().message().c_str());
      return 2;
    }
    if (!only.empty() && c->name != only) continue;
    Result<ModelSpec> model = load_model(c->model);
    Result<ClusterSpec> cluster = load_cluster(c->cluster);
    if (!model.is_ok() || !cluster.is_ok()) {
      std::fprintf(stderr, "tune_cases: %s: %s\n", path.c_str(),
                   (!model.is_ok() ? model.status() : cluster.status()).message().c_str());
      return 2;
    }
    c->options.time_budget = Seconds(budget);
    std::fprintf(stderr, "tune_cases: %s ...", c->name.c_str());
    Result<TuneResult> result = tune(c->options, model.value(), cluster.value());
    if (!result.is_ok()) {
      std::fprintf(stderr, "\ntune_cases: %s: %s\n", c->name.c_str(),
                   result.status().message().c_str());
      return 1;
    }
    std::fprintf(stderr, " %.0f tokens/s, efficiency %.3f, %.2f s\n",
                 result->simulation.throughput_tokens_per_s, result->efficiency,
                 result->search_time.value());
    Row row;
    row.file = c.value();
    row.devices = static_cast<int>(cluster_devices(cluster.value()).size());
    row.layers = static_cast<int>(model->layers.size());
    std::set<std::string> types;
    for (const Device& d : cluster_devices(cluster.value())) types.insert(d.type);
    row.mixed = types.size() > 1;
    row.result = std::move(result.value());
    rows.push_back(std::move(row));
  }
  const std::vector<ScalingRow> scale =
      with_scaling && only.empty() ? scaling(budget) : std::vector<ScalingRow>{};
  const std::string text = markdown(rows, budget, scale);
  Status written = write_file_atomically(out_path, text);
  if (!written.is_ok()) {
    std::fprintf(stderr, "tune_cases: %s\n", written.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "tune_cases: wrote %s\n", out_path.c_str());
  return 0;
}

}  // namespace
}  // namespace motley

int main(int argc, char** argv) { return motley::run(argc, argv); }
