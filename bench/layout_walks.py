"""Which models' first calls still need PyTorch's meta walk to lay out their outputs, and where
the static layout rules stop (docs/frontend.md *Output layouts*): each model of bench/zoo.py (its
TINY size) runs once under xjit.jit in a fresh process with XJIT_LOG=graphs; prints the walks,
the first call's wall time (s), whether torch._dynamo was imported (transformers imports it) and
the ops the rules stopped at.

    python bench/layout_walks.py [--models convnext,swin]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHILD = r"""
import sys, time, warnings
sys.path.insert(0, {repo!r})
import torch, xjit
from bench.zoo import build, TINY
warnings.simplefilter("ignore")
model, kw = build(sys.argv[1], TINY)
with torch.no_grad():
    t = time.perf_counter()
    xjit.jit(model)(**kw)
    first = time.perf_counter() - t
walks = xjit._frontend.events()["counters"]["layout_meta_walks"]
print("RESULT", walks, round(first, 2), "torch._dynamo" in sys.modules)
"""


def main() -> None:
    from bench.zoo import MODELS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    print("| model | meta walks | first call s | torch._dynamo imported | the rules stopped at |")
    print("|---|---|---|---|---|")
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, XJIT_LOG="graphs", XJIT_CACHE_DIR=cache)
            p = subprocess.run(
                [sys.executable, "-c", CHILD.format(repo=str(REPO)), name],
                capture_output=True, text=True, env=env, timeout=600,
            )
        result = [line.split()[1:] for line in p.stdout.splitlines() if line.startswith("RESULT")]
        stops = sorted(
            {re.sub(r" at /.*", "", line.split("decide (", 1)[1]) for line in p.stderr.splitlines()
             if "meta kernels decide" in line}
        )
        if not result:
            print(f"| {name} | failed: {p.stderr.strip().splitlines()[-1:]} | | | |", flush=True)
            continue
        walks, first, dynamo = result[0]
        print(f"| {name} | {walks} | {first} | {dynamo} | {'; '.join(stops)} |", flush=True)


if __name__ == "__main__":
    main()
