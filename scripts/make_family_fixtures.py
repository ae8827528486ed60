#!/usr/bin/env python3
"""Small random-weight models of each supported family, as GGUF, with
transformers' float32 logits on fixed token ids: the fixtures of
tests/test_model_families.cpp (tests/data/families/).

Pinned versions (the fixtures were made with exactly these; others may
initialise the random weights differently, which changes the fixtures but
not what they prove):
    torch==2.15.0  transformers==5.23.0  gguf==0.19.0  numpy==2.4.6

Run with the peers' venv:  /work/peers/venv/bin/python scripts/make_family_fixtures.py

What it writes, per family F (llama3, qwen2, qwen3, gemma3, phi3):
    F.bf16.gguf   every matrix in BF16 (norms and biases F32)
    F.q8_0.gguf   every matrix in Q8_0 (the gguf package's quantizer; it has none for Q4_K)
    F.logits.npy  float16 [positions, vocab]: transformers' logits for F.tokens.npy
    F.tokens.npy  int32 [positions]: the token ids (fixed; fed to the model directly)

The weights are rounded to bf16 before transformers runs, so the BF16 file
holds exactly the weights the reference used: what the BF16 comparison
measures is the engine, not the file. The Q8_0 file adds Q8_0's rounding.

The converter is ours, following llama.cpp's convert_hf_to_gguf.py (its
conventions decide what a GGUF means; no code is taken from it):
  * tensor names: token_embd, blk.N.attn_norm / attn_q / attn_k / attn_v /
    attn_output / ffn_norm / ffn_gate / ffn_up / ffn_down, output_norm,
    output (absent when tied); qwen2 attn_q/k/v.bias; qwen3 and gemma3
    attn_q_norm / attn_k_norm; gemma3 post_attention_norm, post_ffw_norm;
    phi3 attn_qkv and ffn_up [2·ffn] as HF fuses them.
  * llama: Q and K rows permuted per head so that HF's rotate-half pairs
    (i, i + d/2) become adjacent (2i, 2i + 1); Llama 3 rope scaling becomes a
    rope_freqs.weight tensor of per-frequency divisors.
  * gemma3: Gemma's RMSNorm multiplies by (1 + w); the converter stores
    w + 1 for every *norm.weight, so readers apply a plain RMSNorm.
"""
from __future__ import annotations

import math
import pathlib
import sys

import numpy as np

import gguf

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "families"

VOCAB = 128
POSITIONS = 224  # > 200, and more than the engine's 128-token chunk
CONTEXT = 512
SEED = 1234


# --- the vocabulary: a tiny gpt2-style byte-level BPE ------------------------------

def vocabulary(family: str) -> tuple[list[str], list[int], list[str]]:
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [3, 3, 3]
    for c in range(33, 127):
        tokens.append(chr(c))
        types.append(1)
    tokens += ["\u0120", "\u010a"]  # GPT-2's spellings of space and newline
    types += [1, 1]
    merges = ["t h", "\u0120 t", "e r", "i n", "\u0120 a"]
    for m in merges:
        tokens.append(m.replace(" ", ""))
        types.append(1)
    i = 0
    while len(tokens) < VOCAB:
        tokens.append(f"<filler{i}>")
        types.append(1)
        i += 1
    return tokens, types, merges


# --- the families -------------------------------------------------------------------

def family_configs():
    import transformers as tf

    common = dict(vocab_size=VOCAB, max_position_embeddings=CONTEXT, rms_norm_eps=1e-6,
                  attention_dropout=0.0)
    return {
        # Llama 3: GQA 2:1, rope scaling "llama3" whose factors vary over the
        # frequencies of head_dim 64 (wavelengths from 6 to ~50k; the old
        # context 64 puts the band edges at 16 and 64), untied head.
        "llama3": tf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                                 tie_word_embeddings=False,
                                 rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                                      low_freq_factor=1.0, high_freq_factor=4.0,
                                                      original_max_position_embeddings=64),
                                 hidden_act="silu", **common),
        # Qwen2.5: Q/K/V biases, NeoX RoPE, GQA 2:1, tied.
        "qwen2": tf.Qwen2Config(hidden_size=128, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=2, num_key_value_heads=1,
                                rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
                                tie_word_embeddings=True, use_sliding_window=False, hidden_act="silu", **common),
        # Qwen3: QK-norm, head_dim 64 with hidden 64 and 2 heads (Q 128 wide), untied.
        "qwen3": tf.Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                                rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
                                tie_word_embeddings=False, use_sliding_window=False, hidden_act="silu", **common),
        # Gemma 3: six layers (five sliding, window 16, then one global),
        # head_dim 256 with one KV head, local RoPE base 10000, global 1e6,
        # query_pre_attn_scalar = head_dim (as in the released models; llama.cpp
        # takes the scale as 1/sqrt(head_dim)), tied.
        "gemma3": tf.Gemma3TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                                      num_attention_heads=1, num_key_value_heads=1, head_dim=256,
                                      query_pre_attn_scalar=256, sliding_window=16,
                                      layer_types=["sliding_attention"] * 5 + ["full_attention"],
                                      rope_parameters={
                                          "full_attention": dict(rope_type="default", rope_theta=1000000.0),
                                          "sliding_attention": dict(rope_type="default", rope_theta=10000.0)},
                                      final_logit_softcapping=None, attn_logit_softcapping=None,
                                      tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
                                      **common),
        # Phi-3: fused QKV and gate-up, head_dim 96 (Phi-3-mini's) with one
        # KV head, NeoX RoPE, untied. No sliding window (llama.cpp ignores
        # Phi-3's; the reference must not use one either).
        "phi3": tf.Phi3Config(hidden_size=96, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=1, num_key_value_heads=1,
                              rope_parameters=dict(rope_type="default", rope_theta=10000.0),
                              original_max_position_embeddings=CONTEXT, sliding_window=None,
                              tie_word_embeddings=False, hidden_act="silu", resid_pdrop=0.0, embd_pdrop=0.0,
                              pad_token_id=0, bos_token_id=0, eos_token_id=0,
                              **common),
    }


