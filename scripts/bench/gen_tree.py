#!/usr/bin/env python3
"""Generate a deterministic tree of source-like files for the search benchmark.

Usage: python3 scripts/bench/gen_tree.py OUTDIR [--seed N]

OUTDIR must not exist or be empty. The same seed always gives the same tree
(byte for byte). With the default seed: 20,162 files in 1,500 directories
nested up to 9 deep, 325.8 MB in all, made of

* 20,000 text files of source-like lines (log-normal sizes, 12.7 KB on average),
* 12 larger text files of 2-6 MB,
* 150 binary files (random bytes with a NUL byte in the first KB),

with no hidden files and no .gitignore. Two literals are planted:

* NEEDLE    = "NEEDLE_cubby_42": one line in each of 300 text files (a second
  line in some: 366 lines), and in 10 binary files (which a search must skip);
* COMMON    = "config.timeout": part of 0.5% of the distinct generated lines,
  19,338 lines in 8,712 text files.

A summary is printed on stdout as JSON (files, dirs, bytes, expected counts).
"""

import argparse
import json
import os
import random
import sys

NEEDLE = "NEEDLE_cubby_42"
COMMON = "config.timeout"

TEXT_FILES = 20_000
LARGE_FILES = 12
BINARY_FILES = 150
NEEDLE_FILES = 300
NEEDLE_BINARY_FILES = 10
DIRS = 1_500
MAX_DEPTH = 9
POOL_LINES = 40_000
COMMON_SHARE = 0.005

EXTS = [".rs", ".py", ".js", ".ts", ".go", ".c", ".h", ".java", ".md", ".txt", ".json", ".toml", ".yaml"]
BIN_EXTS = [".bin", ".png", ".o", ".so", ".gz"]
WORDS = (
    "alpha beta gamma delta request response handler buffer cursor index value key map list "
    "node tree graph edge vertex parse token lexer span error result option state config "
    "client server socket stream reader writer file path dir entry cache store load save "
    "init start stop run spawn thread pool task queue event timer retry limit count total "
    "width height offset length size capacity data bytes text line column row table query "
    "match filter sort merge split join format print debug trace warn info user session"
).split()
KEYWORDS = [
    "fn", "let", "mut", "pub", "struct", "impl", "return", "if", "else", "for", "while",
    "match", "def", "class", "import", "from", "const", "var", "function", "async", "await",
    "static", "int", "void", "char", "package", "func", "type", "interface",
]
PUNCT = [" = ", "(", ")", ", ", ".", "::", " -> ", " + ", " * ", " == ", " && ", "[", "]", ": ", ";", " {", "}"]


def ident(rng):
    n = rng.choice((1, 1, 2, 2, 3))
    parts = [rng.choice(WORDS) for _ in range(n)]
    return "_".join(parts) if rng.random() < 0.7 else parts[0] + "".join(p.capitalize() for p in parts[1:])


def source_line(rng):
    r = rng.random()
    if r < 0.06:
        return ""
    indent = "    " * min(int(rng.expovariate(0.7)), 6)
    if r < 0.16:
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 18)))
        return f"{indent}{rng.choice(['//', '#', '///', '--', ' *'])} {words}"
    if r < 0.19:
        return f'{indent}"{ident(rng)}": "{" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))}",'
    out = [indent]
    if rng.random() < 0.6:
        out.append(rng.choice(KEYWORDS) + " ")
    for _ in range(rng.randint(1, 12)):
        out.append(ident(rng))
        out.append(rng.choice(PUNCT))
    if rng.random() < 0.15:
        out.append(f'"{" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))}"')
    if rng.random() < 0.1:
        out.append(str(rng.randint(0, 1 << 20)))
    return "".join(out)


