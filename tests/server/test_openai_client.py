#!/usr/bin/env python3
"""`flashscope-cli serve` as the official `openai` Python client and curl see it.

Usage: test_openai_client.py FLASHSCOPE_CLI

Starts the server on 127.0.0.1 and a free port with the default model, then:
chat (stream and not), `max_tokens` and finish_reason "length", `stop`,
`seed` (the same seed, the same sampled reply), usage, a completion, the
model list, a 400 as the client raises it, and the raw server-sent events
through curl (`data: {chunk}` ... `data: [DONE]`).

Exits 77 (ctest: skipped) when the `openai` package, curl or the default
model is absent; scripts/test.sh installs the package into a venv.
"""
import json
import os
import subprocess
import sys

SKIP = 77


def skip(why):
    print(f"skipped: {why}")
    sys.exit(SKIP)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    cli = sys.argv[1]
    try:
        import openai
    except ImportError:
        skip("the `openai` Python package is not installed (pip install openai; scripts/test.sh does)")
    model_path = os.path.join("assets", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model_path):
        skip("the default model is absent (scripts/fetch_model.sh)")
    if subprocess.run(["sh", "-c", "command -v curl"], capture_output=True).returncode != 0:
        skip("curl is not installed")

    server = subprocess.Popen(
        [cli, "serve", "-m", model_path, "--port", "0", "--parallel", "2", "--ctx", "512", "--device", "cpu",
         "--api-key", "test-key", "--model-id", "smollm2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port_line = server.stdout.readline().strip()
        if not port_line.isdigit():
            print("the server did not start:", port_line, server.stderr.read())
            return 1
        base = f"http://127.0.0.1:{port_line}/v1"
        client = openai.OpenAI(base_url=base, api_key="test-key", timeout=120, max_retries=0)
        failures = run_checks(openai, client, base)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    if server.returncode != 0:
        failures.append(f"the server exited with {server.returncode} on SIGTERM")
    for f in failures:
        print("FAILED:", f)
    print(f"{'ok' if not failures else 'failed'}: openai {openai.__version__} against flashscope-cli serve")
    return 1 if failures else 0


def run_checks(openai, client, base):
    failures = []

    def check(cond, what):
        print(("ok:     " if cond else "FAILED: ") + what)
        if not cond:
            failures.append(what)

    msgs = [{"role": "user", "content": "What is the capital of France?"}]

    models = client.models.list()
    check([m.id for m in models.data] == ["smollm2"], "models.list names the model")

    r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=8, temperature=0)
    text = r.choices[0].message.content
    check(r.object == "chat.completion" and r.choices[0].message.role == "assistant", "a chat completion")
    check(r.usage.completion_tokens == 8 and r.choices[0].finish_reason == "length",
          f"max_tokens=8: 8 tokens, finish_reason length ({r.usage.completion_tokens}, {r.choices[0].finish_reason})")
    check(r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + 8, "usage adds up")

    stream = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=8, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    parts, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                parts.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    check("".join(parts) == text, f"the stream's text is the same greedy reply ({''.join(parts)!r} vs {text!r})")
    check(finish == "length" and usage is not None and usage.completion_tokens == 8, "the stream's finish and usage")

    # A stop string: the reply ends before it.
    words = text.split(" ")
    if len(words) > 2:
        stop = " " + words[2]
        r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=8, temperature=0, stop=[stop])
        want = text[: text.index(stop)]
        check(r.choices[0].message.content == want and r.choices[0].finish_reason == "stop",
              f"stop={stop!r} cuts the reply to {want!r} ({r.choices[0].message.content!r})")

    # The same seed, the same sampled reply; another seed is allowed to differ.
    kw = dict(model="smollm2", messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=16,
              temperature=1.0, top_p=0.95)
    a = client.chat.completions.create(seed=42, **kw).choices[0].message.content
    b = client.chat.completions.create(seed=42, **kw).choices[0].message.content
    check(a == b and len(a) > 0, "seed=42 twice: the same sampled reply")

    c = client.completions.create(model="smollm2", prompt="The sky is", max_tokens=5, temperature=0)
    check(c.object == "text_completion" and c.usage.completion_tokens == 5 and len(c.choices[0].text) > 0,
          "a completion")

    try:
        client.chat.completions.create(model="smollm2", messages=[{"role": "wizard", "content": "hi"}])
        check(False, "an unknown role is refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "messages[0].role" in str(e), f"an unknown role: 400 naming the field ({e})")

    bad = openai.OpenAI(base_url=base, api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        check(False, "a wrong API key is refused")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, "a wrong API key: 401")

    # The raw events, as curl sees them.
    body = json.dumps({"messages": msgs, "max_tokens": 4, "temperature": 0, "stream": True})
    out = subprocess.run(["curl", "-sN", "-H", "Authorization: Bearer test-key", "-H",
                          "Content-Type: application/json", "-d", body, base + "/chat/completions"],
                         capture_output=True, text=True, timeout=120)
    events = [e for e in out.stdout.split("\n\n") if e.strip()]
    check(len(events) >= 3 and all(e.startswith("data: ") for e in events), "curl: every event is 'data: ...'")
    check(events[-1] == "data: [DONE]", "curl: the stream ends with data: [DONE]")
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    check(all(c["object"] == "chat.completion.chunk" for c in chunks), "curl: chunks are chat.completion.chunk")
    check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "curl: the first delta names the role")
    check(chunks[-1]["choices"][0]["finish_reason"] == "length", "curl: the last chunk has the finish_reason")
    return failures


if __name__ == "__main__":
    sys.exit(main())
