#include "motley/plan/torch_pp.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "motley/core/json.h"
#include "motley/plan/dependencies.h"

namespace motley {
namespace {

// The types of PyTorch's _ComputationType that a cell may name, longest first where one is a
// prefix of another.
constexpr std::string_view kMessages[] = {"SEND_F", "RECV_F", "SEND_B", "RECV_B"};
constexpr std::string_view kShardActions[] = {"UNSHARD", "RESHARD", "REDUCE_GRAD"};
constexpr std::string_view kOverlap = "OVERLAP_F_B";
constexpr int kMaxIndexDigits = 9;

bool is_backward(ActionKind kind) {
  return kind == ActionKind::kBackwardInput || kind == ActionKind::kBackward;
}

std::string cell(int stage, std::string_view type, int micro_batch) {
  return fmt::format("{}{}{}", stage, type, micro_batch);
}

// Reads decimal digits at `*pos` (at least one, at most kMaxIndexDigits).
std::optional<int> read_number(std::string_view text, size_t* pos) {
  const size_t begin = *pos;
  int value = 0;
  while (*pos < text.size() && text[*pos] >= '0' && text[*pos] <= '9' &&
         *pos - begin < kMaxIndexDigits) {
    value = value * 10 + (text[*pos] - '0');
    ++*pos;
  }
  if (*pos == begin || (*pos < text.size() && text[*pos] >= '0' && text[*pos] <= '9')) {
    return std::nullopt;
  }
  return value;
}

// One cell: the compute actions it holds (none for a message or a sharding action), or
// nullopt when it is not an action. Checks stage indices against `stages`.
struct ParsedCell {
  std::vector<Action> compute;
};

std::optional<ParsedCell> parse_cell(std::string_view text, int stages, std::string* why);

std::optional<ParsedCell> parse_single(std::string_view text, int stages, std::string* why) {
  size_t pos = 0;
  const std::optional<int> stage = read_number(text, &pos);
  if (!stage) return std::nullopt;
  if (*stage >= stages) {
    *why = fmt::format("stage {}, but the plan has {} stages", *stage, stages);
    return std::nullopt;
  }
  const std::string_view rest = text.substr(pos);
  auto starts = [&rest](std::string_view type) { return rest.substr(0, type.size()) == type; };
  for (std::string_view type : kShardActions) {
    if (!starts(type)) continue;
    size_t after = pos + type.size();
    if (after < text.size() && !read_number(text, &after)) return std::nullopt;
    return after == text.size() ? std::optional<ParsedCell>(ParsedCell{}) : std::nullopt;
  }
  for (std::string_view type : kMessages) {
    if (!starts(type)) continue;
    size_t after = pos + type.size();
    if (!read_number(text, &after) || after != text.size()) return std::nullopt;
    return ParsedCell{};
  }
  if (rest.empty()) return std::nullopt;
  ActionKind kind;
  switch (rest.front()) {
    case 'F':
      kind = ActionKind::kForward;
      break;
    case 'I':
      kind = ActionKind::kBackwardInput;
      break;
    case 'W':
      kind = ActionKind::kBackwardWeight;
      break;
    case 'B':
      kind = ActionKind::kBackward;
      break;
    default:
      return std::nullopt;
  }
  size_t after = pos + 1;
  const std::optional<int> micro_batch = read_number(text, &after);
  if (!micro_batch || after != text.size()) return std::nullopt;
  return ParsedCell{{Action{kind, *stage, *micro_batch}}};
}

std::optional<ParsedCell> parse_cell(std::string_view text, int stages, std::string* why) {
  if (!text.empty() && text.front() == '(') {
    const size_t close = text.find(')');
    if (close == std::string_view::npos || text.substr(close + 1) != kOverlap) return std::nullopt;
    ParsedCell out;
    std::string_view inner = text.substr(1, close - 1);
    while (!inner.empty()) {
      const size_t semicolon = inner.find(';');
      std::string_view part = inner.substr(0, semicolon);
      while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
      while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
      std::optional<ParsedCell> sub = parse_single(part, stages, why);
      if (!sub) return std::nullopt;
      out.compute.insert(out.compute.end(), sub->compute.begin(), sub->compute.end());
      inner =
          semicolon == std::string_view::npos ? std::string_view() : inner.substr(semicolon + 1);
    }
    return out;
  }
  return parse_single(text, stages, why);
}

// The rows of a CSV file, each split into cells with spaces and quotes trimmed; a last empty
// line is no row.
std::vector<std::vector<std::string>> csv_rows(std::string_view csv) {
  std::vector<std::vector<std::string>> rows;
  size_t begin = 0;
  while (begin < csv.size()) {
    size_t end = csv.find('\n', begin);
    if (end == std::string_view::npos) end = csv.size();
    std::string_view line = csv.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::vector<std::string> cells;
    size_t from = 0;
    while (true) {
      const size_t comma = line.find(',', from);
      std::string_view c = line.substr(
          from, comma == std::string_view::npos ? std::string_view::npos : comma - from);
      while (!c.empty() && (c.front() == ' ' || c.front() == '"')) c.remove_prefix(1);
      while (!c.empty() && (c.back() == ' ' || c.back() == '"')) c.remove_suffix(1);
      cells.emplace_back(c);
      if (comma == std::string_view::npos) break;
      from = comma + 1;
    }
    rows.push_back(std::move(cells));
    begin = end + 1;
  }
  return rows;
}

// The recomputing stages whose recompute the plan's orders list as actions of their own (R),
// rather than leaving it inside the backward. (An R on a stage that keeps its activations
// recomputes one micro-batch, which the CSV cannot say; its order keeps them all.)
std::set<int> stages_with_recompute_actions(const Plan& plan) {
  std::set<int> stages;
  for (const Replica& r : plan.replicas) {
    for (const DeviceGroupSchedule& g : r.groups) {
      for (const Action& a : g.actions) {
        if (a.kind == ActionKind::kRecompute && plan.stages[a.stage].recomputes()) {
          stages.insert(a.stage);
        }
      }
    }
  }
  return stages;
}

// `actions` with R(s, m) before the first backward of (s, m) of every stage of `recomputing`.
std::vector<Action> with_recompute(const std::set<int>& recomputing,
                                   const std::vector<Action>& actions) {
  std::vector<Action> out;
  std::set<std::pair<int, int>> recomputed;
  for (const Action& a : actions) {
    if (is_backward(a.kind) && recomputing.count(a.stage) > 0 &&
        recomputed.insert({a.stage, a.micro_batch}).second) {
      out.push_back(Action{ActionKind::kRecompute, a.stage, a.micro_batch});
    }
    out.push_back(a);
  }
  return out;
}

}  // namespace

std::vector<int> torch_pp_stage_ranks(const Plan& plan, int replica) {
  return plan.replicas[replica].stage_group;
}

std::string torch_pp_csv(const Plan& plan, int replica, bool lowered) {
  const Replica& rep = plan.replicas[replica];
  const int stages = static_cast<int>(plan.stages.size());
  std::string out;
  for (size_t g = 0; g < rep.groups.size(); ++g) {
    const int group = static_cast<int>(g);
    std::vector<std::string> cells;
    std::set<std::pair<int, int>> received_gradient;
    for (const Action& a : rep.groups[g].actions) {
      if (a.kind == ActionKind::kRecompute) continue;
      const bool forward = a.kind == ActionKind::kForward;
      const bool backward = is_backward(a.kind);
      const bool from_before = a.stage > 0 && rep.stage_group[a.stage - 1] != group;
      const bool to_after = a.stage + 1 < stages && rep.stage_group[a.stage + 1] != group;
      if (lowered && forward && from_before)
        cells.push_back(cell(a.stage, "RECV_F", a.micro_batch));
      if (lowered && backward && to_after &&
          received_gradient.insert({a.stage, a.micro_batch}).second) {
        cells.push_back(cell(a.stage, "RECV_B", a.micro_batch));
      }
      cells.push_back(cell(a.stage, std::string(1, action_letter(a.kind)), a.micro_batch));
      if (lowered && forward && to_after) cells.push_back(cell(a.stage, "SEND_F", a.micro_batch));
      if (lowered && backward && from_before) {
        cells.push_back(cell(a.stage, "SEND_B", a.micro_batch));
      }
    }
    out += fmt::format("{}\n", fmt::join(cells, ","));
  }
  return out;
}

std::vector<std::string> torch_pp_limits(const Plan& plan, int replica) {
  std::vector<std::string> limits;
  const Replica& base = plan.replicas[replica];
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const Replica& other = plan.replicas[r];
    if (static_cast<int>(r) == replica) continue;
    std::vector<std::string> differences;
    if (other.micro_batches != base.micro_batches) {
      differences.push_back(
          fmt::format("{} micro-batches against {}", other.micro_batches, base.micro_batches));
    }
    if (other.stage_group != base.stage_group || other.groups.size() != base.groups.size()) {
      differences.push_back("another stage-to-rank map");
    } else {
      for (size_t g = 0; g < other.groups.size(); ++g) {
        if (other.groups[g].actions != base.groups[g].actions) {
          differences.push_back("another order");
          break;
        }
      }
    }
    if (!differences.empty()) {
      limits.push_back(
          fmt::format("replica {} differs ({}): PyTorch runs one schedule for every "
                      "data-parallel replica; export it with --replica {}",
                      r, fmt::join(differences, ", "), r));
    }
  }
  std::set<size_t> widths;
  for (const DeviceGroupSchedule& g : base.groups) widths.insert(g.devices.size());
  if (*widths.rbegin() > 1) {
    limits.push_back(fmt::format(
        "device groups of {} devices (tensor parallelism): each is one pipeline rank here; the "
        "tensor-parallel split is the stage module's",
        fmt::join(widths, " / ")));
  }
  std::vector<int> recomputing;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    if (plan.stages[s].recomputes()) recomputing.push_back(static_cast<int>(s));
  }
  if (!recomputing.empty()) {
    limits.push_back(
        fmt::format("stage{} {} recompute: PyTorch recomputes inside the stage module (activation "
                    "checkpointing), so the R actions are not written",
                    recomputing.size() > 1 ? "s" : "", fmt::join(recomputing, ", ")));
  }
  std::set<int> single;
  for (const Replica& r : plan.replicas) {
    for (const DeviceGroupSchedule& g : r.groups) {
      for (const Action& a : g.actions) {
        if (recomputes_alone(plan.stages, a)) single.insert(a.stage);
      }
    }
  }
  if (!single.empty()) {
    limits.push_back(fmt::format(
        "stage{} {} recompute{} single micro-batches: PyTorch's schedule checkpoints a stage "
        "for every micro-batch or none, so these R actions are not written and the stage keeps "
        "every micro-batch's activations",
        single.size() > 1 ? "s" : "", fmt::join(single, ", "), single.size() > 1 ? "" : "s"));
  }
  return limits;
}

