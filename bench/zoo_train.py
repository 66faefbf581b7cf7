"""Training steps of bench/zoo.py's models (`python bench/zoo.py --train`): per model, one step
in train() mode (forward, loss, backward; no optimizer step) compiled by xjit, against eager
and a float64 reference on deep copies of the same model.

Dropout stays on: the same seed (torch, numpy, random) is set before each copy's step, and
xjit draws its dropout noise from PyTorch's generator in eager's order (docs/frontend.md
"Autograd"). The float64 copy draws its random numbers in float32 and widens them
(`F32Draws`): torch.rand in float64 reads other bits of the generator than in float32.

The loss is a fixed random projection of every float output that requires grad. The check is
norm-wise against the float64 copy: for each parameter whose float64 gradient is not ~0
relative to the model's largest (attention key biases, a bias before a training-mode batch
norm: their true gradient is 0), ||g - g64|| / ||g64|| of xjit must be within max(4 x eager's,
1e-6); the loss likewise relative to its scale (the sum of |terms|), and the float buffers a
step updates (batch norms' running statistics) relative to their float64 values.
"""

from __future__ import annotations

import copy
import random
import statistics
import time
import warnings
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bench.common import leaves

SEED = 1234
FACTOR = 4.0  # xjit's error may be this many times eager's (against float64)
FLOOR = 1e-6  # ... or this much, whichever is larger
ZERO_GRAD = 1e-10  # a float64 gradient norm below this fraction of the largest is rounding: ~0
DROPOUT_NOISE = "F.dropout's noise"  # the fallback node compiled dropout draws through

# What is changed in a model before its step (randomness switched off, another implementation
# that float64 takes), and why (shown in the table's notes).
ADJUSTMENTS: dict[str, tuple[str, Any]] = {
    "wav2vec2": (
        "SpecAugment and LayerDrop off (config.mask_time_prob = config.layerdrop = 0): the time "
        "mask is drawn with numpy in Python (_compute_mask_indices) and each layer is skipped or "
        "not on a torch.rand draw (`if` on a tensor): graph breaks by nature, which send the whole "
        "step to Python",
        lambda m: (setattr(m.config, "mask_time_prob", 0.0), setattr(m.config, "layerdrop", 0.0)),
    ),
}
ADJUSTMENTS["hubert"] = ADJUSTMENTS["wav2vec2"]  # the same SpecAugment and LayerDrop
# What is changed in the float64 reference copy only: eager's default experts (grouped_mm, which
# under torch.compile-like tracing is transformers' grouped_mm_fallback) take no float64 on CPU,
# so the reference computes the same experts as batched matmuls (session 19: before, the float32
# models were adjusted too and the compiled step never ran the grouped products).
F64_ADJUSTMENTS: dict[str, tuple[str, Any]] = {
    name: (
        "float64 reference with experts as batched matmuls (set_experts_implementation('batched_mm')): "
        "eager's default grouped_mm takes no float64",
        lambda m: m.set_experts_implementation("batched_mm"),
    )
    for name in ("mixtral", "qwen2-moe")
}

aten = torch.ops.aten
_FACTORIES = {aten.rand, aten.randn, aten.rand_like, aten.randn_like, aten.randint_like}
_FILLS = {aten.uniform_, aten.normal_, aten.bernoulli_, aten.exponential_, aten.random_}


