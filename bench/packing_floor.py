#!/usr/bin/env python3
"""A rough reference for the FGD packing experiment (not a strict bound):
the GPU left unusable when
the pods that arrive up to 100% of capacity (same shuffle idea, Python's RNG)
are packed offline, best-fit decreasing by GPU share, with no arrival order
and no CPU or memory limits. Whole-GPU pods take whole GPUs; shares are
packed into GPUs of 1000 milli. Prints the waste as % of capacity.

Usage: packing_floor.py PODS.csv [GPUS_TOTAL=6212] [SEEDS=42-51]
"""
import bisect
import csv
import random
import statistics
import sys


def waste_pct(pods, gpus_total, seed):
    capacity = gpus_total * 1000
    rnd = random.Random(seed)
    order = pods[:]
    rnd.shuffle(order)
    arrived, items, i = 0, [], 0
    while arrived < capacity:
        p = order[i] if i < len(order) else rnd.choice(pods)
        i += 1
        n, m = int(p["num_gpu"]), int(p["gpu_milli"])
        if n:
            arrived += n * m
            items.append((n, m))
    shares = sorted((m for n, m in items if m < 1000), reverse=True)
    free = []  # free milli of opened shared GPUs, sorted
    for s in shares:
        j = bisect.bisect_left(free, s)
        if j < len(free):
            bisect.insort(free, free.pop(j) - s)
        else:
            bisect.insort(free, 1000 - s)
    return 100.0 * sum(free) / capacity


def main():
    path = sys.argv[1]
    gpus_total = int(sys.argv[2]) if len(sys.argv) > 2 else 6212
    lo, hi = (sys.argv[3] if len(sys.argv) > 3 else "42-51").split("-")
    pods = sorted(csv.DictReader(open(path)), key=lambda r: r["name"])
    w = [waste_pct(pods, gpus_total, s) for s in range(int(lo), int(hi) + 1)]
    print(f"{path.rsplit('/', 1)[-1]}: offline best-fit-decreasing waste "
          f"{statistics.mean(w):.2f}% of capacity (mean of {len(w)} seeds)")


if __name__ == "__main__":
    main()
