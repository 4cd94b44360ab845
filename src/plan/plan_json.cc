// The plan file format; docs/plan-format.md documents every field. Keep the two in step.
#include "motley/plan/plan_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "motley/model/limits.h"
#include "motley/model/model_json.h"
#include "motley/plan/spec_hash.h"
#include "motley/plan/structure.h"
#include "motley/plan/task_graph.h"

namespace motley {
namespace {

constexpr const char* kTimeUnit = "s";
constexpr const char* kMemoryUnit = "bytes";

// Sizes of a step (docs/plan-format.md, "Limits"): sequences and tokens as the model formats
// bound them, and micro-batches no more than the actions a plan may list.
constexpr IntRange kMicroBatchSizes{1, kMaxMicroBatchSize};
constexpr IntRange kSeqLens{1, kMaxSeqLen};
constexpr IntRange kGlobalBatches{1, int64_t{1} << 30};
constexpr IntRange kMicroBatches{1, kMaxPlanActions};

std::optional<ActionKind> kind_of_letter(char c) {
  switch (c) {
    case 'F':
      return ActionKind::kForward;
    case 'I':
      return ActionKind::kBackwardInput;
    case 'W':
      return ActionKind::kBackwardWeight;
    case 'B':
      return ActionKind::kBackward;
    case 'R':
      return ActionKind::kRecompute;
    default:
      return std::nullopt;
  }
}

// Reads a run of decimal digits at `pos` into an int; false when there is none or it overflows.
bool read_index(std::string_view text, size_t* pos, int* out) {
  size_t start = *pos;
  int64_t value = 0;
  while (*pos < text.size() && text[*pos] >= '0' && text[*pos] <= '9') {
    value = value * 10 + (text[*pos] - '0');
    if (value > std::numeric_limits<int>::max()) return false;
    ++*pos;
  }
  if (*pos == start) return false;
  *out = static_cast<int>(value);
  return true;
}

Json stage_to_json(const Stage& stage) {
  Json j = Json::object();
  j["layers"] = Json::array({stage.layer_begin, stage.layer_end});
  j["recompute"] = recompute_policy_name(stage.recompute);
  if (stage.is_vocab_shard()) j["vocab_rows"] = Json::array({stage.vocab_begin, stage.vocab_end});
  if (!stage.recompute_layers.empty()) j["recompute_layers"] = stage.recompute_layers;
  return j;
}

// A group's actions as a plan file writes them: separated by single spaces, "0F0 0F1 0B0".
std::string actions_to_string(const std::vector<Action>& actions) {
  std::string out;
  out.reserve(actions.size() * 6);
  char digits[16];  // an int
  for (const Action& a : actions) {
    if (!out.empty()) out += ' ';
    out.append(digits, std::to_chars(digits, digits + sizeof digits, a.stage).ptr);
    out += action_letter(a.kind);
    out.append(digits, std::to_chars(digits, digits + sizeof digits, a.micro_batch).ptr);
  }
  return out;
}

// `same_actions_as`: an earlier replica whose groups run the same actions, whose lists are
// then not written again; -1 for none.
Json replica_to_json(const Replica& replica, int same_actions_as) {
  Json groups = Json::array();
  for (const DeviceGroupSchedule& g : replica.groups) {
    if (same_actions_as >= 0) {
      groups.push_back(Json{{"devices", g.devices}});
    } else {
      groups.push_back(Json{{"devices", g.devices}, {"actions", actions_to_string(g.actions)}});
    }
  }
  Json j = Json::object();
  j["micro_batches"] = replica.micro_batches;
  j["stage_group"] = replica.stage_group;
  if (same_actions_as >= 0) j["same_actions_as"] = same_actions_as;
  j["groups"] = std::move(groups);
  return j;
}

Result<SpecRef> spec_ref_from_json(const JsonField& parent, std::string_view key) {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, parent.get(key));
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"name", "hash"}));
  SpecRef ref;
  MOTLEY_ASSIGN_OR_RETURN(ref.name, f.get_string("name"));
  MOTLEY_ASSIGN_OR_RETURN(ref.hash, f.get_string("hash"));
  return ref;
}

