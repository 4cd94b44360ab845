#include "candidate.h"

#include <charconv>
#include <cstdint>
#include <string>

namespace motley::tune_internal {

namespace {

void append_number(std::string* out, int64_t x) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof(buf), x).ptr;
  out->append(buf, end);
}

}  // namespace

// Built by appending rather than through a string stream: the search asks for a key for every
// candidate it evaluates.
std::string candidate_key(const Candidate& c) {
  std::string k;
  k.reserve(64);
  append_number(&k, c.micro_batch_size);
  k += '|';
  k += c.schedule.name();
  if (!c.schedule.limit_in_flight) k += '!';
  k += '|';
  for (const PipelineSpec& r : c.replicas) {
    k += 'm';
    append_number(&k, r.micro_batches);
    k += ':';
    for (const auto& g : r.groups) {
      k += '[';
      for (int d : g) {
        append_number(&k, d);
        k += ',';
      }
      k += ']';
    }
    k += 'b';
    for (int b : r.bounds) {
      append_number(&k, b);
      k += ',';
    }
    k += 'r';
    for (RecomputePolicy p : r.recompute) append_number(&k, static_cast<int>(p));
    k += ';';
  }
  return k;
}

std::vector<std::vector<GroupLoad>> group_loads(const Context& ctx, const Candidate& c) {
  const CostModel& cost = ctx.cost(c.micro_batch_size);
  std::vector<std::vector<GroupLoad>> out;
  for (const PipelineSpec& rep : c.replicas) {
    const int p = static_cast<int>(rep.groups.size());
    const std::vector<int> stage_group = shape_stage_group(c.schedule, p);
    std::vector<GroupLoad> loads(p);
    for (size_t s = 0; s + 1 < rep.bounds.size(); ++s) {
      const int g = stage_group[s];
      const ComputeTimes t = cost.compute(LayerRange{rep.bounds[s], rep.bounds[s + 1]},
                                          DeviceGroup{rep.groups[g]}, rep.recompute[s]);
      loads[g].forward += t.forward.value();
      loads[g].backward += (t.backward_input + t.recompute).value();
      loads[g].weight += t.backward_weight.value();
    }
    out.push_back(std::move(loads));
  }
  return out;
}

Result<Plan> assemble(const Context& ctx, const Candidate& c, int64_t data_parallel,
                      bool whole_batch) {
  AssembleOptions options;
  options.model = ctx.model_ref();
  options.cluster = ctx.cluster_ref();
  options.num_layers = ctx.num_layers();
  options.seq_len = ctx.seq_len();
  options.zero1 = ctx.options().zero1;
  options.data_parallel = data_parallel;
  options.global_batch = whole_batch ? ctx.global_batch() : 0;
  return assemble_plan(options, c, ctx.cost(c.micro_batch_size));
}

}  // namespace motley::tune_internal
