"""Module instances sharing compiled entries (a benchmark, not a test): before/after figures.

A model of N blocks whose forward has a graph break (`.item()`; /work/scratch/inst.py), run as
`xjit.jit(net)`, each setting in a fresh process (XJIT_NO_CACHE=1: cold compiles), alternating
XJIT_NO_MODULE_SHARING=1 (one entry per instance, as before session 18) and the default:
  compile   thread CPU seconds of the first call (every block compiles or runs in Python), and
            the capture + compile milliseconds xjit's event log records over all graphs
  steady    median thread CPU ms per call after 3 calls, with eager's in the same process
  graphs    graphs compiled; warn: recompile-limit warnings
--break float is inst.py's `if y.sum().item() > -1e9` (the resume function receives a float,
guarded by value); --break bool is `if (y.sum() > -1e9).item()` (a bool).

--guards times one compiled block entry hit from Python (blocks called in a loop that runs in
Python): block 0 (its entry guards self by identity) against block 5 (the shared entry, second
in the list: block 5 first fails the identity entry's first guard).

    python bench/module_sharing.py [--blocks 12,24] [--break bool] [--rounds 3]
    python bench/module_sharing.py --guards
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

nn = torch.nn


class Block(nn.Module):
    def __init__(self, d: int, float_break: bool) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(d, d), nn.Linear(d, d)
        self.float_break = float_break

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.l1(x))
        if self.float_break:
            if y.sum().item() > -1e9:  # data-dependent: a graph break
                y = y * 2
        elif (y.sum() > -1e9).item():
            y = y * 2
        return x + self.l2(y)


class Net(nn.Module):
    def __init__(self, n: int, d: int, float_break: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, float_break) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x


# Loops from a "<...>" file: the hook never compiles them as roots.
_NS: dict[str, Any] = {}
exec(
    compile(
        "def loop(fn, x, calls):\n    for _ in range(calls):\n        fn(x)\n",
        "<module_sharing loop>",
        "exec",
    ),
    _NS,
)
loop: Callable[..., None] = _NS["loop"]


def one_run(blocks: int, float_break: bool, steady_calls: int) -> dict[str, Any]:
    import xjit
    import xjit._frontend as fe

    torch.manual_seed(0)
    net, x = Net(blocks, 64, float_break).eval(), torch.randn(8, 64)
    f = xjit.jit(net)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.thread_time()
        out = f(x)
        compile_s = time.thread_time() - t0
        for _ in range(2):
            out = f(x)
        err = (out - net(x)).abs().max().item()
        xs, es = [], []
        for _ in range(7):
            t0 = time.thread_time()
            loop(f, x, steady_calls)
            xs.append((time.thread_time() - t0) / steady_calls * 1e3)
            t0 = time.thread_time()
            loop(net, x, steady_calls)
            es.append((time.thread_time() - t0) / steady_calls * 1e3)
    warns = [w for w in caught if issubclass(w.category, xjit.XjitWarning)]
    return {
        "compile_s": compile_s,
        "steady_ms": statistics.median(xs),
        "eager_ms": statistics.median(es),
        "graphs": len(fe.events()["graphs"]),
        "capture_compile_ms": sum(g["capture_ms"] + g["compile_ms"] for g in fe.events()["graphs"]),
        "warn": len(warns),
        "max_err": err,
    }


def guard_cost(calls: int, repeats: int) -> None:
    import xjit._frontend as fe
    from xjit.jit import _options

    torch.manual_seed(0)

    class Small(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1, self.l2 = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.l2(torch.relu(self.l1(x)))

    blocks, x = [Small() for _ in range(6)], torch.randn(1, 4)
    opts = _options("xjit", "cpu", False, None)
    with torch.no_grad():
        fe.call(opts, list, ((b(x) for b in blocks),), {})  # compiles: identity, then shared
        samples: dict[str, list[float]] = {"identity (block 0)": [], "shared (block 5)": []}
        for _ in range(repeats):
            for name, b in (("identity (block 0)", blocks[0]), ("shared (block 5)", blocks[5])):
                t0 = time.thread_time()
                fe.call(opts, loop, (b, x, calls), {})
                samples[name].append((time.thread_time() - t0) / calls * 1e6)
    print(f"per call of a compiled Small block from Python (thread CPU us, {repeats} rounds):")
    for name, v in samples.items():
        print(f"  {name:20s} median {statistics.median(v):6.2f}  [{min(v):.2f} .. {max(v):.2f}]")
    print("entries:", fe.code_state(Small.forward.__code__)["entries"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", default="12,24")
    ap.add_argument("--break", dest="brk", choices=("float", "bool"), default="float")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steady-calls", type=int, default=20)
    ap.add_argument("--guards", action="store_true")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.guards:
        guard_cost(2000, 9)
        return
    if args.one:
        print(json.dumps(one_run(args.one, args.brk == "float", args.steady_calls)))
        return
    print(f"torch {torch.__version__}, 1 thread, thread CPU time; break: {args.brk}")
    for n in (int(b) for b in args.blocks.split(",")):
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            for mode in ("before", "after"):
                env = dict(os.environ, XJIT_NO_CACHE="1")
                if mode == "before":
                    env["XJIT_NO_MODULE_SHARING"] = "1"
                else:
                    env.pop("XJIT_NO_MODULE_SHARING", None)
                cmd = [sys.executable, __file__, "--one", str(n), "--break", args.brk]
                cmd += ["--steady-calls", str(args.steady_calls)]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
        for mode, rs in runs.items():

            def fmt(key: str, scale: str = "{:.3f}") -> str:
                v = sorted(r[key] for r in rs)
                return scale.format(statistics.median(v)) + f" [{scale.format(v[0])}..{scale.format(v[-1])}]"

            print(
                f"{n:3d} blocks {mode:6s}: compile {fmt('compile_s')} s "
                f"(capture+compile {fmt('capture_compile_ms', '{:.1f}')} ms), steady "
                f"{fmt('steady_ms')} ms (eager {fmt('eager_ms')} ms), graphs "
                f"{rs[0]['graphs']}, warnings {rs[0]['warn']}, max err {max(r['max_err'] for r in rs):.1e}"
            )


if __name__ == "__main__":
    main()
