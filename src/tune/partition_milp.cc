#include "partition_milp.h"

#include <Cbc_C_Interface.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

namespace motley::tune_internal {

MilpOutcome improve_by_milp(const PartitionRequest& req, const StageOption& option,
                            double time_limit, Partition* partition) {
  const auto start = std::chrono::steady_clock::now();
  MilpOutcome out;
  const int stages = static_cast<int>(req.stage_groups.size());
  const int layers = req.num_layers;
  int groups = 0;
  for (int g : req.stage_owner) groups = std::max(groups, g + 1);
  // The heuristic's group totals.
  std::vector<double> load(groups, 0);
  for (int s = 0; s < stages; ++s) {
    RecomputePolicy p;
    double t = 0;
    option(s, partition->bounds[s], partition->bounds[s + 1], &p, &t);
    load[req.stage_owner[s]] += t;
  }
  const double bound = *std::max_element(load.begin(), load.end());
  out.heuristic = bound;
  out.exact = bound;

  // Arcs: stage s covers [i, j) with its best policy, no longer than the heuristic's value.
  struct Arc {
    int s, i, j;
    RecomputePolicy policy;
    double time;
  };
  std::vector<Arc> arcs;
  for (int s = 0; s < stages; ++s) {
    const int first = s == 0 ? 0 : s;
    const int last_begin = s == 0 ? 0 : layers - (stages - s);
    for (int i = first; i <= last_begin; ++i) {
      const int lo = s == stages - 1 ? layers : i + 1;
      const int hi = layers - (stages - 1 - s);
      for (int j = lo; j <= hi; ++j) {
        RecomputePolicy p;
        double t = 0;
        if (!option(s, i, j, &p, &t)) break;  // more layers fit no better
        if (t > bound * (1 + 1e-9)) break;    // times grow with the layers
        arcs.push_back(Arc{s, i, j, p, t});
      }
    }
  }
  out.arcs = static_cast<int>(arcs.size());

  // Columns: T, then one binary per arc. Rows: flow at (s, i) for s = 1..stages-1 (node
  // index (s - 1) * (layers + 1) + i), the source, then one load row per group.
  const int flow_rows = (stages - 1) * (layers + 1);
  const int source_row = flow_rows;
  const int first_group_row = flow_rows + 1;
  const int rows = first_group_row + groups;
  std::vector<CoinBigIndex> col_start{0};
  std::vector<int> index;
  std::vector<double> value;
  // T: -1 in every group row.
  for (int g = 0; g < groups; ++g) {
    index.push_back(first_group_row + g);
    value.push_back(-1);
  }
  col_start.push_back(static_cast<CoinBigIndex>(index.size()));
  for (const Arc& a : arcs) {
    if (a.s == 0) {
      index.push_back(source_row);
      value.push_back(1);
    } else {
      index.push_back((a.s - 1) * (layers + 1) + a.i);  // leaves node (s, i)
      value.push_back(-1);
    }
    if (a.s + 1 < stages) {
      index.push_back(a.s * (layers + 1) + a.j);  // enters node (s + 1, j)
      value.push_back(1);
    }
    index.push_back(first_group_row + req.stage_owner[a.s]);
    value.push_back(a.time);
    col_start.push_back(static_cast<CoinBigIndex>(index.size()));
  }
  const int cols = 1 + static_cast<int>(arcs.size());
  std::vector<double> col_lb(cols, 0), col_ub(cols, 1), obj(cols, 0);
  col_ub[0] = bound;
  obj[0] = 1;
  std::vector<double> row_lb(rows, 0), row_ub(rows, 0);
  row_lb[source_row] = row_ub[source_row] = 1;
  for (int g = 0; g < groups; ++g) {
    row_lb[first_group_row + g] = -1e30;
    row_ub[first_group_row + g] = 0;
  }
  // Flow rows need in = out: 0 on both sides. (The sink is implied: the last stage ends at L.)

  Cbc_Model* model = Cbc_newModel();
  Cbc_loadProblem(model, cols, rows, col_start.data(), index.data(), value.data(), col_lb.data(),
                  col_ub.data(), obj.data(), row_lb.data(), row_ub.data());
  for (int c = 1; c < cols; ++c) Cbc_setInteger(model, c);
  Cbc_setLogLevel(model, 0);
  Cbc_setMaximumSeconds(model, time_limit);
  if (const char* nodes = std::getenv("MOTLEY_PARTITION_MILP_NODES")) {
    Cbc_setMaximumNodes(model, std::atoi(nodes));
  }
  // Start from the heuristic's partition.
  std::vector<int> start_cols;
  std::vector<double> start_vals;
  for (int s = 0; s < stages; ++s) {
    for (size_t k = 0; k < arcs.size(); ++k) {
      if (arcs[k].s == s && arcs[k].i == partition->bounds[s] &&
          arcs[k].j == partition->bounds[s + 1]) {
        start_cols.push_back(static_cast<int>(k) + 1);
        start_vals.push_back(1);
      }
    }
  }
  start_cols.push_back(0);
  start_vals.push_back(bound);
  Cbc_setMIPStartI(model, static_cast<int>(start_cols.size()), start_cols.data(),
                   start_vals.data());
  Cbc_solve(model);
  out.proven_optimal = Cbc_isProvenOptimal(model) != 0;
  const double* x = Cbc_getColSolution(model);
  if (x != nullptr && Cbc_numberSavedSolutions(model) > 0) {
    std::vector<int> bounds(stages + 1, 0);
    std::vector<RecomputePolicy> recompute(stages, RecomputePolicy::kNone);
    std::vector<double> got(groups, 0);
    int covered = 0;
    for (size_t k = 0; k < arcs.size(); ++k) {
      if (x[k + 1] < 0.5) continue;
      const Arc& a = arcs[k];
      bounds[a.s + 1] = a.j;
      recompute[a.s] = a.policy;
      got[req.stage_owner[a.s]] += a.time;
      ++covered;
    }
    const double value_found = *std::max_element(got.begin(), got.end());
    if (covered == stages && value_found < bound * (1 - 1e-9)) {
      out.improved = true;
      out.exact = value_found;
      partition->bounds = bounds;
      partition->recompute = recompute;
    }
  }
  Cbc_deleteModel(model);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace motley::tune_internal