// A non-negative integer that fits an int: stage, group, device and layer indices.
Result<int> as_index(const JsonField& f) {
  MOTLEY_ASSIGN_OR_RETURN(int64_t v, f.as_int());
  if (v < 0 || v > std::numeric_limits<int>::max()) {
    return f.error(fmt::format("expected a non-negative integer index, got {}",
                               describe_json_value(f.json())));
  }
  return static_cast<int>(v);
}

Result<std::vector<int>> index_list(const JsonField& parent, std::string_view key) {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, parent.get(key));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> items, f.items());
  std::vector<int> out;
  out.reserve(items.size());
  for (const JsonField& item : items) {
    MOTLEY_ASSIGN_OR_RETURN(int v, as_index(item));
    out.push_back(v);
  }
  return out;
}

Status check_units(const JsonField& root) {
  std::optional<JsonField> units = root.find("units");
  if (!units) return Status::ok();
  MOTLEY_RETURN_IF_ERROR(units->check_keys({"time", "memory"}));
  MOTLEY_ASSIGN_OR_RETURN(std::string time, units->get_string_or("time", kTimeUnit));
  if (time != kTimeUnit) {
    return units->child_error(
        "time", fmt::format("expected \"{}\" (seconds), got \"{}\"", kTimeUnit, time));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::string memory, units->get_string_or("memory", kMemoryUnit));
  if (memory != kMemoryUnit) {
    return units->child_error("memory",
                              fmt::format("expected \"{}\", got \"{}\"", kMemoryUnit, memory));
  }
  return Status::ok();
}

Result<Stage> stage_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"layers", "recompute", "recompute_layers", "vocab_rows"}));
  MOTLEY_ASSIGN_OR_RETURN(JsonField layers, f.get("layers"));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> bounds, layers.items());
  if (bounds.size() != 2) {
    return layers.error(fmt::format(
        "expected [first layer, end layer) as two integers, got {} values", bounds.size()));
  }
  Stage stage;
  MOTLEY_ASSIGN_OR_RETURN(stage.layer_begin, as_index(bounds[0]));
  MOTLEY_ASSIGN_OR_RETURN(stage.layer_end, as_index(bounds[1]));
  MOTLEY_ASSIGN_OR_RETURN(std::string policy, f.get_string_or("recompute", "none"));
  std::optional<RecomputePolicy> parsed = parse_recompute_policy(policy);
  if (!parsed) {
    return f.child_error("recompute",
                         fmt::format("expected {}, got \"{}\"",
                                     join_alternatives(recompute_policy_names()), policy));
  }
  stage.recompute = *parsed;
  if (f.has("recompute_layers")) {
    MOTLEY_ASSIGN_OR_RETURN(stage.recompute_layers, index_list(f, "recompute_layers"));
  }
  if (f.has("vocab_rows")) {
    MOTLEY_ASSIGN_OR_RETURN(JsonField rows, f.get("vocab_rows"));
    MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> ends, rows.items());
    if (ends.size() != 2) {
      return rows.error(fmt::format(
          "expected [first row, end row) of the head's vocabulary as two integers, got {} values",
          ends.size()));
    }
    MOTLEY_ASSIGN_OR_RETURN(stage.vocab_begin, ends[0].as_int_in(IntRange{0, kMaxVocab}));
    MOTLEY_ASSIGN_OR_RETURN(stage.vocab_end, ends[1].as_int_in(IntRange{0, kMaxVocab}));
    if (stage.vocab_end <= stage.vocab_begin) {
      return rows.error(
          fmt::format("rows [{}, {}) are empty; a vocabulary shard needs at least "
                      "one row",
                      stage.vocab_begin, stage.vocab_end));
    }
  }
  return stage;
}

