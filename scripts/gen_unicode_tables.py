#!/usr/bin/env python3
"""Generates runtime/src/tokenizer/unicode_tables.cpp: the character classes
the byte-level BPE pre-tokenizer needs, as a sorted table of code point ranges.

Classes (what the GPT-2 split regex and the Digits pre-tokenizer look at):
  letter  \\p{L}: general categories Lu Ll Lt Lm Lo
  number  \\p{N}: general categories Nd Nl No
  space   \\s as Oniguruma defines it for Unicode (the regex engine of HF
          tokenizers): U+0009..U+000D, U+0085 and categories Zs Zl Zp.
          Not Python's str.isspace(), which also takes U+001C..U+001F.
  other   everything else (marks, punctuation, symbols, controls, unassigned)

Which Unicode version: the reference tokenizer (tokenizers 0.23.3) mixes two,
as measured with --verify against every code point. Its ByteLevel regex
(Oniguruma) knows Unicode 16.0, while its Digits pre-tokenizer uses Rust's
char::is_numeric, which knows Unicode 17.0. So the table is Unicode 16.0 from the `unicodedata2` package
(pinned below) plus the numbers Unicode 17.0 added (RUST_ONLY_NUMBERS), which
the reference splits off digit by digit although the regex engine does not
know them yet. Python's own unicodedata (14.0 in 3.11) is the fallback when
unicodedata2 is missing, with a warning: only code points assigned after it
would be classed differently.

`--verify` checks every code point against the reference pre-tokenizer itself
(needs the `tokenizers` package), by the splits it makes of probe strings.

Tested with: Python 3.11.7, unicodedata2==16.0.0, tokenizers==0.23.3.

Usage: python3 scripts/gen_unicode_tables.py [--verify] [-o PATH]
"""
import argparse
import os
import sys

try:
    import unicodedata2 as unicodedata
except ImportError:  # pragma: no cover - fallback documented above
    import unicodedata

    print(f"warning: unicodedata2 not installed; using Python's unicodedata "
          f"(Unicode {unicodedata.unidata_version})", file=sys.stderr)

EXPECTED_UNICODE = "16.0.0"
# Numbers new in Unicode 17.0 (Tolong Siki digits, three Yangqin signs):
# Rust's char::is_numeric knows them, the reference's Oniguruma does not.
RUST_ONLY_NUMBERS = [(0x11DE0, 0x11DE9), (0x16FF4, 0x16FF6)]

OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3
NAMES = {LETTER: "kLetter", NUMBER: "kNumber", SPACE: "kSpace"}
MAX_CP = 0x10FFFF


def classify(cp):
    if 0xD800 <= cp <= 0xDFFF:
        return OTHER
    for lo, hi in RUST_ONLY_NUMBERS:
        if lo <= cp <= hi:
            return NUMBER
    cat = unicodedata.category(chr(cp))
    if cat[0] == "L":
        return LETTER
    if cat[0] == "N":
        return NUMBER
    if cat in ("Zs", "Zl", "Zp") or 0x09 <= cp <= 0x0D or cp == 0x85:
        return SPACE
    return OTHER


def ranges():
    out = []
    start, cls = 0, classify(0)
    for cp in range(1, MAX_CP + 2):
        c = classify(cp) if cp <= MAX_CP else None
        if c != cls:
            if cls != OTHER:
                out.append((start, cp - 1, cls))
            start, cls = cp, c
    return out


def verify(table):
    """Classes every code point with the reference pre-tokenizer and compares."""
    from tokenizers import pre_tokenizers

    pt = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])

    def reference_class(ch):
        # c c '!': other -> one piece "cc!"; letter -> "cc", "!";
        # space or number -> three pieces. " c": one piece if space (\s+),
        # two if number (Digits isolates c from the space).
        pieces = pt.pre_tokenize_str(ch + ch + "!")
        if len(pieces) == 1:
            return OTHER
        if len(pieces) == 2:
            return LETTER
        return SPACE if len(pt.pre_tokenize_str(" " + ch)) == 1 else NUMBER

    lookup = {}
    for lo, hi, cls in table:
        for cp in range(lo, hi + 1):
            lookup[cp] = cls
    bad = []
    for cp in range(MAX_CP + 1):
        if 0xD800 <= cp <= 0xDFFF or cp == 0x20:  # ' ' is its own rule in the regex
            continue
        want = reference_class(chr(cp))
        have = lookup.get(cp, OTHER)
        if want != have:
            bad.append((cp, want, have))
    for cp, want, have in bad[:40]:
        print(f"U+{cp:04X}: reference {want}, table {have}", file=sys.stderr)
    print(f"verify: {len(bad)} code points differ from the reference pre-tokenizer",
          file=sys.stderr)
    return not bad


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output",
                    default=os.path.join(root, "runtime/src/tokenizer/unicode_tables.cpp"))
    ap.add_argument("--verify", action="store_true")
    args = ap.parse_args()

    if unicodedata.unidata_version != EXPECTED_UNICODE:
        print(f"warning: Unicode {unicodedata.unidata_version}, expected {EXPECTED_UNICODE}",
              file=sys.stderr)
    table = ranges()
    lines = [
        "// Generated by scripts/gen_unicode_tables.py; do not edit.",
        f"// Unicode {unicodedata.unidata_version} general categories (plus the Unicode 17.0",
        "// numbers Rust's char::is_numeric adds), as the pre-tokenizer's classes:",
        "// letter = L*, number = N*, space = Oniguruma's \\s. Code points in no range",
        "// are 'other'. Sorted, disjoint, adjacent ranges of one class merged.",
        '#include "tokenizer/unicode.hpp"',
        "",
        "namespace flashscope::tokenizer {",
        "",
        f'const char* const kUnicodeTablesVersion = "{unicodedata.unidata_version}";',
        "",
        f"const UnicodeRange kUnicodeRanges[] = {{",
    ]
    for lo, hi, cls in table:
        lines.append(f"    {{0x{lo:05X}, 0x{hi:05X}, CharClass::{NAMES[cls]}}},")
    lines += [
        "};",
        "",
        "const size_t kUnicodeRangeCount = sizeof(kUnicodeRanges) / sizeof(kUnicodeRanges[0]);",
        "",
        "}  // namespace flashscope::tokenizer",
        "",
    ]
    with open(args.output, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.output}: {len(table)} ranges", file=sys.stderr)
    if args.verify and not verify(table):
        sys.exit(1)


if __name__ == "__main__":
    main()
