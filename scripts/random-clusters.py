#!/usr/bin/env python3
"""Plans on random clusters, and what every command that reads a plan makes of it.

For each seed: a random cluster (one to three kinds of node, device types of the catalog, some
nodes mixing two types, NIC counts and rates, PCIe switches, spot nodes, InfiniBand or
Ethernet), a model (a preset or a Hugging Face config of ../shared/data/hf/) and random plan
options (global batch, sequence length, TP / PP / DP, ZeRO stage, schedule families, context
parallelism, memory headroom, micro-batch size, objective, no optimizer step). Then it checks:

  - `motley plan` exits 0, or 2 with one line on standard error and no plan file written;
  - the plan's efficiency is at most 1 (the lower bound is one);
  - its TP / PP / DP and ZeRO constraints hold in the plan written;
  - `motley simulate --plan` reproduces the predicted iteration time exactly;
  - `export megatron / slurm / k8s / torch-pp`, `report` and `estimate` exit 0, or 2 with one
    line (torch-pp cannot express a head split by vocabulary rows, for one);
  - `replan --lost <the last node>` exits 0 or 2, and its plan simulates;
  - with --run (models tiny-*, small clusters only): `motley run` three steps of the plan
    against `motley run --sequential`, losses within 1e-5 relative.

A check, not a test: the planner's answers depend on the machine's speed (each search has a
time budget), so a seed may land elsewhere on another machine. Prints one line per seed and the
failures at the end; exit 1 if any.

Usage: scripts/random-clusters.py [--build DIR] [--first N] [--count N] [--run]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("SHARED", os.path.join(HERE, "..", "..", "shared", "data"))
TYPES = ["H100-SXM", "H200", "A100-80GB", "A100-40GB", "V100-32GB", "L40S", "RTX-4090", "A10",
         "T4", "MI300X", "MI250X", "MI210", "Gaudi2", "Gaudi3"]
PRESETS = ["llama-3-8b", "llama-3-70b", "mixtral-8x7b", "deepseek-v2-lite", "gemma-2-9b",
           "nemotron-h-8b", "jamba-mini", "llava-style-vlm", "tiny-llama", "tiny-moe",
           "tiny-hybrid", "tiny-gemma"]
TINY = ["tiny-llama", "tiny-moe", "tiny-hybrid", "tiny-gemma"]


def hf_configs():
    d = os.path.join(SHARED, "hf")
    if not os.path.isdir(d):
        return []
    return [os.path.join(d, f) for f in sorted(os.listdir(d))
            if f.endswith(".json") and f != "expected.json"]


def random_cluster(r, small):
    """A cluster YAML and the name of its last node (as `count` expands it)."""
    lines = ["name: random",
             "network: {kind: %s, bandwidth_GBps: %g, latency_us: %g}"
             % (r.choice(["infiniband", "ethernet"]), r.choice([1.25, 12.5, 25, 50, 100]),
                r.choice([0, 2, 10, 50])),
             "nodes:"]
    last = ""
    for i in range(r.choice([1, 1, 2, 3] if small else [1, 1, 2, 2, 3])):
        kind = r.choice(TYPES)
        per = r.choice([1, 2, 4] if small else [1, 2, 4, 8, 8])
        count = r.choice([1, 1, 2, 3] if small else [1, 1, 2, 3, 4, 8, 16])
        lines += ["  - name: n%d" % i, "    count: %d" % count]
        other = r.choice(TYPES)
        if r.random() < 0.15 and other != kind:
            lines.append("    devices: [{type: %s, count: %d}, {type: %s, count: %d}]"
                         % (kind, per, other, r.choice([1, 2])))
        else:
            lines.append("    devices: {type: %s, count: %d}" % (kind, per))
        if r.random() < 0.5:
            lines.append("    nic: {bandwidth_GBps: %g, count: %d}"
                         % (r.choice([3.125, 12.5, 25, 50]), r.choice([1, 2, 4, 8])))
        if r.random() < 0.3:
            lines.append("    devices_per_pcie_switch: %d" % r.choice([0, 1, 2, 4]))
        if r.random() < 0.2:
            lines.append("    spot: true")
        last = "n%d" % i if count == 1 else "n%d-%d" % (i, count - 1)
    return "\n".join(lines) + "\n", last


def plan_options(r, tiny):
    opts, fixed = [], {}
    if r.random() < 0.6:
        opts += ["--global-batch", str(r.choice([1, 2, 3, 4, 8, 16, 64, 256]))]
    if not tiny and r.random() < 0.3:
        opts += ["--seq-len", str(r.choice([256, 1024, 4096, 16384, 32768]))]
    for flag, key, values, p in [("--tensor-parallel", "tp", [1, 2, 4, 8], 0.2),
                                 ("--pipeline-parallel", "pp", [1, 2, 3, 4, 8], 0.2),
                                 ("--data-parallel", "dp", [1, 2, 4], 0.15),
                                 ("--zero-stage", "zero", [0, 1, 2, 3], 0.2),
                                 ("--context-parallel", "cp", [1, 2, 4], 0.1)]:
        if r.random() < p:
            fixed[key] = r.choice(values)
            opts += [flag, str(fixed[key])]
    if r.random() < 0.15:
        opts += ["--schedule", r.choice(["1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v",
                                         "dualpipev", "gpipe", "adaptive"])]
    if r.random() < 0.1:
        opts += ["--memory-headroom", str(r.choice([0.05, 0.2]))]
    if r.random() < 0.1:
        opts += ["--micro-batch-size", str(r.choice([1, 2, 4]))]
    if r.random() < 0.1:
        opts += ["--objective", "cost"]
    if r.random() < 0.1:
        opts += ["--no-optimizer-step"]
    return opts, fixed


def run(cmd, timeout=300):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return "timeout", "", ""


def one_line(err):
    return len([line for line in err.strip().splitlines() if line.strip()]) == 1


def check_seed(motley, seed, workdir, with_run, hf):
    """Returns (summary, failures) for one seed."""
    r = random.Random(seed)
    tiny = with_run
    cluster, last_node = random_cluster(r, small=with_run)
    model = r.choice(TINY if tiny else PRESETS + hf)
    d = os.path.join(workdir, "seed%d" % seed)
    os.makedirs(d)
    cluster_file, plan_file = os.path.join(d, "cluster.yaml"), os.path.join(d, "plan.json")
    with open(cluster_file, "w") as f:
        f.write(cluster)
    opts, fixed = plan_options(r, tiny)
    failures = []
    rc, out, err = run([motley, "plan", "--model", model, "--cluster", cluster_file, "--quiet",
                        "--time-budget", "1.5", "--json", "--out", plan_file] + opts)
    if rc == 2:
        if not one_line(err) or os.path.exists(plan_file):
            failures.append("plan exit 2 with more than one line or a plan file: %r" % err)
        return "no plan: " + err.strip()[:100], failures
    if rc != 0:
        return "plan failed", ["plan exit %s: %s" % (rc, err.strip()[-300:])]
    result = json.loads(out)
    if result["efficiency"] > 1 + 1e-9:
        failures.append("efficiency %.4f above 1" % result["efficiency"])
    with open(plan_file) as f:
        plan = json.load(f)
    groups = [g for rep in plan["replicas"] for g in rep.get("groups", [])]
    if "tp" in fixed and any(len(g["devices"]) != fixed["tp"] for g in groups):
        failures.append("a group is not of --tensor-parallel %d" % fixed["tp"])
    if "pp" in fixed and any(len(rep["groups"]) != fixed["pp"]
                             for rep in plan["replicas"] if "groups" in rep):
        failures.append("a replica is not of --pipeline-parallel %d" % fixed["pp"])
    if "dp" in fixed and len(plan["replicas"]) != fixed["dp"]:
        failures.append("%d replicas, not --data-parallel %d" % (len(plan["replicas"]),
                                                                 fixed["dp"]))
    if "zero" in fixed and len(plan["replicas"]) > 1 and plan.get("zero_stage") != fixed["zero"]:
        failures.append("ZeRO stage %s, not %d" % (plan.get("zero_stage"), fixed["zero"]))
    rc, out, err = run([motley, "simulate", "--plan", plan_file, "--json"])
    if rc != 0:
        failures.append("simulate --plan exit %s: %s" % (rc, err.strip()[-200:]))
    elif json.loads(out)["iteration_time_s"] != result["iteration_time_s"]:
        failures.append("simulate --plan gives %r s, the plan %r s"
                        % (json.loads(out)["iteration_time_s"], result["iteration_time_s"]))
    for sub in (["export", "megatron", "--json"],
                ["export", "slurm", "--out", os.path.join(d, "job.sbatch")],
                ["export", "k8s", "--image", "registry.example/motley:1",
                 "--out", os.path.join(d, "k8s.yaml")],
                ["export", "torch-pp", "--out", os.path.join(d, "pp.csv")],
                ["report", "--html", os.path.join(d, "report.html")]):
        rc, out, err = run([motley] + sub + ["--plan", plan_file])
        if rc not in (0, 2) or (rc == 2 and not one_line(err)):
            failures.append("%s exit %s: %s" % (" ".join(sub[:2]), rc, err.strip()[-200:]))
    rc, out, err = run([motley, "estimate", "--model", model, "--cluster", cluster_file])
    if rc not in (0, 2) or (rc == 2 and not one_line(err)):
        failures.append("estimate exit %s: %s" % (rc, err.strip()[-200:]))
    replanned = os.path.join(d, "replanned.json")
    rc, out, err = run([motley, "replan", "--plan", plan_file, "--lost", last_node,
                        "--max-plans", "200", "--out", replanned])
    if rc not in (0, 2) or (rc == 2 and not one_line(err)):
        failures.append("replan exit %s: %s" % (rc, err.strip()[-200:]))
    elif rc == 0:
        rc, out, err = run([motley, "simulate", "--plan", replanned])
        if rc != 0:
            failures.append("the replanned plan does not simulate: %s" % err.strip()[-200:])
    summary = "efficiency %.3f" % result["efficiency"]
    if with_run:
        rc1, out1, err1 = run([motley, "run", "--plan", plan_file, "--steps", "3", "--json",
                               "--threads", "1"])
        rc2, out2, err2 = run([motley, "run", "--plan", plan_file, "--steps", "3", "--json",
                               "--threads", "1", "--sequential"])
        if rc1 != 0 or rc2 != 0:
            failures.append("run exit %s / sequential %s: %s %s"
                            % (rc1, rc2, err1.strip()[-200:], err2.strip()[-100:]))
        else:
            a, b = json.loads(out1)["losses"], json.loads(out2)["losses"]
            worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
            summary += ", losses within %.1e of the sequential run" % worst
            if worst > 1e-5:
                failures.append("losses %s against the sequential %s" % (a, b))
    return summary, failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--run", action="store_true",
                        help="tiny models on small clusters, each plan trained three steps "
                             "against the sequential run")
    args = parser.parse_args()
    motley = os.path.join(os.path.abspath(args.build), "motley")
    if not os.access(motley, os.X_OK):
        sys.exit("random-clusters.py: no motley binary at %s (build first, or give --build)"
                 % motley)
    hf = hf_configs()
    failed = []
    with tempfile.TemporaryDirectory() as workdir:
        for seed in range(args.first, args.first + args.count):
            summary, failures = check_seed(motley, seed, workdir, args.run, hf)
            print("seed %d: %s%s" % (seed, summary, " FAILED" if failures else ""), flush=True)
            failed += ["seed %d: %s" % (seed, f) for f in failures]
    print("%d seeds, %d failures" % (args.count, len(failed)))
    for f in failed:
        print("  " + f)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
