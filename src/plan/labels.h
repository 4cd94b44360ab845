// How plan checks name what they found: field paths ("replicas[0].groups[1].actions[3]") and
// the words for groups, stages and actions ("device group 1 (devices 2,3), which runs stage 1").
// Shared by the structure check and validation so that both speak alike; internal to plan/.
// Only strings, no checks. Thread-compatible (a Labels object reads its plan).
#pragma once

#include <cstdint>
#include <string>

#include "motley/plan/plan.h"

namespace motley::plan_labels {

// "field 'PATH': WHAT", the form every structure error takes.
std::string field(const std::string& path, const std::string& what);
std::string replica_path(int replica);
std::string group_path(int replica, int group);
std::string action_path(int replica, int group, int index);

// "0F3 (stage 0, micro-batch 3)"
std::string action_label(const Action& action);
// "stage 0, micro-batch 3"
std::string stage_mb(int stage, int micro_batch);
// What exists, for "... has " + ids("stage", "stages", n): "stages 0-3", "only stage 0",
// "no stages".
std::string ids(const std::string& singular, const std::string& plural, int64_t count);

// Names groups in messages; the replica is named only when the plan has several.
class Labels {
 public:
  explicit Labels(const Plan& plan) : plan_(plan) {}

  // "device group 1 (devices 2,3)", "replica 1 device group 0 (device 4)"; the devices are left
  // out when `group` does not exist.
  std::string group(int replica, int group) const;
  // "device group 1 (devices 2,3), which runs stage 1"
  std::string group_with_stages(int replica, int group) const;
  // "the replica" with one replica, "replica 2" with several.
  std::string replica(int replica) const;

 private:
  const Plan& plan_;
};

}  // namespace motley::plan_labels
