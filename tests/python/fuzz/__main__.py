"""Differential fuzzing of xjit against eager PyTorch, from the command line.

    cd tests/python && PYTHONPATH=<build>/python python -m fuzz --seeds 0:2000 [--reduce] [--out DIR]

Seeds run in a worker process; a worker that dies (a crash of xjit, not a Python exception) is
reported as a crash of the seed it was running and a new worker continues with the next seed.
A summary groups findings by kind and first line; with --reduce each distinct serious finding
is reduced to a minimal program, printed and (with --out) written to DIR/seed-N.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path


def _worker(seeds: list[int], modes: tuple[str, ...]) -> None:
    import warnings

    from .differential import check
    from .programs import generate

    warnings.simplefilter("ignore")
    for seed in seeds:
        print(json.dumps({"start": seed}), flush=True)
        try:
            prog = generate(seed)
            found = [f.__dict__ for f in check(prog.source(), prog, modes)]
        except Exception as e:  # noqa: BLE001 - a bug of the fuzzer itself, reported as such
            found = [{"kind": "harness", "mode": "-", "batch": -1,
                      "detail": f"{type(e).__name__}: {e}"}]
        print(json.dumps({"seed": seed, "found": found}), flush=True)


def _run(seeds: list[int], modes: tuple[str, ...]) -> dict[int, list[dict]]:
    results: dict[int, list[dict]] = {}
    todo = list(seeds)
    while todo:
        cmd = [sys.executable, "-m", "fuzz", "--worker", ",".join(map(str, todo)),
               "--modes", ",".join(modes)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parent.parent)
        current = None
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "start" in msg:
                current = msg["start"]
            else:
                results[msg["seed"]] = msg["found"]
                current = None
        rc = proc.wait()
        if current is not None:
            results[current] = [{"kind": "crash", "mode": "?", "batch": -1,
                                 "detail": f"worker died with exit status {rc}"}]
        todo = [s for s in todo if s not in results]
        if rc == 0 and todo:
            break  # the worker finished without reporting some seeds: do not loop
    return results


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0:100", help="A:B (half-open) or a comma list")
    ap.add_argument("--modes", default="static,dynamic", help="static, dynamic, grad (training)")
    ap.add_argument("--reduce", action="store_true", help="reduce each distinct serious finding")
    ap.add_argument("--show-strides", action="store_true", help="list stride-only mismatches")
    ap.add_argument("--out", help="write reduced programs here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    modes = tuple(args.modes.split(","))
    if args.worker:
        _worker([int(s) for s in args.worker.split(",")], modes)
        return 0
    from .differential import SERIOUS
    if ":" in args.seeds:
        a, b = args.seeds.split(":")
        seeds = list(range(int(a), int(b)))
    else:
        seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.time()
    results = _run(seeds, modes)
    elapsed = time.time() - t0
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for seed, found in sorted(results.items()):
        for f in found:
            head = f["detail"].split(":")[0]
            if f["kind"] in ("warning", "internal"):
                # the id (XJIT-E0100) and the reason, without the frame's location
                m = re.search(r"XJIT-\w+", f["detail"])
                head = (m.group(0) if m else "") + " " + f["detail"].split(": ", 2)[-1][:80]
            groups[(f["kind"], head)].append(seed)
    print(f"{len(results)} seeds in {elapsed:.1f} s ({len(results) / elapsed:.2f} programs/s)")
    order = {"wrong": 0, "wrong-grad": 0, "alias": 0, "crash": 1, "internal": 2, "harness": 3, "alias-outputs": 4,
             "view-copy": 4, "stride": 5, "stride1": 5, "warning": 6}
    for (kind, head), ss in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        uniq = sorted(set(ss))
        if kind in ("stride", "stride1") and not args.show_strides:
            continue
        print(f"  {kind:8} {len(uniq):4} seeds  {head[:90]}  e.g. {uniq[:8]}")
    strides = sum(1 for (k, _), _s in groups.items() if k in ("stride", "stride1"))
    if strides and not args.show_strides:
        print(f"  (stride-only mismatches in {strides} groups; --show-strides lists them)")
    if args.reduce:
        from .differential import reduce
        from .programs import generate

        seen = set()
        for (kind, head), ss in groups.items():
            if kind not in SERIOUS or (kind, head) in seen:
                continue
            seen.add((kind, head))
            seed = min(ss)
            src = reduce(generate(seed), kind, modes)
            print(f"\n# ---- {kind}: {head} (seed {seed})\n{src}")
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                Path(args.out, f"seed-{seed}-{kind}.py").write_text(src)
    serious = [k for k in groups if k[0] in SERIOUS]
    return 1 if serious else 0


if __name__ == "__main__":
    sys.exit(main())
