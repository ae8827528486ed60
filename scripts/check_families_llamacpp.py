#!/usr/bin/env python3
"""llama.cpp reads the family fixtures (tests/data/families/*.gguf) the way
transformers computed them: proof that our converter writes real GGUFs (Q/K
permutation for llama, Gemma's norm + 1, key names), not only files our own
loader reads. Prints, per file, llama.cpp's normalized error and top-1
agreement against transformers' logits (F.logits.npy), the measures
tests/test_model_families.cpp holds FlashScope to; exits 1 when a file's
error exceeds that test's bound for its type.

Needs llama-cpp-python (REFERENCE.md: "Peers"): installed, or its sdist's
Python package over a libllama built from the sdist's vendor/llama.cpp
(the package's own LLAMA_CPP_LIB_PATH), plus the pure-Python diskcache:
    PYTHONPATH=<sdist>:<diskcache dir> LLAMA_CPP_LIB_PATH=<build>/bin \
        /work/peers/venv/bin/python scripts/check_families_llamacpp.py

llama.cpp 0c1e570 (llama-cpp-python 0.3.36's vendor tree), 2 threads:
    bf16: llama3 0.0041, qwen2 0.0033, qwen3 0.0039, gemma3 0.0029, phi3 0.0043; top-1 223-224/224
    q8_0: llama3 0.022,  qwen2 0.017,  qwen3 0.021,  gemma3 0.016,  phi3 0.024;  top-1 216-223/224
(FlashScope's CPU backend, same files: bf16 0.0020-0.0028, q8_0 0.017-0.024.)
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

DIR = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "families"
# The CPU bounds of tests/test_model_families.cpp (normalized error).
BOUNDS = {"bf16": 0.008, "q8_0": 0.045}


def main() -> int:
    from llama_cpp import Llama

    worst = 0
    for family in ("llama3", "qwen2", "qwen3", "gemma3", "phi3"):
        tokens = np.load(DIR / f"{family}.tokens.npy").astype(int).tolist()
        ref = np.load(DIR / f"{family}.logits.npy").astype(np.float64)
        for wtype, bound in BOUNDS.items():
            llm = Llama(model_path=str(DIR / f"{family}.{wtype}.gguf"), n_ctx=len(tokens), n_batch=len(tokens),
                        logits_all=True, verbose=False, n_threads=2)
            llm.eval(tokens)
            ours = np.array(llm.scores[: len(tokens)], dtype=np.float64)
            err = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
            top1 = int((ours.argmax(1) == ref.argmax(1)).sum())
            ok = err <= bound
            worst |= not ok
            print(f"{family} {wtype}: llama.cpp vs transformers normalized error {err:.5f} (bound {bound}), "
                  f"top-1 {top1}/{len(tokens)}{'' if ok else '  FAIL'}")
            del llm
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