// With `listed_before`, the group's actions are those given (a replica's same_actions_as), and
// it lists its devices alone.
Result<DeviceGroupSchedule> group_from_json(const JsonField& f,
                                            const std::vector<Action>* listed_before = nullptr) {
  DeviceGroupSchedule group;
  if (listed_before != nullptr) {
    if (f.has("actions")) {
      return f.child_error("actions",
                           "a group of a replica with 'same_actions_as' lists its devices only");
    }
    MOTLEY_RETURN_IF_ERROR(f.check_keys({"devices"}));
    MOTLEY_ASSIGN_OR_RETURN(group.devices, index_list(f, "devices"));
    group.actions = *listed_before;
    return group;
  }
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"devices", "actions"}));
  MOTLEY_ASSIGN_OR_RETURN(group.devices, index_list(f, "devices"));
  MOTLEY_ASSIGN_OR_RETURN(JsonField actions, f.get("actions"));
  if (actions.json().is_string()) {
    // One string, the actions separated by white space. An error names the action by its
    // index, as in the array form: 'actions[7]'.
    const std::string_view text = actions.json().get_ref<const std::string&>();
    constexpr std::string_view kSpace = " \t\n\r";
    for (size_t pos = text.find_first_not_of(kSpace); pos != std::string_view::npos;) {
      const size_t end = std::min(text.find_first_of(kSpace, pos), text.size());
      Result<Action> action = parse_action(text.substr(pos, end - pos));
      if (!action.is_ok()) {
        return invalid_argument(fmt::format("{}: field '{}[{}]': {}", actions.source(),
                                            actions.path(), group.actions.size(),
                                            action.status().message()));
      }
      group.actions.push_back(action.value());
      pos = text.find_first_not_of(kSpace, end);
    }
    return group;
  }
  if (!actions.is_array()) {
    return actions.error(fmt::format(
        "expected the group's actions as one string (\"0F0 0F1 0B0\") or an array of action "
        "strings, got {}",
        describe_json_value(actions.json())));
  }
  // Read straight from the document (a large plan holds millions of actions); an element's
  // field, with its path, is made only to say what is wrong with it.
  const Json& list = actions.json();
  group.actions.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) return actions.item(i).as_string().status();
    Result<Action> action = parse_action(list[i].get_ref<const std::string&>());
    if (!action.is_ok()) return actions.item(i).error(action.status().message());
    group.actions.push_back(action.value());
  }
  return group;
}

// Replica `index` of the plan; `before` holds the replicas read before it, which list `listed`
// actions in all, of at most `max_actions`.
Result<Replica> replica_from_json(const JsonField& f, size_t index,
                                  const std::vector<Replica>& before, int64_t listed,
                                  int64_t max_actions) {
  MOTLEY_RETURN_IF_ERROR(
      f.check_keys({"micro_batches", "stage_group", "same_actions_as", "groups"}));
  Replica replica;
  MOTLEY_ASSIGN_OR_RETURN(replica.micro_batches, f.get_int_in("micro_batches", kMicroBatches));
  MOTLEY_ASSIGN_OR_RETURN(replica.stage_group, index_list(f, "stage_group"));
  MOTLEY_ASSIGN_OR_RETURN(JsonField groups, f.get("groups"));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> items, groups.items());
  const Replica* same = nullptr;  // the replica whose groups' actions these groups run
  if (f.has("same_actions_as")) {
    MOTLEY_ASSIGN_OR_RETURN(const int64_t k, f.get_nonnegative_int("same_actions_as"));
    if (k >= static_cast<int64_t>(index)) {
      return f.child_error("same_actions_as",
                           fmt::format("expected an earlier replica's index (0 to {}), got {}",
                                       static_cast<int64_t>(index) - 1, k));
    }
    same = &before[static_cast<size_t>(k)];
    if (same->groups.size() != items.size()) {
      return f.child_error("same_actions_as",
                           fmt::format("replica {} has {} device groups and this one {}; the "
                                       "groups take its actions one by one",
                                       k, same->groups.size(), items.size()));
    }
    int64_t named = 0;
    for (const DeviceGroupSchedule& g : same->groups)
      named += static_cast<int64_t>(g.actions.size());
    if (named > max_actions - listed) {
      return f.child_error(
          "same_actions_as",
          fmt::format("the replicas would hold {} actions in all with this one's; at most {} are "
                      "read",
                      listed + named, max_actions));
    }
  }
  for (size_t g = 0; g < items.size(); ++g) {
    MOTLEY_ASSIGN_OR_RETURN(
        DeviceGroupSchedule group,
        group_from_json(items[g], same != nullptr ? &same->groups[g].actions : nullptr));
    replica.groups.push_back(std::move(group));
  }
  return replica;
}

