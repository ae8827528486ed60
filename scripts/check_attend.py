#!/usr/bin/env python3
"""Checks `flashscope-cli attend` against attention written in numpy.

For each case: seeded q/k/v (already bf16- or fp16-representable, so the
CLI's rounding to --dtype changes nothing), run through the CLI, compared
with an FP64 numpy softmax over the same mask: bottom-right aligned causal,
the sliding window (query at position i sees keys i - W .. i, or
i - W .. i + R non-causal) and the logit soft-cap C * tanh(s / C).

Bounds, from the dtype's unit roundoff u (2^-8 bf16, 2^-11 fp16): the
kernels round P to the dtype before P.V and O on the store, so
max |o - ref| <= (2u + 2^-12) * max|v|; lse (float32 only) within 1e-3.

    scripts/check_attend.py --cli build/cli/flashscope-cli [--device cpu|cuda] [--dtype bf16|fp16]

Exits 0 when every case passes; prints one line per case. Needs numpy only.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

# (batch, q_heads, kv_heads, q_len, kv_len, head_dim, causal, window_left, window_right, softcap)
CASES = [
    (1, 4, 1, 300, 300, 256, True, 128, -1, 0.0),   # Gemma 3's local layers, 4 q-heads over 1
    (2, 8, 2, 77, 200, 96, True, 17, -1, 0.0),      # chunk after a cached prefix
    (1, 4, 1, 128, 128, 256, True, -1, -1, 50.0),   # Gemma 2's soft-cap
    (1, 2, 2, 150, 150, 64, False, 33, 20, 0.0),    # two-sided local window
    (1, 6, 3, 65, 65, 128, True, 1, -1, 5.0),
    (1, 4, 4, 40, 90, 80, True, 512, -1, 0.0),      # window longer than the sequence
    (1, 2, 1, 64, 64, 32, True, 0, -1, 0.0),        # each query sees only itself
    (1, 8, 8, 100, 100, 128, False, -1, -1, 0.0),   # no window: the plain path still holds
]


def round_to(x, dtype):
    """Rounds float32 values to the nearest bf16 / fp16 (ties to even), back in float32."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def reference(q, k, v, causal, left, right, cap):
    """q [B, Lq, Hq, D], k/v [B, Lk, Hkv, D] -> o [B, Lq, Hq, D], lse [B, Hq, Lq], in float64."""
    b, lq, hq, d = q.shape
    lk, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    qd, kd, vd = (t.astype(np.float64) for t in (q, k, v))
    kd = np.repeat(kd, group, axis=2)
    vd = np.repeat(vd, group, axis=2)
    s = np.einsum("bihd,bjhd->bhij", qd, kd) / np.sqrt(d)
    if cap > 0:
        s = cap * np.tanh(s / cap)
    pos = np.arange(lq)[:, None] + (lk - lq)
    j = np.arange(lk)[None, :]
    mask = np.ones((lq, lk), dtype=bool)
    if causal:
        mask &= j <= pos
    if left >= 0:
        mask &= j >= pos - left
    if right >= 0:
        mask &= j <= pos + right
    s = np.where(mask[None, None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(m)
    m = np.where(empty, 0.0, m)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    o = np.einsum("bhij,bjhd->bihd", p / np.where(l > 0, l, 1.0), vd)
    lse = np.where(l[..., 0] > 0, m[..., 0] + np.log(np.where(l[..., 0] > 0, l[..., 0], 1.0)), -np.inf)
    return o, lse


def run_case(cli, device, dtype, case, seed, tmp):
    b, hq, hkv, lq, lk, d, causal, left, right, cap = case
    rng = np.random.default_rng(seed)
    q = round_to(rng.standard_normal((b, lq, hq, d)), dtype)
    k = round_to(rng.standard_normal((b, lk, hkv, d)), dtype)
    v = round_to(rng.standard_normal((b, lk, hkv, d)), dtype)
    paths = {n: os.path.join(tmp, n + ".npy") for n in ("q", "k", "v", "o", "lse")}
    for n, t in (("q", q), ("k", k), ("v", v)):
        np.save(paths[n], t)
    cmd = [cli, "attend", "--q", paths["q"], "--k", paths["k"], "--v", paths["v"], "--out", paths["o"],
           "--lse", paths["lse"], "--dtype", dtype, "--device", device]
    if causal:
        cmd.append("--causal")
    if left >= 0:
        cmd += ["--window", str(left)]
    if right >= 0:
        cmd += ["--window-right", str(right)]
    if cap > 0:
        cmd += ["--softcap", str(cap)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    name = (f"B{b} H{hq}/{hkv} {lq}x{lk} D{d} {'causal' if causal else 'full'} window=({left},{right}) "
            f"softcap={cap:g} {dtype} {device}")
    if run.returncode != 0:
        return False, f"FAIL {name}: exit {run.returncode}: {run.stderr.strip()}"
    o = np.load(paths["o"]).astype(np.float64)
    lse = np.load(paths["lse"]).astype(np.float64)
    ref_o, ref_lse = reference(q, k, v, causal, left, right, cap)
    u = 2.0 ** -11 if dtype == "fp16" else 2.0 ** -8
    o_bound = (2 * u + 2.0 ** -12) * np.abs(v).max()
    o_err = np.abs(o - ref_o).max()
    both_empty = np.isneginf(lse) & np.isneginf(ref_lse)
    lse_err = np.where(both_empty, 0.0, np.abs(lse - ref_lse)).max()
    ok = bool(o_err <= o_bound and lse_err <= 1e-3)  # NaN fails both comparisons
    return ok, f"{'ok  ' if ok else 'FAIL'} {name}: max|o-ref| {o_err:.3g} (bound {o_bound:.3g}), max|lse-ref| {lse_err:.3g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", default="build/cli/flashscope-cli")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    args = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n, case in enumerate(CASES):
            ok, line = run_case(args.cli, args.device, args.dtype, case, 1000 + n, tmp)
            print(line, flush=True)
            failures += not ok
    print(f"{len(CASES) - failures}/{len(CASES)} cases pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
