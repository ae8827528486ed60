#!/usr/bin/env python3
"""The CPU engine's decode with a bf16 and a q8_0 KV cache, same run, interleaved.

For each round, each context depth and each KV type (the order of the types
alternates between rounds), `flashscope-cli bench e2e --device cpu --runs 1`
runs once: its decode tok/s (wall time) and the process CPU time per decode
token it measures around the same steps (every thread's; run with
OMP_WAIT_POLICY=passive so threads waiting at a barrier sleep rather than
spin, and the figure is the work), which holds on a machine others share
where wall time does not. Others' share of the CPU during each round comes
from /proc/stat as in cpu_vs_llamacpp.py.

    python3 bench/cpu_kv_types.py -t 2 --rounds 3 [--depths 8,512,4096] [--gen 32]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_vs_llamacpp as cvl  # noqa: E402  (its /proc/stat meters and paths)


def run(cli, model, threads, kv, plen, glen):
    """(decode tok/s, prompt tok/s, decode CPU ms per token) of one bench e2e."""
    cmd = [str(cli), "bench", "e2e", "--device", "cpu", "-m", str(model), "--batch", "1", "--prompt-len", str(plen),
           "--gen-len", str(glen), "--runs", "1", "-t", str(threads), "--kv-type", kv, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return j["decode_tokens_per_s"], j["prompt_tokens_per_s"], j["decode_cpu_ms_per_token"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=str(cvl.DEFAULT_MODEL))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--depths", default="8,512,4096")
    ap.add_argument("--cli", default=str(cvl.ROOT / "build/cli/flashscope-cli"))
    ap.add_argument("--out", default="", help="write the markdown table here too")
    a = ap.parse_args()
    depths = [int(d) for d in a.depths.split(",")]
    kinds = ["bf16", "q8_0"]
    rows = []
    for kv in kinds:  # first loads of the file (its weight check, the page cache) outside the measurements
        run(a.cli, a.model, a.threads, kv, 8, 1)
    for r in range(a.rounds):
        meter = cvl.OthersMeter()
        load0 = cvl.loadavg()
        order = kinds if r % 2 == 0 else kinds[::-1]
        for d in depths:
            for kv in order:
                tps, ptps, cpu_ms = run(a.cli, a.model, a.threads, kv, d, a.gen)
                rows.append({"round": r, "depth": d, "kv": kv, "decode_tps": tps, "prompt_tps": ptps,
                             "cpu_ms_per_token": round(cpu_ms, 2)})
                cvl.log(json.dumps(rows[-1]))
        others = meter.stop()
        cvl.log(f"round {r + 1}: others' share of the CPUs {others:.0%}, load {load0:.1f} -> {cvl.loadavg():.1f}")
        rows.append({"round": r, "others": others, "load_before": load0, "load_after": cvl.loadavg()})

    lines = [f"| context | bf16 decode tok/s | q8_0 decode tok/s | q8_0/bf16 (wall) | bf16 CPU ms/token | "
             f"q8_0 CPU ms/token | q8_0/bf16 (CPU) |", "|---|---|---|---|---|---|---|"]
    med = {}
    for d in depths:
        for kv in kinds:
            sel = [x for x in rows if x.get("depth") == d and x.get("kv") == kv]
            med[(d, kv)] = (statistics.median(x["decode_tps"] for x in sel),
                            statistics.median(x["cpu_ms_per_token"] for x in sel))
        (tb, cb), (tq, cq) = med[(d, "bf16")], med[(d, "q8_0")]
        lines.append(f"| {d} | {tb:.1f} | {tq:.1f} | {tq / tb:.2f}× | {cb:.2f} | {cq:.2f} | {cb / cq:.2f}× faster |")
    for kv in kinds:
        t8, c8 = med[(depths[0], kv)]
        tl, cl = med[(depths[-1], kv)]
        lines.append(f"\n{kv}: decode @{depths[-1]} / @{depths[0]} = {tl / t8:.2f} (wall), {c8 / cl:.2f} (CPU time)")
    shares = [x["others"] for x in rows if "others" in x]
    lines.append(f"\nOthers' share of the CPUs per round: {', '.join(f'{s:.0%}' for s in shares)}; "
                 f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset: spinning)')}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n\nRaw rows:\n\n" + "\n".join(json.dumps(x) for x in rows) + "\n")


if __name__ == "__main__":
    main()
