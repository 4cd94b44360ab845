#include "motley/model/profile.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "motley/model/limits.h"
#include "motley/model/model_json.h"

namespace motley {
namespace {

constexpr int64_t kDefaultSeqLen = 4096;
constexpr int64_t kDefaultMicroBatchSize = 1;
constexpr IntRange kSeqLens{1, kMaxSeqLen};
constexpr IntRange kMicroBatchSizes{1, kMaxMicroBatchSize};

// One entry of "layers" before `repeat` is expanded.
struct Entry {
  std::string name;
  int64_t repeat = 1;
  MeasuredLayer measured;
};

struct Defaults {
  std::optional<std::string> measured_on;
  WeightPass weight_pass = WeightPass::kWeightsOnly;
  int64_t seq_len = kDefaultSeqLen;
  int64_t micro_batch_size = kDefaultMicroBatchSize;
};

// The keys of a measured times object in each version.
std::vector<std::string_view> time_keys(int version) {
  std::vector<std::string_view> keys = {"forward_s", "backward_input_s", "backward_weight_s"};
  if (version >= 2) {
    keys.push_back("selective_recompute_s");
    keys.push_back("backward_s");
  }
  return keys;
}

Result<Entry> entry_from_json(const JsonField& f, const Defaults& defaults, int version) {
  std::vector<std::string_view> keys = {
      "name",        "repeat",           "measured_on",  "seq_len",         "micro_batch_size",
      "param_bytes", "activation_bytes", "output_bytes", "times_by_device", "vocab"};
  for (std::string_view k : time_keys(version)) keys.push_back(k);
  if (version >= 2) {
    keys.push_back("times_by_tp");
    keys.push_back("weight_pass");
    keys.push_back("optimizer_s");
  }
  MOTLEY_RETURN_IF_ERROR(f.check_keys(keys));
  Entry e;
  MOTLEY_ASSIGN_OR_RETURN(e.name, f.get_string("name"));
  if (e.name.empty()) return f.child_error("name", "must not be empty");
  MOTLEY_ASSIGN_OR_RETURN(e.repeat, f.get_int_in_or("repeat", IntRange{1, kMaxLayers}, 1));

  MeasuredLayer& m = e.measured;
  if (f.has("measured_on")) {
    MOTLEY_ASSIGN_OR_RETURN(m.measured_on, f.get_string("measured_on"));
  } else if (defaults.measured_on) {
    m.measured_on = *defaults.measured_on;
  } else {
    return f.child_error("measured_on",
                         "is missing: name the device type the times were measured on, here or "
                         "once at the top level");
  }
  if (m.measured_on.empty()) return f.child_error("measured_on", "must not be empty");
  MOTLEY_ASSIGN_OR_RETURN(m.weight_pass,
                          weight_pass_from_json(f, "weight_pass", defaults.weight_pass));
  MOTLEY_ASSIGN_OR_RETURN(m.seq_len, f.get_int_in_or("seq_len", kSeqLens, defaults.seq_len));
  MOTLEY_ASSIGN_OR_RETURN(m.micro_batch_size, f.get_int_in_or("micro_batch_size", kMicroBatchSizes,
                                                              defaults.micro_batch_size));

  // forward_s is required; a layer without an input gradient (the embedding) or without
  // weights may leave out its backward times, which then count as zero.
  MOTLEY_ASSIGN_OR_RETURN(double forward, f.get_nonnegative_double("forward_s"));
  MOTLEY_ASSIGN_OR_RETURN(double backward_input,
                          f.get_nonnegative_double_or("backward_input_s", 0));
  MOTLEY_ASSIGN_OR_RETURN(double backward_weight,
                          f.get_nonnegative_double_or("backward_weight_s", 0));
  m.times.forward = Seconds(forward);
  m.times.backward_input = Seconds(backward_input);
  m.times.backward_weight = Seconds(backward_weight);
  // Absent: the layer has no attention core to recompute, or it was not measured.
  if (f.has("selective_recompute_s")) {
    MOTLEY_ASSIGN_OR_RETURN(double recompute, f.get_nonnegative_double("selective_recompute_s"));
    m.times.selective_recompute = Seconds(recompute);
  }
  if (f.has("backward_s")) {
    MOTLEY_ASSIGN_OR_RETURN(double backward, f.get_nonnegative_double("backward_s"));
    m.times.backward = Seconds(backward);
  }

  if (std::optional<JsonField> by_device = f.find("times_by_device")) {
    MOTLEY_ASSIGN_OR_RETURN(std::vector<std::string> devices, by_device->keys());
    for (const std::string& device : devices) {
      MOTLEY_ASSIGN_OR_RETURN(JsonField times, by_device->get(device));
      if (device.empty()) return by_device->error("a device name is empty");
      MOTLEY_RETURN_IF_ERROR(times.check_keys(time_keys(version)));
      MOTLEY_ASSIGN_OR_RETURN(MeasuredTimes t, measured_times_from_json(times));
      if (!t.forward && !t.backward_input && !t.backward_weight && !t.selective_recompute &&
          !t.backward) {
        return times.error(version >= 2 ? "expected at least one of forward_s, backward_input_s, "
                                          "backward_weight_s, selective_recompute_s or backward_s"
                                        : "expected at least one of forward_s, backward_input_s or "
                                          "backward_weight_s");
      }
      m.times_by_device[device] = t;
    }
  }
  if (std::optional<JsonField> by_tp = f.find("times_by_tp")) {
    MOTLEY_ASSIGN_OR_RETURN(m.times_by_tp, times_by_tp_from_json(*by_tp));
  }

  MOTLEY_ASSIGN_OR_RETURN(double param_bytes, f.get_nonnegative_double_or("param_bytes", 0));
  MOTLEY_ASSIGN_OR_RETURN(double act_bytes, f.get_nonnegative_double_or("activation_bytes", 0));
  MOTLEY_ASSIGN_OR_RETURN(double out_bytes, f.get_nonnegative_double_or("output_bytes", 0));
  m.param_bytes = Bytes(param_bytes);
  m.activation_bytes = Bytes(act_bytes);
  m.output_bytes = Bytes(out_bytes);
  MOTLEY_ASSIGN_OR_RETURN(m.vocab, f.get_int_in_or("vocab", IntRange{1, kMaxVocab}, 0));
  if (f.has("optimizer_s")) {
    MOTLEY_ASSIGN_OR_RETURN(double optimizer, f.get_nonnegative_double("optimizer_s"));
    m.optimizer_step = Seconds(optimizer);
  }
  return e;
}

bool same_times(const MeasuredTimes& a, const MeasuredTimes& b) {
  return a.forward == b.forward && a.backward_input == b.backward_input &&
         a.backward_weight == b.backward_weight && a.selective_recompute == b.selective_recompute &&
         a.backward == b.backward;
}

template <typename Key>
bool same_times_map(const std::map<Key, MeasuredTimes>& a, const std::map<Key, MeasuredTimes>& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first || !same_times(ia->second, ib->second)) return false;
  }
  return true;
}

