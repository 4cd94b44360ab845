#include "motley/exec/emulation_factors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "motley/core/check.h"
#include "motley/exec/rank_layout.h"

namespace motley {
namespace {

// The codes an error document may carry, by name.
const std::vector<std::pair<StatusCode, const char*>>& code_names() {
  static const std::vector<std::pair<StatusCode, const char*>> kNames = {
      {StatusCode::kInvalidArgument, "invalid_argument"},
      {StatusCode::kNotFound, "not_found"},
      {StatusCode::kInfeasible, "infeasible"},
      {StatusCode::kIoError, "io_error"},
      {StatusCode::kInternal, "internal"}};
  return kNames;
}

Result<std::vector<double>> numbers(const JsonField& parent, std::string_view key) {
  MOTLEY_ASSIGN_OR_RETURN(JsonField field, parent.get(key));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> items, field.items());
  std::vector<double> out;
  for (const JsonField& item : items) {
    MOTLEY_ASSIGN_OR_RETURN(double value, item.as_double());
    if (!std::isfinite(value) || value < 0) return item.error("expected a finite number >= 0");
    out.push_back(value);
  }
  return out;
}

Result<std::vector<int>> rank_list(const JsonField& parent, std::string_view key, int world) {
  MOTLEY_ASSIGN_OR_RETURN(JsonField field, parent.get(key));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> items, field.items());
  std::vector<int> out;
  for (const JsonField& item : items) {
    MOTLEY_ASSIGN_OR_RETURN(int64_t rank, item.as_int());
    if (rank < 0 || rank >= world || (!out.empty() && rank <= out.back())) {
      return item.error(fmt::format("expected increasing ranks below {}", world));
    }
    out.push_back(static_cast<int>(rank));
  }
  return out;
}

Result<int> rank_of(const JsonField& parent, std::string_view key, int world) {
  MOTLEY_ASSIGN_OR_RETURN(int64_t rank, parent.get_nonnegative_int(key));
  if (rank >= world) return parent.child_error(key, fmt::format("expected a rank below {}", world));
  return static_cast<int>(rank);
}

// The error an error document carries, or what is wrong with the document.
Status error_from_json(const JsonField& error) {
  MOTLEY_RETURN_IF_ERROR(error.check_keys({"code", "message"}));
  MOTLEY_ASSIGN_OR_RETURN(std::string code, error.get_string("code"));
  MOTLEY_ASSIGN_OR_RETURN(std::string message, error.get_string("message"));
  for (const auto& [value, name] : code_names()) {
    if (code == name && !message.empty()) return Status(value, message);
  }
  std::vector<std::string> names;
  for (const auto& entry : code_names()) names.push_back(entry.second);
  if (message.empty()) return error.child_error("message", "expected the error's message");
  return error.child_error("code", fmt::format("expected {}", join_alternatives(names)));
}

}  // namespace

std::vector<double> all_reduce_grid() {
  std::vector<double> grid = {0};
  for (int k = 0; k <= 4 * 40; ++k) grid.push_back(std::exp2(k / 4.0));
  return grid;
}

std::vector<std::vector<int>> emulated_rank_sets(const Plan& plan) {
  const RankLayout layout(plan);
  const int last_stage = static_cast<int>(plan.stages.size()) - 1;
  const int last_layer = plan.stages.empty() ? 0 : plan.stages.back().layer_end - 1;
  std::set<std::vector<int>> sets = {layout.stage_ranks(last_stage)};
  for (int r = 0; r < layout.world_size(); ++r) {
    const RankPlace place = layout.place_of(r);
    sets.insert(layout.group_ranks(place.replica, place.group));
    for (int s : layout.stages_of(r)) {
      // Every parameter of a stage is read by layers of that stage alone, except a matrix the
      // embedding shares with a tied head (StageParameter::layers), read by both ends.
      std::vector<std::vector<int>> readers = {{plan.stages[s].layer_begin}};
      if (plan.stages[s].layer_begin == 0 || plan.stages[s].layer_end - 1 == last_layer) {
        readers.push_back({0, last_layer});
      }
      for (const std::vector<int>& layers : readers) {
        for (bool plain_shard : {true, false}) {
          sets.insert(layout.gradient_sum_ranks(r, s, layers, plain_shard).ranks);
        }
      }
    }
  }
  std::vector<std::vector<int>> out;
  for (const std::vector<int>& set : sets) {
    if (set.size() > 1) out.push_back(set);
  }
  return out;
}