def randomize(model, family: str, gen) -> None:
    """Weights big enough that logits are not near-uniform (HF's init, std
    0.02, would make top-1 a coin toss), rounded to bf16."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                # Gemma stores w and multiplies by (1 + w): small w; others multiply by w.
                base = 0.0 if family == "gemma3" else 1.0
                v = base + 0.2 * torch.randn(p.shape, generator=gen)
            elif name.endswith(".bias"):
                v = 0.5 * torch.randn(p.shape, generator=gen)
            elif "embed_tokens" in name or "lm_head" in name:
                # Logits of std ~4 over normed x (tied or not): top-1 is then
                # mostly clear of near-ties without being one-hot.
                v = 4.0 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=gen)
            else:
                v = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1])
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


# --- the converter ------------------------------------------------------------------

def permute_llama(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotate-half rows (i, i + d/2) of each head → adjacent rows (2i, 2i + 1)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg) -> np.ndarray:
    rs = cfg.rope_parameters
    dim = cfg.head_dim
    base = rs["rope_theta"]
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_ctx = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_ctx / lo, old_ctx / hi
    out = []
    for i in range(0, dim, 2):
        freq = 1.0 / (base ** (i / dim))
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


HF_TO_GGUF = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",  # llama/qwen: the pre-FFN norm
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.qkv_proj.weight": "attn_qkv.weight",  # phi3
    "mlp.gate_up_proj.weight": "ffn_up.weight",      # phi3: gate rows, then up rows
}
GEMMA3_NORMS = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}


def gguf_tensors(model, family: str):
    """(name, float32 array) in the order llama.cpp's converter writes them."""
    cfg = model.config
    sd = {k: v.detach().to("cpu").float().numpy() for k, v in model.state_dict().items()}
    out = []
    if family == "llama3":
        out.append(("rope_freqs.weight", llama3_rope_factors(cfg)))
    out.append(("token_embd.weight", sd["model.embed_tokens.weight"]))
    for l in range(cfg.num_hidden_layers):
        pre = f"model.layers.{l}."
        for key in sorted(k[len(pre):] for k in sd if k.startswith(pre)):
            w = sd[pre + key]
            if family == "gemma3" and key in GEMMA3_NORMS:
                name = GEMMA3_NORMS[key]
            else:
                name = HF_TO_GGUF[key]
            if family == "gemma3" and name.endswith("norm.weight"):
                w = w + 1.0
            if family == "llama3" and name == "attn_q.weight":
                w = permute_llama(w, cfg.num_attention_heads)
            if family == "llama3" and name == "attn_k.weight":
                w = permute_llama(w, cfg.num_key_value_heads)
            out.append((f"blk.{l}.{name}", w))
    norm = sd["model.norm.weight"]
    out.append(("output_norm.weight", norm + 1.0 if family == "gemma3" else norm))
    if not cfg.tie_word_embeddings:
        out.append(("output.weight", sd["lm_head.weight"]))
    return out


def write_gguf(path: pathlib.Path, model, family: str, matrix_type) -> None:
    cfg = model.config
    arch = {"llama3": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3", "phi3": "phi3"}[family]
    w = gguf.GGUFWriter(str(path), arch)
    # llama.cpp sets token attributes by general.name, and a name with "phi3"
    # in it makes it look up Phi-3's SentencePiece tokens (<s>, </s>), which
    # this byte-level vocabulary has not.
    w.add_name("flashscope-phi-fixture" if family == "phi3" else f"flashscope-{family}-fixture")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    rp = cfg.rope_parameters
    w.add_rope_freq_base((rp["full_attention"] if family == "gemma3" else rp)["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    if family == "gemma3":
        w.add_sliding_window(cfg.sliding_window)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if matrix_type == gguf.GGMLQuantizationType.BF16
                    else gguf.LlamaFileType.MOSTLY_Q8_0)
    tokens, types, merges = vocabulary(family)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)
    for name, t in gguf_tensors(model, family):
        t = np.ascontiguousarray(t, dtype=np.float32)
        if t.ndim == 2 and name != "rope_freqs.weight":
            q = gguf.quants.quantize(t, matrix_type)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=matrix_type)
        else:
            w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# --- the reference ------------------------------------------------------------------

def main() -> int:
    import torch
    import transformers as tf

    torch.manual_seed(SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for family, cfg in family_configs().items():
        cfg._attn_implementation = "eager"
        gen = torch.Generator().manual_seed(SEED + sum(map(ord, family)))
        model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        model.eval()
        randomize(model, family, gen)
        # Ids past the special tokens; fixed per family.
        ids = rng.integers(3, VOCAB, size=POSITIONS).astype(np.int32)
        with torch.no_grad():
            logits = model(torch.from_numpy(ids.astype(np.int64))[None]).logits[0].float().numpy()
        np.save(OUT / f"{family}.tokens.npy", ids)
        np.save(OUT / f"{family}.logits.npy", logits.astype(np.float16))
        write_gguf(OUT / f"{family}.bf16.gguf", model, family, gguf.GGMLQuantizationType.BF16)
        write_gguf(OUT / f"{family}.q8_0.gguf", model, family, gguf.GGMLQuantizationType.Q8_0)
        top = np.sort(logits, axis=1)
        print(f"{family}: logits std {logits.std():.2f}, median top-1 margin "
              f"{np.median(top[:, -1] - top[:, -2]):.3f}, min {np.min(top[:, -1] - top[:, -2]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
