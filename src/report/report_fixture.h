// A small hand-written simulated iteration shared by the report tests: two nodes of four
// H100-SXM, two data-parallel replicas of a two-stage pipeline (stage 0 on one device, stage 1
// on a two-device tensor-parallel group in the other node), two micro-batches in GPipe order,
// with every task's times chosen by hand (milliseconds):
//
//   replica r, group 0 (device r):       F s0 mb0 [0,1]  F s0 mb1 [1,2]  B s0 mb0 [5,7]
//                                        B s0 mb1 [8,10] optimizer [11,12]
//   replica r, group 1 (devices 4+2r..): F s1 mb0 [1.5,2.5] B s1 mb0 [2.5,4.5] F s1 mb1 [4.5,5.5]
//                                        B s1 mb1 [5.5,7.5] optimizer [11,12]
//   transfers (replica r): act s0 mb0 [1,1.5], act s0 mb1 [2,2.5], grad s1 mb0 [4.5,5],
//                          grad s1 mb1 [7.5,8]
//   all-reduce s1 [7.5,10.5], all-reduce s0 [10,11] (they overlap)
//
// The critical path (replica 0) is F s0 mb0, act s0 mb0, F s1 mb0, B s1 mb0, F s1 mb1,
// B s1 mb1, grad s1 mb1, B s0 mb1, all-reduce s0, optimizer g0: 12 ms.
#pragma once

#include <string>

#include "motley/cluster/cluster.h"
#include "motley/plan/plan.h"
#include "motley/sim/simulator.h"

namespace motley::report_testing {

ClusterSpec two_nodes();  // "a": devices 0-3, "b": devices 4-7, one NIC each
Plan two_replica_plan();
SimResult two_replica_result();  // with the timeline and critical path above

// How often `needle` occurs in `text`, overlapping occurrences included.
int count(const std::string& text, const std::string& needle);

}  // namespace motley::report_testing
