"""Runs a generated program in eager PyTorch and under xjit.jit (static, and dynamic=True over
2-3 batch sizes) and compares results, mutated inputs and warnings; in "grad" mode its floating
inputs require grad and a backward through a fixed random projection of its outputs must give
eager's gradients (a compiled training step, or the frame in Python where it cannot train).
Reduces a failing program to a minimal one by deleting statements (delta debugging, one
statement at a time)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch

from .programs import Program, load

# Per-dtype tolerances (rtol, atol): f32 within ~1e-5 relative is the promise; generated chains
# of a dozen ops get a little slack. Integer and bool results compare exactly.
TOLERANCES = {
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-5, 1e-7),  # f64 results are often casts of f32 ones
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
}

# Gradients are sums over a chain's ops: the same relative bound as the values, measured against
# the largest gradient of the input (a gradient is often a difference of near-equal terms).
GRAD_TOLERANCES = {torch.float32: 1e-4, torch.float64: 1e-7}
LOW_PRECISION_GRAD_TOLERANCE = 1e-2  # a program computing in f16/bf16 on the way

# Kinds, most serious first. "stride" (right values, other strides than eager's on dims of size
# > 1; "stride1" where only size-1 dims' strides differ) is reported apart. "warning" is any
# other XjitWarning (a fallback with a reason), counted but not a failure.
SERIOUS = ("wrong", "wrong-grad", "alias", "crash", "internal")


@dataclass
class Finding:
    # wrong | wrong-grad | alias | crash | internal | alias-outputs | view-copy | stride | stride1
    # | warning
    kind: str
    mode: str  # static | dynamic
    batch: int
    detail: str

    def key(self) -> tuple[str, str]:
        return (self.kind, self.detail.split(":")[0])


def _compare(path: str, want: Any, got: Any) -> tuple[str, str] | None:
    """(kind, detail) of the first difference between eager's and xjit's value, or None."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return "wrong", f"{path}: expected a tensor, got {type(got).__name__}"
        if want.dtype != got.dtype:
            return "wrong", f"{path}: dtype {got.dtype} != eager's {want.dtype}"
        if want.shape != got.shape:
            return "wrong", f"{path}: shape {tuple(got.shape)} != eager's {tuple(want.shape)}"
        rtol, atol = TOLERANCES.get(want.dtype, (0.0, 0.0))
        if not torch.allclose(got.double(), want.double(), rtol=rtol, atol=atol, equal_nan=True) \
                if want.dtype in TOLERANCES else not torch.equal(got, want):
            diff = (got.double() - want.double()).abs().nan_to_num(float("inf")).max().item() \
                if want.numel() and want.dtype != torch.bool else "-"
            return "wrong", f"{path}: values differ (max abs diff {diff})"
        if want.numel() > 1 and want.stride() != got.stride():
            # Strides of size-1 dims address nothing: only .stride() itself shows them (not
            # is_contiguous(), view(), reshape or an in-place op), so they are a kind apart.
            big = [d for d, n in enumerate(want.shape) if n != 1]
            kind = "stride" if any(want.stride(d) != got.stride(d) for d in big) else "stride1"
            return kind, f"{path}: strides {got.stride()} != eager's {want.stride()}"
        return None
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return "wrong", f"{path}: expected a sequence of {len(want)}"
        for i, (w, g) in enumerate(zip(want, got)):
            r = _compare(f"{path}[{i}]", w, g)
            if r is not None:
                return r
        return None
    if want != got and not (want != want and got != got):
        return "wrong", f"{path}: {got!r} != eager's {want!r}"
    return None


def _run_eager(ns: dict[str, Any], batch: int) -> tuple[list[Any], Any] | None:
    inputs = ns["make_inputs"](batch)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = ns["fn"](*inputs)
    except Exception:
        return None
    return inputs, out


