#!/usr/bin/env python3
"""Answer quality on a fixed prompt set (bench/answers/prompts.jsonl): FlashScope
and llama.cpp on the same model, chat template, prompts and sampling.

Each prompt is one user turn rendered with the model's own chat template (a
model without one, a base model, in FlashScope's question-and-answer
transcript, with its stop string, for both engines).
FlashScope answers through `flashscope-cli generate --chat` with no sampling
flags, i.e. with its defaults (the model's recommended sampling where it has
one: `flashscope-cli info -m`), once per seed, and once greedy (--temp 0).
The settings FlashScope reports having used (its stats line) are then given
to llama.cpp (llama-cpp-python, libllama) for the same prompt text, which is
rendered from the GGUF's tokenizer.chat_template with jinja2 and checked to
be the same number of tokens as FlashScope's prompt.

Reported per engine and setting:
  loop-free  the share of answers without a degenerate loop. An answer loops
             when (a) some run of 1-10 words repeats back to back at least
             4 times ("au-haut, au-haut, au-haut, au-haut"), or (b) a run of
             1-30 characters holding a letter or digit repeats back to back
             at least 6 times, or (c) it hit the token limit while repeating:
             in its last 64 words, fewer than half of the word 3-grams are
             distinct.
  correct    the share of factual answers that contain an expected answer
             (case-insensitive substring; prompts.jsonl lists the accepted
             spellings).

    /work/peers/venv/bin/python bench/answers/run.py -m assets/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --cli build/cli/flashscope-cli --device cpu --out bench/results/NAME
writes NAME.md (the table) and NAME.jsonl (every answer). --device cuda runs
both engines on the GPU (llama.cpp with every layer offloaded: a CUDA build
of llama-cpp-python).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent

STATS_RE = re.compile(
    r"stop\s+(?P<stop>\w+); seed (?P<seed>\d+); temp (?P<temp>[\d.]+) top-k (?P<top_k>\d+) top-p (?P<top_p>[\d.]+) "
    r"min-p (?P<min_p>[\d.]+) repeat-penalty (?P<repeat_penalty>[\d.]+) last-n (?P<last_n>-?\d+) "
    r"presence (?P<presence>-?[\d.]+) frequency (?P<frequency>-?[\d.]+)")
PROMPT_RE = re.compile(r"prompt\s+(\d+) tokens")
DECODE_RE = re.compile(r"decode\s+(\d+) tokens")


# --- the measures ----------------------------------------------------------------------------

def word_run_loop(words: list[str], max_n: int = 10, repeats: int = 4) -> bool:
    for n in range(1, max_n + 1):
        for start in range(0, len(words) - n * repeats + 1):
            unit = words[start:start + n]
            if all(words[start + k * n:start + (k + 1) * n] == unit for k in range(1, repeats)):
                return True
    return False


CHAR_RUN_RE = re.compile(r"(.{1,30}?)\1{5,}", re.DOTALL)


def char_run_loop(text: str) -> bool:
    return any(re.search(r"[^\W_]", m.group(1)) for m in CHAR_RUN_RE.finditer(text))


def tail_repeats(words: list[str], tail: int = 64) -> bool:
    w = words[-tail:]
    grams = [tuple(w[i:i + 3]) for i in range(len(w) - 2)]
    return len(grams) >= 8 and len(set(grams)) < 0.5 * len(grams)


def words_of(text: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", text.lower())


def degenerate(text: str, hit_limit: bool) -> str:
    """Why the answer is a degenerate loop, or "" when it is not."""
    words = words_of(text)
    if word_run_loop(words):
        return "word run"
    if char_run_loop(text):
        return "character run"
    if hit_limit and tail_repeats(words):
        return "token limit while repeating"
    return ""


def correct(text: str, expect: list[str]) -> bool:
    low = text.lower()
    return any(e.lower() in low for e in expect)


# --- FlashScope ------------------------------------------------------------------------------

def flashscope_answer(args, prompt: str, seed: int | None) -> dict:
    cmd = [args.cli, "generate", "--chat", "-m", args.model, "-p", prompt, "-n", str(args.max_tokens),
           "--device", args.device]
    cmd += ["--temp", "0"] if seed is None else ["--seed", str(seed)]
    cmd += args.flashscope_args
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = STATS_RE.search(out.stderr)
    if not m:
        sys.exit(f"run.py: no stats line from {' '.join(cmd)}:\n{out.stderr}")
    return {
        "text": out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout,
        "hit_limit": m["stop"] == "max_tokens",
        "stop": m["stop"],
        "prompt_tokens": int(PROMPT_RE.search(out.stderr).group(1)),
        "tokens": int(DECODE_RE.search(out.stderr).group(1)),
        "seconds": time.time() - t0,
        "sampling": {k: float(m[k]) for k in ("temp", "top_p", "min_p", "repeat_penalty", "presence", "frequency")}
        | {"top_k": int(m["top_k"]), "last_n": int(m["last_n"])},
    }


# --- llama.cpp -------------------------------------------------------------------------------

class LlamaCpp:
    def __init__(self, args, last_n: int):
        import llama_cpp  # noqa: PLC0415 (the venv of /work/peers, REFERENCE.md)
        self.llm = llama_cpp.Llama(model_path=args.model, n_ctx=2048, n_threads=args.llama_threads,
                                   n_gpu_layers=-1 if args.device == "cuda" else 0, verbose=False,
                                   last_n_tokens_size=last_n if last_n > 0 else 64)
        import jinja2  # noqa: PLC0415
        meta = self.llm.metadata
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, loader=jinja2.BaseLoader())

        def raise_exception(msg):
            raise jinja2.TemplateError(msg)
        env.globals["raise_exception"] = raise_exception
        # No template (a base model such as Gemma-3-270M): the question-and-
        # answer transcript FlashScope's --chat runs such a model in
        # (ChatFormat's kTranscript: BOS text first when the model asks for
        # BOS, "Question: ...\nAnswer:"), ended by the same stop string.
        source = meta.get("tokenizer.chat_template")
        self.template = env.from_string(source) if source else None
        self.stops = [] if source else ["\nQuestion:"]
        self.add_bos = meta.get("tokenizer.ggml.add_bos_token", "false") == "true"
        vocab = self.llm
        self.bos = vocab.detokenize([vocab.token_bos()], special=True).decode() if vocab.token_bos() >= 0 else ""
        self.eos = vocab.detokenize([vocab.token_eos()], special=True).decode() if vocab.token_eos() >= 0 else ""

    def render(self, prompt: str) -> str:
        if self.template is None:
            return (self.bos if self.add_bos else "") + f"Question: {prompt}\nAnswer:"
        return self.template.render(messages=[{"role": "user", "content": prompt}], add_generation_prompt=True,
                                    bos_token=self.bos, eos_token=self.eos)

    def answer(self, args, prompt: str, sampling: dict, seed: int | None) -> dict:
        text = self.render(prompt)
        # The rendered text carries BOS where the model wants one, so the
        # tokens go in as they are (a text prompt would get a second BOS).
        tokens = self.llm.tokenize(text.encode(), add_bos=False, special=True)
        n_prompt = len(tokens)
        t0 = time.time()
        greedy = seed is None
        r = self.llm.create_completion(
            tokens, max_tokens=args.max_tokens, temperature=0.0 if greedy else sampling["temp"],
            top_k=sampling["top_k"], top_p=sampling["top_p"], min_p=sampling["min_p"],
            repeat_penalty=sampling["repeat_penalty"], presence_penalty=sampling["presence"],
            frequency_penalty=sampling["frequency"], seed=0 if greedy else seed, stop=self.stops or None)
        choice = r["choices"][0]
        return {"text": choice["text"], "hit_limit": choice["finish_reason"] == "length",
                "stop": choice["finish_reason"], "prompt_tokens": n_prompt,
                "tokens": r["usage"]["completion_tokens"], "seconds": time.time() - t0}


# --- report ----------------------------------------------------------------------------------

def summarize(rows: list[dict]) -> dict:
    facts = [r for r in rows if r["kind"] == "fact"]
    return {
        "answers": len(rows),
        "loop_free": sum(not r["loop"] for r in rows),
        "facts": len(facts),
        "correct": sum(r["correct"] for r in facts),
        "hit_limit": sum(r["hit_limit"] for r in rows),
        "mean_tokens": sum(r["tokens"] for r in rows) / max(1, len(rows)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--cli", default="build/cli/flashscope-cli")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--prompts", default=str(HERE / "prompts.jsonl"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--llama-threads", type=int, default=1,
                    help="llama.cpp's threads (default 1: its spinning threads crawl on a shared, busy machine)")
    ap.add_argument("--engines", nargs="+", choices=["flashscope", "llamacpp"], default=["flashscope", "llamacpp"])
    ap.add_argument("--flashscope-args", nargs="*", default=[],
                    help="more flags for `generate` (e.g. --dry-multiplier 0: FlashScope without DRY)")
    ap.add_argument("--label", default="flashscope", help="the engine name of FlashScope's rows")
    ap.add_argument("--include", nargs="*", default=[],
                    help="rows of earlier runs (their OUT.jsonl) to report beside this run's")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: the table of the --include rows (with --sampling-note for the header)")
    ap.add_argument("--sampling-note", default="", help="with --report-only: the sampled settings, for the header")
    ap.add_argument("--note", default="", help="a paragraph for the report, after its header")
    ap.add_argument("--out", required=True, help="path without extension: writes OUT.md and OUT.jsonl")
    args = ap.parse_args()

    prompts = [json.loads(line) for line in open(args.prompts) if line.strip()]
    settings = [("default", s) for s in args.seeds] + [("greedy", None)]
    rows: list[dict] = []
    llama = None
    sampling_used = None
    for p in ([] if args.report_only else prompts):
        for name, seed in settings:
            runs = {}
            if "flashscope" in args.engines:
                runs["flashscope"] = flashscope_answer(args, p["prompt"], seed)
                if seed is not None:
                    sampling_used = runs["flashscope"].pop("sampling")
                else:
                    runs["flashscope"].pop("sampling")
            if "llamacpp" in args.engines:
                if sampling_used is None:
                    sampling_used = flashscope_answer(args, p["prompt"], args.seeds[0])["sampling"]
                if llama is None:
                    llama = LlamaCpp(args, sampling_used["last_n"])
                runs["llamacpp"] = llama.answer(args, p["prompt"], sampling_used, seed)
            if len(runs) == 2 and runs["flashscope"]["prompt_tokens"] != runs["llamacpp"]["prompt_tokens"]:
                sys.exit(f"run.py: {p['id']}: the prompt is {runs['flashscope']['prompt_tokens']} tokens in "
                         f"FlashScope and {runs['llamacpp']['prompt_tokens']} in llama.cpp: not the same text")
            for engine, r in runs.items():
                engine = args.label if engine == "flashscope" else engine
                why = degenerate(r["text"], r["hit_limit"])
                row = {"engine": engine, "setting": name, "seed": seed, "id": p["id"], "kind": p["kind"],
                       "loop": why, "correct": p["kind"] == "fact" and correct(r["text"], p["expect"])} | r
                rows.append(row)
                print(f"{engine:10s} {name:7s} {str(seed):4s} {p['id']:18s} tokens {r['tokens']:4d} "
                      f"{'LOOP ' + why if why else 'ok'}{'' if p['kind'] != 'fact' else (' correct' if row['correct'] else ' WRONG')}",
                      flush=True)

    for path in args.include:
        rows += [json.loads(line) for line in open(path) if line.strip()]
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    lines = [f"# Answer quality: {pathlib.Path(args.model).name}, {args.device}",
             "",
             f"{len(prompts)} prompts ({sum(p['kind'] == 'fact' for p in prompts)} factual, "
             f"{sum(p['kind'] == 'instruction' for p in prompts)} instructions) from bench/answers/prompts.jsonl, "
             f"one user turn each in the model's chat template, at most {args.max_tokens} tokens. "
             f"Sampled: FlashScope's defaults for this model ({args.sampling_note or json.dumps(sampling_used)}), seeds "
             f"{', '.join(map(str, args.seeds))}, the same settings given to llama.cpp; greedy: temperature 0. "
             "Loops and correctness as bench/answers/run.py defines them. Machine: "
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores.",
             ""] + ([args.note, ""] if args.note else []) + [
             "| engine | setting | answers | loop-free | correct facts | hit the token limit | mean tokens |",
             "|---|---|---|---|---|---|---|"]
    for engine in engines:
        for name in ("default", "greedy", "all"):
            sel = [r for r in rows if r["engine"] == engine and (name == "all" or r["setting"] == name)]
            if not sel:
                continue
            s = summarize(sel)
            label = {"default": f"sampled ({len(args.seeds)} seeds)", "greedy": "greedy", "all": "**all**"}[name]
            lines.append(f"| {engine} | {label} | {s['answers']} | {s['loop_free']}/{s['answers']} = "
                         f"{100 * s['loop_free'] / s['answers']:.1f}% | {s['correct']}/{s['facts']} = "
                         f"{100 * s['correct'] / max(1, s['facts']):.1f}% | {s['hit_limit']} | {s['mean_tokens']:.0f} |")
    lines += ["", "Answers that loop (their last 160 characters):", ""]
    for r in rows:
        if r["loop"]:
            lines.append(f"- {r['engine']} {r['setting']} seed {r['seed']} `{r['id']}` ({r['loop']}): "
                         f"…{json.dumps(r['text'][-160:], ensure_ascii=False)}")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(line for line in lines if line.startswith("|")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