bool same_measurement(const MeasuredLayer& a, const MeasuredLayer& b) {
  if (a.measured_on != b.measured_on || a.weight_pass != b.weight_pass ||
      !same_times(a.times, b.times) || a.seq_len != b.seq_len ||
      a.micro_batch_size != b.micro_batch_size || a.param_bytes != b.param_bytes ||
      a.activation_bytes != b.activation_bytes || a.output_bytes != b.output_bytes ||
      a.vocab != b.vocab || a.optimizer_step != b.optimizer_step ||
      !same_times_map(a.times_by_device, b.times_by_device) ||
      a.times_by_tp.size() != b.times_by_tp.size()) {
    return false;
  }
  for (auto ia = a.times_by_tp.begin(), ib = b.times_by_tp.begin(); ia != a.times_by_tp.end();
       ++ia, ++ib) {
    if (ia->first != ib->first || !same_times_map(ia->second, ib->second)) return false;
  }
  return true;
}

// "mamba.12" -> ("mamba", 12); nullopt for names without a canonical numeric suffix.
std::optional<std::pair<std::string, int64_t>> split_index(const std::string& name) {
  size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size()) return std::nullopt;
  std::string digits = name.substr(dot + 1);
  if (digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return std::make_pair(name.substr(0, dot), std::stoll(digits));
}

