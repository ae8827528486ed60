#!/usr/bin/env python3
"""Registers, stack and spills of every kernel the library carries, two builds side by side.

    python3 bench/kernel_resources.py BEFORE_BUILD AFTER_BUILD [--arch sm_90a] [--out FILE.md]

BEFORE_BUILD / AFTER_BUILD may also be folders of `cuobjdump -res-usage OBJ >
NAME.txt` dumps, one per object (taken where the builds were, read anywhere).

Reads the CUDA objects of the embeddable library's kernel targets under each
CMake build folder (kernels/CMakeFiles/flashscope_kernels*.dir: the production
kernels, probed builds included; the kernel lab is not the library) with
`cuobjdump -res-usage`, demangles the names (c++filt) and prints a markdown
table: one row per kernel found in both builds, then the kernels only one
build has. STACK is the frame ptxas gives a thread (its spills and local
arrays live there). A register count or frame that moved is what a refactor must not
do unnoticed; the A/B timings (bench/ab_builds.py) say whether it mattered.
"""
import argparse
import collections
import pathlib
import re
import subprocess
import sys

Usage = collections.namedtuple("Usage", "regs stack local")


def objects(build):
    root = pathlib.Path(build) / "kernels" / "CMakeFiles"
    return sorted(p for d in root.glob("flashscope_kernels*.dir") for p in d.rglob("*.o"))


def dumps(build):
    """The `cuobjdump -res-usage` texts of the build's kernel objects, or, for a
    folder of *.txt files, those texts (dumped on another machine)."""
    saved = sorted(pathlib.Path(build).glob("*.txt"))
    if saved:
        return [p.read_text() for p in saved]
    return [subprocess.run(["cuobjdump", "-res-usage", str(obj)], capture_output=True, text=True).stdout
            for obj in objects(build)]


def resources(build, arch):
    """{mangled name: Usage} of every function compiled for `arch` in the build's kernel objects."""
    out = {}
    for text in dumps(build):
        in_arch, name = False, None
        for line in text.splitlines():
            m = re.match(r"\s*arch = (\S+)", line)
            if m:
                in_arch = m.group(1) == arch
                continue
            m = re.match(r"\s*Function (\S+):", line)
            if m:
                name = m.group(1)
                continue
            m = re.match(r"\s*REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", line)
            if m and in_arch and name:
                out[name] = Usage(*(int(g) for g in m.groups()))
                name = None
    return out


def demangle(names):
    if not names:
        return {}
    text = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return dict(zip(names, text.splitlines()))


def short(name):
    """The demangled name without its parameter list and namespaces (the template arguments say which)."""
    name = name.replace("flashscope::kernels::", "").replace("(anonymous namespace)::", "")
    depth = 0
    for i, ch in enumerate(name):  # cut at the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i]
    return name


def split_args(text):
    """The top-level comma-separated arguments of a template argument list."""
    args, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    args.append(text[start:].strip())
    return args


# Template arguments later builds added, with the value that keeps the old
# behaviour: (template name, the argument count with it, its old-behaviour value).
ADDED_ARGS = [
    ("attention_kernel", 6, "0"),           # kMods: no window, no soft-cap
    ("hopper_attention_kernel", 8, "false"),  # kExtras: no window, no soft-cap
    ("PagedView", 6, "false"),              # kWindow: no window masking
    ("skinny_gemm_kernel", 2, "false"),     # kFolds: the plain kernel
]


def same_kernel(name):
    """A name without the template arguments later builds added with their
    old behaviour as the value (a view without a window, an attention kernel
    without mods, the plain few-token GEMM), so a kernel keeps its row across
    those builds."""
    m = re.match(r"^(void )?([A-Za-z_0-9]+)<(.*)>$", name)
    if not m:
        return name
    prefix, template, inner = m.group(1) or "", m.group(2), m.group(3)
    args = [same_kernel(a) for a in split_args(inner)]
    if template == "DenseView" and len(args) == 5 and args[3] == "false":
        args = args[:3]  # no window: the block-KV argument only sizes the window's masking
    for t, count, value in ADDED_ARGS:
        if template == t and len(args) == count and args[-1] == value:
            args = args[:-1]
    return f"{prefix}{template}<{', '.join(args)}>"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out")
    args = ap.parse_args()
    before, after = resources(args.before, args.arch), resources(args.after, args.arch)
    names = demangle(sorted(set(before) | set(after)))
    by_name = collections.defaultdict(dict)  # demangled, shortened -> {"before": Usage, "after": Usage}
    for side, table in (("before", before), ("after", after)):
        for mangled, usage in table.items():
            by_name[same_kernel(short(names.get(mangled, mangled)))][side] = usage
    both = {k: v for k, v in by_name.items() if len(v) == 2}
    lines = [f"# Kernel resources, {args.arch}: {args.before} -> {args.after}", ""]
    moved = [k for k, v in both.items() if v["before"] != v["after"]]
    spills = [k for k, v in by_name.items() if any(u.local or u.stack for u in v.values())]
    lines.append(f"{len(both)} kernels in both builds, {len(moved)} with other registers, stack or spills; "
                 f"{sum('after' not in v for v in by_name.values())} only before, "
                 f"{sum('before' not in v for v in by_name.values())} only after; "
                 f"{len(spills)} with a stack frame (spills or local arrays) in either build.")
    lines += ["", "| kernel | registers | stack frame bytes (spills, local arrays) | local bytes |", "|---|---|---|---|"]

    def cell(v, field):
        b, a = (getattr(v[s], field) if s in v else None for s in ("before", "after"))
        fmt = lambda x: "-" if x is None else str(x)
        return fmt(b) if b == a else f"{fmt(b)} -> **{fmt(a)}**"

    for key in sorted(by_name, key=lambda k: (len(by_name[k]) != 2, k)):
        v = by_name[key]
        lines.append(f"| `{key}` | {cell(v, 'regs')} | {cell(v, 'stack')} | {cell(v, 'local')} |")
    text = "\n".join(lines) + "\n"
    if args.out:
        pathlib.Path(args.out).write_text(text)
    sys.stdout.write("\n".join(lines[:3]) + "\n")
    for k in moved:
        v = by_name[k]
        sys.stdout.write(f"moved: {k}: {v['before']} -> {v['after']}\n")


if __name__ == "__main__":
    main()