class F32Draws(TorchDispatchMode):
    """The float64 reference's step: random numbers of float64 tensors drawn as float32 and
    widened, so that a float64 copy of a model sees the float32 model's draws (bernoulli_ reads
    the generator alike in both; rand does not). Also, batch norm's backward gets its gradient
    in its input's layout: torch 2.13's CPU kernel reads a channels-last gradient of an NCHW
    input wrongly (LeViT: 5.9 off the decomposed batch norm in float64; docs/perf.md, "Session
    21: seventeen more zoo families"), and the reference has to be right."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet is aten.native_batch_norm_backward and args[0].stride() != args[1].stride():
            grad = torch.empty_like(args[1]).copy_(args[0])  # empty_like keeps the input's strides
            return func(grad, *args[1:], **kwargs)
        if packet in _FACTORIES:
            like = args[0] if args and isinstance(args[0], torch.Tensor) else None
            dtype = kwargs.get("dtype") or (like.dtype if like is not None else torch.get_default_dtype())
            if dtype == torch.float64:
                return func(*args, **{**kwargs, "dtype": torch.float32}).to(torch.float64)
        elif packet in _FILLS and args[0].dtype == torch.float64:
            narrow = torch.empty(args[0].shape, dtype=torch.float32)
            func(narrow, *args[1:], **kwargs)
            return args[0].copy_(narrow)
        return func(*args, **kwargs)


def seed_all(seed: int = SEED) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def grad_outputs(out: Any) -> list[torch.Tensor]:
    return [t for t in leaves(out) if t.is_floating_point() and t.requires_grad]


def projection_loss(out: Any) -> tuple[torch.Tensor, float]:
    """sum_i <t_i, r_i> / sqrt(numel) over the float outputs that require grad, r_i fixed
    random (float32 draws, so every dtype projects on the same values); and the loss's scale,
    sum of |terms| (its relative error is meaningless when the terms cancel)."""
    total: Any = 0
    scale = 0.0
    for i, t in enumerate(grad_outputs(out)):
        r = torch.randn(t.shape, generator=torch.Generator().manual_seed(i)).to(t.dtype)
        term = t * r / t.numel() ** 0.5
        total = total + term.sum()
        scale += term.detach().abs().sum().item()
    if isinstance(total, int):
        raise RuntimeError("no float output requires grad")
    return total, scale


def _f64(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.double()
    return value


def step(model: Any, fn: Any, kwargs: dict[str, Any], seed: int = SEED) -> tuple[Any, torch.Tensor, float]:
    """One seeded step: output, loss (backward done) and the loss's scale."""
    seed_all(seed)
    out = fn(**kwargs)
    loss, scale = projection_loss(out)
    loss.backward()
    return out, loss, scale


def _rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a.double() - ref).norm() / ref.norm()).item()


def steps(
    model: Any, compiled_model: Any, compiled: Any, kwargs: dict[str, Any], name: str = ""
) -> dict[str, Any]:
    """One seeded step of `model` (eager), of `compiled` (xjit, on `compiled_model`, a deep copy
    of `model` made before) and of a float64 copy of `model` (under F32Draws, with
    F64_ADJUSTMENTS[name] applied): the copy, outputs, losses and the float64 loss's scale.
    `model` must not have stepped yet."""
    m64 = copy.deepcopy(model).double()
    if name in F64_ADJUSTMENTS:
        F64_ADJUSTMENTS[name][1](m64)
    with F32Draws():
        _, l64, scale64 = step(m64, m64, {k: _f64(v) for k, v in kwargs.items()})
    out_e, l_e, _ = step(model, model, kwargs)
    out_x, l_x, _ = step(compiled_model, compiled, kwargs)
    return {"m64": m64, "out_e": out_e, "out_x": out_x, "l_e": l_e, "l_x": l_x, "l64": l64, "scale64": scale64}


def gradients(model: Any, compiled_model: Any, m64: Any) -> list[tuple[str, Any, Any, Any]]:
    """(name, eager's, xjit's, float64's gradient) per parameter, after `steps`."""
    pairs = zip(model.named_parameters(), compiled_model.parameters(), m64.parameters(), strict=True)
    return [(n, p.grad, px.grad, p64.grad) for (n, p), px, p64 in pairs]


def gradient_errors(grads: list[tuple[str, Any, Any, Any]]) -> list[tuple[str, float, float]]:
    """(name, eager's error, xjit's error) against float64 for each parameter whose float64
    gradient is not ~0 relative to the largest."""
    largest = max((g64.norm().item() for _, _, _, g64 in grads if g64 is not None), default=0.0)
    return [
        (n, _rel(ge, g64), _rel(gx, g64)) for n, ge, gx, g64 in grads if _checkable(ge, gx, g64, largest)
    ]