Json emulation_factors_to_json(const EmulationFactors& f) {
  Json ranks = Json::array();
  for (size_t r = 0; r < f.device_types.size(); ++r) {
    ranks.push_back(
        {{"device_type", f.device_types[r]}, {"compute_slowdown", f.compute_slowdown[r]}});
  }
  Json links = Json::array();
  for (const EmulatedLink& l : f.links) {
    links.push_back({{"src", l.src},
                     {"dst", l.dst},
                     {"latency_s", l.latency.value()},
                     {"bandwidth_bytes_per_s", l.bandwidth.value()}});
  }
  Json all_reduces = Json::array();
  for (const EmulatedAllReduce& a : f.all_reduces) {
    all_reduces.push_back({{"ranks", a.ranks}, {"bytes", a.bytes}, {"seconds", a.seconds}});
  }
  return Json{{"format", kEmulationFormat},
              {"speeds", f.speeds},
              {"ranks", ranks},
              {"cluster_step_s", f.cluster_step.value()},
              {"simulated_iteration_s", f.simulated_iteration.value()},
              {"wire_bytes_per_byte", f.wire_bytes_per_byte},
              {"links", links},
              {"all_reduces", all_reduces}};
}

Json emulation_error_to_json(const Status& error) {
  MOTLEY_CHECK(!error.is_ok(), "an emulation error document needs an error");
  const char* code = "internal";
  for (const auto& [value, name] : code_names()) {
    if (value == error.code()) code = name;
  }
  return Json{{"format", kEmulationFormat},
              {"error", {{"code", code}, {"message", error.message()}}}};
}

