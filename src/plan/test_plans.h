// Small hand-built models, clusters and plans shared by the plan module's tests.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley::testing {

// `layers` decoder blocks of a tiny shape, named "block.<i>".
ModelSpec small_model(int layers, const std::string& name = "small");
// An embedding, `blocks` decoder blocks of small_model's shape and an untied head, all over a
// vocabulary of `vocab`, named "<name>".
ModelSpec model_with_head(int blocks, int64_t vocab = 64, const std::string& name = "headed");

// model_with_head(2) on two single-device nodes with the head split into two vocabulary
// shards: stage 0 = embedding + block 0 on group 0, stage 1 = block 1 on group 1, stage 2 =
// head rows [0, 32) on group 0, stage 3 = head rows [32, 64) on group 1; two micro-batches,
// split backwards, in an order that cannot deadlock.
Plan vocab_shard_plan();

// `nodes` nodes of one device of `type` each, named "n0", "n1", ...
ClusterSpec single_device_nodes(int nodes, const std::string& type = "A100-80GB");
// Two nodes ("a", "b") of four H100-SXM each: devices 0-3 on "a", 4-7 on "b".
ClusterSpec two_node_cluster();

// Parses "0F0 0F1 1B0" into actions; aborts on a typo (tests only).
std::vector<Action> actions(const std::string& text);

// The 1F1B order of rank `rank` of `stages` for `micro_batches`: min(stages - rank - 1, m)
// forwards, then alternating F and B, then the remaining backwards. `split` writes each
// backward as I immediately followed by W.
std::vector<Action> one_f_one_b_order(int stages, int rank, int micro_batches, bool split);

// A one-replica plan with stage s = layer s on group s = device s, in 1F1B order, with the
// model and cluster references filled in from the given specs.
Plan one_f_one_b_plan(const ModelSpec& model, const ClusterSpec& cluster, int micro_batches,
                      bool split = false);

// A random valid plan of 2-5 stages on 1-5 groups with 1-4 micro-batches: random stage ->
// group mapping, fused or split backwards at random, and each group's order the restriction of
// one random topological order of the dependencies. Sets *stages_out to its stage count.
Plan random_plan(std::mt19937& rng, int* stages_out);

}  // namespace motley::testing
