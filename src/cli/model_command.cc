// `motley model show|list`: a model's per-layer table and totals.
#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "format.h"
#include "motley/core/json.h"
#include "motley/model/layer_cost.h"
#include "motley/model/model_json.h"
#include "motley/model/presets.h"
#include "option_checks.h"

namespace motley::cli {
namespace {

struct ModelShowOptions {
  std::string model;
  std::optional<int64_t> seq_len;  // unset: the model's default
  int64_t micro_batch_size = 1;
  bool json = false;
};

// A measured layer's times for the shown micro-batch: the profile's times scaled linearly in
// tokens, as the cost model scales them.
MeasuredTimes scaled(const MeasuredTimes& t, double scale) {
  MeasuredTimes out;
  if (t.forward) out.forward = *t.forward * scale;
  if (t.backward_input) out.backward_input = *t.backward_input * scale;
  if (t.backward_weight) out.backward_weight = *t.backward_weight * scale;
  return out;
}

// Measured layers carry times instead of FLOPs: what a list of layers needs shown.
struct LayerListInfo {
  bool analytic = false;                         // some layer has FLOPs
  int measured = 0;                              // measured layers
  std::set<std::string> devices;                 // their reference device types
  bool other_devices = false;                    // some layer has times on other device types
  std::set<std::pair<int64_t, int64_t>> shapes;  // (micro-batch, seq_len) measured at, if stated
  bool rescaled = false;  // some layer's times are scaled to the shown micro-batch

