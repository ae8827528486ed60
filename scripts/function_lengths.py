#!/usr/bin/env python3
"""List C++/CUDA functions longer than a limit (issue #17: no function in kernels/ over ~150 lines).

Usage: scripts/function_lengths.py [--limit N] [--all] PATH...
A function is a top-level brace block (namespace bodies excepted) whose head has a parameter list and
is not a class, struct, union, enum or initializer; its length runs from the line of its name to its
closing brace, comments included. Lambdas count toward the function that holds them.
"""
import argparse
import os
import re
import sys

SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".inc")
ATTRIBUTES = {"__launch_bounds__", "__attribute__", "__declspec", "alignas", "decltype", "noexcept"}
NOT_FUNCTION = re.compile(r"\b(class|struct|union|enum|namespace)\b|=\s*$")


def strip(text):
    """Blanks comments, strings and character literals, keeping every newline (so line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i)); i = j + 1
        elif c == "#" and (i == 0 or text[text.rfind("\n", 0, i) + 1:i].strip() == ""):
            j = i
            while True:  # a preprocessor line, with its continuations
                j = text.find("\n", j)
                if j < 0 or text[j - 1] != "\\":
                    break
                j += 1
            j = n if j < 0 else j
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        else:
            out.append(c); i += 1
    return "".join(out)


def functions(path):
    text = strip(open(path, encoding="utf-8", errors="replace").read())
    found, depth_kinds, head_start = [], [], 0
    for i, c in enumerate(text):
        if c == "{" and text.count("(", head_start, i) > text.count(")", head_start, i):
            depth_kinds.append(("brace-init", None))  # a default argument's {}: the head goes on
        elif c == "{":
            head = text[head_start:i]
            in_function = any(k == "function" for k, _ in depth_kinds)
            kind = "other"
            if not in_function and all(k == "namespace" for k, _ in depth_kinds):
                if re.search(r"\bnamespace\b|extern\s*$", head) or (
                        re.search(r"\b(class|struct|union)\b", head) and ")" not in head):
                    kind = "namespace"  # a class body: its member functions are functions too
                elif ")" in head and not NOT_FUNCTION.search(head.strip()):
                    kind = "function"
            if kind == "function":
                name = [w for w in re.findall(r"([~\w:]+)\s*\(", head) if w not in ATTRIBUTES]
                first = head_start + len(head) - len(head.lstrip())
                depth_kinds.append((kind, (name[0] if name else "?", text.count("\n", 0, first) + 1)))
            else:
                depth_kinds.append((kind, None))
            head_start = i + 1
        elif c == "}":
            if depth_kinds:
                kind, info = depth_kinds.pop()
                if kind == "function":
                    name, line = info
                    found.append((text.count("\n", 0, i) + 1 - line + 1, name, line))
                if kind == "brace-init":
                    continue
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=150)
    parser.add_argument("--all", action="store_true", help="list every function, longest first")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args()
    rows = []
    for root in args.paths:
        files = [root] if os.path.isfile(root) else [
            os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(SOURCE_SUFFIXES)]
        for path in sorted(files):
            rows += [(length, name, f"{path}:{line}") for length, name, line in functions(path)]
    rows.sort(reverse=True)
    over = [r for r in rows if r[0] > args.limit]
    try:
        for length, name, where in (rows if args.all else over):
            print(f"{length:5d}  {name:40s} {where}")
    except BrokenPipeError:  # piped into head
        return 0
    print(f"{len(over)} of {len(rows)} functions over {args.limit} lines", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
