#!/usr/bin/env python3
"""Same-run A/B of two flashscope-cli builds: is "after" any slower than "before"?

Runs `bench prefill`, `bench decode` and `bench e2e` of both builds on the same
GPU in alternating order (A B B A ...), so drift in clocks and power hits both
alike, and prints each case's median over the rounds with after/before ratios.
No PyTorch needed: it compares our own builds (bench/compare_torch.py compares
us with PyTorch).

  python3 bench/ab_builds.py --before OLD/flashscope-cli --after NEW/flashscope-cli \
      [--rounds 5] [--only prefill,decode,e2e] [--kernels auto,hopper,v6] [--model M.gguf]
      [--e2e-batches 1,8,64] [--out FILE.json]

Prefill shapes are compare_torch.py's anchor shapes plus SmolLM2's GQA 9/3
shape; decode shapes are its decode shapes; e2e runs a model of SmolLM2's
shape (`make-model --preset smollm2-135m`, made with the "after" build when no
--model is given) at batch 1, 8 and 64. Ratios > 1 mean "after" is faster.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import ANCHOR_SHAPES, DECODE_SHAPES, GQA_SHAPE  # noqa: E402  (no torch needed to import)


def run_json(cmd, timeout=600):
    """The JSON lines a CLI call prints; [] when it fails (its stderr is reported)."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not rows:
        print(f"  failed ({p.returncode}): {' '.join(cmd)}\n  {p.stderr.strip()[:400]}", file=sys.stderr)
    return rows


def prefill_cases(kernels):
    for s in ANCHOR_SHAPES + [GQA_SHAPE]:
        args = ["--batch", s.batch, "--q-heads", s.q_heads, "--kv-heads", s.kv_heads, "--q-len", s.q_len,
                "--kv-len", s.kv_len, "--head-dim", s.head_dim] + (["--causal"] if s.causal else [])
        for k in kernels:
            yield f"prefill {s.name} [{k}]", ["bench", "prefill", *map(str, args), "--kernel", k, "--json"], \
                  {"alone ms": "ms", "back-to-back ms": "ms_stream"}


def decode_cases():
    for b, hq, hk, ctx, d in DECODE_SHAPES:
        args = ["--batch", b, "--q-heads", hq, "--kv-heads", hk, "--context", ctx, "--head-dim", d]
        yield f"decode B{b} {hq}/{hk} ctx{ctx} D{d}", ["bench", "decode", *map(str, args), "--json"], {"us": "us"}


def e2e_cases(model, batches):
    # Lower is better for every metric compared here: times, not rates.
    name = os.path.splitext(os.path.basename(model))[0]  # the model's file name: --model's, or smollm2-shape
    yield f"e2e {name}", ["bench", "e2e", "-m", model, "--batch", batches, "--json"], None


def save(path, samples):
    with open(path, "w") as f:
        json.dump([{"case": c, "metric": m, "build": b, "values": v} for (c, m, b), v in samples.items()], f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="prefill,decode,e2e")
    ap.add_argument("--kernels", default="auto,hopper")
    ap.add_argument("--model", help="GGUF for e2e (default: a SmolLM2-shaped random model)")
    ap.add_argument("--e2e-batches", default="1,8,64", help="the batch sizes e2e runs")
    ap.add_argument("--out", help="write every sample as JSON here")
    args = ap.parse_args()
    parts = set(args.only.split(","))

    cases = []
    if "prefill" in parts:
        cases += list(prefill_cases(args.kernels.split(",")))
    if "decode" in parts:
        cases += list(decode_cases())
    if "e2e" in parts:
        model = args.model
        if not model:
            model = os.path.join(tempfile.mkdtemp(), "smollm2-shape.gguf")
            subprocess.run([args.after, "make-model", "--out", model, "--preset", "smollm2-135m"], check=True,
                           capture_output=True)
        cases += list(e2e_cases(model, args.e2e_batches))

    builds = {"before": args.before, "after": args.after}
    samples = {}  # (case, metric, build) -> [values]
    for r in range(args.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for name, cmd, metrics in cases:
            for b in order:
                rows = run_json([builds[b]] + cmd)
                for row in rows:
                    if metrics is None:  # e2e: one row per batch size
                        for label, key in (("prefill ms", "prefill_ms"), ("ttft ms", "ttft_ms"), ("run ms", "run_ms")):
                            samples.setdefault((f"{name} batch {row['batch']}", label, b), []).append(row[key])
                    elif row.get("status", "ok") == "ok" and all(k in row for k in metrics.values()):
                        for label, key in metrics.items():
                            samples.setdefault((name, label, b), []).append(row[key])
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        if args.out:  # every round's samples so far, so a run cut short still leaves them
            save(args.out, samples)

    print(f"| case | metric | before (median of {args.rounds}) | after | before/after |")
    print("|---|---|---|---|---|")
    seen = []
    for (case, metric, _b) in samples:
        if (case, metric) not in seen:
            seen.append((case, metric))
    worst = None
    for case, metric in seen:
        a = samples.get((case, metric, "before"), [])
        b = samples.get((case, metric, "after"), [])
        if not a or not b:
            print(f"| {case} | {metric} | {'-' if not a else round(statistics.median(a), 5)} | "
                  f"{'-' if not b else round(statistics.median(b), 5)} | missing |")
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        ratio = ma / mb if mb > 0 else float("nan")
        worst = ratio if worst is None else min(worst, ratio)
        print(f"| {case} | {metric} | {ma:.5g} | {mb:.5g} | {ratio:.3f} |")
    if worst is not None:
        print(f"\nslowest case: after runs at {worst:.3f}x before's speed")
    if args.out:
        save(args.out, samples)


if __name__ == "__main__":
    main()
