#!/usr/bin/env python3
"""The figures of docs/executor.md's "Emulated vs simulated" tables.

For each plan: `motley simulate --plan` (the GPU cluster's iteration), and `motley run --plan
--emulate --steps 10` under both emulation speeds (peak, cost), whose step after the first is
taken as the median of steps 1-9. The first table's plans run RUNS times (default 9) and keep
the fastest run; the tensor-parallel table's run once with --threads 1, and its 2 x 1 plan is
tests/data/run/schedules/zb-h1-tp2.json with each group cut to its first device. Each cell is
"emulated / s x simulated", s being the run's own time scale (native CPU seconds per cluster
second). An emulation on this CPU, not a measurement of a GPU; the shapes are what compare.

Usage: scripts/emulated-vs-simulated.py [--build DIR] [--runs N]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
STEP = re.compile(r"step\s+\d+\s+loss \S+\s+time\s+([0-9.]+) ms")
SCALE = re.compile(r"time scale ([0-9.]+)")
ITERATION = re.compile(r"iteration time\s+([0-9.]+) (ms|us|s)\b")


def simulated_ms(motley, plan):
    out = subprocess.run([motley, "simulate", "--plan", plan], capture_output=True, text=True,
                         check=True).stdout
    value, unit = ITERATION.search(out).groups()
    return float(value) * {"ms": 1.0, "us": 1e-3, "s": 1e3}[unit]


def emulated(motley, plan, speeds, extra):
    """(median step after the first in ms, time scale) of one emulated run."""
    run = subprocess.run([motley, "run", "--plan", plan, "--emulate", "--emulate-speeds", speeds,
                          "--steps", "10"] + extra, capture_output=True, text=True, check=True)
    text = run.stdout + run.stderr
    steps = [float(s) for s in STEP.findall(text)]
    return statistics.median(steps[1:]), float(SCALE.search(text).group(1))


def row(motley, name, plan, runs, extra):
    sim = simulated_ms(motley, plan)
    cells = []
    scales = []
    for speeds in ("peak", "cost"):
        step, scale = min(emulated(motley, plan, speeds, extra) for _ in range(runs))
        scales.append(scale)
        cells.append("%.1f / %.1f ms" % (step, scale * sim))
    print("| %s | %.2f ms | %s | %s |  (s %s)" % (name, sim, cells[0], cells[1],
                                                    ", ".join("%.2f" % s for s in scales)),
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    motley = os.path.join(args.build, "motley")
    data = os.path.join(ROOT, "tests", "data", "run")

    print("| plan | simulated (GPU) | peak speeds | cost speeds |")
    print("|---|---|---|---|")
    for name, file in (("H100 + H100", "1f1b-2stage-h100-h100.json"),
                       ("H100 + A100", "1f1b-2stage-h100-a100.json"),
                       ("H100 + A100, skewed", "1f1b-2stage-h100-a100-skewed.json")):
        row(motley, name, os.path.join(data, file), args.runs, [])

    print()
    print("| plan | simulated (GPU) | peak speeds | cost speeds |")
    print("|---|---|---|---|")
    tp2 = os.path.join(data, "schedules", "zb-h1-tp2.json")
    with open(tp2) as f:
        plan = json.load(f)
    for group in plan["replicas"][0]["groups"]:
        group["devices"] = group["devices"][:1]
    with tempfile.TemporaryDirectory() as d:
        single = os.path.join(d, "zb-h1-2x1.json")
        with open(single, "w") as f:
            json.dump(plan, f)
        row(motley, "2 stages x 1 device", single, 1, ["--threads", "1"])
    row(motley, "2 stages x TP 2", tp2, 1, ["--threads", "1"])


if __name__ == "__main__":
    main()
