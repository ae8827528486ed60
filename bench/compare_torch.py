#!/usr/bin/env python3
"""FlashScope prefill beside PyTorch SDPA, timed in one run on one GPU.

Two parts, both against the same torch build on the same device:

1. Speed. For each prefill shape of shared/anchors (plus --gqa and --shape
   extras) PyTorch's scaled_dot_product_attention is timed with the
   FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION backends, the same
   way sdpa_anchors.py does (bf16 [B, H, L, D] tensors, warm-up, then each
   call alone between two CUDA events with a synchronize, median), and then
   `flashscope-cli bench prefill ... --json` times each of our kernels with
   the same iteration counts. TFLOPS count 4*B*Hq*Lq*Lk*D, halved when causal.

2. Numerics. A few small shapes (odd lengths, GQA, causal with Lq != Lk) are
   written as float32 .npy in BSHD, run through `flashscope-cli attend` with
   each kernel, and compared with SDPA in float32 on the same inputs rounded
   to bf16: ||o - ref|| / ||ref|| must stay under 2e-2 and the LSE within
   2e-2 absolute (a 2% error of the softmax denominator).

Results go to bench/results/<device-slug>-<date>.json and a markdown table
beside it (.md). Exit status: 0 all good, 1 a numerics check or one of our
runs failed (unsupported is reported apart and is not a failure), 2 the
setup is wrong (no torch, no CUDA device, no CLI binary).

With --window W and/or --softcap C the --shape extras run with a sliding
window (keys from W before each query's bottom-right position) and a logit
soft-cap; SDPA has neither, so torch is timed with
torch.nn.attention.flex_attention, compiled, with a sliding-window block
mask (and a tanh score_mod), and TFLOPS count 4*D per visible (query, key)
pair on both sides.

torch is imported only once the arguments are parsed, so `--help` works on a
machine without it. See bench/README.md for how to run and read it.
"""

import argparse
import dataclasses
import ctypes
import datetime
import json
import math
import os
import re
import shlex
import struct
import subprocess
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass

DEFAULT_KERNELS = ["v1", "v2", "v3", "v4", "v5", "v6", "hopper", "auto"]
TORCH_BACKENDS = ["FLASH_ATTENTION", "CUDNN_ATTENTION"]
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Pass thresholds for bf16 inputs; see the module docstring.
O_TOL_NORMALIZED = 2e-2
LSE_TOL_ABS = 2e-2


@dataclass(frozen=True)
class Shape:
    """One attention problem: q is [B, Lq, Hq, D], k and v are [B, Lk, Hkv, D]."""

    name: str
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    causal: bool
    q_scale: float = 1.0  # numerics only: q is randn * q_scale (sharper softmax)
    window: int = -1  # sliding window to the left (-1: none); --window
    softcap: float = 0.0  # logit soft-cap (0: none); --softcap

    def label(self):
        heads = str(self.q_heads) if self.q_heads == self.kv_heads else f"{self.q_heads}/{self.kv_heads}"
        mask = " causal" if self.causal else ""
        extras = (f" W{self.window}" if self.window >= 0 else "") + (f" cap{self.softcap:g}" if self.softcap > 0 else "")
        return f"B{self.batch} H{heads} {self.q_len}x{self.kv_len} D{self.head_dim}{mask}{extras}"

    def flops(self):
        # The count PyTorch, FlashAttention and sdpa_anchors.py use: two GEMMs
        # of 2*Lq*Lk*D per head, halved for causal whatever Lq and Lk are.
        # With a window: 4*D per (query, key) pair a query sees (as
        # `flashscope-cli bench prefill --window` counts them).
        if self.window >= 0:
            pairs = 0
            for i in range(self.q_len):
                pos = i + self.kv_len - self.q_len
                hi = min(self.kv_len, pos + 1) if self.causal else self.kv_len
                pairs += max(0, hi - max(0, pos - self.window))
            return 4.0 * self.batch * self.q_heads * self.head_dim * pairs
        f = 4.0 * self.batch * self.q_heads * self.q_len * self.kv_len * self.head_dim
        return f / 2 if self.causal else f


# The prefill shapes of shared/anchors/README.md, in its order.
ANCHOR_SHAPES = [
    Shape("seed shape", 1, 8, 8, 4096, 8192, 128, False),
    Shape("long", 1, 16, 16, 8192, 8192, 128, False),
    Shape("long causal", 1, 16, 16, 8192, 8192, 128, True),
    Shape("batch causal", 4, 16, 16, 4096, 4096, 128, True),
    Shape("D=64", 4, 16, 16, 4096, 4096, 64, False),
    Shape("D=64 causal", 4, 16, 16, 4096, 4096, 64, True),
    Shape("SmolLM2-like prefill", 16, 9, 9, 1024, 1024, 64, True),
]
# --gqa: the SmolLM2 shape as the model really runs it, 9 q-heads over 3 kv-heads.
GQA_SHAPE = Shape("SmolLM2 GQA 9/3", 16, 9, 3, 1024, 1024, 64, True)
# --quick: the seed shape and the small-model shape.
QUICK_SHAPES = [ANCHOR_SHAPES[0], ANCHOR_SHAPES[-1]]

# Small problems whose edges are where kernels break: lengths that are not a
# multiple of any tile, GQA with an odd ratio, causal with Lq < Lk (bottom-right
# alignment), tiny Lq. Each must keep q_len <= kv_len when causal, so that
# every query row sees at least one key.
NUMERIC_CASES = [
    Shape("causal, ragged tiles", 2, 8, 8, 1000, 1000, 128, True),
    Shape("GQA 9/3, Lq != Lk", 1, 9, 3, 517, 1029, 64, False, q_scale=2.0),
    Shape("causal, Lq < Lk", 3, 4, 4, 17, 64, 64, True, q_scale=4.0),
]