def _check_call(jitted: Any, ns: dict[str, Any], batch: int, mode: str) -> list[Finding]:
    import xjit

    ref = _run_eager(ns, batch)
    if ref is None:
        return []  # eager rejects this batch size: nothing to compare
    want_inputs, want = ref
    inputs = ns["make_inputs"](batch)
    found: list[Finding] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = jitted(*inputs)
        except Exception as e:  # noqa: BLE001 - any exception eager did not raise is a bug
            return [Finding("crash", mode, batch, f"{type(e).__name__}: {str(e)[:300]}")]
    for w in caught:
        if issubclass(w.category, xjit.XjitWarning):
            text = str(w.message)
            kind = "internal" if "XJIT-E" in text else "warning"
            found.append(Finding(kind, mode, batch, text[:400]))
    diff = _compare("output", want, got)
    if diff is None:
        diff = _compare("inputs after the call", want_inputs, inputs)
    if diff is None or diff[0] in ("stride", "stride1"):
        alias = _compare_aliasing(want, want_inputs, got, inputs)
        if alias is not None:
            diff = alias
    if diff is not None:
        found.append(Finding(diff[0], mode, batch, diff[1]))
    return found


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _compare_aliasing(want: Any, want_inputs: list[Any], got: Any,
                      inputs: list[Any]) -> tuple[str, str] | None:
    """Which results share memory is part of the answer: the caller may write an output or an
    input after the call. Writes each output and input in turn, on both sides, and compares
    everything after each write ("alias": xjit shares memory that eager does not, or not
    memory that eager does)."""
    w_all = _tensors(want) + _tensors(want_inputs)
    g_all = _tensors(got) + _tensors(inputs)
    if len(w_all) != len(g_all):
        return None
    n_out = len(_tensors(want))
    for i, (w, g) in enumerate(zip(w_all, g_all)):
        what = f"output {i}" if i < n_out else f"input {i - n_out}"
        if w.dtype == torch.bool or w.numel() == 0:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                w.add_(1)
        except RuntimeError:
            continue  # eager cannot write it (an expanded view): nothing to compare
        try:
            g.add_(1)
        except RuntimeError as e:
            return "stride", f"writing {what} after the call: {str(e)[:120]}"
        for j, (w2, g2) in enumerate(zip(w_all, g_all)):
            r = _compare(f"after writing {what}, tensor {j}", w2, g2)
            if r is not None and r[0] not in ("stride", "stride1"):
                return _alias_kind(w, w2, g, g2, i < n_out and j < n_out), r[1]
    return None


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _alias_kind(w: torch.Tensor, w2: torch.Tensor, g: torch.Tensor, g2: torch.Tensor,
                both_outputs: bool) -> str:
    """'alias': xjit shares memory with an input that eager does not (a write by the caller
    reaches the wrong tensor). 'alias-outputs': two outputs are one tensor where eager returns
    two (a known limit: copies between outputs are dropped). 'view-copy': eager returns a view
    of an input where xjit returns a copy (output views are the strides work)."""
    if _shares(g, g2) and not _shares(w, w2):
        return "alias-outputs" if both_outputs else "alias"
    return "view-copy"


def _grad_inputs(ns: dict[str, Any], batch: int) -> list[Any]:
    """The program's inputs with every f32/f64 leaf requiring grad (views made of them before
    stay grad-free: their base was not yet a variable)."""
    inputs = ns["make_inputs"](batch)
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.dtype in GRAD_TOLERANCES and t._base is None:
            t.requires_grad_(True)
    return inputs


def _backward(out: Any, inputs: list[Any]) -> list[Any] | None:
    """Gradients of sum(out_i * r_i) (r_i fixed by i) for the inputs that require grad; None
    when no output carries a gradient."""
    outs = [t for t in _tensors(out) if t.requires_grad]
    if not outs:
        return None
    loss = sum((t * torch.randn(t.shape, generator=torch.Generator().manual_seed(i),
                                dtype=t.dtype)).sum() for i, t in enumerate(outs))
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return list(torch.autograd.grad(loss, wrt, allow_unused=True))


