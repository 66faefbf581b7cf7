"""First-call compile time of the frontend on real models, beside torch.compile's (a benchmark,
not a test).

For each model of the bench suite (bench/models.py: BERT-base, GPT-2 small, a ~100M LLaMA at
sequence length 128, batch 1, ...) every measurement runs in a fresh Python process (nothing
cached: no compiled entries, fresh inductor and xjit compile-cache directories) and reports the
median over repeats of:

  xjit capture    the bytecode analyzer on every compiled frame of the first call (C++ timer)
  xjit compile    verify + the pass pipeline + the native backend's code generation
  xjit first call wall time of the whole first call (capture + compile + running the graphs)
  dynamo          torch.compile(model, backend="eager") first call: TorchDynamo's capture alone
  inductor        torch.compile(model) first call: capture + AOT autograd + Inductor codegen

    PYTHONPATH=build/py/python python bench/frontend_capture.py [--models bert,gpt2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("xjit", "dynamo", "inductor")


def worker(model_name: str, mode: str) -> dict[str, float]:
    import torch

    sys.path.insert(0, str(ROOT))
    from bench.models import CASES

    case = next(c for c in CASES.values() if c.model == model_name and c.batch == 1)
    model, inputs = case.build()
    with torch.no_grad():
        if mode == "xjit":
            import xjit
            from xjit import _frontend

            compiled = xjit.jit(model)
            _frontend.set_recording(True)
            t0 = time.perf_counter()
            compiled(*inputs)
            total = (time.perf_counter() - t0) * 1e3
            events = _frontend.events()
            return {
                "capture_ms": sum(g["capture_ms"] for g in events["graphs"]),
                "compile_ms": sum(g["compile_ms"] for g in events["graphs"]),
                "first_call_ms": total,
                "graphs": len(events["graphs"]),
                "breaks": len(events["breaks"]),
            }
        backend = "eager" if mode == "dynamo" else "inductor"
        compiled = torch.compile(model, backend=backend)
        t0 = time.perf_counter()
        compiled(*inputs)
        return {"first_call_ms": (time.perf_counter() - t0) * 1e3}


def measure(model_name: str, mode: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(
            os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=cache, XJIT_CACHE_DIR=cache
        )
        out = subprocess.run(
            [sys.executable, __file__, "--worker", model_name, mode],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if out.returncode != 0:
        raise RuntimeError(f"{model_name}/{mode} failed:\n{out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet18,lstm,bert,gpt2,llama,vit")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--inductor-repeats", type=int, default=2, help="inductor takes minutes per model"
    )
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"))
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    header = (
        "| model | xjit capture | xjit compile | xjit first call | graphs/breaks "
        "| dynamo first call | inductor first call |"
    )
    print(header)
    print("|" + "---|" * 7)
    for model_name in args.models.split(","):
        runs: dict[str, list[dict[str, float]]] = {}
        for mode in args.modes.split(","):
            n = args.inductor_repeats if mode == "inductor" else args.repeats
            runs[mode] = [measure(model_name, mode) for _ in range(n)]

        def med(mode: str, key: str) -> str:
            if mode not in runs:
                return "-"
            value = statistics.median(r[key] for r in runs[mode])
            return f"{value:.1f} ms" if value < 10 else f"{value:.0f} ms"

        x = runs.get("xjit", [{}])[0]
        shape = f"{x.get('graphs', '-')}/{x.get('breaks', '-')}"
        cap = med("xjit", "capture_ms")
        compile_ms = med("xjit", "compile_ms")
        print(
            f"| {model_name} | {cap} | {compile_ms} | {med('xjit', 'first_call_ms')} | {shape} "
            f"| {med('dynamo', 'first_call_ms')} | {med('inductor', 'first_call_ms')} |",
            flush=True,
        )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
