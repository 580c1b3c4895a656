#!/usr/bin/env python3
"""Checks repohop's target resolution and masking on DevEval tasks.

Usage: python3 scripts/deveval_targets.py TASKS.jsonl SOURCE_CODE_DIR [REPOHOP_BINARY]

For each task, runs `repohop show <SOURCE_CODE_DIR>/<project_path> <namespace> --json` and checks
that the namespace resolves to a definition in `completion_path` whose line range covers DevEval's
`signature_position` and `body_position`, and that the masked view serves neither its signature
nor its body. Prints one line per failure and a summary; exits 1 if any task fails. The symbol
caches go to a temporary folder, not into the DevEval sources.
"""

import json
import os
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    tasks_file, src = sys.argv[1], sys.argv[2]
    binary = sys.argv[3] if len(sys.argv) > 3 else "repohop"
    tasks = [json.loads(line) for line in open(tasks_file) if line.strip()]
    ok = 0
    caches = tempfile.mkdtemp(prefix="repohop-deveval-")
    for t in tasks:
        root = os.path.join(src, t["project_path"])
        cache = os.path.join(caches, t["project_path"].replace("/", "_"))
        r = subprocess.run([binary, "show", root, t["namespace"], "--json", "--cache-dir", cache],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL {t['namespace']}: {r.stderr.strip()}")
            continue
        out = json.loads(r.stdout)
        tgt, masked = out["target"], out["masked"]
        want_path = os.path.relpath(t["completion_path"], t["project_path"])
        problems = []
        if tgt["path"] != want_path:
            problems.append(f"path {tgt['path']} != {want_path}")
        if not (tgt["start_line"] <= t["signature_position"][0]
                and tgt["end_line"] >= t["body_position"][1]):
            problems.append(f"lines {tgt['start_line']}-{tgt['end_line']} do not cover "
                            f"signature {t['signature_position']} / body {t['body_position']}")
        for key in ("signature_absent", "body_absent", "definition_absent"):
            if not masked[key]:
                problems.append(f"masked view: {key} is false")
        if problems:
            print(f"FAIL {t['namespace']}: " + "; ".join(problems))
        else:
            ok += 1
    print(f"{ok}/{len(tasks)} DevEval targets resolve to the right definition and are masked")
    sys.exit(0 if ok == len(tasks) else 1)


if __name__ == "__main__":
    main()
