#!/usr/bin/env python3
"""FlashScope against llama.cpp on a real model: the same token ids through
both runtimes, every position's top-1 and normalized logit error, then each
prompt's greedy continuation up to the first near-tie.

Ours comes from `flashscope-cli logits` (and `generate --temp 0`); llama.cpp's
from llama-cpp-python over a libllama built from the sdist's vendor tree
(REFERENCE.md, "Peers"): on the CPU with n_gpu_layers=0, on CUDA with every
layer offloaded (a CUDA build of libllama). --llama-device cpu keeps
llama.cpp on the CPU while ours runs on --device cuda: the reference is the
same file's logits either way. Exits 1 when top-1 agreement over
all prompts is below --min-top1 (the #18 bar: 95%).

Where llama-cpp-python is not installed (the GPU machine reaches no
registry), split the run: --save-ours FILE.npz there writes our side (each
prompt's token ids and top-1 ids, the greedy texts: 10 KB where the logits
of a 262,144-token vocabulary would be 240 MB) and stops; --ours-from
FILE.npz here compares it against llama.cpp on this machine (top-1 and
greedy; no normalized error without the logits).

    python3 scripts/compare_llamacpp.py --cli build/cli/flashscope-cli -m M --device cuda --save-ours ours.npz
    python3 scripts/compare_llamacpp.py -m M --device cuda --llama-device cpu --ours-from ours.npz

    python3 scripts/compare_llamacpp.py --cli build/cli/flashscope-cli \
        -m assets/models/gemma-3-270m-q4_k_m.gguf --device cpu
"""
from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

PROMPTS = [
    "Water boils at",
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "In 1969, the first humans to walk on the Moon were",
    "A recipe for pancakes: first, mix",
    "The three primary colors are",
    "Photosynthesis is the process by which plants",
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
    "movable metal type, oil-based ink and a wooden press adapted from those used to make wine. Within fifty "
    "years, presses in more than two hundred European cities had printed millions of books, and",
    "Dear hiring manager,\n\nI am writing to apply for the position of junior software engineer that was "
    "advertised on your website last week. During my studies I built a small compiler, contributed to an "
    "open-source database and",
    "Q: A train leaves the station at 3 pm travelling at 60 km/h. A second train leaves the same station at "
    "4 pm travelling at 90 km/h in the same direction. At what time does the second train catch up?\nA:",
]


def ours(cli: str, model: str, prompt: str, device: str, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([cli, "logits", "-m", model, "-p", prompt, "--device", device, "--out", d,
                        "--chunk", str(chunk)], check=True, stderr=subprocess.DEVNULL)
        return np.load(f"{d}/tokens.npy"), np.load(f"{d}/logits.npy")


def ours_greedy(cli: str, model: str, prompt: str, device: str, n: int) -> str:
    out = subprocess.run([cli, "generate", "-m", model, "-p", prompt, "--device", device, "--temp", "0",
                          "--dry-multiplier", "0",
                          "-n", str(n)], check=True, capture_output=True, text=True)
    return out.stdout.rstrip("\n")


def save_ours(args) -> int:
    saved = {}
    for i, prompt in enumerate(PROMPTS):
        ids, mine = ours(args.cli, args.model, prompt, args.device, args.chunk)
        saved[f"tokens{i}"] = ids
        saved[f"top1_{i}"] = mine.argmax(axis=1).astype(np.int32)
        if i < 3 and args.greedy > 0:
            saved[f"greedy{i}"] = np.array(ours_greedy(args.cli, args.model, prompt, args.device, args.greedy))
    np.savez(args.save_ours, **saved)
    print(f"our side of {len(PROMPTS)} prompts in {args.save_ours}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default="build/cli/flashscope-cli")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where our engine runs")
    ap.add_argument("--llama-device", choices=["cpu", "cuda"], help="where llama.cpp runs (default: --device)")
    ap.add_argument("--chunk", type=int, default=0, help="our forward's tokens per call (1: decode steps)")
    ap.add_argument("--min-top1", type=float, default=0.95)
    ap.add_argument("--greedy", type=int, default=16, help="tokens of greedy continuation to compare")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save-ours", metavar="NPZ", help="write our side only (no llama.cpp) and stop")
    ap.add_argument("--ours-from", metavar="NPZ", help="read our side from a --save-ours file")
    args = ap.parse_args()
    if args.save_ours:
        return save_ours(args)
    saved = np.load(args.ours_from) if args.ours_from else None

    from llama_cpp import Llama

    gpu = (args.llama_device or args.device) == "cuda"
    llm = Llama(model_path=args.model, n_ctx=512, n_batch=512, logits_all=True, verbose=False,
                n_gpu_layers=-1 if gpu else 0, n_threads=args.threads, flash_attn=True)
    agree = total = 0
    print(f"model {pathlib.Path(args.model).name}, ours on {args.device}, llama.cpp (llama-cpp-python) on "
          f"{'cuda' if gpu else 'cpu'}")
    print("| prompt | tokens | top-1 equal | normalized error | first near-tie split |")
    print("|---|---|---|---|---|")
    for i, prompt in enumerate(PROMPTS):
        if saved is not None:
            ids, a, mine = saved[f"tokens{i}"], saved[f"top1_{i}"], None
        else:
            ids, mine = ours(args.cli, args.model, prompt, args.device, args.chunk)
            a = mine.argmax(axis=1)
        llm.reset()
        llm.eval(ids.tolist())
        ref = np.array(llm.scores[: len(ids)], dtype=np.float64)
        b = ref.argmax(axis=1)
        agree += int((a == b).sum())
        total += len(ids)
        err = float(np.linalg.norm(mine - ref) / np.linalg.norm(ref)) if mine is not None else float("nan")
        # Where the two disagree, how close llama.cpp's own top two were.
        gaps = []
        for pos in np.nonzero(a != b)[0]:
            top2 = np.sort(ref[pos])[-2:]
            gaps.append(f"{top2[1] - top2[0]:.3f}")
        print(f"| {prompt[:40]!r} | {len(ids)} | {int((a == b).sum())}/{len(ids)} | {err:.4f} | "
              f"{', '.join(gaps) if gaps else '-'} |")
    share = agree / max(total, 1)
    print(f"\ntop-1 agreement {agree}/{total} = {share:.1%} (bar {args.min_top1:.0%})")

    if args.greedy > 0:
        print("\n| prompt | FlashScope greedy | llama.cpp greedy |")
        print("|---|---|---|")
        for i, prompt in enumerate(PROMPTS[:3]):
            if saved is not None:
                if f"greedy{i}" not in saved:
                    continue
                mine = str(saved[f"greedy{i}"])
            else:
                mine = ours_greedy(args.cli, args.model, prompt, args.device, args.greedy)
            llm.reset()
            theirs = llm.create_completion(prompt, max_tokens=args.greedy, temperature=0.0, top_k=1)["choices"][0]["text"]
            mine_tail = mine[len(prompt):] if mine.startswith(prompt) else mine
            print(f"| {prompt[:30]!r} | {mine_tail!r} | {theirs!r} |")
    return 0 if share >= args.min_top1 else 1


if __name__ == "__main__":
    sys.exit(main())