// Every entry states where and at which shape it was measured, so an entry read alone (or moved
// to another file) keeps its meaning.
Json entry_to_json(const std::string& name, int64_t repeat, const MeasuredLayer& m) {
  Json j = Json::object();
  j["name"] = name;
  if (repeat > 1) j["repeat"] = repeat;
  j["measured_on"] = m.measured_on;
  if (m.weight_pass != WeightPass::kWeightsOnly) j["weight_pass"] = weight_pass_name(m.weight_pass);
  j["seq_len"] = m.seq_len;
  j["micro_batch_size"] = m.micro_batch_size;
  j.update(measured_times_to_json(m.times));
  j["param_bytes"] = number_json(m.param_bytes.value());
  j["activation_bytes"] = number_json(m.activation_bytes.value());
  j["output_bytes"] = number_json(m.output_bytes.value());
  if (m.vocab > 0) j["vocab"] = m.vocab;
  if (m.optimizer_step) j["optimizer_s"] = m.optimizer_step->value();
  if (!m.times_by_device.empty()) {
    Json by_device = Json::object();
    for (const auto& [device, times] : m.times_by_device) {
      by_device[device] = measured_times_to_json(times);
    }
    j["times_by_device"] = std::move(by_device);
  }
  if (!m.times_by_tp.empty()) j["times_by_tp"] = times_by_tp_to_json(m.times_by_tp);
  return j;
}

}  // namespace

bool is_profile_format(std::string_view format) {
  return format == kProfileFormat || format == kProfileFormatV1;
}

Result<ModelSpec> profile_from_json(const Json& profile, const std::string& source) {
  JsonField root(profile, source);
  if (!root.is_object()) {
    return root.error(
        fmt::format("expected a profile object, got {}", describe_json_value(profile)));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::string format, root.get_string("format"));
  if (!is_profile_format(format)) {
    return root.child_error("format", fmt::format("expected \"{}\" or \"{}\", got \"{}\"",
                                                  kProfileFormat, kProfileFormatV1, format));
  }
  const int version = format == kProfileFormatV1 ? 1 : 2;
  std::vector<std::string_view> root_keys = {"format",           "name",  "measured_on", "seq_len",
                                             "micro_batch_size", "dtype", "layers"};
  if (version >= 2) root_keys.push_back("weight_pass");
  MOTLEY_RETURN_IF_ERROR(root.check_keys(root_keys));
  ModelSpec model;
  model.family = "profile";
  MOTLEY_ASSIGN_OR_RETURN(model.name, root.get_string_or("name", "profile"));
  if (root.has("dtype")) {
    MOTLEY_ASSIGN_OR_RETURN(std::string dtype, root.get_string("dtype"));
    std::optional<DType> parsed = parse_dtype(dtype);
    if (!parsed) {
      return root.child_error(
          "dtype", fmt::format("unknown dtype \"{}\"; expected fp32, bf16 or fp16", dtype));
    }
    model.dtype = *parsed;
  }
  Defaults defaults;
  if (root.has("measured_on")) {
    MOTLEY_ASSIGN_OR_RETURN(defaults.measured_on, root.get_string("measured_on"));
  }
  MOTLEY_ASSIGN_OR_RETURN(defaults.weight_pass,
                          weight_pass_from_json(root, "weight_pass", WeightPass::kWeightsOnly));
  MOTLEY_ASSIGN_OR_RETURN(defaults.seq_len,
                          root.get_int_in_or("seq_len", kSeqLens, kDefaultSeqLen));
  MOTLEY_ASSIGN_OR_RETURN(
      defaults.micro_batch_size,
      root.get_int_in_or("micro_batch_size", kMicroBatchSizes, kDefaultMicroBatchSize));
  model.default_seq_len = defaults.seq_len;

  MOTLEY_ASSIGN_OR_RETURN(JsonField layers_field, root.get("layers"));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> items, layers_field.items());
  if (items.empty()) return layers_field.error("expected at least one layer");
  std::vector<Entry> entries;
  std::map<std::string, int64_t> uses;  // layers each entry name stands for, over the file
  int64_t total = 0;                    // layers the entries expand to
  for (const JsonField& item : items) {
    MOTLEY_ASSIGN_OR_RETURN(Entry e, entry_from_json(item, defaults, version));
    total += e.repeat;  // each repeat is at most kMaxLayers: no overflow before the check
    if (total > kMaxLayers) {
      const std::string what = fmt::format(
          "brings the profile to {} layers; at most {} are supported", total, kMaxLayers);
      return item.has("repeat") ? item.child_error("repeat", what) : item.error(what);
    }
    uses[e.name] += e.repeat;
    entries.push_back(std::move(e));
  }

  // A name used for one layer stays as is; a name used for several (by `repeat` or by several
  // entries, as in an interleaved hybrid) numbers them .0, .1, ... in file order.
  std::map<std::string, int64_t> next_index;
  std::map<std::string, size_t> produced_by;  // layer name -> entry index
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    for (int64_t r = 0; r < e.repeat; ++r) {
      Layer layer;
      layer.kind = LayerKind::kMeasured;
      layer.name = uses[e.name] == 1 ? e.name : e.name + "." + std::to_string(next_index[e.name]++);
      layer.measured = e.measured;
      auto [it, inserted] = produced_by.emplace(layer.name, i);
      if (!inserted) {
        return items[i].child_error(
            "name", fmt::format("gives a layer the name '{}', which layers[{}] also produces; "
                                "entries sharing a name are numbered name.0, name.1, ..., so "
                                "rename one of them",
                                layer.name, it->second));
      }
      model.layers.push_back(std::move(layer));
    }
  }
  MOTLEY_RETURN_IF_ERROR(validate_model(model, source));
  return model;
}

