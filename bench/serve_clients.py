#!/usr/bin/env python3
"""N concurrent streaming clients against `flashscope-cli serve`: aggregate
tokens/s and time to first token (p50/p99), beside `bench e2e` in the same run.

  python3 bench/serve_clients.py --cli build/cli/flashscope-cli --clients 64 --device cuda
  python3 bench/serve_clients.py --cli build/cli/flashscope-cli --clients 4 --device cpu   # the 2-core CPU machine
  python3 bench/serve_clients.py --url http://127.0.0.1:8080/v1 --clients 16             # a server already running

With --cli the script starts the server (--parallel = --clients, on a free
port), and first runs `flashscope-cli bench e2e --batch N` with the same
prompt and generation lengths for the engine's own batched decode rate;
the server's aggregate decode tokens/s is then reported as a fraction of it.
Each client sends its request at the same moment: a completion of
--prompt-len random token ids, --gen-len tokens (ignore_eos, so every
stream is that long), streamed. Reported:

  aggregate tokens/s   all generated tokens / (last stream's end - first request)
  decode tokens/s      all tokens after each stream's first / the decode span
  TTFT p50 / p99       from sending the request to its first token
The clients run in several processes (--procs, threads within each): one
Python process parsing 64 streams of server-sent events tops out near
20k events/s under the GIL, below what the server sends, and would measure
itself. The processes share one start barrier; time.perf_counter is the
system-wide monotonic clock on Linux, so their timestamps compare.
Standard library only (http.client, threads, multiprocessing).
"""
import argparse
import http.client
import json
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse


def percentile(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_client(url, prompt_ids, gen_len, api_key, start_barrier, out, i):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"prompt": prompt_ids, "max_tokens": gen_len, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}})
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    start_barrier.wait()
    t0 = time.perf_counter()
    conn.request("POST", u.path.rstrip("/") + "/completions", body=body, headers=headers)
    resp = conn.getresponse()
    if resp.status != 200:
        out[i] = {"error": f"HTTP {resp.status}: {resp.read()[:200]!r}"}
        return
    first, tokens, buf, stamps = None, 0, b"", []
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            payload = event[len(b"data: "):]
            if payload == b"[DONE]":
                continue
            j = json.loads(payload)
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
            if j["choices"] and j["choices"][0].get("text"):
                now = time.perf_counter()
                if first is None:
                    first = now
                stamps.append(now)
    end = time.perf_counter()
    out[i] = {"t0": t0, "first": first if first is not None else end, "end": end, "tokens": tokens, "stamps": stamps}