# --- command line -------------------------------------------------------------


def die(message):
    """Setup errors: exit status 2, apart from a failed check (1)."""
    print(f"compare_torch.py: {message}", file=sys.stderr)
    sys.exit(2)


def parse_shape(text):
    """--shape B,HQ[/HK],LQ,LK,D[,causal] -> Shape."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (5, 6) or (len(parts) == 6 and parts[5] not in ("causal", "c", "1", "true")):
        raise argparse.ArgumentTypeError(f"expected B,HQ[/HK],LQ,LK,D[,causal], got {text!r}")
    try:
        heads = parts[1].split("/")
        hq = int(heads[0])
        hk = int(heads[1]) if len(heads) == 2 else hq
        b, lq, lk, d = int(parts[0]), int(parts[2]), int(parts[3]), int(parts[4])
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"expected integers in B,HQ[/HK],LQ,LK,D[,causal], got {text!r}")
    if min(b, hq, hk, lq, lk, d) < 1 or hq % hk != 0:
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: sizes must be >= 1 and HQ a multiple of HK")
    return Shape(f"custom {text}", b, hq, hk, lq, lk, d, len(parts) == 6)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Time FlashScope prefill kernels beside PyTorch SDPA (FA2, cuDNN) and check their numerics.",
        epilog="Run on the GPU machine from the repository root after building the CLI; see bench/README.md.",
    )
    p.add_argument("--cli", default=os.path.join("build", "cli", "flashscope-cli"),
                   help="path to flashscope-cli (default: %(default)s)")
    p.add_argument("--kernels", "--kernel", dest="kernels", default=",".join(DEFAULT_KERNELS),
                   help="comma-separated kernels to run, or 'all' (one `--kernel all` call per shape; "
                        "numerics then use v1..v6,auto) (default: %(default)s)")
    p.add_argument("--iters", type=int, default=30, help="timed runs per measurement, median reported (default: 30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs before timing (default: 5)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 2 shapes, 10 timed runs after 2 warm-ups (numerics unchanged)")
    p.add_argument("--gqa", action="store_true",
                   help="also run the SmolLM2 shape as 9 q-heads over 3 kv-heads (torch enable_gqa=True)")
    p.add_argument("--shape", type=parse_shape, action="append", default=[], metavar="B,HQ[/HK],LQ,LK,D[,causal]",
                   help="an extra prefill shape to time (repeatable)")
    p.add_argument("--window", type=int, default=-1, metavar="W",
                   help="run the --shape extras with a sliding window of W keys (torch: compiled flex_attention)")
    p.add_argument("--softcap", type=float, default=0.0, metavar="C",
                   help="run the --shape extras with the logit soft-cap C (torch: compiled flex_attention)")
    p.add_argument("--only", choices=["bench", "numerics", "decode"], help="run one part only")
    p.add_argument("--page-size", type=int, default=16, help="page size of our decode runs (default: 16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the numerics inputs (default: 0)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds allowed to one CLI call before it counts as failed (default: 600)")
    p.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "bench", "results"),
                   help="where the .json and .md results go (default: bench/results)")
    args = p.parse_args(argv)

    if args.quick:
        args.iters, args.warmup = 10, 2
    elif args.iters < 30:
        p.error("--iters must be >= 30 for a reported number (use --quick for a smoke run)")
    if args.warmup < 0:
        p.error("--warmup must be >= 0")
    if args.window < -1 or args.softcap < 0:
        p.error("--window must be >= 0 (or -1: none) and --softcap >= 0")
    if args.window >= 0 or args.softcap > 0:
        if not args.shape:
            p.error("--window and --softcap apply to the --shape extras: give at least one --shape")
        args.shape = [dataclasses.replace(s, window=args.window, softcap=args.softcap) for s in args.shape]
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    if kernels == ["all"]:
        args.kernel_list, args.kernel_all = list(DEFAULT_KERNELS), True
    else:
        bad = [k for k in kernels if not re.fullmatch(r"v[1-9]|hopper|auto", k)]
        if bad or not kernels:
            p.error(f"--kernels takes v1..v6, hopper and auto, comma-separated, or 'all'; got {args.kernels!r}")
        args.kernel_list, args.kernel_all = kernels, False
    return args


# --- flashscope-cli -------------------------------------------------------------


def classify_error(message):
    """'unsupported' for a case the CLI declines (reported apart), else 'failed'.

    The library's Status::to_string() prefixes its code name ("unsupported: ..."),
    so a message from an unsupported shape or kernel says so.
    """
    m = message.lower()
    return "unsupported" if ("unsupported" in m or "not supported" in m) else "failed"


def run_cli(cli, cli_args, timeout):
    """Runs the CLI; returns (returncode or None, stdout, stderr or error text)."""
    cmd = [cli] + cli_args
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {timeout:.0f} s: {shlex.join(cmd)}"
    except OSError as ex:
        return None, "", f"could not run {shlex.join(cmd)}: {ex}"
    return proc.returncode, proc.stdout, proc.stderr


def json_lines(text, salvage=False):
    """Every line of `text` that parses as a JSON object; other lines are ignored.

    With `salvage`, a line that looks like one of the CLI's error objects but
    does not parse (an error message with unescaped quotes in it) still gives
    {"kernel": ..., "error": ...}, so the reason is not lost.
    """
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            kernel = re.search(r'"kernel"\s*:\s*"(\w+)"', line)
            error = re.search(r'"error"\s*:\s*"(.*)"\s*[,}]', line)
            if salvage and kernel and error:
                rows.append({"kind": "prefill", "kernel": kernel.group(1), "error": error.group(1)})
            continue
        if isinstance(obj, dict):
            rows.append(obj)
    return rows


def tail(text, limit=400):
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def bench_ours(cli, shape, args):
    """Times our kernels on `shape`; returns {kernel: row}.

    A row is the CLI's JSON plus "status" ("ok", "unsupported" or "failed");
    a kernel the CLI printed nothing for gets the reason from its exit status
    and stderr.
    """
    common = ["bench", "prefill",
              "--batch", str(shape.batch), "--q-heads", str(shape.q_heads), "--kv-heads", str(shape.kv_heads),
              "--q-len", str(shape.q_len), "--kv-len", str(shape.kv_len), "--head-dim", str(shape.head_dim),
              "--dtype", "bf16", "--device", "cuda",
              "--iters", str(args.iters), "--warmup", str(args.warmup), "--json"]
    if shape.causal:
        common.append("--causal")
    if shape.window >= 0:
        common += ["--window", str(shape.window)]
    if shape.softcap > 0:
        common += ["--softcap", repr(shape.softcap)]
    calls = [("all", common + ["--kernel", "all"])] if args.kernel_all else \
        [(k, common + ["--kernel", k]) for k in args.kernel_list]

    rows = {}
    for requested, cli_args in calls:
        rc, out, err = run_cli(cli, cli_args, args.timeout)
        printed = [r for r in json_lines(out, salvage=True) if r.get("kind", "prefill") == "prefill"]
        for r in printed:
            kernel = r.get("kernel", requested)
            if "error" in r:
                r["status"] = r.get("status") or classify_error(str(r["error"]))
            else:
                r["status"] = "ok"
                mismatch = [f for f, want in (("batch", shape.batch), ("q_heads", shape.q_heads),
                                              ("kv_heads", shape.kv_heads), ("q_len", shape.q_len),
                                              ("kv_len", shape.kv_len), ("head_dim", shape.head_dim),
                                              ("causal", shape.causal))
                            if f in r and r[f] != want]
                if mismatch:
                    r["status"] = "failed"
                    r["error"] = f"CLI reported a different problem ({', '.join(mismatch)})"
            rows[kernel] = r
        wanted = args.kernel_list if requested == "all" else [requested]
        for k in wanted:
            if k not in rows:
                why = tail(err) or tail(out) or f"exit status {rc}"
                rows[k] = {"kind": "prefill", "kernel": k, "status": classify_error(why), "error": why,
                           "returncode": rc}
    return rows


def cli_info(cli, timeout):
    """`flashscope-cli info --json`, or None when that fails."""
    rc, out, _ = run_cli(cli, ["info", "--json"], timeout)
    rows = json_lines(out) if rc == 0 else []
    return rows[0] if rows else None


# --- PyTorch --------------------------------------------------------------------


def import_torch():
    """(torch, F, sdpa_kernel, SDPBackend), or exits 2 saying what is missing."""
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as ex:
        die(f"PyTorch with torch.nn.attention is needed to run ({ex}); only --help works without it")
    if not torch.cuda.is_available():
        die("torch sees no CUDA device")
    return torch, F, sdpa_kernel, SDPBackend


def time_cuda(torch, fn, iters, warmup):
    """Median ms of `fn`: sdpa_anchors.py's method, each call alone between two events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2], times[0]


