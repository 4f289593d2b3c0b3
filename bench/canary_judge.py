#!/usr/bin/env python3
"""How well the canary analysis judges (docs/versions.md, "Figures"): the
live rollout code (control/rollout.h) run by `gpusched sim serve` over many
seeds, canaries against one stable (llama-2-7b on A100-80GB, as many
replicas each; the analysis is the default, docs/versions.md):

  identical  the canary is the stable's twin.
             Target: rolled back in <= 1% of the seeds.
  slow       every latency of the canary's engine is 1.5x (the sim's
             latency_multiplier). Target: rolled back in >= 95% of the seeds,
             with <= 5% of the route's traffic on the canary before the
             rollback.
  errors     the stable fails 1% of its requests, the canary 2% (the sim's
             error_rate). Target: rolled back in >= 95% of the seeds.
  errors-identical  both fail 1%: the error checks' false rollbacks.
             Target: rolled back in <= 1% of the seeds.

The identical and slow canaries run at two loads: "-light" at 10 req/s on
8 replicas a version (the stable at about 1.2 req/s a replica at the 5%
step) and "-busy" at 20 req/s on 4 (about 4.75 req/s a replica). The
analysis compares what each version's users see, and a canary at 5% of the
traffic on as many replicas as the stable is far less loaded than it: on a
busy stable that hides a slower engine until the weights are even (see
docs/versions.md). "-busy-baseline" adds a baseline (spec.rollout.baseline:
the stable's version on as many replicas as the canary, given the canary's
share), so that the analysis compares two versions at the same load, as
Kayenta does. No version is saturated: the stable's replicas are sized
for the route's load, as a user would (the error scenario: 120 req/s on 24
replicas a version).

The rollout is the default 5, 25, 50% (60 s each). Exposure is the
canary's share of the route's requests that arrived before the rollback
(from the per-request CSV), and over the whole run.

Usage: bench/canary_judge.py BUILD_DIR [--seeds N] [--jobs J] [--only NAME]
Prints a table; JSON in out/canary_judge.json.
"""
import argparse
import concurrent.futures
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

# rate: route requests/s; replicas: a version's; duration: s (the
# rollout's 180 s and a tail).
SLOW = {"latency_multiplier": 1.5}
SCENARIOS = {
    "identical-light": {"canary": {}, "stable": {}, "rate": 10, "replicas": 8},
    "slow-light": {"canary": SLOW, "stable": {}, "rate": 10, "replicas": 8},
    "identical-busy": {"canary": {}, "stable": {}, "rate": 20, "replicas": 4},
    "slow-busy": {"canary": SLOW, "stable": {}, "rate": 20, "replicas": 4},
    "identical-busy-baseline": {"canary": {}, "stable": {}, "rate": 20,
                                "replicas": 4, "baseline": True},
    "slow-busy-baseline": {"canary": SLOW, "stable": {}, "rate": 20,
                           "replicas": 4, "baseline": True},
    "errors": {"canary": {"error_rate": 0.02}, "stable": {"error_rate": 0.01},
               "rate": 120, "replicas": 24},
    "errors-identical": {"canary": {"error_rate": 0.01},
                         "stable": {"error_rate": 0.01}, "rate": 120,
                         "replicas": 24},
}
DURATION_S = 200
# The route's analysis: the defaults (docs/versions.md).
ANALYSIS = {}


def knobs(d):
    return "".join(f", {k}: {v}" for k, v in d.items())


def config(scenario, seed):
    s = SCENARIOS[scenario]
    analysis = ", ".join(f"{k}: {v}" for k, v in ANALYSIS.items())
    # "-baseline": a third deployment of the stable's version, as many
    # replicas as the canary, that gets the canary's share while the
    # rollout runs; the analysis compares the canary with it.
    baseline_deployment = baseline_target = baseline_rollout = ""
    if s.get("baseline"):
        baseline_deployment = (
            f"\n  - {{name: baseline, model: llama-2-7b, gpu: A100-80GB, "
            f"replicas: {s['replicas']}{knobs(s['stable'])}}}")
        baseline_target = ', {deployment: baseline, version: "1-baseline"}'
        baseline_rollout = "\n      baseline: baseline"
    return f"""seed: {seed}
deployments:
  - {{name: stable, model: llama-2-7b, gpu: A100-80GB, replicas: {s['replicas']}{knobs(s['stable'])}}}
  - {{name: canary, model: llama-2-7b, gpu: A100-80GB, replicas: {s['replicas']}{knobs(s['canary'])}}}{baseline_deployment}
routes:
  - name: chat
    targets: [{{deployment: stable, version: "1"}}, {{deployment: canary, version: "2"}}{baseline_target}]
    rollout:
      canary: canary{baseline_rollout}
      analysis: {{{analysis}}}
tenants:
  - name: users
workload:
  synthetic:
    duration_s: {DURATION_S}
    tenants:
      - {{name: users, model: chat, arrival: poisson, rate: {s['rate']}, input_tokens: 200, input_max: 800, output_tokens: 40, output_max: 120}}
"""


