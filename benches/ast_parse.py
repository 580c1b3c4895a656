#!/usr/bin/env python3
"""Peer figure for `repohop bench index`: Python's own `ast` parsing a directory's .py files.

Usage: python3 benches/ast_parse.py DIR [--runs N]   (default 5 runs)

Output: exactly one JSON line on stdout,
  {"seconds": S, "bytes": B, "files": F, "functions": N, "runs": R,
   "mb_per_s": B / S / 1e6, "functions_per_s": N / S}
where S is the median over R runs of the time to `ast.parse` every file and walk each tree
counting FunctionDef / AsyncFunctionDef nodes (what repohop's cold parse also has to find).
Reading the files is done once, before timing, so both sides measure parsing from memory.
Hidden files and folders are skipped, as repohop's walker does; files `ast` rejects are
skipped and counted in "syntax_errors".
"""

import ast
import json
import os
import statistics
import sys
import time


def sources(root):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".py") and not name.startswith("."):
                with open(os.path.join(dirpath, name), "rb") as f:
                    out.append(f.read())
    return out


def parse_all(files):
    functions, errors = 0, 0
    for src in files:
        try:
            tree = ast.parse(src)
        except (SyntaxError, ValueError):
            errors += 1
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions += 1
    return functions, errors


def main():
    args = sys.argv[1:]
    runs = 5
    if "--runs" in args:
        i = args.index("--runs")
        runs = int(args[i + 1])
        del args[i : i + 2]
    if len(args) != 1 or not os.path.isdir(args[0]) or runs < 1:
        sys.exit("usage: ast_parse.py DIR [--runs N]")
    files = sources(args[0])
    total = sum(len(s) for s in files)
    times = []
    functions = errors = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        functions, errors = parse_all(files)
        times.append(time.perf_counter() - t0)
    seconds = statistics.median(times)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "bytes": total,
                "files": len(files),
                "functions": functions,
                "syntax_errors": errors,
                "runs": runs,
                "mb_per_s": total / seconds / 1e6 if seconds > 0 else None,
                "functions_per_s": functions / seconds if seconds > 0 else None,
            }
        )
    )


if __name__ == "__main__":
    main()