def time_cuda_stream(torch, fn, batches=5, per_batch=10):
    """Median over batches of ms per call, `per_batch` calls back to back between two events.

    PyTorch's host work per call (Python, dispatch, cuDNN's graph lookup: 12-18 us
    on the H200 machine) overlaps the GPU's here; a call alone between two
    events (time_cuda) holds it, so short problems look slower there than the
    kernel is. The CLI reports ours both ways too (ms, ms_stream).
    """
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(batches):
        start.record()
        for _ in range(per_batch):
            fn()
        end.record()
        torch.cuda.synchronize()
        per_call.append(start.elapsed_time(end) / per_batch)
    per_call.sort()
    return per_call[len(per_call) // 2]


def bench_torch(torch, F, sdpa_kernel, SDPBackend, shape, args, sol_tflops):
    """Times each SDPA backend on `shape`; returns {backend: row}, errors recorded, never raised.

    sol_tflops (from `flashscope-cli info`, or None) gives torch the same % of
    SOL column as our kernels in the JSON.
    """
    rows = {}
    q = torch.randn(shape.batch, shape.q_heads, shape.q_len, shape.head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(shape.batch, shape.kv_heads, shape.kv_len, shape.head_dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    gqa = shape.q_heads != shape.kv_heads
    if shape.window >= 0 or shape.softcap > 0:
        rows["FLEX_ATTENTION"] = bench_flex(torch, shape, q, k, v, gqa, args, sol_tflops)
        return rows
    # torch's is_causal is top-left aligned, ours bottom-right: the same mask
    # only when Lq == Lk, as in every anchor shape. For a causal shape with
    # Lq != Lk torch is given its bottom-right bias (causal_lower_right), which
    # the backends that cannot take it refuse (recorded as unsupported); a
    # torch without that bias times top-left work, and the row says so.
    kwargs = {"is_causal": shape.causal}
    note = None
    if shape.causal and shape.q_len != shape.kv_len:
        try:
            from torch.nn.attention.bias import causal_lower_right
            kwargs = {"attn_mask": causal_lower_right(shape.q_len, shape.kv_len)}
            note = "torch given causal_lower_right: bottom-right aligned, as ours"
        except ImportError:
            note = "torch is_causal is top-left aligned (ours bottom-right): not the same work when Lq != Lk"
    if gqa:
        kwargs["enable_gqa"] = True
    for name in TORCH_BACKENDS:
        row = {"backend": name}
        if note:
            row["note"] = note
        try:
            backend = getattr(SDPBackend, name)
            # A backend that cannot take the shape warns "kernel not used because"
            # before it raises; the exception below records the same reason once.
            with sdpa_kernel(backend), warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                call = lambda: F.scaled_dot_product_attention(q, k, v, **kwargs)
                ms, ms_min = time_cuda(torch, call, args.iters, args.warmup)
                ms_stream = time_cuda_stream(torch, call)
            tflops = shape.flops() / ms / 1e9
            row.update(status="ok", ms=round(ms, 5), ms_min=round(ms_min, 5), tflops=round(tflops, 2),
                       ms_stream=round(ms_stream, 5), tflops_stream=round(shape.flops() / ms_stream / 1e9, 2))
            if sol_tflops:
                row["sol_pct"] = round(100.0 * tflops / sol_tflops, 2)
        except Exception as ex:  # a backend that cannot run this shape or is not built: record it
            row.update(status="unsupported", error=f"{type(ex).__name__}: {str(ex)[:200]}")
        rows[name] = row
    return rows


def bench_flex(torch, shape, q, k, v, gqa, args, sol_tflops):
    """torch.nn.attention.flex_attention, compiled, with the shape's window (a block mask: tiles outside every
    window skipped) and soft-cap (a score_mod); a row like bench_torch's, errors recorded."""
    row = {"backend": "FLEX_ATTENTION"}
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        offset, window, causal, cap = shape.kv_len - shape.q_len, shape.window, shape.causal, shape.softcap

        def mask_mod(b, h, q_idx, kv_idx):
            pos = q_idx + offset  # bottom-right aligned, as ours
            keep = (kv_idx <= pos) if causal else (kv_idx >= 0)
            if window >= 0:
                keep = keep & (pos - kv_idx <= window)
            return keep

        block_mask = None
        if causal or window >= 0:
            block_mask = create_block_mask(mask_mod, None, None, shape.q_len, shape.kv_len, device="cuda")
        score_mod = (lambda score, b, h, q_idx, kv_idx: cap * torch.tanh(score / cap)) if cap > 0 else None
        compiled = torch.compile(flex_attention)
        call = lambda: compiled(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa)
        ms, ms_min = time_cuda(torch, call, args.iters, args.warmup)
        ms_stream = time_cuda_stream(torch, call)
        tflops = shape.flops() / ms / 1e9
        row.update(status="ok", ms=round(ms, 5), ms_min=round(ms_min, 5), tflops=round(tflops, 2),
                   ms_stream=round(ms_stream, 5), tflops_stream=round(shape.flops() / ms_stream / 1e9, 2))
        if sol_tflops:
            row["sol_pct"] = round(100.0 * tflops / sol_tflops, 2)
    except Exception as ex:  # no flex_attention in this torch, or it cannot compile here: record it
        row.update(status="unsupported", error=f"{type(ex).__name__}: {str(ex)[:200]}")
    return row


# --- .npy without numpy (torch may come without it) -------------------------------


def save_npy_f32(path, tensor):
    """Writes a contiguous CPU float32 tensor as a version 1.0 .npy file."""
    t = tensor.detach().to("cpu").float().contiguous()
    shape = tuple(t.shape)
    shape_repr = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_repr + ", }"
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        if t.numel():
            f.write(ctypes.string_at(t.data_ptr(), t.numel() * 4))


def load_npy_f32(torch, path):
    """Reads a '<f4' C-order .npy file (what `flashscope-cli attend` writes) as a CPU tensor."""
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:6] != b"\x93NUMPY" or blob[6] not in (1, 2, 3):
        raise ValueError(f"{path}: not a .npy file")
    hlen_size = 2 if blob[6] == 1 else 4
    hlen = int.from_bytes(blob[8:8 + hlen_size], "little")
    start = 8 + hlen_size
    header = blob[start:start + hlen].decode("latin1")
    descr = re.search(r"'descr':\s*'([^']*)'", header)
    fortran = re.search(r"'fortran_order':\s*(True|False)", header)
    dims = re.search(r"'shape':\s*\(([^)]*)\)", header)
    if not (descr and fortran and dims) or descr.group(1) != "<f4" or fortran.group(1) != "False":
        raise ValueError(f"{path}: expected a C-order '<f4' array, header {header.strip()!r}")
    shape = [int(d) for d in dims.group(1).split(",") if d.strip()]
    data = bytearray(blob[start + hlen:])
    if len(data) != 4 * math.prod(shape):
        raise ValueError(f"{path}: {len(data)} data bytes for shape {shape}")
    if not data:
        return torch.zeros(shape, dtype=torch.float32)
    return torch.frombuffer(data, dtype=torch.float32).reshape(shape).clone()


# --- numerics -------------------------------------------------------------------------


def reference(torch, F, sdpa_kernel, SDPBackend, q, k, v, causal):
    """o [B, Lq, Hq, D] and lse [B, Hq, Lq] in float32, from bf16-rounded BSHD inputs.

    o comes from SDPA's MATH backend in float32; the LSE (which SDPA does not return) from the
    scores in float64. The mask is explicit and bottom-right aligned, our
    convention: query i sees key j iff j <= i + Lk - Lq.
    """
    qh, kh, vh = (x.to(torch.bfloat16).float().permute(0, 2, 1, 3) for x in (q, k, v))  # [B, H, L, D]
    b, hq, lq, d = qh.shape
    hk, lk = kh.shape[1], kh.shape[2]
    if hq != hk:  # GQA: q-head h reads kv-head h // (hq // hk)
        kh = kh.repeat_interleave(hq // hk, dim=1)
        vh = vh.repeat_interleave(hq // hk, dim=1)
    mask = None
    if causal:
        mask = torch.ones(lq, lk, dtype=torch.bool, device=qh.device).tril(diagonal=lk - lq)
    with sdpa_kernel(SDPBackend.MATH):  # plain float32 matmuls: no TF32, no fused-kernel shortcuts
        o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
    scores = (qh.double() @ kh.double().transpose(-1, -2)) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1).float()
    return o.permute(0, 2, 1, 3).contiguous(), lse


def compare(torch, o, lse, o_ref, lse_ref):
    """Error measures and pass/fail of one output against the reference."""
    o, lse = o.to(o_ref.device), lse.to(lse_ref.device)
    row = {
        "o_err_normalized": float(torch.linalg.vector_norm(o - o_ref) / torch.linalg.vector_norm(o_ref)),
        "o_err_max_abs": float((o - o_ref).abs().max()),
        "lse_err_normalized": float(torch.linalg.vector_norm(lse - lse_ref) / torch.linalg.vector_norm(lse_ref)),
        "lse_err_max_abs": float((lse - lse_ref).abs().max()),
    }
    # NaN compares false, so a NaN anywhere fails here too.
    ok = row["o_err_normalized"] < O_TOL_NORMALIZED and row["lse_err_max_abs"] < LSE_TOL_ABS
    row["status"] = "ok" if ok else "failed"
    if not ok:
        row["error"] = (f"o normalized error {row['o_err_normalized']:.3g} (limit {O_TOL_NORMALIZED}), "
                        f"lse max abs error {row['lse_err_max_abs']:.3g} (limit {LSE_TOL_ABS})")
    return row


def check_numerics(torch, F, sdpa_kernel, SDPBackend, cli, args):
    """Runs every numerics case through `flashscope-cli attend` with each kernel; returns rows."""
    rows = []
    gen = torch.Generator().manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False  # a float32 reference must be float32
    with tempfile.TemporaryDirectory(prefix="flashscope-numerics-") as tmp:
        for case in NUMERIC_CASES:
            assert not case.causal or case.q_len <= case.kv_len, "every query row must see a key"
            q = torch.randn(case.batch, case.q_len, case.q_heads, case.head_dim, generator=gen) * case.q_scale
            k = torch.randn(case.batch, case.kv_len, case.kv_heads, case.head_dim, generator=gen)
            v = torch.randn(case.batch, case.kv_len, case.kv_heads, case.head_dim, generator=gen)
            paths = {n: os.path.join(tmp, f"{n}.npy") for n in ("q", "k", "v", "o", "lse")}
            for name, t in (("q", q), ("k", k), ("v", v)):
                save_npy_f32(paths[name], t)
            o_ref, lse_ref = reference(torch, F, sdpa_kernel, SDPBackend, q.cuda(), k.cuda(), v.cuda(),
                                       case.causal)
            for kernel in args.kernel_list:
                row = {"case": case.name, "shape": asdict(case), "kernel": kernel, "seed": args.seed}
                for n in ("o", "lse"):
                    if os.path.exists(paths[n]):
                        os.remove(paths[n])  # a stale output must not pass for a new one
                cli_args = ["attend", "--q", paths["q"], "--k", paths["k"], "--v", paths["v"],
                            "--out", paths["o"], "--lse", paths["lse"], "--layout", "bshd",
                            "--dtype", "bf16", "--device", "cuda", "--kernel", kernel]
                if case.causal:
                    cli_args.append("--causal")
                rc, out, err = run_cli(cli, cli_args, args.timeout)
                if rc != 0:
                    why = tail(err) or tail(out) or f"exit status {rc}"
                    row.update(status=classify_error(why), error=why, returncode=rc)
                else:
                    row["resolved"] = resolved_kernel(err)
                    try:
                        o = load_npy_f32(torch, paths["o"])
                        lse = load_npy_f32(torch, paths["lse"])
                        want_o = [case.batch, case.q_len, case.q_heads, case.head_dim]
                        want_lse = [case.batch, case.q_heads, case.q_len]
                        if list(o.shape) != want_o or list(lse.shape) != want_lse:
                            raise ValueError(f"o is {list(o.shape)} (want {want_o}), "
                                             f"lse is {list(lse.shape)} (want {want_lse})")
                        row.update(compare(torch, o, lse, o_ref, lse_ref))
                    except (OSError, ValueError) as ex:
                        row.update(status="failed", error=str(ex))
                rows.append(row)
                print_numerics_row(row)
            del o_ref, lse_ref
    return rows


def resolved_kernel(stderr):
    """The kernel `attend` says it ran ("... (kernel v5)" on stderr), or None."""
    m = re.search(r"\(kernel (\w+)\)", stderr)
    return m.group(1) if m else None


# --- output ---------------------------------------------------------------------------


def fmt_tflops(row, with_sol=False):
    """'123.4' (or '123.4 (45%)' with the CLI's % of SOL), else why there is no number."""
    if not row:
        return "-"
    if row.get("status") != "ok":
        return row.get("status", "failed")
    text = f"{row['tflops']:.1f}"
    if with_sol and row.get("sol_pct") is not None:
        text += f" ({row['sol_pct']:.0f}%)"
    return text


def stream_tflops(row):
    """TFLOPS of the calls back to back, where the row has them."""
    return f"{row['tflops_stream']:.1f}" if row and row.get("status") == "ok" and row.get("tflops_stream") else "-"


def best_of(ours):
    ok = [r for r in ours.values() if r.get("status") == "ok" and r.get("tflops")]
    return max(ok, key=lambda r: r["tflops"]) if ok else None


def ratio(a, b, key="tflops"):
    if not a or not b or b.get("status") != "ok" or not b.get(key) or not a.get(key):
        return "-"
    return f"{a[key] / b[key]:.2f}"


def share(row, gemm, key="tflops_stream"):
    """A row's TFLOPS as a share of the same run's GEMM ceiling, back to back on both sides."""
    if not row or not gemm or row.get("status") != "ok" or not row.get(key) or not gemm.get(key):
        return "-"
    return f"{100.0 * row[key] / gemm[key]:.0f}%"


def bench_table(results, kernels, gemm=None):
    with_flex = any("FLEX_ATTENTION" in r["torch"] for r in results)
    head = (["shape", "ours best (kernel)"] + [f"{k} TFLOPS (% SOL)" for k in kernels]
            + ["torch FA2", "cuDNN", "ours/FA2", "ours/cuDNN", "stream: ours", "FA2", "cuDNN", "ours/FA2",
               "ours/cuDNN"] + (["stream: ours / GEMM", "cuDNN / GEMM"] if gemm else [])
            + (["flex", "ours/flex", "stream: flex", "ours/flex"] if with_flex else []))
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = False
    for r in results:
        best = best_of(r["ours"])
        fa2, cudnn = r["torch"].get("FLASH_ATTENTION"), r["torch"].get("CUDNN_ATTENTION")
        best_text = "-"
        if best:
            kernel = best["kernel"]
            if kernel == "auto" and best.get("resolved"):
                kernel += "=" + best["resolved"]
            best_text = f"{best['tflops']:.1f} ({kernel})"
        mark = "*" if any(row.get("note") for row in r["torch"].values()) else ""
        notes = notes or bool(mark)
        cells = ([f"{r['shape']['name']}: {Shape(**r['shape']).label()}", best_text]
                 + [fmt_tflops(r["ours"].get(k), with_sol=True) for k in kernels]
                 + [fmt_tflops(fa2) + mark, fmt_tflops(cudnn) + mark, ratio(best, fa2), ratio(best, cudnn)]
                 + [stream_tflops(best), stream_tflops(fa2), stream_tflops(cudnn),
                    ratio(best, fa2, "tflops_stream"), ratio(best, cudnn, "tflops_stream")]
                 + ([share(best, gemm), share(cudnn, gemm)] if gemm else []))
        if with_flex:
            flex = r["torch"].get("FLEX_ATTENTION")
            cells += [fmt_tflops(flex), ratio(best, flex), stream_tflops(flex), ratio(best, flex, "tflops_stream")]
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += ["", "\\* torch's is_causal is top-left aligned, ours bottom-right: with Lq != Lk "
                  "the two sides do different work, so the ratio is not like for like."]
    return "\n".join(lines)


def numerics_table(rows):
    lines = ["| case | shape | kernel | o err (normalized) | o max abs | lse max abs | result |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        shape = Shape(**r["shape"]).label()
        kernel = r["kernel"] + (f" ({r['resolved']})" if r.get("resolved") and r["resolved"] != r["kernel"] else "")
        if "o_err_normalized" in r:
            errs = [f"{r['o_err_normalized']:.2e}", f"{r['o_err_max_abs']:.2e}", f"{r['lse_err_max_abs']:.2e}"]
        else:
            errs = ["-", "-", "-"]
        result = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('error', '')[:80]}"
        lines.append("| " + " | ".join([r["case"], shape, kernel] + errs + [result.replace("|", "/")]) + " |")
    return "\n".join(lines)


def print_bench_row(shape, torch_rows, ours):
    parts = [f"{b}={fmt_tflops(r)}" for b, r in torch_rows.items()]
    parts += [f"{k}={fmt_tflops(r)}" for k, r in ours.items()]
    print(f"  {shape.label():40s} TFLOPS: " + "  ".join(parts), flush=True)
    for k, r in ours.items():
        if r.get("status") == "failed":
            print(f"    {k} failed: {r.get('error')}", flush=True)


def print_numerics_row(r):
    errs = (f"o {r['o_err_normalized']:.2e} (max {r['o_err_max_abs']:.2e})  lse max {r['lse_err_max_abs']:.2e}"
            if "o_err_normalized" in r else r.get("error", ""))
    print(f"  {r['case']:28s} {r['kernel']:5s} {r['status']:12s} {errs}", flush=True)


def cudnn_version(torch):
    """torch's cuDNN version number as text: 91900 -> '9.19.0' (8902 -> '8.9.2' before cuDNN 9)."""
    v = torch.backends.cudnn.version()
    if not v:
        return None
    major_unit = 10000 if v >= 90000 else 1000
    return f"{v // major_unit}.{v % major_unit // 100}.{v % 100}"


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown-device"


def git_commit():
    # A copy of the tree without its own .git (the GPU machine runs one) may
    # sit inside another checkout: FLASHSCOPE_COMMIT names the real commit.
    if os.environ.get("FLASHSCOPE_COMMIT"):
        return os.environ["FLASHSCOPE_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def result_paths(out_dir, device, quick):
    """bench/results/<device-slug>-<YYYY-MM-DD>[-quick][-N].json and .md; never overwrites."""
    os.makedirs(out_dir, exist_ok=True)
    stem = f"{slug(device)}-{datetime.date.today().isoformat()}" + ("-quick" if quick else "")
    n, candidate = 1, stem
    while os.path.exists(os.path.join(out_dir, candidate + ".json")):
        n += 1
        candidate = f"{stem}-{n}"
    base = os.path.join(out_dir, candidate)
    return base + ".json", base + ".md"


# --- main -------------------------------------------------------------------------------



# --- decode: paged KV (ours) against contiguous KV (PyTorch), same run -------------------

# (B, Hq, Hkv, context, D): the anchors' decode cases.
DECODE_SHAPES = [(1, 32, 8, 4096, 128), (64, 32, 8, 4096, 128), (64, 9, 3, 2048, 64), (8, 32, 8, 32768, 128)]


def decode_bytes(b, hk, ctx, d):
    """K and V bytes each decode step must read once (bf16)."""
    return 2 * b * hk * ctx * d * 2


def bench_decode_torch(torch, F, sdpa_kernel, SDPBackend, shape, args):
    b, hq, hk, ctx, d = shape
    q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, hk, ctx, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, hk, ctx, d, device="cuda", dtype=torch.bfloat16)
    rows = {}
    for name in TORCH_BACKENDS:
        backend = getattr(SDPBackend, name)
        try:
            with sdpa_kernel(backend):
                ms, _ = time_cuda(torch, lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                                  max(args.iters, 100), args.warmup)
            rows[name] = {"us": ms * 1e3, "gbps": decode_bytes(b, hk, ctx, d) / (ms * 1e-3) / 1e9}
        except Exception as ex:  # a backend that refuses the shape is recorded, not fatal
            rows[name] = {"error": str(ex)[:160]}
    del q, k, v
    return rows


def copy_ceiling(torch):
    """Device-to-device copy of 1 GiB, bytes read + written per second (the anchors' ceiling)."""
    x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    ms, _ = time_cuda(torch, lambda: y.copy_(x), 20, 3)
    del x, y
    torch.cuda.empty_cache()
    return 2 * (1 << 30) / (ms * 1e-3) / 1e9


def gemm_ceiling(torch, n=8192):
    """BF16 n³ matmul (cuBLAS through torch.matmul) in TFLOPS: (each call alone, back to back).

    The anchors' practical ceiling of the tensor cores: attention does the same
    multiply-adds plus its softmax, so a kernel's share of this figure says how
    much of what the chip sustains under the same clocks and power it reaches.
    """
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    call = lambda: torch.matmul(a, b, out=c)
    ms, _ = time_cuda(torch, call, 20, 3)
    ms_stream = time_cuda_stream(torch, call)
    del a, b, c
    torch.cuda.empty_cache()
    flops = 2.0 * n ** 3
    return {"n": n, "tflops": round(flops / ms / 1e9, 2), "tflops_stream": round(flops / ms_stream / 1e9, 2)}


def bench_decode_ours(cli, shape, args):
    b, hq, hk, ctx, d = shape
    cmd = ["bench", "decode", "--batch", str(b), "--q-heads", str(hq), "--kv-heads", str(hk), "--context", str(ctx),
           "--head-dim", str(d), "--page-size", str(args.page_size), "--iters", str(max(args.iters, 100)),
           "--warmup", str(args.warmup), "--json"]
    rc, out, err = run_cli(cli, cmd, args.timeout)
    rows = json_lines(out)
    if rc != 0 or not rows:
        return {"status": "failed", "error": tail(err or out)}
    return rows[-1]


def decode_table(rows, copy_gbps):
    out = ["| case | ours µs (splits) | ours GB/s | torch FA2 µs | cuDNN µs | time ours / FA2 | time ours / cuDNN | ours / copy ceiling |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b, hq, hk, ctx, d = r["shape"]
        o, t = r["ours"], r["torch"]
        fa, cu = t.get("FLASH_ATTENTION", {}), t.get("CUDNN_ATTENTION", {})
        if "us" not in o:
            out.append(f"| B{b} {hq}/{hk} ctx {ctx} D{d} | failed: {o.get('error', '')[:60]} | | | | | | |")
            continue
        def rt(x):
            return f"{o['us'] / x['us']:.2f}" if "us" in x else "n/a"
        out.append(f"| B{b} {hq}/{hk} ctx {ctx} D{d} page {o.get('page_size')} | {o['us']:.1f} ({o.get('splits')}) | "
                   f"{o['gbps']:.0f} | {fa.get('us', float('nan')):.1f} | {cu.get('us', float('nan')):.1f} | "
                   f"{rt(fa)} | {rt(cu)} | {o['gbps'] / copy_gbps:.2f} |")
    return "\n".join(out)


def run_decode(torch, F, sdpa_kernel, SDPBackend, cli, args):
    copy_gbps = copy_ceiling(torch)
    print(f"decode timing (device-to-device copy ceiling {copy_gbps:.0f} GB/s):", flush=True)
    rows = []
    for shape in DECODE_SHAPES:
        t = bench_decode_torch(torch, F, sdpa_kernel, SDPBackend, shape, args)
        torch.cuda.empty_cache()
        o = bench_decode_ours(cli, shape, args)
        rows.append({"shape": list(shape), "torch": t, "ours": o})
        print(f"  {shape}: ours {o.get('us', 'failed')} us, torch {t}", flush=True)
    return rows, copy_gbps


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    cli = args.cli
    if not (os.path.isfile(cli) and os.access(cli, os.X_OK)):
        die(f"no executable flashscope-cli at {cli!r}; build it first "
            "(cmake -S . -B build -G Ninja && cmake --build build) or pass --cli PATH")
    torch, F, sdpa_kernel, SDPBackend = import_torch()

    device = torch.cuda.get_device_name(0)
    info = cli_info(cli, args.timeout)
    meta = {
        "command": shlex.join([sys.executable] + sys.argv),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn_version(torch),
        "git_commit": git_commit(),
        "cli": os.path.abspath(cli),
        "cli_info": info,
        "iters": args.iters,
        "warmup": args.warmup,
        "kernels": "all" if args.kernel_all else args.kernel_list,
        "flops": "4*B*Hq*Lq*Lk*D, halved when causal",
        "tolerances": {"o_err_normalized": O_TOL_NORMALIZED, "lse_err_max_abs": LSE_TOL_ABS},
    }
    print(f"device {device}, torch {meta['torch']}, CUDA {meta['cuda']}, cuDNN {meta['cudnn']}, "
          f"commit {meta['git_commit']}; median of {args.iters} runs after {args.warmup} warm-ups", flush=True)

    bench_rows, gemm = [], None
    if args.only in (None, "bench"):
        gemm = gemm_ceiling(torch)
        meta["gemm_ceiling"] = gemm
        print(f"BF16 GEMM {gemm['n']}³ (torch.matmul): {gemm['tflops']:.1f} TFLOPS alone, "
              f"{gemm['tflops_stream']:.1f} back to back", flush=True)
        shapes = list(QUICK_SHAPES if args.quick else ANCHOR_SHAPES)
        if args.gqa:
            shapes.append(GQA_SHAPE)
        shapes += args.shape
        print("prefill timing:", flush=True)
        for shape in shapes:
            torch_rows = bench_torch(torch, F, sdpa_kernel, SDPBackend, shape, args,
                                     info.get("sol_tflops") if info else None)
            torch.cuda.empty_cache()  # torch's tensors are gone: hand their memory back before our CLI runs
            ours = bench_ours(cli, shape, args)
            print_bench_row(shape, torch_rows, ours)
            bench_rows.append({"shape": asdict(shape), "flops": shape.flops(), "torch": torch_rows, "ours": ours})

    decode_rows, copy_gbps = [], None
    if args.only in (None, "decode"):
        decode_rows, copy_gbps = run_decode(torch, F, sdpa_kernel, SDPBackend, cli, args)

    numeric_rows = []
    if args.only in (None, "numerics"):
        print("numerics (bf16 inputs; o: ||o - ref|| / ||ref|| < "
              f"{O_TOL_NORMALIZED}, lse: max abs < {LSE_TOL_ABS}):", flush=True)
        numeric_rows = check_numerics(torch, F, sdpa_kernel, SDPBackend, cli, args)

    numerics_failed = [r for r in numeric_rows if r["status"] == "failed"]
    bench_failed = [(r["shape"]["name"], k) for r in bench_rows for k, o in r["ours"].items()
                    if o.get("status") == "failed"]
    bench_failed += [("decode", tuple(r["shape"])) for r in decode_rows if r["ours"].get("status") == "failed"]
    meta["numerics_pass"] = not numerics_failed if numeric_rows else None
    meta["bench_failures"] = len(bench_failed)

    md = [f"# FlashScope attention vs PyTorch SDPA on {device}", "",
          f"{meta['date']}, torch {meta['torch']} (CUDA {meta['cuda']}, cuDNN {meta['cudnn']}), "
          f"commit {meta['git_commit']}. Median of {args.iters} runs after {args.warmup} warm-ups, "
          "each call alone between two CUDA events (it holds the host's work before the launch: "
          "PyTorch's per call); 'stream': the median of 5 batches of 10 calls back to back, per call "
          "(the kernels' own pace); TFLOPS = 4·B·Hq·Lq·Lk·D / time, halved when causal; % SOL of "
          f"{info.get('sol_tflops') if info else '?'} TFLOPS (flashscope-cli info).", "",
          f"`{meta['command']}`", ""]
    if bench_rows:
        md += ["## Prefill, bf16", ""]
        if gemm:
            md += [f"Ceiling in the same run: BF16 GEMM {gemm['n']}³ through torch.matmul (cuBLAS), "
                   f"{gemm['tflops']:.1f} TFLOPS alone, {gemm['tflops_stream']:.1f} back to back; the last two "
                   "columns give each attention kernel's back-to-back TFLOPS as a share of it.", ""]
        md += [bench_table(bench_rows, args.kernel_list, gemm), ""]
    if decode_rows:
        md += ["## Decode, bf16: paged KV (ours, shuffled pages) vs contiguous KV (PyTorch)", "",
               "Time of one decode step (one new token per sequence); GB/s counts K and V read once; the copy "
               f"ceiling is a 1 GiB device-to-device copy in the same run ({copy_gbps:.0f} GB/s, read + write).", "",
               decode_table(decode_rows, copy_gbps), ""]
    if numeric_rows:
        md += ["## Numerics against SDPA in float32 on bf16-rounded inputs", "",
               f"Pass: o normalized error < {O_TOL_NORMALIZED}, LSE max abs error < {LSE_TOL_ABS}.", "",
               numerics_table(numeric_rows), ""]
    markdown = "\n".join(md)

    json_path, md_path = result_paths(args.out_dir, device, args.quick)
    with open(json_path, "w") as f:
        json.dump({"meta": meta, "prefill": bench_rows, "decode": decode_rows, "copy_gbps": copy_gbps,
                   "numerics": numeric_rows}, f, indent=1)
        f.write("\n")
    with open(md_path, "w") as f:
        f.write(markdown)
    print("\n" + markdown)
    print(f"results: {json_path}\n         {md_path}")

    if numerics_failed:
        print(f"FAILED: {len(numerics_failed)} numerics check(s)", file=sys.stderr)
    if bench_failed:
        print(f"FAILED: {len(bench_failed)} benchmark run(s) of ours: {bench_failed}", file=sys.stderr)
    return 1 if (numerics_failed or bench_failed) else 0


if __name__ == "__main__":
    sys.exit(main())