Result<PredictedMetrics> predicted_from_json(const JsonField& f) {
  MOTLEY_RETURN_IF_ERROR(f.check_keys({"iteration_time_s", "throughput_tokens_per_s",
                                       "bubble_fraction", "cost_model", "optimizer_step"}));
  PredictedMetrics p;
  MOTLEY_ASSIGN_OR_RETURN(double t, f.get_nonnegative_double("iteration_time_s"));
  p.iteration_time = Seconds(t);
  MOTLEY_ASSIGN_OR_RETURN(p.throughput_tokens_per_s,
                          f.get_nonnegative_double("throughput_tokens_per_s"));
  MOTLEY_ASSIGN_OR_RETURN(p.bubble_fraction, f.get_nonnegative_double("bubble_fraction"));
  if (p.bubble_fraction > 1.0) {
    return f.child_error("bubble_fraction",
                         fmt::format("expected a fraction between 0 and 1, got {}",
                                     f.json().at("bubble_fraction").dump()));
  }
  MOTLEY_ASSIGN_OR_RETURN(p.cost_model, f.get_string("cost_model"));
  MOTLEY_ASSIGN_OR_RETURN(p.optimizer_step, f.get_bool_or("optimizer_step", true));
  return p;
}

bool is_flat_array(const Json& j) {
  if (!j.is_array()) return false;
  for (const Json& e : j) {
    if (e.is_structured()) return false;
  }
  return true;
}

// Keys in the order a reader wants them (the format first, the bulky schedule last); Json
// itself keeps keys sorted.
const std::vector<std::string>& preferred_key_order() {
  static const std::vector<std::string> kOrder = {"format",
                                                  "units",
                                                  "time",
                                                  "memory",
                                                  "model",
                                                  "cluster",
                                                  "name",
                                                  "hash",
                                                  "micro_batch_size",
                                                  "seq_len",
                                                  "global_batch",
                                                  "schedule",
                                                  "zero_stage",
                                                  "expert_parallel",
                                                  "context_parallel",
                                                  "sequence_parallel",
                                                  "predicted",
                                                  "iteration_time_s",
                                                  "throughput_tokens_per_s",
                                                  "bubble_fraction",
                                                  "cost_model",
                                                  "stages",
                                                  "layers",
                                                  "recompute",
                                                  "replicas",
                                                  "micro_batches",
                                                  "stage_group",
                                                  "same_actions_as",
                                                  "groups",
                                                  "devices",
                                                  "actions",
                                                  "software_stack",
                                                  "model_spec",
                                                  "cluster_spec"};
  return kOrder;
}

std::vector<std::string> ordered_keys(const Json& object) {
  std::vector<std::string> keys;
  for (const std::string& k : preferred_key_order()) {
    if (object.contains(k)) keys.push_back(k);
  }
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (std::find(keys.begin(), keys.end(), it.key()) == keys.end()) keys.push_back(it.key());
  }
  return keys;
}

// A scalar as JSON. A string of printable ASCII without quotes or backslashes (a group's
// actions: megabytes in a large plan) is copied as it is; anything else goes through dump().
void print_scalar(const Json& j, std::string* out) {
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (std::all_of(s.begin(), s.end(),
                    [](char c) { return c >= ' ' && c <= '~' && c != '"' && c != '\\'; })) {
      *out += '"';
      *out += s;
      *out += '"';
      return;
    }
  }
  *out += j.dump();
}

void print_flat_array(const Json& j, std::string* out) {
  *out += "[";
  for (size_t i = 0; i < j.size(); ++i) {
    if (i > 0) *out += ", ";
    print_scalar(j[i], out);
  }
  *out += "]";
}

