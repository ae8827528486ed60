#!/usr/bin/env python3
"""A decode step's critical path from bench/cupti_timeline.cpp's CSV.

Each step begins at an embedding launch. Per launch of a step:
  duration  end - start on the GPU
  lag       start - the previous launch's end (negative: it began before that one ended)
  exposed   how far its end moves the step's frontier (end - the latest end before it, at least 0):
            what the step would lose if this launch took no time at all, to first order
Medians over the steps between --skip and the last, grouped by kernel and grid.
Between steps the GPU waits for the host (the token read back, the next step
packed and launched): the step's period less its span is that gap. Where the
file has the host's CUDA calls ("api:" rows), the gap is split by call: the
time each call spends inside the gap (medians), and the rest, the host's own
work between calls.

  usage: python3 bench/decode_timeline.py timeline.csv [--skip N] [--steps N]
"""
import argparse
import collections
import csv
import re
import shutil
import statistics
import subprocess


def demangle(names):
    if not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def short(name):
    m = re.search(r"(\w+)(<[^()]*>)?\(", name)
    if not m:
        return name[:50]
    base, args = m.group(1), (m.group(2) or "")
    if "quant_gemv_q8" in base:
        return base.replace("quant_gemv_q8_", "q8 ") + args.replace(" ", "")
    return base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--skip", type=int, default=2, help="first steps left out (graph capture, warm-up)")
    ap.add_argument("--steps", type=int, default=0, help="steps used at most (0: all the rest but the last)")
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    api = sorted(((int(r["start_ns"]), int(r["end_ns"]), r["name"][4:]) for r in rows if r["name"].startswith("api:")))
    rows = [r for r in rows if not r["name"].startswith("api:")]
    names = demangle(sorted({r["name"] for r in rows}))
    ks = sorted(({"start": int(r["start_ns"]), "end": int(r["end_ns"]), "grid": int(r["grid"]),
                  "name": short(names[r["name"]])} for r in rows), key=lambda k: k["start"])
    starts = [i for i, k in enumerate(ks) if k["name"].startswith("embedding")]
    bounds = list(zip(starts, starts[1:]))[a.skip:]
    if a.steps:
        bounds = bounds[:a.steps]
    steps = [ks[b:e] for b, e in bounds]
    if not steps:
        raise SystemExit("no whole decode step in the file (is there an embedding launch a step?)")
    walls = [s[-1]["end"] - s[0]["start"] for s in steps]
    periods = [ks[e]["start"] - ks[b]["start"] for b, e in bounds]  # this step's first launch to the next's
    gaps = [p - w for p, w in zip(periods, walls)]
    print(f"# {len(steps)} decode steps: {statistics.median(walls) / 1e3:.1f} µs a step (median; "
          f"{min(walls) / 1e3:.1f}-{max(walls) / 1e3:.1f}), {len(steps[0])} launches a step; one every "
          f"{statistics.median(periods) / 1e3:.1f} µs, the GPU idle {statistics.median(gaps) / 1e3:.1f} µs "
          f"between steps (median)\n")
    groups = collections.OrderedDict()
    for s in steps:
        frontier, prev_end = s[0]["start"], None
        seen = collections.Counter()
        for k in s:
            key = (k["name"], k["grid"])
            seen[key] += 1
            g = groups.setdefault(key, {"dur": [], "lag": [], "exp": [], "per_step": []})
            g["dur"].append(k["end"] - k["start"])
            if prev_end is not None:
                g["lag"].append(k["start"] - prev_end)
            g["exp"].append(max(0, k["end"] - frontier))
            frontier = max(frontier, k["end"])
            prev_end = k["end"]
        for key, n in seen.items():
            groups[key]["per_step"].append(n)
    total_exp = 0.0
    print("| kernel | grid | a step | duration µs | lag µs | exposed µs | exposed a step µs |\n|---|---|---|---|---|---|---|")
    for (name, grid), g in sorted(groups.items(), key=lambda kv: -statistics.median(kv[1]["exp"]) * statistics.median(kv[1]["per_step"])):
        n = statistics.median(g["per_step"])
        exp = statistics.median(g["exp"]) / 1e3
        total_exp += exp * n
        lag = f"{statistics.median(g['lag']) / 1e3:.2f}" if g["lag"] else ""
        print(f"| {name} | {grid} | {n:g} | {statistics.median(g['dur']) / 1e3:.2f} | {lag} | {exp:.2f} | {exp * n:.1f} |")
    print(f"\nExposed time summed: {total_exp:.1f} µs a step (medians, so near the step's span, not equal to it).")
    if api:
        gap_split(api, [(s[-1]["end"], ks[e]["start"]) for s, (b, e) in zip(steps, bounds)])


def gap_split(api, gaps):
    """The host's CUDA calls inside each gap [end of a step's last kernel, start of the next step's first]."""
    per_call = collections.defaultdict(list)
    outside = []
    for g0, g1 in gaps:
        inside = collections.Counter()
        covered, frontier = 0, g0
        for a0, a1, fn in api:
            if a1 <= g0 or a0 >= g1:
                continue
            lo, hi = max(a0, g0), min(a1, g1)
            inside[fn] += hi - lo
            if hi > frontier:  # the union of the calls' spans within the gap
                covered += hi - max(lo, frontier)
                frontier = hi
        for fn in set(per_call) | set(inside):
            per_call[fn].append(inside.get(fn, 0))
        outside.append((g1 - g0) - covered)
    print("\n| host call in the gap | µs (median a gap) |\n|---|---|")
    for fn, v in sorted(per_call.items(), key=lambda kv: -statistics.median(kv[1])):
        if statistics.median(v) > 0:
            print(f"| {fn} | {statistics.median(v) / 1e3:.1f} |")
    print(f"| (no CUDA call: the host's own work) | {statistics.median(outside) / 1e3:.1f} |")


if __name__ == "__main__":
    main()