def make_pool(rng):
    pool = [source_line(rng) for _ in range(POOL_LINES)]
    # Make sure the needle never occurs by chance (it cannot: no digits glued
    # to words), and plant the common literal in a fixed share of the pool.
    for i in rng.sample(range(POOL_LINES), int(POOL_LINES * COMMON_SHARE)):
        pool[i] = "    " * rng.randint(0, 3) + rng.choice(
            [
                f"let deadline = {COMMON} * 2;",
                f"if elapsed > {COMMON} {{ return Err(Timeout); }}",
                f"self.{COMMON} = Duration::from_secs({rng.randint(1, 600)});",
                f"# {COMMON}: seconds before a request is abandoned",
                f'"{COMMON}": {rng.randint(1, 600)},',
            ]
        )
    return pool


def make_dirs(rng):
    dirs = [""]
    depth = {"": 0}
    seen = set()
    while len(dirs) < DIRS + 1:
        parent = rng.choice(dirs)
        if depth[parent] >= MAX_DEPTH:
            continue
        name = rng.choice(WORDS) + ("_" + rng.choice(WORDS) if rng.random() < 0.4 else "")
        path = f"{parent}/{name}" if parent else name
        if path in seen:
            continue
        seen.add(path)
        dirs.append(path)
        depth[path] = depth[parent] + 1
    return dirs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    out = os.path.abspath(args.outdir)
    if os.path.exists(out) and os.listdir(out):
        sys.exit(f"gen_tree: {out} exists and is not empty; pass a new or empty directory")
    rng = random.Random(args.seed)

    pool = make_pool(rng)
    common_in_pool = {i for i, line in enumerate(pool) if COMMON in line}
    dirs = make_dirs(rng)
    for d in dirs:
        os.makedirs(os.path.join(out, d), exist_ok=True)

    used = set()

    def new_path(exts):
        while True:
            d = rng.choice(dirs)
            name = f"{ident(rng).lower()}{rng.choice(exts)}"
            rel = f"{d}/{name}" if d else name
            if rel not in used and rel not in dirs:
                used.add(rel)
                return rel

    # Line counts: log-normal around ~120 lines, a long tail, plus large files.
    counts = [max(1, min(int(rng.lognormvariate(4.6, 1.0)), 20_000)) for _ in range(TEXT_FILES)]
    counts += [rng.randint(25_000, 75_000) for _ in range(LARGE_FILES)]
    paths = [new_path(EXTS) for _ in counts]
    needle_files = set(rng.sample(range(len(paths)), NEEDLE_FILES))

    total_bytes = 0
    needle_lines = 0
    common_lines = 0
    for i, (rel, n) in enumerate(zip(paths, counts)):
        idx = rng.choices(range(POOL_LINES), k=n)
        common_lines += sum(1 for j in idx if j in common_in_pool)
        lines = [pool[j] for j in idx]
        if i in needle_files:
            for _ in range(1 if rng.random() < 0.8 else 2):
                at = rng.randint(0, len(lines))
                lines.insert(at, f"    let marker = \"{NEEDLE}\"; // {rng.choice(WORDS)}")
                needle_lines += 1
        data = ("\n".join(lines) + "\n").encode()
        with open(os.path.join(out, rel), "wb") as f:
            f.write(data)
        total_bytes += len(data)

    for i in range(BINARY_FILES):
        rel = new_path(BIN_EXTS)
        size = rng.randint(1_024, 256 * 1_024)
        blob = bytearray(rng.randbytes(size))
        blob[rng.randint(0, 512)] = 0  # a NUL within the first KB
        if i < NEEDLE_BINARY_FILES:
            at = rng.randint(1_024, size - 64)
            blob[at : at + len(NEEDLE)] = NEEDLE.encode()
        with open(os.path.join(out, rel), "wb") as f:
            f.write(blob)
        total_bytes += size

    summary = {
        "outdir": out,
        "seed": args.seed,
        "files": len(paths) + BINARY_FILES,
        "text_files": len(paths),
        "binary_files": BINARY_FILES,
        "dirs": len(dirs) - 1,
        "max_depth": MAX_DEPTH,
        "bytes": total_bytes,
        "needle": NEEDLE,
        "needle_files": NEEDLE_FILES,
        "needle_lines": needle_lines,
        "common": COMMON,
        "common_lines": common_lines,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
