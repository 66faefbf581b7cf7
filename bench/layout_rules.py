"""What deciding the output layouts costs a capture: the static rules against PyTorch's meta
walk (XJIT_LAYOUT_META_WALK=1), on Hugging Face LLaMA (the small config of
tests/python/frontend/test_models.py). Each variant runs in a fresh process that captures the
model `--repeats` times with backend="eager" (no compile, so the capture and its layout step
dominate), a fresh frontend each time, one thread; the variants alternate `--rounds` times;
prints the first capture's CPU time and the median of the
later ones, and the counter that says whether the meta walk ran.

    PYTHONPATH=build-<you>/python python bench/layout_rules.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
sys.path.insert(0, {frontend!r})
import torch, xjit, xjit._frontend as fe
import test_models
torch.set_num_threads(1)
model, args, kwargs = test_models.build("llama")
times, walks = [], 0
with torch.no_grad():
    for _ in range({repeats}):
        fe.reset()
        cpu = time.process_time()
        xjit.jit(model, backend="eager")(*args, **kwargs)
        times.append(time.process_time() - cpu)
        walks += fe.events()["counters"]["layout_meta_walks"]
print(json.dumps({{"times": times, "walks": walks}}))
"""


def run(variant: str, repeats: int) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("XJIT_LAYOUT_META_WALK", None)
    if variant == "meta walk":
        env["XJIT_LAYOUT_META_WALK"] = "1"
    code = CHILD.format(frontend=str(REPO / "tests/python/frontend"), repeats=repeats)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return {
        "first_capture_cpu_s": r["times"][0],
        "later_capture_cpu_s": statistics.median(r["times"][1:]),
        "meta_walks": r["walks"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for variant in ("rules", "meta walk") * args.rounds:
        r = run(variant, args.repeats)
        print(
            f"{variant:10s} first capture {r['first_capture_cpu_s']:.3f} s CPU, later captures "
            f"{r['later_capture_cpu_s'] * 1e3:.1f} ms CPU (median), meta walks {r['meta_walks']}"
        )


if __name__ == "__main__":
    main()