def compare(
    model: Any, compiled_model: Any, compiled: Any, kwargs: dict[str, Any], name: str = ""
) -> dict[str, Any]:
    """Runs `steps` and compares losses, gradients and updated buffers."""
    st = steps(model, compiled_model, compiled, kwargs, name)
    m64, l64, l_e, l_x = st["m64"], st["l64"], st["l_e"], st["l_x"]
    res: dict[str, Any] = {"problems": []}
    n_e, n_x = len(grad_outputs(st["out_e"])), len(grad_outputs(st["out_x"]))
    if n_e != n_x:
        res["problems"].append(f"{n_x} outputs require grad, eager has {n_e}")
    res["loss_err_eager"] = abs(l_e.item() - l64.item()) / st["scale64"]
    res["loss_err_xjit"] = abs(l_x.item() - l64.item()) / st["scale64"]
    grads = gradients(model, compiled_model, m64)
    for name, ge, gx, _ in grads:
        if (ge is None) != (gx is None):
            res["problems"].append(f"{name}: gradient {'missing' if gx is None else 'unexpected'}")
    errors = gradient_errors(grads)
    worst: dict[str, Any] = {"ratio": 0.0}
    for name, e_e, e_x in errors:
        ratio = e_x / max(e_e, FLOOR / FACTOR)
        if ratio > worst["ratio"]:
            worst = {"ratio": ratio, "param": name, "err_xjit": e_x, "err_eager": e_e}
    res["grads_checked"], res["grads"] = len(errors), len(grads)
    res["grad_worst"] = worst
    res["grad_err_xjit"] = max((e_x for _, _, e_x in errors), default=0.0)
    res["grad_err_eager"] = max((e_e for _, e_e, _ in errors), default=0.0)
    bufs = zip(model.named_buffers(), compiled_model.buffers(), m64.buffers(), strict=True)
    buf_worst = 0.0
    for (name, be), bx, b64 in bufs:
        if not be.is_floating_point() or b64.norm().item() == 0:
            continue
        e_e, e_x = _rel(be, b64), _rel(bx, b64)
        buf_worst = max(buf_worst, e_x / max(e_e, FLOOR / FACTOR))
        if e_x > max(FACTOR * e_e, FLOOR):
            res["problems"].append(f"buffer {name}: error {e_x:.1e} vs float64, eager's {e_e:.1e}")
    res["buffer_ratio"] = buf_worst
    if res["loss_err_xjit"] > max(FACTOR * res["loss_err_eager"], FLOOR):
        res["problems"].append(f"loss error {res['loss_err_xjit']:.1e} vs float64, eager's {res['loss_err_eager']:.1e}")
    if worst["ratio"] > FACTOR:
        res["problems"].append(
            f"gradient of {worst['param']}: error {worst['err_xjit']:.1e} vs float64, eager's {worst['err_eager']:.1e}"
        )
    return res


def _checkable(ge: Any, gx: Any, g64: Any, largest: float) -> bool:
    return ge is not None and gx is not None and g64 is not None and g64.norm().item() > ZERO_GRAD * largest


