"""Shared helpers: machine description, backends, timing, memory and error measurement."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import resource
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("eager", "inductor", "xjit")
COMPILERS = ("inductor", "xjit")


def cores() -> int:
    return len(os.sched_getaffinity(0))


def setup_threads() -> None:
    torch.set_num_threads(cores())


def cpu_info() -> tuple[str, list[str]]:
    """CPU model name and the vector ISA extensions that matter for kernels."""
    fields: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or platform.processor() or "unknown"
    flags = fields.get("flags", "").split()
    return model, [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags]


def describe_machine() -> dict[str, Any]:
    model, isa = cpu_info()
    return {
        "cpu": model,
        "isa": isa,
        "cores": cores(),
        "torch_threads": torch.get_num_threads(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": importlib.metadata.version("transformers"),
        "loadavg_1m_at_start": os.getloadavg()[0],
        "env": {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "GOMP_", "KMP_", "MKL_", "TORCH"))},
    }


def error_text(exc: BaseException) -> str:
    """One-line reason plus the last traceback frames, for the JSON."""
    tail = "".join(traceback.format_exception(exc)[-3:])
    return f"{type(exc).__name__}: {exc}"[:500] + "\n" + tail[-1500:]


def load_xjit() -> Any:
    """Import xjit (installed, or from the source tree's python/ dir); raise if it has no `jit`."""
    try:
        xjit = importlib.import_module("xjit")
    except ModuleNotFoundError:
        src = ROOT / "python"
        if not (src / "xjit" / "__init__.py").exists():
            raise
        sys.path.insert(0, str(src))
        xjit = importlib.import_module("xjit")
    if not callable(getattr(xjit, "jit", None)):
        raise RuntimeError("xjit is importable but exposes no callable `jit`")
    return xjit


def make_backend(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if name == "eager":
        return fn
    compiled: Callable[..., Any]
    if name == "inductor":
        compiled = torch.compile(fn)
    elif name == "xjit":
        compiled = load_xjit().jit(fn)
    else:
        raise ValueError(f"unknown backend {name!r}")
    return compiled


def time_per_call(fn: Callable[[], Any], inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def thread_time_per_call(fn: Callable[[], Any], inner: int) -> float:
    """CPU seconds of the calling thread per call: what a loaded machine still measures fairly
    when everything runs on that one thread."""
    start = time.thread_time()
    for _ in range(inner):
        fn()
    return (time.thread_time() - start) / inner


def prepare(
    backends: list[str], fn: Callable[..., Any], args: tuple[Any, ...], calls: int = 3
) -> tuple[dict[str, Callable[[], Any]], dict[str, Any], dict[str, str]]:
    """Wrap `fn` with each backend and call it `calls` times (compiling it): the ready-to-time
    closures, each backend's last output, and the error text of each backend that failed."""
    fns: dict[str, Callable[[], Any]] = {}
    outputs: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for b in backends:
        try:
            f = make_backend(b, fn)
            for _ in range(calls):
                outputs[b] = f(*args)
            fns[b] = partial(f, *args)
        except Exception as exc:
            errors[b] = error_text(exc)
    return fns, outputs, errors


def interleave(
    fns: dict[str, Callable[[], Any]],
    repeats: int,
    inner: int,
    errors: dict[str, str],
    timer: Callable[[Callable[[], Any], int], float] = time_per_call,
) -> dict[str, list[float]]:
    """Per-call seconds (`timer`: wall by default), `repeats` samples of `inner` calls for each
    fn, round-robin with the order rotated every repeat. A fn that raises is dropped and its
    error added to `errors`."""
    live = dict(fns)
    samples: dict[str, list[float]] = {n: [] for n in fns}
    for r in range(repeats):
        names = list(live)
        for n in names[r % len(names) :] + names[: r % len(names)]:
            try:
                samples[n].append(timer(live[n], inner))
            except Exception as exc:
                errors[n] = error_text(exc)
                del live[n]
    return {n: s for n, s in samples.items() if n in live}


def interleaved_medians(
    fns: dict[str, Callable[[], Any]],
    repeats: int,
    inner: int,
    timer: Callable[[Callable[[], Any], int], float] = time_per_call,
) -> dict[str, float]:
    """Median seconds per call of each fn, interleaved as `interleave` does; raises if one fails."""
    errors: dict[str, str] = {}
    samples = interleave(fns, repeats, inner, errors, timer)
    if errors:
        raise RuntimeError("; ".join(f"{n}: {e}" for n, e in errors.items()))
    return {n: statistics.median(v) for n, v in samples.items()}


def medians_line(name: str, samples: dict[str, list[float]]) -> tuple[str, dict[str, float]]:
    """`name threads=N: eager 1.00 ms b 0.50 ms (2.00x eager) ...` from interleaved samples (s
    per call), and the medians in ms."""
    med = {b: statistics.median(v) * 1e3 for b, v in samples.items()}
    line = f"{name} threads={torch.get_num_threads()}:"
    for b, ms in med.items():
        line += f" {b} {ms:.2f} ms"
        if b != "eager" and "eager" in med:
            line += f" ({med['eager'] / ms:.2f}x eager)"
    return line, med


def leaves(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, Mapping):
        return [t for v in out.values() for t in leaves(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in leaves(v)]
    return []


def max_errors(out: Any, ref: Any) -> dict[str, float]:
    """Max abs error, and max abs error relative to the largest |ref| of the same output."""
    got, want = leaves(out), leaves(ref)
    if len(got) != len(want):
        raise ValueError(f"{len(got)} output tensors, eager has {len(want)}")
    abs_err = rel_err = 0.0
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape:  # (would broadcast in the subtraction)
            raise ValueError(f"output shape {tuple(g.shape)}, eager {tuple(w.shape)}")
        diff = (g.float() - w.float()).abs().max().item() if w.numel() else 0.0
        scale = w.float().abs().max().item() if w.numel() else 0.0
        abs_err = max(abs_err, diff)
        rel_err = max(rel_err, diff / scale if scale else diff)
    return {"max_abs_err": abs_err, "max_rel_err": rel_err}


# Peak memory: the process's resident-set high-water mark (VmHWM), which Linux lets a process
# reset by writing "5" to /proc/self/clear_refs. It counts everything torch allocates (weights,
# activations, compiled code, allocator caches), unlike tracemalloc.


def rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def children_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def kernel_cases_main(cases: Mapping[str, tuple[Any, ...]], no_grad: bool = False) -> None:
    """The command line of a kernel-case script (bench/strided_kernels.py and the like):
    --repeats, --inner, --inductor, --only; one thread; print_kernel_cases with strides."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--inductor", action="store_true")
    ap.add_argument("--only", default="", help="run the cases whose name contains this text")
    args = ap.parse_args()
    torch.set_num_threads(1)
    backends = ["eager", "xjit"] + (["inductor"] if args.inductor else [])
    selected = {name: case for name, case in cases.items() if args.only in name}
    with torch.no_grad() if no_grad else torch.enable_grad():
        print_kernel_cases(selected, backends, args.repeats, args.inner, strides=True)


def print_kernel_cases(
    cases: Mapping[str, tuple[Any, ...]],
    backends: list[str],
    repeats: int,
    inner: int,
    strides: bool = False,
) -> None:
    """One line per case: each backend's median thread CPU time per call (interleaved), its ratio
    to eager, xjit's largest error and, with `strides`, whether its output strides differ. A case
    is (fn, inputs) or (fn, inputs, eager_fn): eager then times eager_fn (PyTorch's own kernel for
    what the compilers see as its decomposition, such as aten.gelu_backward)."""
    for name, (fn, inputs, *eager_fn) in cases.items():
        fns, outputs, errors = {}, {}, {}
        for b in backends:
            f, o, e = prepare([b], eager_fn[0] if eager_fn and b == "eager" else fn, inputs)
            fns.update(f)
            outputs.update(o)
            errors.update(e)
        samples = interleave(fns, repeats, inner, errors, thread_time_per_call)
        med = {b: statistics.median(s) * 1e6 for b, s in samples.items()}
        line = f"{name}:"
        for b, us in med.items():
            line += f" {b} {us:.0f} us"
            if b != "eager":
                line += f" ({med['eager'] / us:.2f}x eager)"
        if "xjit" in outputs:
            err = max_errors(outputs["xjit"], outputs["eager"])
            line += f"  max |xjit - eager| {err['max_abs_err']:.2g}"
            if strides and outputs["xjit"].stride() != outputs["eager"].stride():
                line += f"  strides differ: {outputs['xjit'].stride()}"
        print(line + "".join(f"  {b} failed: {e}" for b, e in errors.items()), flush=True)