  void add(const std::vector<Layer>& layers, const Workload& w) {
    for (const Layer& layer : layers) {
      if (layer.kind != LayerKind::kMeasured || !layer.measured) {
        analytic = true;
        continue;
      }
      const MeasuredLayer& m = *layer.measured;
      ++measured;
      devices.insert(m.measured_on);
      if (!m.times_by_device.empty()) other_devices = true;
      if (m.seq_len > 0 && m.micro_batch_size > 0) shapes.insert({m.micro_batch_size, m.seq_len});
      if (measured_token_scale(layer, w) != 1.0) rescaled = true;
    }
  }
};

struct Columns {
  bool flops = true;
  bool times = false;
  bool device = false;  // the reference device type of each measured layer
};

Columns columns_for(const std::vector<Layer>& layers, const LayerListInfo& model_info,
                    const Workload& w) {
  LayerListInfo info;
  info.add(layers, w);
  return {info.analytic, info.measured > 0, info.measured > 0 && model_info.devices.size() > 1};
}

std::vector<std::string> layer_header(const Columns& c) {
  std::vector<std::string> h = {"#", "layer", "kind", "params", "active"};
  if (c.flops) h.insert(h.end(), {"F", "B", "W"});
  if (c.times) h.insert(h.end(), {"F time", "B time", "W time"});
  if (c.device) h.push_back("measured on");
  h.insert(h.end(), {"act none", "act sel", "act full", "output"});
  return h;
}

std::string time_cell(const std::optional<Seconds>& t) { return t ? format_time(*t) : "-"; }

std::vector<std::string> layer_row(const Columns& columns, int index, const Layer& layer,
                                   const LayerCost& c, const Workload& w) {
  const bool measured = layer.kind == LayerKind::kMeasured && layer.measured;
  std::vector<std::string> row = {std::to_string(index), layer.name, layer_kind_name(layer.kind),
                                  format_count(static_cast<double>(c.params)),
                                  format_count(static_cast<double>(c.active_params))};
  if (columns.flops) {
    // A measured layer's FLOPs are not known: "-" rather than a misleading 0.
    if (measured) {
      row.insert(row.end(), {"-", "-", "-"});
    } else {
      row.insert(row.end(), {format_flops(c.forward), format_flops(c.backward_input),
                             format_flops(c.backward_weight)});
    }
  }
  if (columns.times) {
    if (measured) {
      const MeasuredTimes t = scaled(layer.measured->times, measured_token_scale(layer, w));
      row.insert(row.end(),
                 {time_cell(t.forward), time_cell(t.backward_input), time_cell(t.backward_weight)});
    } else {
      row.insert(row.end(), {"-", "-", "-"});
    }
  }
  if (columns.device) row.push_back(measured ? layer.measured->measured_on : "");
  row.insert(row.end(), {format_bytes(c.activation_bytes[0]), format_bytes(c.activation_bytes[1]),
                         format_bytes(c.activation_bytes[2]), format_bytes(c.output_bytes)});
  return row;
}

Table layer_table(const std::vector<Layer>& layers, const Columns& columns, const Workload& w) {
  Table t(layer_header(columns));
  for (size_t i = 0; i < layers.size(); ++i) {
    t.add_row(layer_row(columns, static_cast<int>(i), layers[i], layer_cost(layers[i], w), w));
  }
  return t;
}

// The measured layers' times summed on their one reference device type.
struct MeasuredTotals {
  Seconds forward;
  Seconds backward_input;
  Seconds backward_weight;
};

MeasuredTotals measured_totals(const std::vector<Layer>& layers, const Workload& w) {
  MeasuredTotals totals;
  for (const Layer& layer : layers) {
    if (layer.kind != LayerKind::kMeasured || !layer.measured) continue;
    const MeasuredTimes t = scaled(layer.measured->times, measured_token_scale(layer, w));
    totals.forward += t.forward.value_or(Seconds(0));
    totals.backward_input += t.backward_input.value_or(Seconds(0));
    totals.backward_weight += t.backward_weight.value_or(Seconds(0));
  }
  return totals;
}

// The times a profile gives on device types other than a layer's reference, one row per layer
// and device type.
Table other_device_table(const std::vector<Layer>& layers, const Workload& w) {
  Table t({"#", "layer", "device", "F time", "B time", "W time"});
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& layer = layers[i];
    if (layer.kind != LayerKind::kMeasured || !layer.measured) continue;
    for (const auto& [device, times] : layer.measured->times_by_device) {
      const MeasuredTimes s = scaled(times, measured_token_scale(layer, w));
      t.add_row({std::to_string(i), layer.name, device, time_cell(s.forward),
                 time_cell(s.backward_input), time_cell(s.backward_weight)});
    }
  }
  return t;
}

Json layer_json(int index, const Layer& layer, const LayerCost& c, const Workload& w) {
  Json j{
      {"index", index},
      {"name", layer.name},
      {"kind", layer_kind_name(layer.kind)},
      {"params", c.params},
      {"active_params", c.active_params},
      {"stored_params", c.stored_params},
      {"forward_flops", c.forward.value()},
      {"backward_input_flops", c.backward_input.value()},
      {"backward_weight_flops", c.backward_weight.value()},
      {"activation_bytes",
       {{"none", c.activation_bytes[0].value()},
        {"selective", c.activation_bytes[1].value()},
        {"full", c.activation_bytes[2].value()}}},
      {"output_bytes", c.output_bytes.value()},
  };
  if (layer.kind == LayerKind::kMeasured && layer.measured) {
    // The fields of motley.model/1's `measured`, with the times for the shown micro-batch.
    const MeasuredLayer& m = *layer.measured;
    const double scale = measured_token_scale(layer, w);
    Json measured = measured_times_to_json(scaled(m.times, scale));
    measured["measured_on"] = m.measured_on;
    if (!m.times_by_device.empty()) {
      Json by_device = Json::object();
      for (const auto& [device, times] : m.times_by_device) {
        by_device[device] = measured_times_to_json(scaled(times, scale));
      }
      measured["times_by_device"] = std::move(by_device);
    }
    measured["seq_len"] = m.seq_len;
    measured["micro_batch_size"] = m.micro_batch_size;
    measured["token_scale"] = scale;
    j["measured"] = std::move(measured);
  }
  return j;
}

// The lines above a table with measured layers: where their times come from.
std::string measured_note(const LayerListInfo& info, const Workload& w) {
  if (info.measured == 0) return "";
  std::string out = info.devices.size() == 1
                        ? fmt::format("times measured on {}", *info.devices.begin())
                        : std::string("times measured on each layer's 'measured on' device type");
  out += ", per micro-batch; a measured layer has no FLOP count\n";
  if (info.rescaled) {
    if (info.shapes.size() == 1) {
      out += fmt::format(
          "times and bytes scaled linearly from the {} x {} tokens they were measured at to {} x "
          "{}\n",
          info.shapes.begin()->first, info.shapes.begin()->second, w.micro_batch_size, w.seq_len);
    } else {
      out += "times and bytes scaled linearly from the tokens each layer was measured at\n";
    }
  }
  return out;
}

Status show_model(const ModelShowOptions& opt) {
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec model, load_model(opt.model));
  Workload w;
  w.seq_len = opt.seq_len.value_or(model.default_seq_len);
  w.micro_batch_size = opt.micro_batch_size;
  w.dtype = model.dtype;
  w.dropout = model.dropout;
  ModelTotals totals = model_totals(model, w);
  LayerListInfo info;  // the trained model
  info.add(model.layers, w);
  LayerListInfo all = info;  // with the extra layers
  all.add(model.extra_layers, w);
  // Times on different device types do not add up.
  const bool time_totals = info.measured > 0 && info.devices.size() == 1;
  const MeasuredTotals mtotals = measured_totals(model.layers, w);

