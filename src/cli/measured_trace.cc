#include "measured_trace.h"

#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "motley/exec/rank_layout.h"
#include "motley/model/model_json.h"

namespace motley::cli {
namespace {

Result<MeasuredKind> measured_kind(const std::string& cat, const std::string& name,
                                   const std::string& source) {
  if (cat == "F") return MeasuredKind::kForward;
  if (cat == "B (input grad)") return MeasuredKind::kBackwardInput;
  if (cat == "W (weight grad)") return MeasuredKind::kBackwardWeight;
  if (cat == "B (fused)") return MeasuredKind::kBackward;
  if (cat == "R (recompute)") return MeasuredKind::kRecompute;
  if (cat == "optimizer") return MeasuredKind::kOptimizer;
  if (cat == "all-reduce" && name == "all_reduce") return MeasuredKind::kAllReduceWait;
  if (cat == "send") {
    if (name.rfind("wait for ", 0) == 0) return MeasuredKind::kInputWait;
    if (name == "finish_sends") return MeasuredKind::kSendWait;
    return MeasuredKind::kSendPost;
  }
  return invalid_argument(fmt::format(
      "{}: an event '{}' of category '{}' is not of a measured trace", source, name, cat));
}

}  // namespace

Result<MeasuredTrace> measured_trace_from_chrome(const Json& doc, const Plan& plan,
                                                 const std::string& source) {
  auto bad = [&](const std::string& what) {
    return invalid_argument(fmt::format("{}: {}", source, what));
  };
  if (!doc.is_object() || !doc.contains("otherData") || !doc["otherData"].is_object() ||
      !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return bad("not a measured trace (traceEvents and otherData expected)");
  }
  const Json& other = doc["otherData"];
  if (!other.contains("step_time_s") || !other["step_time_s"].is_array() ||
      !other.contains("step_offsets_s") || !other["step_offsets_s"].is_array() ||
      !other.contains("first_step") || !other["first_step"].is_number_integer()) {
    return bad("otherData lacks step_time_s, step_offsets_s or first_step");
  }
  const RankLayout layout(plan);
  const int world = layout.world_size();
  const Json& times = other["step_time_s"];
  if (static_cast<int>(times.size()) != world) {
    return bad(fmt::format("step_time_s has {} ranks, the plan {}", times.size(), world));
  }
  std::vector<double> offsets;
  for (const Json& o : other["step_offsets_s"]) {
    if (!o.is_number()) return bad("step_offsets_s: expected numbers");
    offsets.push_back(o.get<double>());
  }
  const int64_t first_step = other["first_step"].get<int64_t>();
  MeasuredTrace trace;
  for (int r = 0; r < world; ++r) {
    const RankPlace place = layout.place_of(r);
    MeasuredRank rank;
    rank.rank = r;
    rank.replica = place.replica;
    rank.group = place.group;
    rank.device = place.device;
    if (!times[r].is_array()) return bad("step_time_s: expected a list per rank");
    for (const Json& t : times[r]) {
      if (!t.is_number()) return bad("step_time_s: expected numbers");
      rank.step_times.push_back(Seconds(t.get<double>()));
    }
    trace.ranks.push_back(std::move(rank));
  }
  for (const Json& e : doc["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const Json args = e.value("args", Json::object());
    if (!args.is_object() || !args.contains("rank") || !args.contains("step") ||
        !args["rank"].is_number_integer() || !args["step"].is_number_integer()) {
      return bad("an event without integer args.rank and args.step");
    }
    const std::string cat = e.value("cat", ""), name = e.value("name", "");
    if (cat == "all-reduce" && name != "all_reduce") continue;  // a gradient sum
    const int64_t r = args["rank"].get<int64_t>();
    const int64_t k = args["step"].get<int64_t>() - first_step;
    if (r < 0 || r >= world || k < 0 || k + 1 >= static_cast<int64_t>(offsets.size())) {
      return bad(fmt::format("an event of rank {} step {} outside the run", r, k + first_step));
    }
    MOTLEY_ASSIGN_OR_RETURN(MeasuredKind kind, measured_kind(cat, name, source));
    MeasuredEvent ev;
    ev.kind = kind;
    ev.step = k;
    ev.stage = args.value("stage", -1);
    ev.micro_batch = args.value("micro_batch", -1);
    ev.start = Seconds(e.value("ts", 0.0) * 1e-6 - offsets[static_cast<size_t>(k)]);
    ev.duration = Seconds(e.value("dur", 0.0) * 1e-6);
    trace.ranks[static_cast<size_t>(r)].events.push_back(ev);
  }
  return trace;
}

Result<ModelSpec> profile_pricing_model(const std::string& profile, const ModelSpec& model) {
  if (profile.empty()) return model;
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec measured, load_model(profile));
  if (measured.layers.size() != model.layers.size()) {
    return invalid_argument(fmt::format(
        "--profile {}: {} layers, but the plan's model '{}' has {}; a profile prices the plan's "
        "model layer for layer",
        profile, measured.layers.size(), model.name, model.layers.size()));
  }
  return measured;
}

}  // namespace motley::cli