constexpr size_t kLineWidth = 100;

// One line for a small object of scalars and flat arrays (units, references, stages), or
// nullopt when it has nested objects or a string longer than a line.
std::optional<std::string> one_line_object(const Json& j) {
  std::string out = "{";
  for (const std::string& key : ordered_keys(j)) {
    const Json& v = j.at(key);
    if (v.is_object() || (v.is_array() && !is_flat_array(v))) return std::nullopt;
    if (v.is_string() && v.get_ref<const std::string&>().size() > kLineWidth) return std::nullopt;
    if (out.size() > 1) out += ", ";
    out += Json(key).dump() + ": ";
    if (v.is_array()) {
      print_flat_array(v, &out);
    } else {
      print_scalar(v, &out);
    }
  }
  return out + "}";
}

// Like Json::dump(2), except that keys come in preferred_key_order, arrays of scalars (layer
// bounds, device lists, action orders) stay on one line, and so do small objects that fit, so
// that a plan reads as a few lines per device group.
void pretty_print(const Json& j, int indent, std::string* out) {
  const std::string pad(static_cast<size_t>(indent) * 2, ' ');
  const std::string inner(static_cast<size_t>(indent + 1) * 2, ' ');
  if (j.is_object() && !j.empty()) {
    // Where the current line started, to judge whether the object fits on it.
    const size_t line_start = out->rfind('\n') == std::string::npos ? 0 : out->rfind('\n') + 1;
    if (std::optional<std::string> line = one_line_object(j);
        line && out->size() - line_start + line->size() + 1 <= kLineWidth) {
      *out += *line;
      return;
    }
    *out += "{\n";
    const std::vector<std::string> keys = ordered_keys(j);
    for (size_t i = 0; i < keys.size(); ++i) {
      *out += inner + Json(keys[i]).dump() + ": ";
      pretty_print(j.at(keys[i]), indent + 1, out);
      *out += (i + 1 < keys.size()) ? ",\n" : "\n";
    }
    *out += pad + "}";
  } else if (j.is_array() && !j.empty() && !is_flat_array(j)) {
    *out += "[\n";
    for (size_t i = 0; i < j.size(); ++i) {
      *out += inner;
      pretty_print(j[i], indent + 1, out);
      *out += (i + 1 < j.size()) ? ",\n" : "\n";
    }
    *out += pad + "]";
  } else if (j.is_array()) {
    print_flat_array(j, out);
  } else {
    print_scalar(j, out);
  }
}

}  // namespace

std::string action_to_string(const Action& action) {
  return std::to_string(action.stage) + action_letter(action.kind) +
         std::to_string(action.micro_batch);
}

Result<Action> parse_action(std::string_view text) {
  auto bad = [&]() {
    return invalid_argument(fmt::format(
        "expected an action like \"0F3\", got {} (<stage><F, I, W, B or R><micro-batch>: "
        "forward, input-gradient backward, weight-gradient backward, full backward, "
        "recompute)",
        describe_json_value(Json(std::string(text)))));
  };
  Action action;
  size_t pos = 0;
  if (!read_index(text, &pos, &action.stage) || pos >= text.size()) return bad();
  std::optional<ActionKind> kind = kind_of_letter(text[pos++]);
  if (!kind) return bad();
  action.kind = *kind;
  if (!read_index(text, &pos, &action.micro_batch) || pos != text.size()) return bad();
  return action;
}

