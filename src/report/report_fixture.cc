#include "report_fixture.h"

namespace motley::report_testing {

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}
namespace {

NodeSpec node(const std::string& name) {
  NodeSpec n;
  n.name = name;
  n.devices = {NodeDevices{"H100-SXM", 4}};
  n.interconnect = LinkSpec{LinkKind::kNvlink, gigabytes_per_second(450), microseconds(2)};
  n.pcie = LinkSpec{LinkKind::kPcie, gigabytes_per_second(50), microseconds(3)};
  n.nic = LinkSpec{LinkKind::kInfiniband, gigabytes_per_second(50), microseconds(1)};
  n.nic_count = 1;
  return n;
}

SimTask task(SimTaskKind kind, int replica, int group, int stage, int mb, double start_ms,
             double end_ms, int device, int peer_group = -1, int peer_device = -1) {
  SimTask t;
  t.kind = kind;
  t.replica = replica;
  t.group = group;
  t.stage = stage;
  t.micro_batch = mb;
  t.peer_group = peer_group;
  t.device = device;
  t.peer_device = peer_device;
  t.start = milliseconds(start_ms);
  t.end = milliseconds(end_ms);
  return t;
}

}  // namespace

ClusterSpec two_nodes() {
  ClusterSpec c;
  c.name = "two-nodes";
  c.nodes = {node("a"), node("b")};
  c.network = LinkSpec{LinkKind::kInfiniband, gigabytes_per_second(50), microseconds(2)};
  return c;
}

Plan two_replica_plan() {
  Plan p;
  p.model = {"tiny", "0"};
  p.cluster = {"two-nodes", "0"};
  p.micro_batch_size = 1;
  p.seq_len = 1024;
  p.global_batch = 4;
  p.stages = {Stage{0, 1}, Stage{1, 2}};
  p.schedule = "gpipe";
  for (int r = 0; r < 2; ++r) {
    Replica rep;
    rep.micro_batches = 2;
    rep.stage_group = {0, 1};
    using K = ActionKind;
    rep.groups.push_back(DeviceGroupSchedule{
        {r},
        {{K::kForward, 0, 0}, {K::kForward, 0, 1}, {K::kBackward, 0, 0}, {K::kBackward, 0, 1}}});
    rep.groups.push_back(DeviceGroupSchedule{
        {4 + 2 * r, 5 + 2 * r},
        {{K::kForward, 1, 0}, {K::kBackward, 1, 0}, {K::kForward, 1, 1}, {K::kBackward, 1, 1}}});
    p.replicas.push_back(rep);
  }
  return p;
}

SimResult two_replica_result() {
  using K = SimTaskKind;
  SimResult res;
  res.iteration_time = milliseconds(12);
  res.throughput_tokens_per_s = 4 * 1024 / 0.012;
  res.bubble_fraction = 5.0 / 12.0;
  std::vector<SimTask> critical;
  for (int r = 0; r < 2; ++r) {
    const int d0 = r, d1 = 4 + 2 * r;
    const std::vector<SimTask> tasks = {
        task(K::kForward, r, 0, 0, 0, 0, 1, d0),     task(K::kForward, r, 0, 0, 1, 1, 2, d0),
        task(K::kBackward, r, 0, 0, 0, 5, 7, d0),    task(K::kBackward, r, 0, 0, 1, 8, 10, d0),
        task(K::kForward, r, 1, 1, 0, 1.5, 2.5, d1), task(K::kBackward, r, 1, 1, 0, 2.5, 4.5, d1),
        task(K::kForward, r, 1, 1, 1, 4.5, 5.5, d1), task(K::kBackward, r, 1, 1, 1, 5.5, 7.5, d1),
    };
    res.timeline.insert(res.timeline.end(), tasks.begin(), tasks.end());
    if (r == 0) {
      critical = {tasks[0],
                  task(K::kSendActivation, 0, 0, 0, 0, 1, 1.5, d0, 1, d1),
                  tasks[4],
                  tasks[5],
                  tasks[6],
                  tasks[7],
                  task(K::kSendGradient, 0, 1, 1, 1, 7.5, 8, d1, 0, d0),
                  tasks[3]};
    }
  }
  for (int r = 0; r < 2; ++r) {
    const int d0 = r, d1 = 4 + 2 * r;
    res.timeline.push_back(task(K::kSendActivation, r, 0, 0, 0, 1, 1.5, d0, 1, d1));
    res.timeline.push_back(task(K::kSendActivation, r, 0, 0, 1, 2, 2.5, d0, 1, d1));
    res.timeline.push_back(task(K::kSendGradient, r, 1, 1, 0, 4.5, 5, d1, 0, d0));
    res.timeline.push_back(task(K::kSendGradient, r, 1, 1, 1, 7.5, 8, d1, 0, d0));
  }
  res.timeline.push_back(task(K::kGradientAllReduce, -1, -1, 1, -1, 7.5, 10.5, -1));
  res.timeline.push_back(task(K::kGradientAllReduce, -1, -1, 0, -1, 10, 11, -1));
  for (int r = 0; r < 2; ++r) {
    res.timeline.push_back(task(K::kOptimizerStep, r, 0, -1, -1, 11, 12, r));
    res.timeline.push_back(task(K::kOptimizerStep, r, 1, -1, -1, 11, 12, 4 + 2 * r));
  }
  critical.push_back(task(K::kGradientAllReduce, -1, -1, 0, -1, 10, 11, -1));
  critical.push_back(task(K::kOptimizerStep, 0, 0, -1, -1, 11, 12, 0));
  res.critical_path = critical;
  res.tasks = static_cast<int64_t>(res.timeline.size());

  // Devices by replica, group, position. Device 6 is over its 80 GiB.
  const double gib = kGiB;
  struct Row {
    int device, replica, group;
    double busy_ms, exposed_ms, peak_gib;
  };
  const Row rows[] = {{
                          0,
                          0,
                          0,
                          7,
                          1,
                          60,
                      },
                      {4, 0, 1, 7, 0.5, 40},
                      {5, 0, 1, 7, 0.5, 40},
                      {1, 1, 0, 7, 1, 60},
                      {6, 1, 1, 7, 0.5, 88},
                      {7, 1, 1, 7, 0.5, 40}};
  for (const Row& row : rows) {
    DeviceStats d;
    d.device = row.device;
    d.replica = row.replica;
    d.group = row.group;
    d.busy = milliseconds(row.busy_ms);
    d.idle = milliseconds(12 - row.busy_ms);
    d.exposed_communication = milliseconds(row.exposed_ms);
    d.fixed_memory = Bytes(20 * gib);
    d.peak_memory = Bytes(row.peak_gib * gib);
    d.peak_in_flight = 2;
    d.capacity = Bytes(80 * gib);
    res.devices.push_back(d);
  }
  res.fits_memory = false;
  return res;
}

}  // namespace motley::report_testing
