#!/usr/bin/env python3
"""Held-out-style variants of the Alibaba GPU trace (issue 16), built from
the default pod list the way the trace's authors built theirs: sampled and
re-labelled from openb_pod_list_default.csv, nothing else changed.

  gpuspecX   (X = 10, 20, 25, 33): X% of the GPU pods (chosen at random)
             get a GPU-model constraint. The model is drawn in proportion to
             the cluster's GPUs of each model, among the models whose nodes
             can host the pod (enough GPUs per node); a V100 draw becomes
             "V100M16|V100M32" half the time (the trace's own form, two
             memory sizes of one model).
  multigpuY  (Y = 20, 30, 40, 50): Y% of the GPU pods ask for 2-8 whole
             GPUs. Pods chosen at random (among the one-GPU and shared
             ones) take the shape (CPU, memory, GPU count) of a multi-GPU
             pod of the default trace drawn at random, so the counts keep
             the trace's own mix of 2, 4 and 8.

Every choice comes from one seeded generator (--seed, default 2023), so the
files are the same on every machine. Writes OUT_DIR/openb_pod_list_NAME.csv
and prints one line per file (pods, GPU pods, constrained or multi-GPU).

Usage: make-placement-variants.py OUT_DIR [--data DIR] [--seed N]
"""
import argparse
import collections
import csv
import os
import random
import sys


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write(out_dir, name, fields, pods):
    path = os.path.join(out_dir, f"openb_pod_list_{name}.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        w.writerows(pods)
    return path


def gpu_pods(pods):
    return [i for i, p in enumerate(pods) if int(p["num_gpu"]) > 0]


def gpuspec(pods, nodes, share, rng):
    gpus = collections.Counter()
    per_node = collections.defaultdict(int)
    for n in nodes:
        gpus[n["model"]] += int(n["gpu"])
        per_node[n["model"]] = max(per_node[n["model"]], int(n["gpu"]))
    models = sorted(gpus)
    out = [dict(p) for p in pods]
    idx = gpu_pods(out)
    chosen = rng.sample(idx, round(share * len(idx)))
    for i in sorted(chosen):
        need = int(out[i]["num_gpu"])
        fit = [m for m in models if per_node[m] >= need]
        model = rng.choices(fit, weights=[gpus[m] for m in fit])[0]
        spec = model
        if model.startswith("V100") and rng.random() < 0.5:
            spec = "V100M16|V100M32"
        out[i]["gpu_spec"] = spec
    return out, len(chosen)


def multigpu(pods, share, rng):
    out = [dict(p) for p in pods]
    idx = gpu_pods(out)
    multi = [i for i in idx if int(out[i]["num_gpu"]) >= 2]
    single = [i for i in idx if int(out[i]["num_gpu"]) == 1]
    want = round(share * len(idx)) - len(multi)
    if want > len(single):
        sys.exit(f"multigpu: {share:.0%} of GPU pods needs {want} more, "
                 f"only {len(single)} one-GPU pods")
    shapes = [(out[i]["cpu_milli"], out[i]["memory_mib"], out[i]["num_gpu"])
              for i in multi]
    for i in sorted(rng.sample(single, max(want, 0))):
        cpu, mem, n = rng.choice(shapes)
        out[i].update(cpu_milli=cpu, memory_mib=mem, num_gpu=n,
                      gpu_milli="1000")
    return out, len(multi) + max(want, 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--data", default=os.path.join(
        os.path.dirname(__file__), "..", "..", "shared", "data",
        "alibaba-gpu-v2023"))
    ap.add_argument("--seed", type=int, default=2023)
    a = ap.parse_args()
    base = os.path.join(a.data, "openb_pod_list_default.csv")
    if not os.path.exists(base):
        sys.exit(f"missing {base} (see ../shared/data/alibaba-gpu-v2023)")
    with open(base, newline="") as f:
        fields = csv.DictReader(f).fieldnames
    pods = sorted(read_csv(base), key=lambda p: p["name"])
    nodes = read_csv(os.path.join(a.data, "openb_node_list_gpu_node.csv"))
    os.makedirs(a.out_dir, exist_ok=True)
    n_gpu = len(gpu_pods(pods))
    for x in (10, 20, 25, 33):
        rng = random.Random(f"{a.seed}-gpuspec{x}")
        out, k = gpuspec(pods, nodes, x / 100, rng)
        path = write(a.out_dir, f"gpuspec{x}", fields, out)
        print(f"{path}: {len(out)} pods, {n_gpu} GPU pods, {k} constrained")
    for y in (20, 30, 40, 50):
        rng = random.Random(f"{a.seed}-multigpu{y}")
        out, k = multigpu(pods, y / 100, rng)
        path = write(a.out_dir, f"multigpu{y}", fields, out)
        print(f"{path}: {len(out)} pods, {n_gpu} GPU pods, {k} ask 2-8 GPUs")


if __name__ == "__main__":
    main()
