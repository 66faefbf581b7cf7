"""Guard cost of inlined module calls and of inlined forward hooks (a benchmark, not a test).

A frame calling N small modules (`x * 1.0001` each, inlined), compiled with xjit.jit, one
thread: the thread CPU time per warm call (median, min and max of 9 rounds of 3000 calls) and
the entry's guard count, for the modules without hooks (each inlined call guards
NoModuleHooks since session 20) and with one forward hook each (inlined: the hook dicts'
keys, the hooks, the backward dicts guarded). Compare builds by running it with each
(docs/perf.md "Session 20").

    python bench/module_hooks.py [--modules 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.common, as a script
from bench.common import thread_time_per_call  # noqa: E402

nn = torch.nn


class Scale(nn.Module):
    def forward(self, x: Any) -> Any:
        return x * 1.0001


def measure(n: int, hooked: bool) -> str:
    import xjit
    from xjit import _frontend as fe

    fe.reset()
    m = nn.Sequential(*[Scale() for _ in range(n)])
    if hooked:
        for layer in m:
            layer.register_forward_hook(lambda mod, args, out: out + 1)
    x = torch.randn(8)
    c = xjit.jit(m)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))
        fe.set_recording(True)
        c(x)
        graphs = fe.events()["graphs"]
        fe.set_recording(False)
        guards = [len(g.get("guards", [])) for g in graphs]
        us = [thread_time_per_call(lambda: c(x), 3000) * 1e6 for _ in range(9)]
    return (
        f"{n} modules, hooks {'yes' if hooked else 'no '}: guards {guards}, "
        f"{statistics.median(us):.2f} us per call [{min(us):.2f}..{max(us):.2f}]"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modules", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for hooked in (False, True):
        print(measure(args.modules, hooked))


if __name__ == "__main__":
    main()
