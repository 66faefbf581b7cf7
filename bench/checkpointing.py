"""Activation checkpointing: a Hugging Face GPT-2 training step with and without
`model.gradient_checkpointing_enable()`, eager against xjit (docs/frontend.md "Activation
checkpointing"). Each configuration runs in a fresh process: the model is built, two steps warm
it up (and compile), the resident-set high-water mark is reset, then --steps steps are timed.
Reports the median step time, the resident size after building the model and the peak RSS of
the timed steps (glibc's mmap threshold is fixed at 64 KiB in the children, so that freed
activations go back to the kernel rather than staying resident in malloc's free lists;
--default-malloc leaves it as users run), and each step's loss against eager's.

    python bench/checkpointing.py [--layers 6] [--seq 512] [--batch 2] [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [("eager", False), ("eager", True), ("xjit", False), ("xjit", True)]


def child(backend: str, ckpt: bool, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    sys.path.insert(0, str(ROOT))
    import transformers

    from bench.common import load_xjit, reset_peak_rss, rss_mb, setup_threads

    setup_threads()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=args.layers, n_embd=768, n_head=12, vocab_size=8192, n_positions=args.seq
    )
    model = transformers.GPT2LMHeadModel(cfg).train()
    built = rss_mb()
    model.config.use_cache = False
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    fn: Any = model
    if backend == "xjit":
        fn = load_xjit().jit(model)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses: list[float] = []

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.manual_seed(len(losses))  # dropout draws alike in every configuration
        loss = fn(ids, labels=ids).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())

    for _ in range(2):
        step()
    resettable = reset_peak_rss()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return {
        "backend": backend,
        "checkpointing": ckpt,
        "step_ms": statistics.median(times),
        "rss_before_mb": built,
        "peak_rss_mb": rss_mb("VmHWM") if resettable else None,
        "losses": losses,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--default-malloc", action="store_true", help="leave glibc's mmap threshold dynamic")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1] == "1", args)))
        return
    rows = []
    for backend, ckpt in CONFIGS:
        cmd = [sys.executable, __file__, "--child", backend, "1" if ckpt else "0"]
        cmd += ["--layers", str(args.layers), "--seq", str(args.seq), "--batch", str(args.batch)]
        cmd += ["--steps", str(args.steps)]
        env = dict(os.environ) if args.default_malloc else dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{backend} checkpointing={ckpt} failed")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ref = {r["checkpointing"]: r["losses"] for r in rows if r["backend"] == "eager"}
    print(f"GPT-2 ({args.layers} layers, 768 wide), batch {args.batch}, sequence {args.seq}, SGD; load {os.getloadavg()[0]:.1f}")
    print("| backend | checkpointing | step ms | RSS after building the model (MB) | peak RSS of the steps (MB) | max loss rel diff vs eager |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        diff = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], ref[r["checkpointing"]]))
        peak = "n/a" if r["peak_rss_mb"] is None else f"{r['peak_rss_mb']:.0f}"
        on = "on" if r["checkpointing"] else "off"
        print(f"| {r['backend']} | {on} | {r['step_ms']:.0f} | {r['rss_before_mb']:.0f} | {peak} | {diff:.1e} |")


if __name__ == "__main__":
    main()
