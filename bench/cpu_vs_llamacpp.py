#!/usr/bin/env python3
"""FlashScope's CPU engine beside llama.cpp's llama-bench, same machine, same
threads, interleaved rounds (issue #25).

Per round, in this order: llama-bench with flash attention off, llama-bench
with it on, then `flashscope-cli bench e2e --device cpu`, each measuring

  prompt 512       prompt tokens/s of a 512-token prompt (llama-bench -p 512 -n 0)
  decode @ N       decode tokens/s of --gen tokens after N context tokens
                   (llama-bench -p 0 -n GEN -d N; ours --prompt-len N --gen-len GEN)

With --kv-type q8_0 or q4_0 (ours), llama-bench also runs with its own cache
of that type (-fa 1 -ctk T -ctv T), so the same cache type is beside ours.

Medians over the rounds go into a markdown table with the ratio ours / the
best of llama.cpp's figures and the issue's targets, written to
bench/results/cpu-<host>-<date>-vs-llamacpp.md (-2, -3 ... after an earlier run that day) with every round's raw
numbers and how busy the machine was (on a shared machine that decides more
than the code: read those columns first).

Quiet. The load average cannot say whether others are running: it decays
over a minute, so right after a round it still holds that round's own
threads. Instead the script counts other programs' CPU time from
/proc/stat: before a round it samples a few idle seconds (it runs nothing
then, so every busy jiffy is someone else's) and waits, up to --wait-quiet
seconds, until those use at most --quiet of the machine; during a round it
takes the machine's busy time less its own children's CPU time. A round in
which others used more than --quiet of the machine is marked loaded.

llama.cpp: the source vendored in PyPI's llama-cpp-python 0.3.36 sdist
(pip download --no-binary), built once with its default native CPU build
(GGML_NATIVE, OpenMP) into ~/.cache/flashscope-peers/; FLASHSCOPE_LLAMA_BUILD
(or --llama-build) names an existing build directory instead (the one holding
bin/llama-bench).

  python3 bench/cpu_vs_llamacpp.py                      # 3 rounds, threads as `info` says
  FLASHSCOPE_LLAMA_BUILD=/work/peers/llama-build python3 bench/cpu_vs_llamacpp.py --rounds 5 -t 2
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SDIST_VERSION = "0.3.36"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "flashscope-peers"
DEFAULT_MODEL = ROOT / "assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cpu_jiffies():
    """(busy, total) jiffies of the whole machine since boot (/proc/stat), or None."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    total = sum(f)
    return total - f[3] - f[4], total  # idle and iowait are not busy


def others_idle_share(seconds):
    """Share of the machine's CPU time others used over `seconds` of our idling (0..1; nan if unknown)."""
    a = cpu_jiffies()
    time.sleep(seconds)
    b = cpu_jiffies()
    if a is None or b is None or b[1] <= a[1]:
        return float("nan")
    return (b[0] - a[0]) / (b[1] - a[1])


def wait_quiet(quiet, max_wait, sample=3.0):
    """Waits until others use at most `quiet` of the machine (or max_wait s pass): (share, seconds waited)."""
    start = time.monotonic()
    share = others_idle_share(sample)
    while share > quiet and time.monotonic() - start < max_wait:
        log(f"  others use {share:.0%} of the machine; waiting for <= {quiet:.0%}")
        share = others_idle_share(sample)
    return share, time.monotonic() - start


class OthersMeter:
    """Other programs' share of the machine's CPU time while our benchmarks run: busy jiffies less the CPU
    time of our finished children (each benchmark is a child that has exited when stop() is called)."""

    def __init__(self):
        self.j0 = cpu_jiffies()
        self.c0 = os.times()
        self.t0 = time.monotonic()

    def stop(self):
        j1, c1, wall = cpu_jiffies(), os.times(), time.monotonic() - self.t0
        if self.j0 is None or j1 is None or j1[1] <= self.j0[1]:
            return float("nan")
        hz = os.sysconf("SC_CLK_TCK")
        ours = (c1.children_user - self.c0.children_user + c1.children_system - self.c0.children_system
                + c1.user - self.c0.user + c1.system - self.c0.system)
        busy = (j1[0] - self.j0[0]) / hz
        cpus = os.cpu_count() or 1
        return max(0.0, busy - ours) / (wall * cpus)