  std::string out;
  if (opt.json) {
    Json layers = Json::array();
    for (size_t i = 0; i < model.layers.size(); ++i) {
      layers.push_back(
          layer_json(static_cast<int>(i), model.layers[i], layer_cost(model.layers[i], w), w));
    }
    Json extra = Json::array();
    for (size_t i = 0; i < model.extra_layers.size(); ++i) {
      extra.push_back(layer_json(static_cast<int>(i), model.extra_layers[i],
                                 layer_cost(model.extra_layers[i], w), w));
    }
    Json j{{"name", model.name},
           {"family", model.family},
           {"seq_len", w.seq_len},
           {"micro_batch_size", w.micro_batch_size},
           {"dtype", dtype_name(w.dtype)},
           {"num_layers", model.layers.size()},
           {"total_params", totals.total_params},
           {"active_params", totals.active_params},
           {"extra_params", totals.extra_params},
           {"forward_flops", totals.forward.value()},
           {"backward_input_flops", totals.backward_input.value()},
           {"backward_weight_flops", totals.backward_weight.value()},
           {"activation_bytes",
            {{"none", totals.activation_bytes[0].value()},
             {"selective", totals.activation_bytes[1].value()},
             {"full", totals.activation_bytes[2].value()}}},
           {"layers", layers},
           {"extra_layers", extra}};
    if (time_totals) {
      j["measured_totals"] = {{"measured_on", *info.devices.begin()},
                              {"layers", info.measured},
                              {"forward_s", mtotals.forward.value()},
                              {"backward_input_s", mtotals.backward_input.value()},
                              {"backward_weight_s", mtotals.backward_weight.value()}};
    }
    out = j.dump(2) + "\n";
  } else {
    out += fmt::format("model {} ({}), {} layers; micro-batch {} x {} tokens, {}\n", model.name,
                       model.family, model.layers.size(), w.micro_batch_size, w.seq_len,
                       dtype_name(w.dtype));
    out += measured_note(all, w) + "\n";
    const Columns columns = columns_for(model.layers, all, w);
    Table t = layer_table(model.layers, columns, w);
    t.add_separator();
    std::vector<std::string> total_row = {"", "total", "",
                                          format_count(static_cast<double>(totals.total_params)),
                                          format_count(static_cast<double>(totals.active_params))};
    if (columns.flops) {
      total_row.insert(total_row.end(),
                       {format_flops(totals.forward), format_flops(totals.backward_input),
                        format_flops(totals.backward_weight)});
    }
    if (columns.times) {
      if (time_totals) {
        total_row.insert(total_row.end(),
                         {format_time(mtotals.forward), format_time(mtotals.backward_input),
                          format_time(mtotals.backward_weight)});
      } else {
        total_row.insert(total_row.end(), {"-", "-", "-"});
      }
    }
    if (columns.device) total_row.push_back("");
    total_row.insert(total_row.end(), {format_bytes(totals.activation_bytes[0]),
                                       format_bytes(totals.activation_bytes[1]),
                                       format_bytes(totals.activation_bytes[2]), ""});
    t.add_row(std::move(total_row));
    out += t.to_string();
    if (info.other_devices) {
      out +=
          "\ntimes measured on other device types (-: not measured; the cost model scales the "
          "reference time):\n";
      out += other_device_table(model.layers, w).to_string();
    }
    if (!model.extra_layers.empty()) {
      out += fmt::format("\nnot part of the trained model (excluded from the totals):\n");
      out +=
          layer_table(model.extra_layers, columns_for(model.extra_layers, all, w), w).to_string();
    }
    out += fmt::format("\ntotal parameters {} ({}), active per token {} ({})", totals.total_params,
                       format_count(static_cast<double>(totals.total_params)), totals.active_params,
                       format_count(static_cast<double>(totals.active_params)));
    if (totals.extra_params > 0) {
      out += fmt::format(", not counted {} ({})", totals.extra_params,
                         format_count(static_cast<double>(totals.extra_params)));
    }
    out += "\n";
    if (info.analytic || info.measured == 0) {
      out +=
          fmt::format("training FLOPs per micro-batch {} (F {}, B {}, W {}){}\n",
                      format_flops(totals.forward + totals.backward_input + totals.backward_weight),
                      format_flops(totals.forward), format_flops(totals.backward_input),
                      format_flops(totals.backward_weight),
                      info.measured > 0 ? ", measured layers not counted" : "");
    }
    if (time_totals) {
      out += fmt::format(
          "{} per micro-batch on {} {} (F {}, B {}, W {})\n",
          info.analytic ? fmt::format("time of the {} measured layers", info.measured)
                        : std::string("measured time"),
          *info.devices.begin(),
          format_time(mtotals.forward + mtotals.backward_input + mtotals.backward_weight),
          format_time(mtotals.forward), format_time(mtotals.backward_input),
          format_time(mtotals.backward_weight));
    } else if (info.measured > 0) {
      std::string devices;
      for (const std::string& d : info.devices) devices += (devices.empty() ? "" : ", ") + d;
      out += fmt::format("measured times are on several device types ({}): no total\n", devices);
    }
    // A measured head's or embedding's rows, stated or read from its bytes: what vocabulary
    // parallelism splits.
    const auto rows_note = [&](const Layer& layer, int64_t rows, const char* what) {
      if (layer.kind != LayerKind::kMeasured || !layer.measured || rows <= 0) return;
      out += fmt::format("{} ({}): {} vocabulary rows, {}; vocabulary parallelism may split it\n",
                         what, layer.name, rows,
                         layer.measured->vocab > 0 ? "stated" : "read from its bytes");
    };
    if (!model.layers.empty()) {
      rows_note(model.layers.front(), embedding_vocab(model), "embedding");
      rows_note(model.layers.back(), head_vocab(model), "head");
    }
  }
  std::fputs(out.c_str(), stdout);
  return Status::ok();
}

