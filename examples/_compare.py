"""Shared by the examples: run a model eagerly and through `xjit.jit`, print speedup and compile time.

When xjit is not importable (or has no `jit` yet), the model runs eagerly only and says so.
Under `python -m xjit` every frame of the script is compiled, this file's included: the
comparison pauses that program mode (`xjit.jit.paused`), so the eager column is plain PyTorch
and the xjit column is the model compiled by `xjit.jit`, as under plain `python`.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def _median_s(fn: Callable[[], Any], calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _max_abs_err(out: Any, ref: Any) -> float:
    def leaves(x: Any) -> list[torch.Tensor]:
        if isinstance(x, torch.Tensor):
            return [x]
        values = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else []
        return [t for v in values for t in leaves(v)]

    return max((a - b).abs().max().item() for a, b in zip(leaves(out), leaves(ref), strict=True))


def _program_mode_paused() -> contextlib.AbstractContextManager[Any]:
    """`xjit.jit.paused()` (the hook leaves these frames alone), or nothing without xjit."""
    try:
        from xjit.jit import paused
    except ImportError:
        return contextlib.nullcontext()
    return paused()


def compare(name: str, model: torch.nn.Module, *inputs: torch.Tensor, calls: int = 20) -> None:
    with _program_mode_paused():
        _compare(name, model, inputs, calls)


def _compare(
    name: str, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], calls: int
) -> None:
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    model.eval()
    with torch.no_grad():
        ref = model(*inputs)
        eager_s = _median_s(lambda: model(*inputs), calls)
        print(f"{name}: eager {eager_s * 1e3:.2f} ms per call")
        try:
            import xjit

            jit = xjit.jit
        except (ImportError, AttributeError) as exc:
            print(f"xjit is not available ({type(exc).__name__}: {exc}); ran eager only")
            return
        compiled = jit(model)
        start = time.perf_counter()
        out = compiled(*inputs)
        compile_s = time.perf_counter() - start
        xjit_s = _median_s(lambda: compiled(*inputs), calls)
    print(
        f"{name}: xjit {xjit_s * 1e3:.2f} ms per call, {eager_s / xjit_s:.2f}x eager; "
        f"compile (first call) {compile_s:.2f} s; max abs error vs eager {_max_abs_err(out, ref):.1e}"
    )


def compare_training(
    name: str,
    model: torch.nn.Module,
    batch: dict[str, Any],
    make_optimizer: Callable[[Any], torch.optim.Optimizer],
    steps: int = 10,
) -> None:
    """Fine-tunes `model` (its forward returns `.loss`) and an eager copy side by side on the same
    batch for `steps` optimizer steps, the random draws (dropout) seeded alike per step; prints
    the time per step, the first step's (compile) time and the largest loss difference."""
    with _program_mode_paused():
        _compare_training(name, model, batch, make_optimizer, steps)


def _compare_training(
    name: str,
    model: torch.nn.Module,
    batch: dict[str, Any],
    make_optimizer: Callable[[Any], torch.optim.Optimizer],
    steps: int,
) -> None:
    import copy

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    model.train()
    eager = copy.deepcopy(model)
    try:
        import xjit

        compiled = xjit.jit(model)
    except (ImportError, AttributeError) as exc:
        print(f"xjit is not available ({type(exc).__name__}: {exc}); nothing to compare")
        return
    eager_opt, xjit_opt = make_optimizer(eager.parameters()), make_optimizer(model.parameters())
    # The optimizer step compiled too (SGD, Adam, AdamW: one fused update in place).
    runs = {"eager": (eager, eager_opt, eager_opt.step),
            "xjit": (compiled, xjit_opt, xjit.jit(lambda: xjit_opt.step()))}
    times: dict[str, list[float]] = {"eager": [], "xjit": []}
    losses: dict[str, list[float]] = {"eager": [], "xjit": []}
    for step in range(steps):
        for backend, (net, opt, opt_step) in runs.items():
            torch.manual_seed(1000 + step)
            start = time.perf_counter()
            opt.zero_grad()
            loss = net(**batch).loss
            loss.backward()
            opt_step()
            times[backend].append(time.perf_counter() - start)
            losses[backend].append(loss.item())
    # Steps 1 and 2 compile: the model at the first, the optimizer step at the second (its first
    # call runs in Python, making the optimizer's state).
    eager_s = statistics.median(times["eager"][2:])
    xjit_s = statistics.median(times["xjit"][2:])
    diff = max(abs(a - b) / abs(b) for a, b in zip(losses["xjit"], losses["eager"], strict=True))
    print(f"{name}: eager {eager_s * 1e3:.1f} ms per step")
    print(
        f"{name}: xjit {xjit_s * 1e3:.1f} ms per step, {eager_s / xjit_s:.2f}x eager; first step "
        f"(compile) {times['xjit'][0]:.2f} s, second {times['xjit'][1]:.2f} s; losses "
        f"{losses['xjit'][0]:.4f} -> "
        f"{losses['xjit'][-1]:.4f}, max relative difference vs eager {diff:.1e}"
    )