def loadavg():
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def build_llamacpp(jobs):
    """llama-bench from the sdist's vendored llama.cpp, built once under CACHE."""
    src_root = CACHE / f"llama_cpp_python-{SDIST_VERSION}"
    build = CACHE / f"llama.cpp-{SDIST_VERSION}-build"
    bench = build / "bin/llama-bench"
    if bench.exists():
        return build
    CACHE.mkdir(parents=True, exist_ok=True)
    if not (src_root / "vendor/llama.cpp/CMakeLists.txt").exists():
        dl = CACHE / "sdist"
        dl.mkdir(exist_ok=True)
        tgz = dl / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
        if not tgz.exists():
            log(f"downloading the llama-cpp-python {SDIST_VERSION} sdist into {dl}")
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                            f"llama-cpp-python=={SDIST_VERSION}", "-d", str(dl)], check=True)
        with tarfile.open(tgz) as t:
            t.extractall(CACHE, filter="data") if hasattr(tarfile, "data_filter") else t.extractall(CACHE)
    log(f"building llama-bench into {build} (once)")
    subprocess.run(["cmake", "-S", str(src_root / "vendor/llama.cpp"), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                    "-DGGML_NATIVE=ON", "-DGGML_CUDA=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_TOOLS=ON"]
                   + (["-G", "Ninja"] if shutil.which("ninja") else []), check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-bench", "-j", str(jobs)], check=True)
    return build


def llama_env(build):
    env = dict(os.environ)
    libs = [str(build / "bin"), str(build / "lib")]
    env["LD_LIBRARY_PATH"] = ":".join(libs + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
    return env


def run_llama(build, model, threads, fa, prompt, gen, depths, cache_type=None):
    """{test: tok/s} of one llama-bench pass per kind (prompt at depth 0; decode at each depth); cache_type:
    its K and V cache in that type (-ctk/-ctv, which llama.cpp runs with flash attention only)."""
    bench = str(build / "bin/llama-bench")
    out = {}
    calls = [["-p", str(prompt), "-n", "0"], ["-p", "0", "-n", str(gen), "-d", ",".join(str(d) for d in depths)]]
    for extra in calls:
        cmd = [bench, "-m", str(model), "-t", str(threads), "-fa", str(fa), "-r", "1", "-o", "jsonl"] + extra
        if cache_type:
            cmd += ["-ctk", cache_type, "-ctv", cache_type]
        r = subprocess.run(cmd, capture_output=True, text=True, env=llama_env(build))
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
        for line in r.stdout.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            if j["n_gen"] == 0:
                out[f"prompt {j['n_prompt']}"] = j["avg_ts"]
            else:
                out[f"decode @ {j['n_depth']}"] = j["avg_ts"]
    return out


def run_ours(cli, model, threads, prompt, gen, depths, kv_type="bf16"):
    """{test: tok/s} from bench e2e at batch 1 (one run after its warm-up), its KV cache kv_type."""
    out = {}
    jobs = [(f"prompt {prompt}", prompt, 1)] + [(f"decode @ {d}", d, gen) for d in depths]
    for name, plen, glen in jobs:
        cmd = [str(cli), "bench", "e2e", "--device", "cpu", "-m", str(model), "--batch", "1", "--prompt-len",
               str(plen), "--gen-len", str(glen), "--runs", "1", "-t", str(threads), "--kv-type", kv_type, "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
        j = json.loads(r.stdout.strip().splitlines()[-1])
        out[name] = j["prompt_tokens_per_s"] if name.startswith("prompt") else j["decode_tokens_per_s"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=str(DEFAULT_MODEL))
    ap.add_argument("-t", "--threads", type=int, default=0, help="both engines (default: flashscope-cli info's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=32, help="decode tokens per measurement")
    ap.add_argument("--depths", default="8,512,4096")
    ap.add_argument("--kv-type", default="bf16", choices=["bf16", "q8_0", "q4_0"],
                    help="FlashScope's KV cache (llama-bench keeps its default f16 cache)")
    ap.add_argument("--cli", default=str(ROOT / "build/cli/flashscope-cli"))
    ap.add_argument("--llama-build", default=os.environ.get("FLASHSCOPE_LLAMA_BUILD", ""),
                    help="existing llama.cpp build dir with bin/llama-bench (env FLASHSCOPE_LLAMA_BUILD)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel jobs of the one-time llama.cpp build")
    ap.add_argument("--out-dir", default=str(ROOT / "bench/results"))
    ap.add_argument("--note", default="", help="a line for the report (what else ran, the build)")
    ap.add_argument("--quiet", type=float, default=0.15,
                    help="most share of the machine's CPU time others may use for a round to count as quiet")
    ap.add_argument("--wait-quiet", type=float, default=300,
                    help="seconds to wait before each round for others to fall to --quiet (0: do not wait)")
    a = ap.parse_args()

    model = Path(a.model)
    if not model.exists():
        sys.exit(f"no model at {model} (bash scripts/fetch_model.sh)")
    cli = Path(a.cli)
    if not cli.exists():
        sys.exit(f"no {cli}: build flashscope-cli first (cmake --build build --target flashscope-cli)")
    build = Path(a.llama_build) if a.llama_build else build_llamacpp(a.jobs)
    if not (build / "bin/llama-bench").exists():
        sys.exit(f"{build}/bin/llama-bench does not exist")
    threads = a.threads
    if threads <= 0:
        info = subprocess.run([str(cli), "info", "--json"], capture_output=True, text=True).stdout
        threads = next((json.loads(l)["default_threads"] for l in info.splitlines() if "default_threads" in l), 0)
        threads = threads or os.cpu_count() or 1
    depths = [int(d) for d in a.depths.split(",")]

    a.commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    rounds = []
    for r in range(a.rounds):
        share, waited = wait_quiet(a.quiet, a.wait_quiet) if a.wait_quiet > 0 else (others_idle_share(3.0), 0.0)
        row = {"load_before": loadavg(), "others_before": share, "waited_s": round(waited)}
        log(f"round {r + 1}/{a.rounds} (others {share:.0%} after {waited:.0f} s of waiting, "
            f"load {row['load_before']:.1f})")
        meter = OthersMeter()
        row["fa0"] = run_llama(build, model, threads, 0, a.prompt, a.gen, depths)
        row["fa1"] = run_llama(build, model, threads, 1, a.prompt, a.gen, depths)
        if a.kv_type != "bf16":  # the same cache type beside ours
            row["fa1kv"] = run_llama(build, model, threads, 1, a.prompt, a.gen, depths, cache_type=a.kv_type)
        row["ours"] = run_ours(cli, model, threads, a.prompt, a.gen, depths, a.kv_type)
        row["others_during"] = meter.stop()
        row["load_after"] = loadavg()
        rounds.append(row)
        log("  " + json.dumps(row))
        # After every round, so a run cut short still leaves its table.
        write_report(a, rounds, build, cli, model, threads, depths, final=r + 1 == a.rounds)



_report = None


def report_path(out_dir, stem):
    """The run's report file, chosen at its first write: STEM.md, or STEM-2.md, -3 ... when an
    earlier run of the same day left one (rewritten after every round of this run, never
    another run's)."""
    global _report
    if _report is None:
        _report, n = out_dir / f"{stem}.md", 2
        while _report.exists():
            _report, n = out_dir / f"{stem}-{n}.md", n + 1
    return _report


def write_report(a, rounds, build, cli, model, threads, depths, final):
    tests = [f"prompt {a.prompt}"] + [f"decode @ {d}" for d in depths]
    peers = ["fa0", "fa1"] + (["fa1kv"] if a.kv_type != "bf16" else [])
    med = {k: {t: statistics.median(r[k][t] for r in rounds) for t in tests} for k in ["ours"] + peers}
    targets = {f"prompt {a.prompt}": 1.3}
    targets.update({f"decode @ {d}": 1.2 for d in depths})

    def git(*args):
        r = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return r.stdout.strip()

    version = subprocess.run([str(build / "bin/llama-bench"), "--version"], capture_output=True, text=True,
                             env=llama_env(build))
    llama_version = (version.stdout + version.stderr).strip().splitlines()
    host = re.sub(r"[^a-z0-9]+", "-", cpu_name().lower()).strip("-") + f"-{os.cpu_count()}core"
    date = datetime.date.today().isoformat()
    loads = [r["load_before"] for r in rounds] + [r["load_after"] for r in rounds]
    lines = [
        f"# CPU engine beside llama.cpp: {model.name}, {threads} threads",
        "",
        f"Machine: {cpu_name()}, {os.cpu_count()} CPUs (`{socket.gethostname()}`), load average "
        f"{min(loads):.1f}-{max(loads):.1f} during the runs (other people's work on a shared machine: "
        "see each round's load below).",
        f"FlashScope: the tree at `{a.commit}` ({git('rev-parse', '--abbrev-ref', 'HEAD')}) when the run started, "
        f"`{cli}`; llama.cpp: llama-cpp-python {SDIST_VERSION}'s vendored source, "
        f"{' '.join(llama_version[-2:]) if llama_version else '?'}, build `{build}`.",
        f"{len(rounds)} interleaved round{'s' if len(rounds) > 1 else ''}"
        f"{'' if final else f' (of {a.rounds} planned; the run was cut short)'}, one measurement per engine "
        "and test each; medians. "
        f"Decode: {a.gen} tokens after N context tokens.",
    ]
    if a.note:
        lines += ["", a.note]
    cpus = os.cpu_count() or 1
    # Other programs' CPU time during the rounds (not the load average, which holds our own threads).
    busiest = max(r["others_during"] for r in rounds)
    loaded = not busiest <= a.quiet  # nan (no /proc/stat) counts as loaded
    if loaded:
        lines += ["", f"**Not a quiet machine** (other programs used up to {busiest:.0%} of the {cpus} CPUs during "
                  "a round): these figures show how each engine copes with other programs on its cores (spinning "
                  "threads collapse there), not the quiet-machine speeds the issue's targets are about; the met "
                  "column says so."]
    else:
        lines += ["", f"Quiet: other programs used at most {busiest:.0%} of the {cpus} CPUs during any round "
                  "(/proc/stat busy time less this script's own children)."]
    lines += [
        "",
        "Commands (one round):",
        "",
        f"    llama-bench -m MODEL -t {threads} -fa 0|1 -r 1 -p {a.prompt} -n 0",
        f"    llama-bench -m MODEL -t {threads} -fa 0|1 -r 1 -p 0 -n {a.gen} -d {a.depths}",
    ] + ([f"    llama-bench ... -fa 1 -ctk {a.kv_type} -ctv {a.kv_type}   # both again, llama.cpp's own {a.kv_type} KV cache"]
         if "fa1kv" in peers else []) + [
        f"    flashscope-cli bench e2e --device cpu -m MODEL --batch 1 --runs 1 -t {threads} "
        f"--kv-type {a.kv_type} --prompt-len {a.prompt} --gen-len 1    # prompt",
        f"    flashscope-cli bench e2e --device cpu -m MODEL --batch 1 --runs 1 -t {threads} "
        f"--kv-type {a.kv_type} --prompt-len N --gen-len {a.gen}   # decode @ N",
        "",
        "| test (tok/s) | FlashScope | llama.cpp fa off | llama.cpp fa on |"
        + (f" llama.cpp fa on, {a.kv_type} KV |" if "fa1kv" in peers else "") + " ours / best | target | met |",
        "|---" * (5 + len(peers)) + "|",
    ]
    for t in tests:
        best = max(med[k][t] for k in peers)
        ratio = med["ours"][t] / best if best > 0 else float("nan")
        met = "yes" if ratio >= targets[t] else "no"
        lines.append(f"| {t} | {med['ours'][t]:.1f} | " + " | ".join(f"{med[k][t]:.1f}" for k in peers) +
                     f" | {ratio:.2f}× | ≥ {targets[t]:.1f}× | {met + ' (loaded)' if loaded else met} |")
    last = f"decode @ {depths[-1]}"
    if f"decode @ {depths[0]}" in med["ours"] and len(depths) > 1:
        keep = med["ours"][last] / med["ours"][f"decode @ {depths[0]}"]
        lines.append(f"| ours {last} / ours decode @ {depths[0]} | {keep:.2f}× |" + " |" * len(peers) + " | ≥ 0.8× | "
                     f"{('yes' if keep >= 0.8 else 'no') + (' (loaded)' if loaded else '')} |")
    lines += ["", "Every round (FlashScope / llama.cpp fa off / fa on" + (f" / fa on {a.kv_type} KV" if "fa1kv" in peers else "")
              + "):", "",
              "| round | others' CPU before, during | load avg before, after | " + " | ".join(tests) + " |",
              "|---" * (len(tests) + 3) + "|"]
    for i, r in enumerate(rounds):
        cells = [" / ".join(f"{r[k][t]:.1f}" for k in ["ours"] + peers) for t in tests]
        lines.append(f"| {i + 1} | {r['others_before']:.0%}, {r['others_during']:.0%} (waited {r['waited_s']} s) | "
                     f"{r['load_before']:.1f}, {r['load_after']:.1f} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    out = report_path(Path(a.out_dir), f"cpu-{host}-{date}-vs-llamacpp")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    if final:
        print(text)
    log(f"written to {out}")


if __name__ == "__main__":
    main()