Json profile_to_json(const ModelSpec& model) {
  for (const Layer& l : model.layers) {
    MOTLEY_CHECK(l.kind == LayerKind::kMeasured && l.measured.has_value(),
                 fmt::format("profile_to_json needs measured layers only; '{}' is {}", l.name,
                             layer_kind_name(l.kind)));
  }
  const size_t n = model.layers.size();

  // A base name can be written once per run only when reading it back renumbers its layers to
  // exactly their present names: they are base.0 .. base.(k-1) in order, k >= 2, and no layer
  // is called just `base`.
  std::vector<std::optional<std::pair<std::string, int64_t>>> split(n);
  std::map<std::string, int64_t> count;
  std::map<std::string, bool> foldable;
  for (size_t i = 0; i < n; ++i) {
    split[i] = split_index(model.layers[i].name);
    if (!split[i]) continue;
    const auto& [base, index] = *split[i];
    bool in_order = index == count[base];
    auto it = foldable.find(base);
    foldable[base] = (it == foldable.end() ? true : it->second) && in_order;
    ++count[base];
  }
  for (size_t i = 0; i < n; ++i) {
    auto it = foldable.find(model.layers[i].name);
    if (it != foldable.end()) it->second = false;
  }
  for (auto& [base, ok] : foldable) ok = ok && count[base] >= 2;

  Json layers = Json::array();
  for (size_t i = 0; i < n;) {
    const Layer& first = model.layers[i];
    size_t j = i + 1;
    std::string name = first.name;
    if (split[i] && foldable[split[i]->first]) {
      name = split[i]->first;
      while (j < n && split[j] && split[j]->first == name &&
             split[j]->second == split[i]->second + static_cast<int64_t>(j - i) &&
             same_measurement(*model.layers[j].measured, *first.measured)) {
        ++j;
      }
    }
    layers.push_back(entry_to_json(name, static_cast<int64_t>(j - i), *first.measured));
    i = j;
  }

  Json j = Json::object();
  j["format"] = kProfileFormat;
  j["name"] = model.name;
  j["seq_len"] = model.default_seq_len;  // the model's default; each entry states its own
  j["dtype"] = dtype_name(model.dtype);
  j["layers"] = std::move(layers);
  return j;
}

}  // namespace motley
