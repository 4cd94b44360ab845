// `motley model show|list`: a model's per-layer table and totals.
#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "commands.h"
#include "format.h"
#include "motley/core/json.h"
#include "motley/model/layer_cost.h"
#include "motley/model/model_json.h"
#include "motley/model/presets.h"

namespace motley::cli {
namespace {

struct ModelShowOptions {
  std::string model;
  int64_t seq_len = 0;  // 0: the model's default
  int64_t micro_batch_size = 1;
  bool json = false;
};

Json layer_json(int index, const Layer& layer, const LayerCost& c) {
  return Json{
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
}

std::vector<std::string> layer_row(int index, const Layer& layer, const LayerCost& c) {
  return {std::to_string(index),
          layer.name,
          layer_kind_name(layer.kind),
          format_count(static_cast<double>(c.params)),
          format_count(static_cast<double>(c.active_params)),
          format_flops(c.forward),
          format_flops(c.backward_input),
          format_flops(c.backward_weight),
          format_bytes(c.activation_bytes[0]),
          format_bytes(c.activation_bytes[1]),
          format_bytes(c.activation_bytes[2]),
          format_bytes(c.output_bytes)};
}

Status show_model(const ModelShowOptions& opt) {
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec model, load_model(opt.model));
  if (opt.seq_len < 0) return invalid_argument("--seq-len: expected a positive integer");
  if (opt.micro_batch_size <= 0) {
    return invalid_argument("--micro-batch-size: expected a positive integer");
  }
  Workload w;
  w.seq_len = opt.seq_len > 0 ? opt.seq_len : model.default_seq_len;
  w.micro_batch_size = opt.micro_batch_size;
  w.dtype = model.dtype;
  w.dropout = model.dropout;
  ModelTotals totals = model_totals(model, w);

  std::string out;
  if (opt.json) {
    Json layers = Json::array();
    for (size_t i = 0; i < model.layers.size(); ++i) {
      layers.push_back(
          layer_json(static_cast<int>(i), model.layers[i], layer_cost(model.layers[i], w)));
    }
    Json extra = Json::array();
    for (size_t i = 0; i < model.extra_layers.size(); ++i) {
      extra.push_back(layer_json(static_cast<int>(i), model.extra_layers[i],
                                 layer_cost(model.extra_layers[i], w)));
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
    out = j.dump(2) + "\n";
  } else {
    out += fmt::format("model {} ({}), {} layers; micro-batch {} x {} tokens, {}\n\n", model.name,
                       model.family, model.layers.size(), w.micro_batch_size, w.seq_len,
                       dtype_name(w.dtype));
    Table t({"#", "layer", "kind", "params", "active", "F", "B", "W", "act none", "act sel",
             "act full", "output"});
    for (size_t i = 0; i < model.layers.size(); ++i) {
      t.add_row(layer_row(static_cast<int>(i), model.layers[i], layer_cost(model.layers[i], w)));
    }
    t.add_separator();
    t.add_row({"", "total", "", format_count(static_cast<double>(totals.total_params)),
               format_count(static_cast<double>(totals.active_params)),
               format_flops(totals.forward), format_flops(totals.backward_input),
               format_flops(totals.backward_weight), format_bytes(totals.activation_bytes[0]),
               format_bytes(totals.activation_bytes[1]), format_bytes(totals.activation_bytes[2]),
               ""});
    out += t.to_string();
    if (!model.extra_layers.empty()) {
      out += fmt::format("\nnot part of the trained model (excluded from the totals):\n");
      Table x({"#", "layer", "kind", "params", "active", "F", "B", "W", "act none", "act sel",
               "act full", "output"});
      for (size_t i = 0; i < model.extra_layers.size(); ++i) {
        x.add_row(layer_row(static_cast<int>(i), model.extra_layers[i],
                            layer_cost(model.extra_layers[i], w)));
      }
      out += x.to_string();
    }
    out += fmt::format("\ntotal parameters {} ({}), active per token {} ({})", totals.total_params,
                       format_count(static_cast<double>(totals.total_params)), totals.active_params,
                       format_count(static_cast<double>(totals.active_params)));
    if (totals.extra_params > 0) {
      out += fmt::format(", not counted {} ({})", totals.extra_params,
                         format_count(static_cast<double>(totals.extra_params)));
    }
    out +=
        fmt::format("\ntraining FLOPs per micro-batch {} (F {}, B {}, W {})\n",
                    format_flops(totals.forward + totals.backward_input + totals.backward_weight),
                    format_flops(totals.forward), format_flops(totals.backward_input),
                    format_flops(totals.backward_weight));
  }
  std::fputs(out.c_str(), stdout);
  return Status::ok();
}

Status list_models() {
  std::string out = "model presets (use with --model or 'motley model show NAME'):\n";
  for (const auto& name : model_preset_names()) out += "  " + name + "\n";
  out += "also accepted: a Hugging Face config.json, a motley.profile/1 or motley.model/1 file\n";
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
  show->add_option("--seq-len", opt->seq_len, "Sequence length (default: the model's)");
  show->add_option("--micro-batch-size", opt->micro_batch_size, "Sequences per micro-batch")
      ->capture_default_str();
  show->add_flag("--json", opt->json, "Print one JSON object");
  show->callback([opt, action] { *action = [opt] { return show_model(*opt); }; });

  CLI::App* list = model->add_subcommand("list", "List the model presets");
  list->callback([action] { *action = [] { return list_models(); }; });
}

}  // namespace motley::cli