Json plan_to_json(const Plan& plan) {
  Json j = Json::object();
  j["format"] = kPlanFormat;
  j["units"] = Json{{"time", kTimeUnit}, {"memory", kMemoryUnit}};
  j["model"] = Json{{"name", plan.model.name}, {"hash", plan.model.hash}};
  j["cluster"] = Json{{"name", plan.cluster.name}, {"hash", plan.cluster.hash}};
  j["micro_batch_size"] = plan.micro_batch_size;
  j["seq_len"] = plan.seq_len;
  j["global_batch"] = plan.global_batch;
  Json stages = Json::array();
  for (const Stage& s : plan.stages) stages.push_back(stage_to_json(s));
  j["stages"] = std::move(stages);
  // A replica whose actions repeat the one before it (thousands, in a large data-parallel plan)
  // names the first of the run instead of listing them again.
  Json replicas = Json::array();
  int first_of_run = -1;
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const bool repeats = r > 0 && same_task_graph(plan.replicas[r - 1], plan.replicas[r]);
    if (!repeats) first_of_run = static_cast<int>(r);
    replicas.push_back(replica_to_json(plan.replicas[r], repeats ? first_of_run : -1));
  }
  j["replicas"] = std::move(replicas);
  j["schedule"] = plan.schedule;
  j["zero_stage"] = plan.zero_stage;
  if (plan.expert_parallel != 1) j["expert_parallel"] = plan.expert_parallel;
  if (plan.context_parallel != 1) j["context_parallel"] = plan.context_parallel;
  if (plan.sequence_parallel) j["sequence_parallel"] = true;
  if (plan.predicted) {
    const PredictedMetrics& p = *plan.predicted;
    j["predicted"] = Json{{"iteration_time_s", p.iteration_time.value()},
                          {"throughput_tokens_per_s", p.throughput_tokens_per_s},
                          {"bubble_fraction", p.bubble_fraction},
                          {"cost_model", p.cost_model}};
    if (!p.optimizer_step) j["predicted"]["optimizer_step"] = false;
  }
  if (plan.software_stack) j["software_stack"] = *plan.software_stack;
  return j;
}

Json plan_to_json(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster) {
  MOTLEY_CHECK(model_ref(model) == plan.model, "plan_to_json: the model is not the plan's");
  MOTLEY_CHECK(cluster_ref(cluster) == plan.cluster, "plan_to_json: the cluster is not the plan's");
  Json j = plan_to_json(plan);
  j["model_spec"] = model_to_json(model);
  j["cluster_spec"] = cluster_canonical_json(cluster);
  return j;
}

namespace {

// An embedded spec must be the one its reference names: a hand edit of either shows here
// rather than as a confusing hash mismatch later.
Status check_embedded(const JsonField& spec, const char* what, const SpecRef& recorded,
                      const SpecRef& actual, const std::string& ref_field) {
  if (actual == recorded) return Status::ok();
  return spec.error(fmt::format(
      "the embedded {} is '{}' (hash {}) but field '{}' says '{}' (hash {}); it was changed after "
      "the plan was made. Make the plan again from the changed {}, or restore it",
      what, actual.name, actual.hash, ref_field, recorded.name, recorded.hash, what));
}

}  // namespace