def run(binary, scenario, seed, tmp):
    base = os.path.join(tmp, f"{scenario}-{seed}")
    with open(base + ".yaml", "w") as f:
        f.write(config(scenario, seed))
    subprocess.run([binary, "sim", "serve", "--config", base + ".yaml",
                    "--out", base + ".json", "--requests", base + ".csv",
                    "--omit-wall-time"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    report = json.load(open(base + ".json"))
    events = report["route_events"]
    back = next((e for e in events if e["kind"] == "rollout.rolled_back"), None)
    t_back = back["t"] if back else None
    before = {"stable": 0, "canary": 0, "baseline": 0}
    total = {"stable": 0, "canary": 0, "baseline": 0}
    with open(base + ".csv") as f:
        for row in csv.DictReader(f):
            d = row["deployment"]
            if d not in total:
                continue
            total[d] += 1
            if t_back is not None and float(row["arrival_s"]) <= t_back:
                before[d] += 1
    for ext in (".yaml", ".json", ".csv"):
        os.remove(base + ext)
    share = lambda c: c["canary"] / max(1, sum(c.values()))
    return {
        "seed": seed,
        "phase": report["routes"]["chat"]["rollout_phase"],
        "rolled_back_at_s": t_back,
        "step": int(re.search(r"at step (\d+)", back["message"]).group(1)) if back else None,
        "exposed_before": share(before) if back else None,
        "exposed_run": share(total),
        "why": back["message"] if back else None,
    }


def summarize(name, runs):
    n = len(runs)
    back = [r for r in runs if r["phase"] == "rolled_back"]
    out = {"scenario": name, "seeds": n, "rolled_back": len(back),
           "rolled_back_share": len(back) / n,
           "promoted": sum(r["phase"] == "promoted" for r in runs)}
    if back:
        out["median_rollback_s"] = statistics.median(r["rolled_back_at_s"] for r in back)
        out["median_exposed_before"] = statistics.median(r["exposed_before"] for r in back)
        out["max_exposed_before"] = max(r["exposed_before"] for r in back)
        out["median_exposed_run"] = statistics.median(r["exposed_run"] for r in back)
        out["rolled_back_at_step_1"] = sum(r["step"] == 1 for r in back)
        # The exposure target: rolled back with at most 5% of the route's
        # requests on the canary before the rollback.
        out["rolled_back_within_5pct"] = sum(
            r["exposed_before"] <= 0.05 for r in back)
        out["example"] = back[0]["why"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", choices=sorted(SCENARIOS))
    args = ap.parse_args()
    binary = os.path.join(args.build, "gpusched")
    if not os.access(binary, os.X_OK):
        sys.exit(f"no {binary}: build it first (make build)")
    if not 1 <= args.seeds <= 10000:
        sys.exit("--seeds: 1..10000")
    results = []
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for name in SCENARIOS:
            if args.only and name != args.only:
                continue
            runs = list(pool.map(lambda s: run(binary, name, s, tmp),
                                 range(1, args.seeds + 1)))
            results.append({"summary": summarize(name, runs), "runs": runs})
            s = results[-1]["summary"]
            line = f"{name:23s} seeds {s['seeds']:4d}  rolled back {s['rolled_back']:4d} ({100 * s['rolled_back_share']:.1f}%)"
            if s["rolled_back"]:
                line += (f"  median at {s['median_rollback_s']:.0f} s, step 1 in "
                         f"{s['rolled_back_at_step_1']}, with <= 5% exposed in "
                         f"{s['rolled_back_within_5pct']} "
                         f"({100 * s['rolled_back_within_5pct'] / s['seeds']:.1f}%); "
                         f"canary share before the rollback: "
                         f"median {100 * s['median_exposed_before']:.2f}%, max "
                         f"{100 * s['max_exposed_before']:.2f}%; over the run "
                         f"{100 * s['median_exposed_run']:.2f}%")
            print(line, flush=True)
    os.makedirs("out", exist_ok=True)
    with open("out/canary_judge.json", "w") as f:
        json.dump({"analysis": ANALYSIS, "scenarios": SCENARIOS,
                   "duration_s": DURATION_S, "results": results}, f, indent=1)
    for r in results:
        if r["summary"].get("example"):
            print(f"{r['summary']['scenario']}: e.g. {r['summary']['example']}")


if __name__ == "__main__":
    main()