def client_group(url, jobs, gen_len, api_key, barrier, results):
    """One process: its share of the clients, a thread each; (index, record) pairs go back on `results`."""
    out = {}
    threads = [threading.Thread(target=one_client, args=(url, prompt, gen_len, api_key, barrier, out, i))
               for i, prompt in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put(list(out.items()))


def run_clients(url, n, prompt_len, gen_len, vocab_hi, api_key, procs):
    rng = random.Random(0)
    prompts = [[rng.randrange(100, vocab_hi) for _ in range(prompt_len)] for _ in range(n)]
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    groups = [[(i, prompts[i]) for i in range(g, n, procs)] for g in range(procs)]
    workers = [ctx.Process(target=client_group, args=(url, jobs, gen_len, api_key, barrier, results))
               for jobs in groups if jobs]
    for w in workers:
        w.start()
    out = [None] * n
    for _ in workers:
        for i, record in results.get():
            out[i] = record
    for w in workers:
        w.join()
    errors = [o["error"] for o in out if o is None or "error" in o]
    if errors:
        sys.exit(f"{len(errors)} clients failed, e.g. {errors[0]}")
    t_start = min(o["t0"] for o in out)
    t_end = max(o["end"] for o in out)
    total = sum(o["tokens"] for o in out)
    decode_tokens = sum(max(o["tokens"] - 1, 0) for o in out)
    decode_span = t_end - min(o["first"] for o in out)
    ttft = [o["first"] - o["t0"] for o in out]
    # Steady state: from the moment the last stream started to the moment the
    # first one ended every client is decoding, as in bench e2e's decode
    # phase; the text events in that window over its length.
    w0, w1 = max(o["first"] for o in out), min(o["end"] for o in out)
    in_window = sum(sum(1 for t in o["stamps"] if w0 < t <= w1) for o in out)
    steady = in_window / (w1 - w0) if w1 - w0 > 0.02 else float("nan")
    return {"clients": n, "tokens": total, "aggregate_tokens_per_s": total / (t_end - t_start),
            "decode_tokens_per_s": decode_tokens / decode_span if decode_span > 0 else float("nan"),
            "steady_decode_tokens_per_s": steady, "steady_window_s": max(w1 - w0, 0.0),
            "ttft_p50_ms": 1000 * percentile(ttft, 50), "ttft_p99_ms": 1000 * percentile(ttft, 99),
            "wall_s": t_end - t_start}


def bench_e2e(cli, model, device, batch, prompt_len, gen_len):
    cmd = [cli, "bench", "e2e", "--device", device, "--batch", str(batch), "--prompt-len", str(prompt_len),
           "--gen-len", str(gen_len), "--json"]
    if model:
        cmd += ["-m", model]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print("bench e2e failed:", out.stderr.strip(), file=sys.stderr)
        return None
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    return lines[-1] if lines else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", help="flashscope-cli: start `serve` (and run `bench e2e`) from it")
    ap.add_argument("--url", help="a running server's base URL, e.g. http://127.0.0.1:8080/v1")
    ap.add_argument("-m", "--model", help="GGUF model (default: the CLI's default model)")
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds after a warm-up; medians reported")
    ap.add_argument("--api-key")
    ap.add_argument("--procs", type=int, default=0,
                    help="client processes (default: half the cores, at most --clients)")
    ap.add_argument("--no-e2e", action="store_true", help="skip the bench e2e reference")
    args = ap.parse_args()
    if not args.cli and not args.url:
        ap.error("give --cli (start a server) or --url (use a running one)")

    reference = None
    if args.cli and not args.no_e2e:
        reference = bench_e2e(args.cli, args.model, args.device, args.clients, args.prompt_len, args.gen_len)
        if reference:
            print("bench e2e:", json.dumps(reference))

    server = None
    url = args.url
    if args.cli:
        cmd = [args.cli, "serve", "--port", "0", "--device", args.device, "--parallel", str(args.clients),
               "--queue", str(args.clients), "--ctx", str(args.prompt_len + args.gen_len + 8)]
        if args.model:
            cmd += ["-m", args.model]
        server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        port = server.stdout.readline().strip()
        if not port.isdigit():
            sys.exit("the server did not start")
        url = f"http://127.0.0.1:{port}/v1"
    procs = args.procs or max(1, min(args.clients, (os.cpu_count() or 2) // 2))
    try:
        run_clients(url, args.clients, args.prompt_len, min(args.gen_len, 8), 10000, args.api_key, procs)  # warm-up
        rounds = [run_clients(url, args.clients, args.prompt_len, args.gen_len, 10000, args.api_key, procs)
                  for _ in range(args.rounds)]
    finally:
        if server:
            server.terminate()
            server.wait(timeout=60)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0] if k != "clients"}
    med["clients"] = args.clients
    med["device"] = args.device
    med["prompt_len"] = args.prompt_len
    med["gen_len"] = args.gen_len
    med["client_processes"] = procs
    if reference:
        for key in ("decode_tokens_per_s", "decode_tok_s", "decode_tokens_s"):
            if key in reference:
                med["e2e_decode_tokens_per_s"] = reference[key]
                med["serve_vs_e2e"] = med["decode_tokens_per_s"] / reference[key]
                med["steady_vs_e2e"] = med["steady_decode_tokens_per_s"] / reference[key]
                break
    print(json.dumps(med))
    print(f"{args.clients} clients: {med['aggregate_tokens_per_s']:.0f} tokens/s aggregate, "
          f"{med['decode_tokens_per_s']:.0f} decode tokens/s, TTFT p50 {med['ttft_p50_ms']:.0f} ms, "
          f"p99 {med['ttft_p99_ms']:.0f} ms" +
          (f"; {100 * med['serve_vs_e2e']:.0f}% of bench e2e's decode rate" if "serve_vs_e2e" in med else "") +
          f"; all streams decoding ({1000 * med['steady_window_s']:.0f} ms): {med['steady_decode_tokens_per_s']:.0f} tokens/s" +
          (f" = {100 * med['steady_vs_e2e']:.0f}% of bench e2e's" if "steady_vs_e2e" in med else ""))


if __name__ == "__main__":
    main()