Result<PlanFile> plan_file_from_json(const Json& json, const std::string& source,
                                     int64_t max_actions) {
  JsonField root(json, source);
  if (!root.is_object()) {
    return root.error(fmt::format("expected a plan (a JSON object with \"format\": \"{}\"), got {}",
                                  kPlanFormat, describe_json_value(json)));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::string format, root.get_string("format"));
  const bool v1 = format == kPlanFormatV1;
  if (format != kPlanFormat && format != kPlanFormatV3 && format != kPlanFormatV2 && !v1) {
    return root.child_error(
        "format", fmt::format("expected \"{}\" (or \"{}\", \"{}\" or \"{}\"), got \"{}\"",
                              kPlanFormat, kPlanFormatV3, kPlanFormatV2, kPlanFormatV1, format));
  }
  std::vector<std::string_view> keys = {
      "format",           "units",         "model",           "cluster",   "micro_batch_size",
      "seq_len",          "global_batch",  "stages",          "replicas",  "schedule",
      "zero_stage",       "zero1",         "expert_parallel", "predicted", "sequence_parallel",
      "context_parallel", "software_stack"};
  if (!v1) {
    keys.push_back("model_spec");
    keys.push_back("cluster_spec");
  }
  MOTLEY_RETURN_IF_ERROR(root.check_keys(keys));
  MOTLEY_RETURN_IF_ERROR(check_units(root));
  PlanFile file;
  Plan& plan = file.plan;
  MOTLEY_ASSIGN_OR_RETURN(plan.model, spec_ref_from_json(root, "model"));
  MOTLEY_ASSIGN_OR_RETURN(plan.cluster, spec_ref_from_json(root, "cluster"));
  MOTLEY_ASSIGN_OR_RETURN(plan.micro_batch_size,
                          root.get_int_in("micro_batch_size", kMicroBatchSizes));
  MOTLEY_ASSIGN_OR_RETURN(plan.seq_len, root.get_int_in("seq_len", kSeqLens));
  MOTLEY_ASSIGN_OR_RETURN(plan.global_batch, root.get_int_in("global_batch", kGlobalBatches));

  MOTLEY_ASSIGN_OR_RETURN(JsonField stages, root.get("stages"));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> stage_items, stages.items());
  for (const JsonField& item : stage_items) {
    MOTLEY_ASSIGN_OR_RETURN(Stage stage, stage_from_json(item));
    plan.stages.push_back(stage);
  }
  MOTLEY_ASSIGN_OR_RETURN(JsonField replicas, root.get("replicas"));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> replica_items, replicas.items());
  int64_t listed = 0;  // actions of the replicas read so far
  for (const JsonField& item : replica_items) {
    MOTLEY_ASSIGN_OR_RETURN(Replica replica, replica_from_json(item, plan.replicas.size(),
                                                               plan.replicas, listed, max_actions));
    for (const DeviceGroupSchedule& g : replica.groups) {
      listed += static_cast<int64_t>(g.actions.size());
    }
    plan.replicas.push_back(std::move(replica));
  }
  MOTLEY_ASSIGN_OR_RETURN(plan.schedule, root.get_string_or("schedule", ""));
  // Plans written before ZeRO-2 and -3 say `zero1`, true or false.
  if (root.find("zero_stage") && root.find("zero1")) {
    return root.child_error("zero1", "give 'zero_stage' or the older 'zero1', not both");
  }
  MOTLEY_ASSIGN_OR_RETURN(const bool zero1, root.get_bool_or("zero1", false));
  MOTLEY_ASSIGN_OR_RETURN(const int64_t zero_stage,
                          root.get_int_in_or("zero_stage", IntRange{0, 3}, zero1 ? 1 : 0));
  plan.zero_stage = static_cast<int>(zero_stage);
  MOTLEY_ASSIGN_OR_RETURN(const int64_t expert_parallel,
                          root.get_int_in_or("expert_parallel", IntRange{1, 1 << 20}, 1));
  plan.expert_parallel = static_cast<int>(expert_parallel);
  MOTLEY_ASSIGN_OR_RETURN(const int64_t context_parallel,
                          root.get_int_in_or("context_parallel", IntRange{1, 1 << 20}, 1));
  plan.context_parallel = static_cast<int>(context_parallel);
  MOTLEY_ASSIGN_OR_RETURN(plan.sequence_parallel, root.get_bool_or("sequence_parallel", false));
  if (std::optional<JsonField> predicted = root.find("predicted")) {
    MOTLEY_ASSIGN_OR_RETURN(PredictedMetrics p, predicted_from_json(*predicted));
    plan.predicted = std::move(p);
  }
  if (std::optional<JsonField> stack = root.find("software_stack")) {
    // Its fields are the cost module's to check (software_stack_from_json).
    if (!stack->is_object()) {
      return stack->error(fmt::format("expected a software stack object, got {}",
                                      describe_json_value(stack->json())));
    }
    plan.software_stack = stack->json();
  }
  if (std::optional<JsonField> spec = root.find("model_spec")) {
    MOTLEY_ASSIGN_OR_RETURN(ModelSpec model, model_from_json(*spec));
    MOTLEY_RETURN_IF_ERROR(check_embedded(*spec, "model", plan.model, model_ref(model), "model"));
    file.model = std::move(model);
  }
  if (std::optional<JsonField> spec = root.find("cluster_spec")) {
    MOTLEY_ASSIGN_OR_RETURN(ClusterSpec cluster, cluster_from_json(*spec));
    MOTLEY_RETURN_IF_ERROR(
        check_embedded(*spec, "cluster", plan.cluster, cluster_ref(cluster), "cluster"));
    file.cluster = std::move(cluster);
  }
  return file;
}