Result<EmulationFactors> emulation_factors_from_json(const Json& json, const std::string& source) {
  const JsonField root(json, source);
  MOTLEY_ASSIGN_OR_RETURN(std::string format, root.get_string("format"));
  if (format != kEmulationFormat) {
    return root.child_error("format", fmt::format("expected \"{}\"", kEmulationFormat));
  }
  if (std::optional<JsonField> error = root.find("error")) {
    MOTLEY_RETURN_IF_ERROR(root.check_keys({"format", "error"}));
    const Status carried = error_from_json(*error);
    MOTLEY_CHECK(!carried.is_ok(), "an error document yields an error");
    return carried;
  }
  MOTLEY_RETURN_IF_ERROR(
      root.check_keys({"format", "speeds", "ranks", "cluster_step_s", "simulated_iteration_s",
                       "wire_bytes_per_byte", "links", "all_reduces"}));
  EmulationFactors f;
  MOTLEY_ASSIGN_OR_RETURN(f.speeds, root.get_string("speeds"));
  MOTLEY_ASSIGN_OR_RETURN(double cluster_step, root.get_positive_double("cluster_step_s"));
  f.cluster_step = Seconds(cluster_step);
  MOTLEY_ASSIGN_OR_RETURN(double iteration, root.get_nonnegative_double("simulated_iteration_s"));
  f.simulated_iteration = Seconds(iteration);
  MOTLEY_ASSIGN_OR_RETURN(f.wire_bytes_per_byte, root.get_positive_double("wire_bytes_per_byte"));
  MOTLEY_ASSIGN_OR_RETURN(JsonField ranks, root.get("ranks"));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> rank_items, ranks.items());
  for (const JsonField& r : rank_items) {
    MOTLEY_RETURN_IF_ERROR(r.check_keys({"device_type", "compute_slowdown"}));
    MOTLEY_ASSIGN_OR_RETURN(std::string type, r.get_string("device_type"));
    MOTLEY_ASSIGN_OR_RETURN(double slowdown, r.get_positive_double("compute_slowdown"));
    f.device_types.push_back(type);
    f.compute_slowdown.push_back(slowdown);
  }
  const int world = static_cast<int>(f.device_types.size());
  MOTLEY_ASSIGN_OR_RETURN(JsonField links, root.get("links"));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> link_items, links.items());
  for (const JsonField& l : link_items) {
    MOTLEY_RETURN_IF_ERROR(l.check_keys({"src", "dst", "latency_s", "bandwidth_bytes_per_s"}));
    EmulatedLink link;
    MOTLEY_ASSIGN_OR_RETURN(link.src, rank_of(l, "src", world));
    MOTLEY_ASSIGN_OR_RETURN(link.dst, rank_of(l, "dst", world));
    MOTLEY_ASSIGN_OR_RETURN(double latency, l.get_nonnegative_double("latency_s"));
    MOTLEY_ASSIGN_OR_RETURN(double bandwidth, l.get_positive_double("bandwidth_bytes_per_s"));
    link.latency = Seconds(latency);
    link.bandwidth = BytesPerSecond(bandwidth);
    f.links.push_back(link);
  }
  MOTLEY_ASSIGN_OR_RETURN(JsonField all_reduces, root.get("all_reduces"));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> all_reduce_items, all_reduces.items());
  for (const JsonField& a : all_reduce_items) {
    MOTLEY_RETURN_IF_ERROR(a.check_keys({"ranks", "bytes", "seconds"}));
    EmulatedAllReduce priced;
    MOTLEY_ASSIGN_OR_RETURN(priced.ranks, rank_list(a, "ranks", world));
    MOTLEY_ASSIGN_OR_RETURN(priced.bytes, numbers(a, "bytes"));
    MOTLEY_ASSIGN_OR_RETURN(priced.seconds, numbers(a, "seconds"));
    if (priced.ranks.size() < 2) return a.child_error("ranks", "expected two or more ranks");
    if (priced.bytes.size() < 2 || priced.bytes.size() != priced.seconds.size() ||
        !std::is_sorted(priced.bytes.begin(), priced.bytes.end(), std::less_equal<double>())) {
      return a.error("expected two or more increasing sizes, one time each");
    }
    f.all_reduces.push_back(std::move(priced));
  }
  return f;
}

EmulatedNetwork::EmulatedNetwork(const EmulationFactors& factors)
    : wire_bytes_per_byte_(factors.wire_bytes_per_byte) {
  for (const EmulatedLink& l : factors.links) links_[{l.src, l.dst}] = l;
  for (const EmulatedAllReduce& a : factors.all_reduces) all_reduces_[a.ranks] = a;
}

Seconds EmulatedNetwork::message_time(int src, int dst, int64_t bytes) const {
  auto it = links_.find({src, dst});
  if (it == links_.end()) return Seconds(0);  // one device: the cost model's p2p time is 0
  const EmulatedLink& l = it->second;
  return l.latency + Bytes(static_cast<double>(bytes) * wire_bytes_per_byte_) / l.bandwidth;
}

Seconds EmulatedNetwork::all_reduce_time(const std::vector<int>& ranks, int64_t bytes) const {
  auto it = all_reduces_.find(ranks);
  MOTLEY_CHECK(it != all_reduces_.end(),
               "an all-reduce over a rank set the emulation did not price");
  const std::vector<double>& x = it->second.bytes;
  const std::vector<double>& y = it->second.seconds;
  const double size = static_cast<double>(bytes) * wire_bytes_per_byte_;
  // The interval holding `size`; past the last size, the last interval's line.
  size_t i = static_cast<size_t>(std::upper_bound(x.begin(), x.end(), size) - x.begin());
  i = std::clamp<size_t>(i, 1, x.size() - 1);
  return Seconds(y[i - 1] + (y[i] - y[i - 1]) * (size - x[i - 1]) / (x[i] - x[i - 1]));
}

}  // namespace motley
