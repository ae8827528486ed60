#!/usr/bin/env python3
"""Tables from bench/device/ncu_decode_step.sh's CSVs: one decode step's
launches (kernel, grid, µs, DRAM bytes) and their sums by kernel, then the
int8 GEMV's warp states by launch shape.

  usage: python3 bench/ncu_decode_step.py DIR [--step-ms MS]
  DIR holds ncu-times.csv (and ncu-gemv.csv); MS is bench e2e's time a token,
  for the share that the sum of the isolated launches explains.
"""
import argparse
import collections
import csv
import os
import re


def rows(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    return list(csv.DictReader(lines))


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def short_name(kernel):
    m = re.search(r"(?:::)?(\w+?)(?:<([^()]*)>)?\(", kernel)
    if not m:
        return kernel[:60]
    name, args = m.group(1), m.group(2) or ""
    if name == "quant_gemv_q8_kernel":
        tok, typ, warps, staged = (a.strip() for a in args.split(","))
        types = {"2": "Q4_0", "3": "Q4_1", "6": "Q5_0", "7": "Q5_1", "8": "Q8_0", "12": "Q4_K", "13": "Q5_K", "14": "Q6_K"}
        return f"q8 gemv {types.get(typ, typ)} w{warps}{' staged' if staged == 'true' else ''}"
    return name


def launches(path):
    by_id = collections.OrderedDict()
    for r in rows(path):
        k = by_id.setdefault(r["ID"], {"name": short_name(r["Kernel Name"]), "grid": r["Grid Size"], "m": {}})
        k["m"][r["Metric Name"]] = number(r["Metric Value"])
    return list(by_id.values())


def steps(ks):
    """Launches split where an embedding lookup begins a step."""
    out, cur = [], []
    for k in ks:
        if k["name"].startswith("embedding") and cur:
            out.append(cur)
            cur = []
        cur.append(k)
    out.append(cur)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--step-ms", type=float, default=None)
    a = ap.parse_args()
    ss = steps(launches(os.path.join(a.dir, "ncu-times.csv")))
    step = ss[-2] if len(ss) > 2 else ss[-1]  # the last step may end after the graph's sampling
    total_us = sum(k["m"].get("gpu__time_duration.sum", 0) for k in step) / 1e3
    total_mb = sum(k["m"].get("dram__bytes_read.sum", 0) for k in step) / 1e6
    print(f"# One decode step: {len(step)} launches, {total_us:.1f} µs run one at a time, {total_mb:.1f} MB read from DRAM")
    if a.step_ms:
        print(f"(bench e2e: {a.step_ms * 1e3:.1f} µs a token; the isolated sum is {total_us / (a.step_ms * 1e3):.2f}x that)")
    print("\n| kernel | launches | grids | µs | µs a launch | DRAM MB | GB/s |\n|---|---|---|---|---|---|---|")
    agg = collections.OrderedDict()
    for k in step:
        g = agg.setdefault(k["name"], {"n": 0, "us": 0.0, "mb": 0.0, "grids": collections.Counter()})
        g["n"] += 1
        g["us"] += k["m"].get("gpu__time_duration.sum", 0) / 1e3
        g["mb"] += k["m"].get("dram__bytes_read.sum", 0) / 1e6
        g["grids"][k["grid"].strip("()").split(",")[0]] += 1
    for name, g in sorted(agg.items(), key=lambda kv: -kv[1]["us"]):
        grids = " ".join(f"{c}x{grid}" for grid, c in g["grids"].most_common())
        print(f"| {name} | {g['n']} | {grids} | {g['us']:.1f} | {g['us'] / g['n']:.2f} | {g['mb']:.1f} | "
              f"{g['mb'] / g['us'] * 1e3 if g['us'] else 0:.0f} |")
    print("\n| # | kernel | grid | µs | DRAM MB | GB/s |\n|---|---|---|---|---|---|")
    for i, k in enumerate(step):
        us = k["m"].get("gpu__time_duration.sum", 0) / 1e3
        mb = k["m"].get("dram__bytes_read.sum", 0) / 1e6
        print(f"| {i} | {k['name']} | {k['grid'].strip('()').split(',')[0]} | {us:.2f} | {mb:.2f} | {mb / us * 1e3 if us else 0:.0f} |")

    gemv = os.path.join(a.dir, "ncu-gemv.csv")
    if not os.path.exists(gemv):
        return
    shapes = collections.OrderedDict()
    sms = 0
    for r in rows(gemv):
        key = (short_name(r["Kernel Name"]), int(r["Grid Size"].strip("()").split(",")[0]))
        v = number(r["Metric Value"])
        if r["Metric Name"] == "# SMs" and v:
            sms = int(v)
        shapes.setdefault(key, collections.defaultdict(list))[r["Metric Name"]].append(v)

    def med(m, name):
        v = sorted(x for x in m.get(name, []) if x is not None)
        return v[len(v) // 2] if v else float("nan")

    print("\n# The int8 GEMV by launch shape (medians over the profiled launches)\n")
    print("| kernel | grid | launches | elapsed cycles | SM active cycles (mean over SMs) | a CTA's life "
          "(active x SMs / grid) | issued warps a scheduler a cycle | no eligible warp | achieved occupancy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, grid), m in shapes.items():
        active = med(m, "SM Active Cycles")
        life = active * sms / min(grid, sms) if sms else float("nan")
        print(f"| {name} | {grid} | {len(m.get('Duration', []))} | {med(m, 'Elapsed Cycles'):,.0f} | {active:,.0f} | "
              f"{life:,.0f} | {med(m, 'Issued Warp Per Scheduler'):.2f} | {med(m, 'No Eligible'):.1f}% | "
              f"{med(m, 'Achieved Occupancy'):.1f}% |")

if __name__ == "__main__":
    main()