Result<Plan> plan_from_json(const Json& json, const std::string& source) {
  MOTLEY_ASSIGN_OR_RETURN(PlanFile file, plan_file_from_json(json, source));
  return std::move(file.plan);
}

Result<PlanFile> load_plan_file(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(Json json, read_json_file(path));
  return plan_file_from_json(json, path);
}

Result<Plan> load_plan(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(PlanFile file, load_plan_file(path));
  return std::move(file.plan);
}

namespace {

std::string text_of(const Json& json) {
  std::string text;
  pretty_print(json, 0, &text);
  text += "\n";
  return text;
}

// One spec of a plan: the override, the embedded one, or the one the plan names. `load` is
// load_model or load_cluster; `what` is "model" or "cluster".
template <typename Spec, typename Load, typename Ref>
Result<Spec> resolve_spec(const std::string& path, const char* what, const SpecRef& recorded,
                          const std::optional<Spec>& embedded, const std::string& override_name,
                          Load load, Ref ref) {
  const std::string flag = fmt::format("--{}", what);
  if (!override_name.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(Spec spec, load(override_name));
    const SpecRef given = ref(spec);
    if (given.hash == recorded.hash) return spec;
    const std::string advice =
        embedded ? fmt::format("leave out {} to use the {} the plan carries", flag, what)
                 : fmt::format("pass the {} the plan was made for", what);
    return invalid_argument(fmt::format(
        "{}: field '{}': the plan was made for {} '{}' (hash {}) but {} {} is '{}' (hash {}); {}, "
        "or make a new plan for this {}",
        path, what, what, recorded.name, recorded.hash, flag, override_name, given.name, given.hash,
        advice, what));
  }
  if (embedded) return *embedded;
  // A plan without its spec (motley.plan/1): the name is all there is to go on.
  Result<Spec> named = load(recorded.name);
  if (!named.is_ok()) {
    return Status(
        named.status().code(),
        fmt::format("{}: field '{}': the plan names {} '{}' but does not carry it (an "
                    "older plan file), and it cannot be found: {}; pass {} with the {} "
                    "the plan was made for",
                    path, what, what, recorded.name, named.status().message(), flag, what));
  }
  const SpecRef found = ref(named.value());
  if (found.hash == recorded.hash) return named;
  return invalid_argument(fmt::format(
      "{}: field '{}': the plan was made for {} '{}' (hash {}) but the {} of that name here has "
      "hash {}; the plan does not carry its {} (an older plan file): pass {} with the one it was "
      "made for",
      path, what, what, recorded.name, recorded.hash, what, found.hash, what, flag));
}

}  // namespace

std::string plan_to_text(const Plan& plan) { return text_of(plan_to_json(plan)); }

std::string plan_to_text(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster) {
  return text_of(plan_to_json(plan, model, cluster));
}

Status save_plan(const Plan& plan, const std::string& path) {
  return write_file_atomically(path, plan_to_text(plan));
}

Status save_plan(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster,
                 const std::string& path) {
  return write_file_atomically(path, plan_to_text(plan, model, cluster));
}

Result<PlanInputs> load_plan_inputs(const std::string& path, const PlanSpecOverrides& overrides) {
  MOTLEY_ASSIGN_OR_RETURN(PlanFile file, load_plan_file(path));
  PlanInputs in;
  MOTLEY_ASSIGN_OR_RETURN(
      in.model, resolve_spec<ModelSpec>(path, "model", file.plan.model, file.model, overrides.model,
                                        load_model, model_ref));
  MOTLEY_ASSIGN_OR_RETURN(
      in.cluster, resolve_spec<ClusterSpec>(path, "cluster", file.plan.cluster, file.cluster,
                                            overrides.cluster, load_cluster, cluster_ref));
  in.plan = std::move(file.plan);
  return in;
}

}  // namespace motley