Status list_models() {
  std::string out = "model presets (use with --model or 'motley model show NAME'):\n";
  for (const auto& name : model_preset_names()) out += "  " + name + "\n";
  out += "also accepted: a Hugging Face config.json, a motley profile or motley.model/1 file\n";
  std::fputs(out.c_str(), stdout);
  return Status::ok();
}

}  // namespace

void add_model_command(CLI::App& app, Action* action) {
  CLI::App* model = app.add_subcommand("model", "Inspect models: presets, HF configs, profiles");
  model->require_subcommand(1);

  auto opt = std::make_shared<ModelShowOptions>();
  CLI::App* show = model->add_subcommand(
      "show", "Per-layer parameters, FLOPs, activation and output bytes, and totals");
  show->add_option("model", opt->model,
                   "Preset name, Hugging Face config.json, motley profile or model JSON")
      ->required();
  show->add_option("--seq-len", opt->seq_len, "Sequence length (default: the model's)")
      ->check(integer_in(1, kMaxOptionSeqLen));
  show->add_option("--micro-batch-size", opt->micro_batch_size, "Sequences per micro-batch")
      ->check(integer_in(1, kMaxOptionCount))
      ->capture_default_str();
  show->add_flag("--json", opt->json, "Print one JSON object");
  show->callback([opt, action] { *action = [opt] { return show_model(*opt); }; });

  CLI::App* list = model->add_subcommand("list", "List the model presets");
  list->callback([action] { *action = [] { return list_models(); }; });
}

}  // namespace motley::cli
