// The GEMM rule of the timing model (kernel_time of one BF16 GEMM, docs/timing-model.md) against
// a table of measured matmul throughputs, shape by shape. The table is XLA's default matmul
// performance table (xla/service/gpu/model/matmul_interpolator_data.h in openxla/xla): a text
// proto of entries {b, m, n, k, flops {key: "bf16xbf16->bf16" value: FLOP/s}} per GPU key
// ("sm_90" for H100). Point it at a copy of that file; nothing of it is kept here. A benchmark
// of the model's accuracy, not a test.
//
//   gemm_table FILE [--key sm_90] [--device H100-SXM] [--stack megatron-core] [--all-batches]
//
// Prints each shape's measured and predicted TFLOP/s and the error of the predicted time, then
// the mean and RMS of ln(predicted / measured) over all shapes and by their smallest dimension.
// Entries with b > 1 (batched) are left out unless --all-batches: motley prices one GEMM, or
// `count` GEMMs of one shape (routed experts) at the single GEMM's rate.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "motley/cluster/device_catalog.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/cost/software_stack.h"
#include "motley/model/layer_cost.h"

namespace {

struct Entry {
  double b = 0, m = 0, n = 0, k = 0;
  double flops_per_s = 0;  // bf16 x bf16 -> bf16
};

// The number after `name:` on a line such as "        m: 1024"; false when the line is not one.
bool field(const std::string& line, const std::string& name, double* out) {
  const size_t at = line.find_first_not_of(' ');
  if (at == std::string::npos || line.compare(at, name.size() + 1, name + ":") != 0) return false;
  *out = std::atof(line.c_str() + at + name.size() + 1);
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The entries of the block keyed `key`, with their BF16 throughput.
std::vector<Entry> read_table(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::vector<Entry> out;
  std::string line;
  bool inside = false;
  Entry e;
  while (std::getline(in, line)) {
    if (line.find("key: \"") != std::string::npos && line.find("value") == std::string::npos) {
      inside = line.find("key: \"" + key + "\"") != std::string::npos;
      continue;
    }
    if (!inside) continue;
    double v = 0;
    if (field(line, "b", &v)) {
      e = Entry{};
      e.b = v;
    } else if (field(line, "m", &v)) {
      e.m = v;
    } else if (field(line, "n", &v)) {
      e.n = v;
    } else if (field(line, "k", &v)) {
      e.k = v;
    } else if (lower(line).find("key: \"bf16xbf16->bf16\"") != std::string::npos) {
      const size_t at = line.find("value:");
      if (at == std::string::npos) continue;
      e.flops_per_s = std::atof(line.c_str() + at + 6);
      if (e.m > 0 && e.n > 0 && e.k > 0 && e.b > 0 && e.flops_per_s > 0) out.push_back(e);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: gemm_table FILE [--key sm_90] [--device H100-SXM] [--stack megatron-core] "
                 "[--all-batches]\n");
    return 2;
  }
  std::string path = argv[1], key = "sm_90", device_name = "H100-SXM", stack_name = "megatron-core";
  bool all_batches = false;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--all-batches") {
      all_batches = true;
    } else if (i + 1 < argc && arg == "--key") {
      key = argv[++i];
    } else if (i + 1 < argc && arg == "--device") {
      device_name = argv[++i];
    } else if (i + 1 < argc && arg == "--stack") {
      stack_name = argv[++i];
    } else {
      std::fprintf(stderr, "gemm_table: unknown argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  const motley::Result<const motley::DeviceType*> device = motley::find_device_type(device_name);
  const motley::Result<motley::SoftwareStack> stack = motley::find_software_stack(stack_name);
  if (!device.is_ok() || !stack.is_ok()) {
    std::fprintf(stderr, "gemm_table: %s\n",
                 (!device.is_ok() ? device.status() : stack.status()).message().c_str());
    return 2;
  }
  if (!std::ifstream(path)) {
    std::fprintf(stderr, "gemm_table: %s: cannot read\n", path.c_str());
    return 2;
  }
  const std::vector<Entry> table = read_table(path, key);
  if (table.empty()) {
    std::fprintf(stderr, "gemm_table: %s: no bf16 entries under key '%s'\n", path.c_str(),
                 key.c_str());
    return 2;
  }
  fmt::print("{} under {} against {} ({}), bf16\n", device_name, stack_name, path, key);
  fmt::print("{:>2} {:>6} {:>6} {:>6} {:>14} {:>15} {:>8}\n", "b", "m", "n", "k", "measured TF/s",
             "predicted TF/s", "error");
  std::map<double, std::vector<double>> by_smallest;
  std::vector<double> all;
  for (const Entry& e : table) {
    if (e.b != 1 && !all_batches) continue;
    motley::Kernel gemm;
    gemm.kind = motley::KernelKind::kGemm;
    gemm.m = e.m;
    gemm.n = e.n;
    gemm.k = e.k;
    gemm.count = e.b;
    const double flops = 2.0 * e.b * e.m * e.n * e.k;
    gemm.flops = flops;
    const double predicted =
        motley::kernel_time(gemm, **device, motley::DType::kBFloat16, 1, false, false, *stack)
            .value();
    const double measured = flops / e.flops_per_s;
    const double error = std::log(predicted / measured);
    all.push_back(error);
    by_smallest[std::min({e.m, e.n, e.k})].push_back(error);
    fmt::print("{:>2} {:>6} {:>6} {:>6} {:>14.0f} {:>15.0f} {:>+7.1f}%\n", e.b, e.m, e.n, e.k,
               e.flops_per_s / 1e12, flops / predicted / 1e12, 100.0 * (predicted / measured - 1));
  }
  auto summary = [](const std::vector<double>& x) {
    double sum = 0, squares = 0;
    for (double v : x) {
      sum += v;
      squares += v * v;
    }
    const double n = static_cast<double>(x.size());
    return fmt::format("{} shapes, mean ln(predicted/measured) {:+.3f}, RMS {:.3f}", x.size(),
                       sum / n, std::sqrt(squares / n));
  };
  fmt::print("\nall: {}\n", summary(all));
  for (const auto& [smallest, errors] : by_smallest) {
    fmt::print("smallest dimension {:>5}: {}\n", smallest, summary(errors));
  }
  return 0;
}