Result<Plan> plan_with_torch_pp_order(const Plan& plan, std::string_view csv,
                                      const std::string& source) {
  const int stages = static_cast<int>(plan.stages.size());
  const std::vector<std::vector<std::string>> rows = csv_rows(csv);
  std::vector<std::vector<Action>> orders;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<Action> order;
    for (size_t c = 0; c < rows[r].size(); ++c) {
      const std::string& text = rows[r][c];
      if (text.empty()) continue;
      std::string why;
      const std::optional<ParsedCell> parsed = parse_cell(text, stages, &why);
      if (!parsed) {
        return invalid_argument(fmt::format(
            "{}: row {} (rank {}), column {}: {}expected an action such as 0F3, 1I3, 1W3, 2B0 "
            "or 1SEND_F3 (<stage><F, I, W, B, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD "
            "or REDUCE_GRAD><micro-batch>, or (a;b)OVERLAP_F_B), got {}",
            source, r + 1, r, c + 1, why.empty() ? "" : why + "; ",
            Json(text).dump(-1, ' ', false, Json::error_handler_t::replace)));
      }
      order.insert(order.end(), parsed->compute.begin(), parsed->compute.end());
    }
    orders.push_back(std::move(order));
  }
  const std::set<int> recomputing = stages_with_recompute_actions(plan);
  Plan out = plan;
  for (size_t r = 0; r < out.replicas.size(); ++r) {
    Replica& rep = out.replicas[r];
    if (rep.groups.size() != orders.size()) {
      return invalid_argument(fmt::format(
          "{}: {} rows (pipeline ranks), but replica {} of the plan has {} device groups", source,
          orders.size(), r, rep.groups.size()));
    }
    for (size_t g = 0; g < rep.groups.size(); ++g) {
      rep.groups[g].actions = with_recompute(recomputing, orders[g]);
    }
  }
  out.predicted.reset();
  return out;
}

}  // namespace motley
