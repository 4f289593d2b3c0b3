#!/usr/bin/env python3
"""A rough reference for the FGD packing experiment (not a strict bound):
the GPU left unusable when
the pods that arrive up to 100% of capacity (same shuffle idea, Python's RNG)
are packed offline, best-fit decreasing by GPU share, with no arrival order
and no CPU or memory limits. Whole-GPU pods take whole GPUs; shares are
packed into GPUs of 1000 milli. Prints the waste as % of capacity.

With --nodes NODES.csv it packs onto the real nodes instead (the node-aware
floor): GPU pods only (CPU-only pods are left out, which only lowers it),
whole-GPU gangs first (most GPUs, then most CPU, first), each onto the node
that fits it (GPU model, idle GPUs, CPU, memory) with the fewest idle GPUs
left, then shares, largest first, onto the fitting GPU with the least milli
left. What does not fit is the waste. This sees what the share-only floor
cannot: pods that only a few node types can host (an 8-GPU pod asking for
120 CPUs fits only the 39 G3 nodes), and GPU-model constraints.

Usage: packing_floor.py PODS.csv [GPUS_TOTAL=6212] [SEEDS=42-51]
       packing_floor.py --nodes NODES.csv PODS.csv [SEEDS=42-51]
"""
import bisect
import csv
import random
import statistics
import sys


def arrivals(pods, capacity, rnd):
    """The GPU pods that arrive up to 100% of capacity: shuffled, then
    clones drawn at random once the originals run out."""
    order = pods[:]
    rnd.shuffle(order)
    arrived, items, i = 0, [], 0
    while arrived < capacity:
        p = order[i] if i < len(order) else rnd.choice(pods)
        i += 1
        n, m = int(p["num_gpu"]), int(p["gpu_milli"])
        if n:
            arrived += n * m
            items.append(p)
    return items


def node_waste_pct(nodes, pods, seed):
    gpus = [int(n["gpu"]) for n in nodes]
    capacity = sum(gpus) * 1000
    items = arrivals(pods, capacity, random.Random(seed))
    model = [n["model"] for n in nodes]
    cpu = [int(n["cpu_milli"]) for n in nodes]
    mem = [int(n["memory_mib"]) for n in nodes]
    free = [[1000] * g for g in gpus]  # free milli per GPU
    idle_of = gpus[:]  # idle GPUs per node (gangs come before shares)

    def fits(p, j):
        spec = p["gpu_spec"]
        return ((not spec or model[j] in spec.split("|")) and
                cpu[j] >= int(p["cpu_milli"]) and
                mem[j] >= int(p["memory_mib"]))

    def take(p, j):
        cpu[j] -= int(p["cpu_milli"])
        mem[j] -= int(p["memory_mib"])

    whole = sorted((p for p in items if int(p["gpu_milli"]) >= 1000),
                   key=lambda p: (-int(p["num_gpu"]), -int(p["cpu_milli"])))
    shares = sorted((p for p in items if int(p["gpu_milli"]) < 1000),
                    key=lambda p: -int(p["gpu_milli"]))
    lost = 0
    for p in whole:
        n = int(p["num_gpu"])
        best, left = -1, None
        for j in range(len(nodes)):
            idle = idle_of[j]
            if idle >= n and (left is None or idle - n < left) and fits(p, j):
                best, left = j, idle - n
                if left == 0:
                    break
        if best < 0:
            lost += n * 1000
            continue
        take(p, best)
        idle_of[best] -= n
        for k in range(n):
            free[best][free[best].index(1000)] = 0
    for p in shares:
        m = int(p["gpu_milli"])
        best, left = None, 1001
        for j in range(len(nodes)):
            fj = free[j]
            top = max(fj) if fj else 0
            if top < m or (left == 0) or not fits(p, j):
                continue
            for k, f in enumerate(fj):
                if m <= f < m + left:
                    best, left = (j, k), f - m
        if best is None:
            lost += m
            continue
        take(p, best[0])
        free[best[0]][best[1]] -= m
    return 100.0 * lost / capacity


def waste_pct(pods, gpus_total, seed):
    capacity = gpus_total * 1000
    items = arrivals(pods, capacity, random.Random(seed))
    shares = sorted((int(p["gpu_milli"]) for p in items
                     if int(p["gpu_milli"]) < 1000), reverse=True)
    free = []  # free milli of opened shared GPUs, sorted
    for s in shares:
        j = bisect.bisect_left(free, s)
        if j < len(free):
            bisect.insort(free, free.pop(j) - s)
        else:
            bisect.insort(free, 1000 - s)
    return 100.0 * sum(free) / capacity


def main():
    if sys.argv[1] == "--nodes":
        nodes = list(csv.DictReader(open(sys.argv[2])))
        path = sys.argv[3]
        lo, hi = (sys.argv[4] if len(sys.argv) > 4 else "42-51").split("-")
        pods = sorted(csv.DictReader(open(path)), key=lambda r: r["name"])
        w = [node_waste_pct(nodes, pods, s) for s in range(int(lo), int(hi) + 1)]
        print(f"{path.rsplit('/', 1)[-1]}: offline node-aware waste "
              f"{statistics.mean(w):.2f}% of capacity (mean of {len(w)} seeds)")
        return
    path = sys.argv[1]
    gpus_total = int(sys.argv[2]) if len(sys.argv) > 2 else 6212
    lo, hi = (sys.argv[3] if len(sys.argv) > 3 else "42-51").split("-")
    pods = sorted(csv.DictReader(open(path)), key=lambda r: r["name"])
    w = [waste_pct(pods, gpus_total, s) for s in range(int(lo), int(hi) + 1)]
    print(f"{path.rsplit('/', 1)[-1]}: offline best-fit-decreasing waste "
          f"{statistics.mean(w):.2f}% of capacity (mean of {len(w)} seeds)")


if __name__ == "__main__":
    main()