def train_model(name: str, size: Any = None, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """bench/zoo.py's model `name` (BENCH size unless `size`) in train() mode with its
    ADJUSTMENTS applied, and its inputs."""
    from bench import zoo

    model, kwargs = zoo.build(name, size or zoo.BENCH, seed)
    model.train()
    if name in ADJUSTMENTS:
        ADJUSTMENTS[name][1](model)
    return model, kwargs


def run_one(name: str, rounds: int, timer: str) -> dict[str, Any]:
    """Measure one model's training step in this process; the result as a JSON-able dict."""
    import xjit

    from bench import zoo

    result: dict[str, Any] = {"model": name}
    model, kwargs = train_model(name)
    if name in ADJUSTMENTS:
        result["adjusted"] = ADJUSTMENTS[name][0]
    elif name in F64_ADJUSTMENTS:
        result["adjusted"] = F64_ADJUSTMENTS[name][0]
    result["params_m"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 2)
    mx = copy.deepcopy(model)
    compiled = xjit.jit(mx)
    reports: list[Any] = []

    def explained(**kw: Any) -> Any:
        reports.append(xjit.explain(compiled)(**kw))
        return reports[-1].output

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        check = compare(model, mx, explained, kwargs, name)
        result["first_step_s"] = time.perf_counter() - t0  # includes eager's and float64's steps
    report = reports[0]
    result.update(check)
    result["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught})
    result["graphs"] = report.graph_count
    result["breaks"] = [f"{b.where}: {b.reason}" for b in report.graph_breaks]
    result["fallback_targets"] = zoo.fallback_targets(report)
    result["in_python"] = [g.note for g in report.graphs if g.runs_in_python]
    result["train_notes"] = [g.note for g in report.graphs if not g.runs_in_python and g.note]

    clock = time.process_time if timer == "cpu" else time.perf_counter
    fns = {"eager": (model, model), "xjit": (mx, compiled)}
    times: dict[str, list[float]] = {"eager": [], "xjit": []}

    def one(b: str) -> None:
        m, f = fns[b]
        m.zero_grad(set_to_none=True)
        projection_loss(f(**kwargs))[0].backward()

    t0 = clock()
    one("eager")
    inner = max(1, min(5, int(0.05 / max(clock() - t0, 1e-6))))
    result["steps_per_sample"] = inner
    for r in range(rounds):
        for b in ("eager", "xjit") if r % 2 == 0 else ("xjit", "eager"):
            t0 = clock()
            for _ in range(inner):
                one(b)
            times[b].append((clock() - t0) / inner)
    result["eager_ms"] = statistics.median(times["eager"]) * 1e3
    result["xjit_ms"] = statistics.median(times["xjit"]) * 1e3
    result["spread_pct"] = {
        b: round(100 * (max(v) - min(v)) / statistics.median(v), 1) for b, v in times.items()
    }
    result["speedup"] = result["eager_ms"] / result["xjit_ms"]
    return result


def status(r: dict[str, Any]) -> str:
    if "error" in r:
        return "error"
    if r["problems"]:
        return "MISMATCH"
    other = {t for t in r["fallback_targets"] if t != DROPOUT_NOISE}
    if r["graphs"] == 1 and not r["breaks"] and not r["in_python"] and not other and not r["warnings"]:
        return "ok"
    return "runs"


def _why(r: dict[str, Any]) -> str:
    """The training-step note of a compiled step, or why (part of) it runs in Python."""
    if r["in_python"]:
        note = r["in_python"][0]
        return note.split("enabled and ", 1)[-1][:160].replace("|", "/")
    if r["breaks"]:
        return f"break: {r['breaks'][0].split(' [called from')[0][:160]}".replace("|", "/")
    return "; ".join(r["train_notes"])[:160].replace("|", "/")


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| model | params (M) | status | graphs | breaks | training step / why Python | loss err xjit (eager) "
        "| grad err xjit (eager) | worst grad ratio | eager ms | xjit ms | speedup |"
    )
    lines = [head, "|" + "---|" * 12]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | | error | | | {r['error'][:160].replace('|', '/')} | | | | | | |")
            continue
        w = r["grad_worst"]
        lines.append(
            f"| {r['model']} | {r['params_m']} | {status(r)} | {r['graphs']} | {len(r['breaks'])} | {_why(r)} | "
            f"{r['loss_err_xjit']:.1e} ({r['loss_err_eager']:.1e}) | {r['grad_err_xjit']:.1e} ({r['grad_err_eager']:.1e}) | "
            f"{w['ratio']:.2f} | {r['eager_ms']:.1f} | {r['xjit_ms']:.1f} | {r['speedup']:.2f}x |"
        )
    return "\n".join(lines)


def _first_notes(r: dict[str, Any]) -> list[str]:
    notes = [f"problem: {p}" for p in r["problems"]]
    if "adjusted" in r:
        notes.append(f"adjusted: {r['adjusted']}")
    return notes


def details(results: list[dict[str, Any]]) -> str:
    from bench import zoo

    return zoo.details(results, _first_notes, (DROPOUT_NOISE,))


def write(results: list[dict[str, Any]], args: Any, header: str) -> None:
    """Prints the table and writes it (markdown) with the results (JSON), unless --no-write."""
    import json
    from pathlib import Path

    from bench.zoo import ROOT, SEQ

    text = (
        "# Training steps of the models beyond the suite (bench/zoo.py --train)\n\n"
        f"{header} Same models and sizes as zoo.md (batch 1, sequence {SEQ}, images 128x128), "
        "train() mode, dropout on (torch, numpy and random seeded alike before each copy's step), "
        "fp32. A step: forward, loss = a fixed random projection of every float output that "
        "requires grad, backward; no optimizer step. Errors against a float64 copy of the model "
        "(its random draws made in float32, and its batch norms' backward given the gradient in the "
        "input's layout: torch 2.13's CPU kernel is wrong for a channels-last gradient of an NCHW "
        "input, which eager's own float32 step keeps, so its error shows it, as LeViT's): loss error relative to the sum of |terms|; gradient "
        "error ||g - g64|| / ||g64|| per parameter, the largest over the parameters (those whose "
        f"float64 gradient norm is below {ZERO_GRAD:g} of the largest are skipped: their true "
        "gradient is 0), xjit's with eager's in parentheses; worst grad ratio = the largest over "
        f"the parameters of xjit's error / eager's (eager's floored at {FLOOR / FACTOR:g}). Times: "
        f"median of {args.rounds} interleaved samples of 1-5 steps each ({args.timer} time); the "
        "machine is shared, so speedups are indicative only.\n\n"
        "status: ok = the step compiled (1 graph, 0 breaks, nothing in Python, no fallback node but "
        f"dropout's noise, no warning) and is within the bounds (xjit's error <= max({FACTOR:g} x "
        f"eager's, {FLOOR:g}) for the loss, every gradient and the updated buffers); runs = within "
        "the bounds, partly or wholly in Python (why: the sixth column and below); MISMATCH = "
        "outside them.\n\n"
        + table(results)
        + "\n\n## Problems, breaks, fallbacks, graphs in Python, warnings, errors\n\n"
        + details(results)
        + "\n"
    )
    print()
    print(text)
    if not args.no_write:
        out = Path(args.out or ROOT / "bench" / "results" / "zoo_train.md")
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