def _check_grad_call(jitted: Any, ns: dict[str, Any], batch: int, low_precision: bool) -> list[Finding]:
    import xjit

    mode = "grad"
    inputs = _grad_inputs(ns, batch)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = ns["fn"](*inputs)
            want_grads = _backward(want, inputs)
    except Exception:
        return []  # eager rejects it (an in-place write of a leaf that requires grad...)
    inputs = _grad_inputs(ns, batch)
    found: list[Finding] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = jitted(*inputs)
            got_grads = _backward(got, inputs)
        except Exception as e:  # noqa: BLE001 - any exception eager did not raise is a bug
            return [Finding("crash", mode, batch, f"{type(e).__name__}: {str(e)[:300]}")]
    for w in caught:
        if issubclass(w.category, xjit.XjitWarning):
            text = str(w.message)
            found.append(Finding("internal" if "XJIT-E" in text else "warning", mode, batch,
                                 text[:400]))
    with torch.no_grad():
        diff = _compare("output", _detached(want), _detached(got))
    if diff is not None and diff[0] not in ("stride", "stride1"):
        return found + [Finding(diff[0], mode, batch, diff[1])]
    w_flags = [t.requires_grad for t in _tensors(want)]
    g_flags = [t.requires_grad for t in _tensors(got)]
    if w_flags != g_flags:
        return found + [Finding("wrong-grad", mode, batch,
                                f"outputs' requires_grad {g_flags} != eager's {w_flags}")]
    for i, (w, g) in enumerate(zip(want_grads or [], got_grads or [])):
        if (w is None) != (g is None):
            return found + [Finding("wrong-grad", mode, batch,
                                    f"gradient {i}: {'none' if g is None else 'a tensor'} where "
                                    f"eager has {'none' if w is None else 'a tensor'}")]
        if w is None:
            continue
        scale = w.abs().max().item() if w.numel() else 1.0
        rtol = LOW_PRECISION_GRAD_TOLERANCE if low_precision else GRAD_TOLERANCES[w.dtype]
        if w.shape != g.shape or w.dtype != g.dtype or not torch.allclose(
                g, w, rtol=rtol, atol=rtol * max(1.0, scale), equal_nan=True):
            err = (g.double() - w.double()).abs().nan_to_num(float("inf")).max().item() \
                if w.shape == g.shape else "-"
            return found + [Finding("wrong-grad", mode, batch,
                                    f"gradient of input {i}: max abs diff {err}")]
    return found


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(v) for v in value)
    return value


def check(src: str, prog: Program, modes: tuple[str, ...] = ("static", "dynamic")) -> list[Finding]:
    """Every finding of one program (its text `src`) over the modes."""
    import xjit
    from xjit import _frontend as fe

    found: list[Finding] = []
    for mode in modes:
        fe.reset()
        ns = load(src, f"<fuzz seed {prog.seed}>")
        if mode == "grad":
            jitted = xjit.jit(ns["fn"])
            for _ in range(2):  # the second call runs the cached training step
                found += _check_grad_call(jitted, ns, prog.batch, "float16" in src)
            continue
        if mode == "static":
            jitted = xjit.jit(ns["fn"])
            batches = [prog.batch, prog.batch]  # the second call runs the cached graph
        else:
            jitted = xjit.jit(ns["fn"], dynamic=True)
            batches = [prog.batch] + prog.extra_batches
        for b in batches:
            found += _check_call(jitted, ns, b, mode)
    fe.reset()
    return found


def serious(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.kind in SERIOUS]


def reduce(prog: Program, kind: str, modes: tuple[str, ...] = ("static", "dynamic")) -> str:
    """The shortest program (by deleting statements one at a time until none can go) that still
    has a finding of `kind`; candidates eager cannot run are skipped by `check` itself."""
    body = list(prog.body)

    def fails(candidate: list[str]) -> bool:
        src = prog.source(candidate)
        try:
            ns = load(src)
            if _run_eager(ns, prog.batch) is None:
                return False
        except Exception:
            return False
        return any(f.kind == kind for f in check(src, prog, modes))

    changed = True
    while changed:
        changed = False
        for i in range(len(body) - 1, -1, -1):
            candidate = body[:i] + body[i + 1:]
            if fails(candidate):
                body = candidate
                changed = True
    # fewer returned values too
    returns = list(prog.returns)
    for r in list(returns):
        trial = Program(prog.seed, prog.batch, prog.inputs_src, prog.n_inputs, body,
                        [x for x in returns if x != r], prog.extra_batches)
        src = trial.source()
        try:
            ok = _run_eager(load(src), prog.batch) is not None and any(
                f.kind == kind for f in check(src, trial, modes))
        except Exception:
            ok = False
        if ok:
            returns.remove(r)
    final = Program(prog.seed, prog.batch, prog.inputs_src, prog.n_inputs, body, returns,
                    prog.extra_batches)
    return final.source()
