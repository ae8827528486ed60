#!/usr/bin/env python3
"""Per-kernel GPU time from an Nsight Compute CSV of one run, grouped by kernel name.

  ncu --graph-profiling node --metrics gpu__time_duration.sum --csv --print-units base \
      --clock-control none --cache-control none flashscope-cli generate ... > run.csv
  python3 bench/ncu_summary.py run.csv [--steps N] [--top 25]

With dram__bytes_read.sum also collected (--metrics gpu__time_duration.sum,
dram__bytes_read.sum), each kernel's DRAM read rate is printed beside it.

--steps divides the totals by the decode steps the run made (the prefill's
kernels then count too: profile a short prompt). Answers "what does one
decode step spend its GPU time on", and the sum beside the measured time per
token says how much of a step is launch gaps rather than kernels.
"""
import argparse
import collections
import csv
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    rows = []
    read_bytes = collections.Counter()
    with open(args.csv, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own log lines before the table
    for r in csv.DictReader(lines):
        metric = r.get("Metric Name")
        if metric not in ("gpu__time_duration.sum", "dram__bytes_read.sum"):
            continue
        value = float(r["Metric Value"].replace(",", ""))
        name = r["Kernel Name"].removeprefix("void ").split("(")[0]  # keeps template arguments: configs differ
        name = name.replace("flashscope::", "").replace("<unnamed>::", "")
        if metric == "dram__bytes_read.sum":
            read_bytes[name] += value
        else:
            rows.append((name, value))
    if not rows:
        sys.exit("no gpu__time_duration rows in " + args.csv)
    total = collections.Counter()
    count = collections.Counter()
    for name, ns in rows:
        total[name] += ns
        count[name] += 1
    all_ns = sum(total.values())
    print(f"{len(rows)} kernels, {all_ns / 1e3:.1f} us of GPU time; per step (/{args.steps}): "
          f"{all_ns / 1e3 / args.steps:.1f} us, {len(rows) / args.steps:.1f} launches")
    gbps = bool(read_bytes)
    print(f"{'launches/step':>14s} {'us/step':>10s} {'share':>7s}" + (f" {'read GB/s':>10s}" if gbps else "") + "  kernel")
    for name, ns in total.most_common(args.top):
        rate = f" {read_bytes[name] / ns:10.0f}" if gbps else ""
        print(f"{count[name] / args.steps:14.1f} {ns / 1e3 / args.steps:10.2f} {100 * ns / all_ns:6.1f}%{rate}  {name[:110]}")


if __name__ == "__main__":
    main()
