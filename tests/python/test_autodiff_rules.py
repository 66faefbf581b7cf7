"""Each derivative rule of the autodiff pass (src/passes/autodiff.cpp) against PyTorch autograd:
a one-op graph is differentiated (the joint graph: inputs + the output's gradient -> output +
input gradients), compiled natively and run; its gradients must equal torch.autograd.grad's, in
f32 and f64, on contiguous and non-contiguous inputs, with broadcasting operands."""

from __future__ import annotations

import re

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

torch = pytest.importorskip("torch")
x_ = pytest.importorskip("xjit._xjit")

F = torch.nn.functional
DTYPES = {torch.float32: "f32", torch.float64: "f64"}


@dataclass
class Case:
    name: str
    op: str
    shapes: list[tuple[int, ...]]  # float inputs (each requires grad)
    ref: Callable[..., Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    positive: bool = False  # inputs drawn in (0.5, 1.5) (log, sqrt, rsqrt)
    extra: list[Any] = field(default_factory=list)  # non-differentiable operands after the inputs
    domain: tuple[float, float] | None = None  # inputs drawn uniformly in (lo, hi) (asin, acosh)


def ty(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtype}[{','.join(map(str, shape))}]"


CASES = [
    Case("add_broadcast", "add", [(4, 1, 3), (5, 1)], lambda a, b: a + 2.0 * b, {"alpha": 2.0}),
    Case("sub_broadcast", "sub", [(4, 5, 3), (3,)], lambda a, b: a - b),
    Case("mul_broadcast", "mul", [(4, 1, 3), (5, 1)], lambda a, b: a * b),
    Case("div", "div", [(4, 3), (4, 3)], lambda a, b: a / b, positive=True),
    Case("neg", "neg", [(4, 3)], torch.neg),
    Case("tril", "tril", [(2, 4, 5)], lambda a: torch.tril(a, -1), {"diagonal": -1}),
    Case("triu", "triu", [(2, 5, 4)], lambda a: torch.triu(a, 1), {"diagonal": 1}),
    Case("relu", "relu", [(4, 3)], torch.relu),
    Case("gelu", "gelu", [(4, 3)], F.gelu, {"approximate": "none"}),
    Case("gelu_tanh", "gelu", [(4, 3)], lambda a: F.gelu(a, approximate="tanh"),
         {"approximate": "tanh"}),
    Case("tanh", "tanh", [(4, 3)], torch.tanh),
    Case("sigmoid", "sigmoid", [(4, 3)], torch.sigmoid),
    Case("silu", "silu", [(4, 3)], F.silu),
    Case("exp", "exp", [(4, 3)], torch.exp),
    Case("log", "log", [(4, 3)], torch.log, positive=True),
    Case("sqrt", "sqrt", [(4, 3)], torch.sqrt, positive=True),
    Case("rsqrt", "rsqrt", [(4, 3)], torch.rsqrt, positive=True),
    Case("square", "square", [(4, 3)], torch.square),
    Case("reciprocal", "reciprocal", [(4, 3)], torch.reciprocal, positive=True),
    Case("softmax", "softmax", [(3, 4, 5)], lambda a: torch.softmax(a, -1), {"dim": -1}),
    Case("log_softmax", "log_softmax", [(3, 4, 5)], lambda a: torch.log_softmax(a, 1),
         {"dim": 1}),
    Case("sum_all", "sum", [(3, 4)], torch.sum),
    Case("sum_dims", "sum", [(3, 4, 5)], lambda a: a.sum((0, 2)), {"dims": [0, 2]}),
    Case("sum_keepdim", "sum", [(3, 4, 5)], lambda a: a.sum(-1, keepdim=True),
         {"dims": [-1], "keepdim": True}),
    Case("mean_all", "mean", [(3, 4)], torch.mean),
    Case("mean_dims", "mean", [(3, 4, 5)], lambda a: a.mean(1), {"dims": [1]}),
    Case("matmul_2d", "matmul", [(4, 3), (3, 5)], torch.matmul),
    Case("matmul_batched_broadcast", "matmul", [(2, 4, 3), (3, 5)], torch.matmul),
    Case("matmul_batched", "matmul", [(2, 4, 3), (2, 3, 5)], torch.matmul),
    Case("baddbmm", "baddbmm", [(2, 1, 5), (2, 4, 3), (2, 3, 5)],
         lambda s, b1, b2: torch.baddbmm(s, b1, b2, beta=0.5, alpha=2.0),
         {"beta": 0.5, "alpha": 2.0}),
    Case("mm", "mm", [(4, 3), (3, 5)], torch.mm),
    Case("bmm", "bmm", [(2, 4, 3), (2, 3, 5)], torch.bmm),
    Case("linear", "linear", [(2, 4, 3), (5, 3), (5,)], F.linear),
    Case("linear_no_bias", "linear", [(4, 3), (5, 3)], F.linear),
    Case("addmm", "addmm", [(5,), (4, 3), (3, 5)],
         lambda s, a, b: torch.addmm(s, a, b, beta=0.5, alpha=2.0), {"beta": 0.5, "alpha": 2.0}),
    Case("layer_norm", "layer_norm", [(2, 4, 8), (8,), (8,)],
         lambda a, w, b: F.layer_norm(a, (8,), w, b), {"normalized_shape": [8]}),
    Case("layer_norm_2d", "layer_norm", [(3, 4, 5), (4, 5), (4, 5)],
         lambda a, w, b: F.layer_norm(a, (4, 5), w, b, eps=1e-3),
         {"normalized_shape": [4, 5], "eps": 1e-3}),
    Case("reshape", "reshape", [(3, 4)], lambda a: a.reshape(2, 6), {"shape": [2, 6]}),
    Case("permute", "permute", [(2, 3, 4)], lambda a: a.permute(2, 0, 1), {"dims": [2, 0, 1]}),
    Case("transpose", "transpose", [(2, 3, 4)], lambda a: a.transpose(0, 2),
         {"dim0": 0, "dim1": 2}),
    Case("t", "t", [(3, 4)], torch.t),
    Case("expand", "expand", [(3, 1)], lambda a: a.expand(2, 3, 4), {"shape": [2, 3, 4]}),
    Case("slice", "slice", [(5, 4)], lambda a: a[:, 1:3], {"dim": 1, "start": 1, "end": 3}),
    Case("select", "select", [(5, 4)], lambda a: a[:, -1], {"dim": 1, "index": -1}),
    Case("unsqueeze", "unsqueeze", [(3, 4)], lambda a: a.unsqueeze(1), {"dim": 1}),
    Case("squeeze", "squeeze", [(3, 1, 4)], lambda a: a.squeeze(1), {"dim": [1]}),
    # copying movement ops and cumsum (autodiff_rules_movement.cpp)
    Case("stack", "stack", [(3, 4), (3, 4), (3, 4)], lambda *t: torch.stack(t, 1), {"dim": 1}),
    Case("stack_last", "stack", [(3, 4), (3, 4)], lambda *t: torch.stack(t, -1), {"dim": -1}),
    Case("repeat", "repeat", [(3, 4)], lambda a: a.repeat(2, 1, 3), {"repeats": [2, 1, 3]}),
    Case("tile", "tile", [(2, 3, 4)], lambda a: a.tile(2, 1), {"dims": [2, 1]}),
    Case("roll", "roll", [(3, 4, 5)], lambda a: torch.roll(a, (1, -7), (0, 2)),
         {"shifts": [1, -7], "dims": [0, 2]}),
    Case("roll_flat", "roll", [(3, 4)], lambda a: torch.roll(a, 5), {"shifts": [5]}),
    Case("flip", "flip", [(3, 4, 5)], lambda a: torch.flip(a, (0, -1)), {"dims": [0, -1]}),
    Case("narrow", "narrow", [(3, 7)], lambda a: a.narrow(1, -5, 3),
         {"dim": 1, "start": -5, "length": 3}),
    Case("pad_constant", "pad", [(2, 3, 6, 7)], lambda a: F.pad(a, (1, 2, 3, 0), value=2.0),
         {"pad": [1, 2, 3, 0], "value": 2.0}),
    Case("pad_constant_crop", "pad", [(2, 3, 6, 7)], lambda a: F.pad(a, (-1, 2, 3, -2)),
         {"pad": [-1, 2, 3, -2]}),
    Case("pad_reflect", "pad", [(2, 3, 6, 7)], lambda a: F.pad(a, (1, 2, 5, 3), mode="reflect"),
         {"pad": [1, 2, 5, 3], "mode": "reflect"}),
    Case("pad_reflect_1d", "pad", [(2, 3, 7)], lambda a: F.pad(a, (6, 6), mode="reflect"),
         {"pad": [6, 6], "mode": "reflect"}),
    Case("pad_replicate", "pad", [(2, 3, 6, 7)],
         lambda a: F.pad(a, (3, 0, 2, 4), mode="replicate"),
         {"pad": [3, 0, 2, 4], "mode": "replicate"}),
    Case("pad_replicate_3d", "pad", [(1, 2, 3, 4, 5)],
         lambda a: F.pad(a, (1, 2, 0, 1, 2, 1), mode="replicate"),
         {"pad": [1, 2, 0, 1, 2, 1], "mode": "replicate"}),
    Case("pad_circular", "pad", [(2, 3, 6, 7)],
         lambda a: F.pad(a, (7, 1, 2, 6), mode="circular"),
         {"pad": [7, 1, 2, 6], "mode": "circular"}),
    Case("cumsum", "cumsum", [(3, 4, 5)], lambda a: torch.cumsum(a, 1), {"dim": 1}),
    Case("cumsum_last", "cumsum", [(3, 300)], lambda a: torch.cumsum(a, -1), {"dim": -1}),
    Case("cumsum_first", "cumsum", [(40, 3, 5)], lambda a: torch.cumsum(a, 0), {"dim": 0}),
    Case("slice_step2", "slice", [(3, 8)], lambda a: a[:, ::2], {"dim": 1, "step": 2}),
    Case("slice_step3_offset", "slice", [(10, 4)], lambda a: a[1:9:3],
         {"dim": 0, "start": 1, "end": 9, "step": 3}),
    # more elementwise math, reductions (autodiff_rules_math.cpp)
    Case("sin", "sin", [(4, 3)], torch.sin),
    Case("cos", "cos", [(4, 3)], torch.cos),
    Case("tan", "tan", [(4, 3)], torch.tan),
    Case("sinh", "sinh", [(4, 3)], torch.sinh),
    Case("cosh", "cosh", [(4, 3)], torch.cosh),
    Case("asin", "asin", [(4, 3)], torch.asin, domain=(-0.9, 0.9)),
    Case("acos", "acos", [(4, 3)], torch.acos, domain=(-0.9, 0.9)),
    Case("atan", "atan", [(4, 3)], torch.atan),
    Case("asinh", "asinh", [(4, 3)], torch.asinh),
    Case("acosh", "acosh", [(4, 3)], torch.acosh, domain=(1.2, 3.0)),
    Case("atanh", "atanh", [(4, 3)], torch.atanh, domain=(-0.9, 0.9)),
    Case("log1p", "log1p", [(4, 3)], torch.log1p, positive=True),
    Case("expm1", "expm1", [(4, 3)], torch.expm1),
    Case("log2", "log2", [(4, 3)], torch.log2, positive=True),
    Case("log10", "log10", [(4, 3)], torch.log10, positive=True),
    Case("exp2", "exp2", [(4, 3)], torch.exp2),
    Case("erf", "erf", [(4, 3)], torch.erf),
    Case("erfc", "erfc", [(4, 3)], torch.erfc),
    Case("abs", "abs", [(4, 3)], torch.abs),
    Case("mish", "mish", [(4, 3)], F.mish),
    Case("log_sigmoid", "log_sigmoid", [(4, 3)], F.logsigmoid),
    Case("softplus", "softplus", [(4, 30)], lambda a: F.softplus(a, 2.0, 5.0),
         {"beta": 2.0, "threshold": 5.0}, domain=(-4.0, 4.0)),
    Case("selu", "selu", [(4, 3)], F.selu),
    Case("celu", "celu", [(4, 3)], lambda a: F.celu(a, 0.5), {"alpha": 0.5}),
    Case("floor", "floor", [(4, 3)], torch.floor),
    Case("round", "round", [(4, 3)], torch.round),
    Case("frac", "frac", [(4, 3)], torch.frac),
    Case("clamp", "clamp", [(4, 30)], lambda a: torch.clamp(a, -0.5, 0.7),
         {"min": -0.5, "max": 0.7}),
    Case("clamp_min", "clamp", [(4, 30)], lambda a: torch.clamp(a, min=0.1), {"min": 0.1}),
    Case("maximum", "maximum", [(4, 1, 3), (5, 3)], torch.maximum),
    Case("minimum", "minimum", [(4, 5, 3), (3,)], torch.minimum),
    Case("addcmul", "addcmul", [(4, 3), (4, 3), (3,)],
         lambda s, a, b: torch.addcmul(s, a, b, value=0.5), {"value": 0.5}),
    Case("addcdiv", "addcdiv", [(4, 3), (4, 3), (4, 3)],
         lambda s, a, b: torch.addcdiv(s, a, b, value=2.0), {"value": 2.0}, positive=True),
    Case("lerp_tensor", "lerp", [(4, 3), (4, 3), (3,)], torch.lerp),
    Case("lerp_scalar", "lerp", [(4, 3), (4, 3)], lambda a, b: torch.lerp(a, b, 0.3),
         {"weight": 0.3}),
    Case("max_all", "max", [(3, 4)], torch.max),
    Case("logsumexp", "logsumexp", [(3, 4, 5)], lambda a: torch.logsumexp(a, 1), {"dims": [1]}),
    Case("var", "var", [(3, 4, 5)], lambda a: a.var(-1), {"dims": [-1]}),
    Case("std_keepdim", "std", [(3, 4, 5)], lambda a: a.std((0, 2), keepdim=True, correction=0),
         {"dims": [0, 2], "keepdim": True, "correction": 0}),
    Case("rms_norm", "rms_norm", [(2, 4, 8), (8,)],
         lambda a, w: F.rms_norm(a, (8,), w, eps=1e-6), {"normalized_shape": [8], "eps": 1e-6}),
    Case("baddbmm", "baddbmm", [(4, 1), (2, 4, 3), (2, 3, 5)],
         lambda s, a, b: torch.baddbmm(s, a, b, beta=0.5, alpha=2.0), {"beta": 0.5, "alpha": 2.0}),
    Case("dot", "dot", [(5,), (5,)], torch.dot),
    Case("mv", "mv", [(4, 5), (5,)], torch.mv),
    Case("outer", "outer", [(4,), (5,)], torch.outer),
    Case("remainder", "remainder", [(4, 3), (4, 3)], torch.remainder, domain=(0.3, 3.0)),
    Case("fmod", "fmod", [(4, 3), (3,)], torch.fmod, domain=(0.3, 3.0)),
    Case("atan2", "atan2", [(4, 3), (4, 3)], torch.atan2),
    Case("hypot", "hypot", [(4, 3), (4, 3)], torch.hypot),
    Case("logit", "logit", [(4, 30)], torch.logit, domain=(0.02, 0.98)),
    Case("logit_eps", "logit", [(4, 30)], lambda a: torch.logit(a, 0.1), {"eps": 0.1},
         domain=(0.01, 0.99)),
    Case("pixel_shuffle", "pixel_shuffle", [(2, 8, 3, 4)], lambda a: F.pixel_shuffle(a, 2),
         {"upscale_factor": 2}),
    Case("pixel_unshuffle", "pixel_unshuffle", [(2, 2, 6, 4)], lambda a: F.pixel_unshuffle(a, 2),
         {"downscale_factor": 2}),
    Case("movedim", "movedim", [(2, 3, 4)], lambda a: torch.movedim(a, (0, 1), (2, 0)),
         {"source": [0, 1], "destination": [2, 0]}),
]


def make(shape: tuple[int, ...], dtype: Any, positive: bool, contiguous: bool,
         domain: tuple[float, float] | None = None) -> Any:
    gen = torch.rand if positive or domain else torch.randn
    if contiguous or len(shape) < 2:
        t = gen(*shape, dtype=dtype)
    else:  # the same shape with transposed strides
        t = gen(*reversed(shape), dtype=dtype).permute(*reversed(range(len(shape))))
    if domain:
        return t * (domain[1] - domain[0]) + domain[0]
    return t + 0.5 if positive else t


def joint_run(graph: Any, inputs: list[Any]) -> list[Any]:
    compiled = x_.compile(graph, pipeline="autodiff{wrt=all part=joint}")
    return compiled.run(inputs, framework="torch")


@pytest.mark.parametrize("contiguous", [True, False], ids=["contig", "strided"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES.values()))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule_matches_autograd(case: Case, dtype: Any, contiguous: bool) -> None:
    torch.manual_seed(0)
    dt = DTYPES[dtype]
    g = x_.Graph("g")
    ins = [g.add_input(ty(dt, s), f"x{i}") for i, s in enumerate(case.shapes)]
    out = g.add_op(case.op, ins, case.attrs)[0]
    g.set_outputs([out])
    xs = [make(s, dtype, case.positive, contiguous, case.domain) for s in case.shapes]
    leaves = [x.detach().clone().requires_grad_() for x in xs]
    want_out = case.ref(*leaves)
    grad = torch.randn(want_out.shape, dtype=dtype)
    want = torch.autograd.grad(want_out, leaves, grad)
    got = joint_run(g, [*xs, grad])
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    torch.testing.assert_close(got[0], want_out.detach(), **tol)
    assert len(got) == 1 + len(leaves)
    for i, (a, b) in enumerate(zip(got[1:], want, strict=True)):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, i=i: f"gradient of input {i}: {m}")


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float64], ids=["same", "f64"])
def test_softmax_rules_with_a_dtype(op: str, out_dtype: Any) -> None:
    # F.softmax(x, dim, dtype=...) (BLOOM's attention): the input cast first, the gradient cast
    # back to the input's dtype.
    torch.manual_seed(0)
    g = x_.Graph("g")
    x = g.add_input("f32[3,4,5]", "x")
    g.set_outputs(g.add_op(op, [x], {"dim": -1, "dtype": out_dtype}))
    xs = torch.randn(3, 4, 5)
    leaf = xs.clone().requires_grad_()
    out = getattr(F, op)(leaf, -1, dtype=out_dtype)
    grad = torch.randn(out.shape, dtype=out_dtype)
    (want,) = torch.autograd.grad(out, [leaf], grad)
    got = joint_run(g, [xs, grad])
    torch.testing.assert_close(got[0], out.detach(), rtol=1e-5, atol=1e-6)
    assert got[1].dtype == torch.float32
    torch.testing.assert_close(got[1], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("padding_idx", [-1, 2])
def test_embedding_rule_accumulates_repeated_rows(padding_idx: int) -> None:
    torch.manual_seed(0)
    g = x_.Graph("g")
    w = g.add_input("f32[10,4]", "w")
    idx = g.add_input("i64[2,3]", "idx")
    g.set_outputs(g.add_op("embedding", [w, idx], {"padding_idx": padding_idx}))
    weight = torch.randn(10, 4)
    ids = torch.tensor([[1, 2, 1], [2, 9, 1]])  # repeated rows accumulate
    leaf = weight.clone().requires_grad_()
    out = F.embedding(ids, leaf, padding_idx=None if padding_idx < 0 else padding_idx)
    grad = torch.randn(out.shape)
    (want,) = torch.autograd.grad(out, [leaf], grad)
    got = x_.compile(g, pipeline="autodiff{wrt=0 part=joint}").run([weight, ids, grad], "torch")
    torch.testing.assert_close(got[1], want)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather_rule_accumulates_repeated_indices(dim: int) -> None:
    torch.manual_seed(1)
    g = x_.Graph("g")
    x = g.add_input("f32[4,5]", "x")
    idx = g.add_input("i64[4,3]" if dim != 0 else "i64[6,5]", "idx")
    g.set_outputs(g.add_op("gather", [x, idx], {"dim": dim}))
    xv = torch.randn(4, 5)
    iv = torch.randint(0, xv.shape[dim], (4, 3) if dim != 0 else (6, 5))  # repeats accumulate
    leaf = xv.clone().requires_grad_()
    out = torch.gather(leaf, dim, iv)
    grad = torch.randn(out.shape)
    (want,) = torch.autograd.grad(out, [leaf], grad)
    got = x_.compile(g, pipeline="autodiff{wrt=0 part=joint}").run([xv, iv, grad], "torch")
    torch.testing.assert_close(got[1], want)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select_rule_accumulates_repeated_indices(dim: int) -> None:
    torch.manual_seed(2)
    xv = torch.randn(4, 5, 3)
    iv = torch.tensor([1, 0, 1, 2, 1])  # repeats accumulate
    g = x_.Graph("g")
    x = g.add_input("f32[4,5,3]", "x")
    idx = g.add_input("i64[5]", "idx")
    g.set_outputs(g.add_op("index_select", [x, idx], {"dim": dim}))
    leaf = xv.clone().requires_grad_()
    out = leaf.index_select(dim, iv)
    grad = torch.randn(out.shape)
    (want,) = torch.autograd.grad(out, [leaf], grad)
    got = x_.compile(g, pipeline="autodiff{wrt=0 part=joint}").run([xv, iv, grad], "torch")
    torch.testing.assert_close(got[1], want)


@pytest.mark.parametrize("op", ["max", "maximum"])
def test_tied_extrema_share_the_gradient(op: str) -> None:
    # PyTorch splits the gradient evenly between equal maxima (max over everything) and equal
    # operands (maximum): 1/4 each to four tied maxima, 1/2 each to a tie.
    xv = torch.tensor([[1.0, 3.0, 3.0, 3.0], [2.0, 3.0, 0.0, -1.0]])
    yv = torch.tensor([[1.0, 0.0, 5.0, 3.0], [2.0, 1.0, 1.0, -1.0]])
    g = x_.Graph("g")
    x = g.add_input("f32[2,4]", "x")
    y = g.add_input("f32[2,4]", "y")
    if op == "max":
        g.set_outputs(g.add_op("max", [x]))
    else:
        g.set_outputs(g.add_op("maximum", [x, y]))
    lx, ly = xv.clone().requires_grad_(), yv.clone().requires_grad_()
    out = lx.max() if op == "max" else torch.maximum(lx, ly)
    grad = torch.randn(out.shape)
    want = torch.autograd.grad(out, [lx, ly], grad, allow_unused=True)
    got = x_.compile(g, pipeline="autodiff{wrt=all part=joint}").run([xv, yv, grad], "torch")
    torch.testing.assert_close(got[1], want[0])
    if op == "maximum":
        torch.testing.assert_close(got[2], want[1])


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_extrema_of_a_nan_give_both_operands_the_gradient(op: str) -> None:
    # Fuzz seed 6520: eager masks out only the operand that compares as losing; with a NaN no
    # comparison holds, so both operands get the whole gradient (the rule gave both zero).
    nan = float("nan")
    xv = torch.tensor([nan, 1.0, nan, 2.0, 3.0])
    yv = torch.tensor([0.5, nan, nan, 2.0, -1.0])
    g = x_.Graph("g")
    x = g.add_input("f32[5]", "x")
    y = g.add_input("f32[5]", "y")
    g.set_outputs(g.add_op(op, [x, y]))
    lx, ly = xv.clone().requires_grad_(), yv.clone().requires_grad_()
    out = getattr(torch, op)(lx, ly)
    grad = torch.randn(out.shape)
    want = torch.autograd.grad(out, [lx, ly], grad)
    got = x_.compile(g, pipeline="autodiff{wrt=all part=joint}").run([xv, yv, grad], "torch")
    torch.testing.assert_close(got[0], out.detach(), equal_nan=True)
    torch.testing.assert_close(got[1], want[0])
    torch.testing.assert_close(got[2], want[1])


def test_where_and_masked_fill_rules() -> None:
    torch.manual_seed(0)
    g = x_.Graph("g")
    c = g.add_input("bool[4,3]", "c")
    a = g.add_input("f32[4,3]", "a")
    b = g.add_input("f32[3]", "b")
    w = g.add_op("where", [c, a, b])[0]
    g.set_outputs(g.add_op("masked_fill", [w, c], {"value": 0.5}))
    cond = torch.rand(4, 3) > 0.5
    av, bv = torch.randn(4, 3), torch.randn(3)
    la, lb = av.clone().requires_grad_(), bv.clone().requires_grad_()
    out = torch.where(cond, la, lb).masked_fill(cond, 0.5)
    grad = torch.randn(4, 3)
    want = torch.autograd.grad(out, [la, lb], grad)
    got = x_.compile(g, pipeline="autodiff{wrt=1,2 part=joint}").run([cond, av, bv, grad], "torch")
    torch.testing.assert_close(got[1], want[0])
    torch.testing.assert_close(got[2], want[1])


def test_gelu_tanh_against_float64() -> None:
    # gelu(x, approximate="tanh") and its gradient in f32 against float64 autograd, relative
    # error, over [-12, 12]: the forward as x * sigmoid(2u) and the gradient from exp(-2|u|)
    # have no cancellation (eager's 0.5 x (1 + tanh u) and 1 - tanh(u)^2 are off by up to 1.5e-4
    # relative for x < -3 and 3e-6 absolute for x in 4..9).
    n = 1 << 16
    g = x_.Graph("g")
    x = g.add_input(f"f32[{n}]", "x")
    g.set_outputs(g.add_op("gelu", [x], {"approximate": "tanh"}))
    xs = torch.linspace(-12, 12, n)
    grad = torch.ones(n)
    leaf = xs.double().requires_grad_()
    # x sigmoid(2u) = 0.5 x (1 + tanh u): F.gelu's own form cancels to 0 below x = -6 in f64 too.
    k = (2 / torch.pi) ** 0.5
    want_out = leaf * torch.sigmoid(2 * k * (leaf + 0.044715 * leaf**3))
    (want,) = torch.autograd.grad(want_out, [leaf], grad.double())
    got = joint_run(g, [xs, grad])
    # Relative error grows with |x| in the tail (exp(2u) amplifies the rounding of u ~ x^3 by 2|u|,
    # up to 50 at x = -8); below 1e-30 the f32 results are subnormal or zero: absolute there.
    torch.testing.assert_close(got[0].double(), want_out.detach(), rtol=3e-5, atol=1e-30)
    # The gradient is zero near x = -0.75 (gelu's minimum): absolute there.
    torch.testing.assert_close(got[1].double(), want, rtol=3e-5, atol=1e-7)


def test_split_graphs_reproduce_the_joint_gradients() -> None:
    # forward (outputs + saved) then backward (saved, saved inputs, grads): the protocol the
    # frontend's autograd.Function follows, on a small MLP with a layer_norm.
    torch.manual_seed(0)
    text = """
graph @g(%x: f32[6,8], %w1: f32[16,8], %b1: f32[16], %ln_w: f32[16], %ln_b: f32[16], %w2: f32[4,16]) -> (f32[]) {
  %h = linear(%x, %w1, %b1) : f32[6,16]
  %a = gelu(%h) : f32[6,16]
  %n = layer_norm(%a, %ln_w, %ln_b) {normalized_shape = [16]} : f32[6,16]
  %o = linear(%n, %w2) : f32[6,4]
  %l = log_softmax(%o) {dim = 1} : f32[6,4]
  %s = mean(%l) : f32[]
  return(%s)
}"""
    fwd = x_.compile(x_.parse(text), pipeline="autodiff{wrt=1,2,3,4,5 part=forward}")
    bwd_graph = x_.compile(x_.parse(text), pipeline="autodiff{wrt=1,2,3,4,5 part=backward}")
    shapes = [(6, 8), (16, 8), (16,), (16,), (16,), (4, 16)]
    xs = [torch.randn(s) for s in shapes]
    results = fwd.run(xs, "torch")
    loss, saved = results[0], results[1:]
    # The backward's inputs: saved values, then the graph inputs it reads (by name), then grads.
    header = bwd_graph.graph.print(locations=False).split(")", 1)[0]
    names = re.findall(r"%(\w+):", header)
    by_name = dict(zip(["x", "w1", "b1", "ln_w", "ln_b", "w2"], xs, strict=True))
    rest = [by_name[n] for n in names[len(saved) : len(names) - 1]]
    assert rest, "the backward reads graph inputs (x, the weights)"
    grads = bwd_graph.run([*saved, *rest, torch.tensor(1.0)], "torch")
    leaves = [x.clone().requires_grad_() for x in xs[1:]]
    h = F.gelu(F.linear(xs[0], leaves[0], leaves[1]))
    want_loss = F.log_softmax(F.linear(F.layer_norm(h, (16,), leaves[2], leaves[3]), leaves[4]), 1).mean()
    want = torch.autograd.grad(want_loss, leaves)
    torch.testing.assert_close(loss, want_loss.detach())
    for a, b in zip(grads, want, strict=True):
        torch.testing.assert_close(a, b)



# name: (op, input shapes, the product of views of the inputs, each input's view in IR with its
# shape, or None for the input itself)
PRODUCTS_OF_VIEWS = {
    "rhs_transposed": ("matmul", [(2, 5, 4), (2, 3, 4)], lambda a, b: a @ b.transpose(1, 2),
                       [None, ("transpose(%b) {dim0 = 1, dim1 = 2}", (2, 4, 3))]),
    "rhs_permuted_heads": ("matmul", [(2, 4, 3, 8), (2, 6, 3, 8)],
                           lambda a, b: a.transpose(1, 2) @ b.permute(0, 2, 3, 1),
                           [("transpose(%a) {dim0 = 1, dim1 = 2}", (2, 3, 4, 8)),
                            ("permute(%b) {dims = [0, 2, 3, 1]}", (2, 3, 8, 6))]),
    "lhs_permuted": ("matmul", [(3, 2, 4), (2, 3, 6)], lambda a, b: a.permute(1, 2, 0) @ b,
                     [("permute(%a) {dims = [1, 2, 0]}", (2, 4, 3)), None]),
    "mm_weight_t": ("mm", [(4, 3), (5, 3)], lambda a, b: a @ b.t(), [None, ("t(%b)", (3, 5))]),
    "both_t": ("mm", [(3, 4), (5, 3)], lambda a, b: a.t() @ b.t(),
               [("t(%a)", (4, 3)), ("t(%b)", (3, 5))]),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(PRODUCTS_OF_VIEWS))
def test_product_of_transposed_views(name: str, dtype: Any) -> None:
    # A column-major operand's gradient is computed as the transposed product (autodiff.cpp
    # columnMajorView); the values must still be autograd's.
    op, shapes, ref, views = PRODUCTS_OF_VIEWS[name]
    torch.manual_seed(0)
    xs = [torch.randn(s, dtype=dtype) for s in shapes]
    leaves = [x.clone().requires_grad_() for x in xs]
    out = ref(*leaves)
    grad = torch.randn(out.shape, dtype=dtype)
    want = torch.autograd.grad(out, leaves, grad)
    d = DTYPES[dtype]
    lines, operands = [], []
    for view, n in zip(views, "ab"):
        if view:
            lines.append(f"  %{n}v = {view[0]} : {ty(d, view[1])}\n")
        operands.append(f"%{n}v" if view else f"%{n}")
    result = ty(d, tuple(out.shape))
    text = (f"graph @g(%a: {ty(d, shapes[0])}, %b: {ty(d, shapes[1])}) -> ({result}) {{\n"
            + "".join(lines)
            + f"  %y = {op}({operands[0]}, {operands[1]}) : {result}\n  return(%y)\n}}")
    got = x_.compile(x_.parse(text), pipeline="autodiff{wrt=all part=joint}").run([*xs, grad], "torch")
    torch.testing.assert_close(got[1], want[0])
    torch.testing.assert_close(got[2], want[1])


@pytest.mark.parametrize("op,attrs", [
    ("topk", {"k": 3, "dim": -1, "largest": True, "sorted": True}),
    ("topk", {"k": 2, "dim": 0, "largest": False, "sorted": True}),
    ("sort", {"dim": 1, "descending": True}),
])
def test_topk_and_sort_rules_scatter_back(op: str, attrs: dict[str, Any]) -> None:
    # The values' gradient goes back to the elements they were read from (Mixtral's router).
    torch.manual_seed(4)
    xv = torch.randn(4, 6)
    g = x_.Graph("g")
    x = g.add_input("f32[4,6]", "x")
    values = g.add_op(op, [x], attrs)
    g.set_outputs(values[:1])  # the values; the indices get no gradient
    leaf = xv.clone().requires_grad_()
    if op == "topk":
        out = torch.topk(leaf, attrs["k"], dim=attrs["dim"], largest=attrs["largest"]).values
    else:
        out = torch.sort(leaf, dim=attrs["dim"], descending=attrs["descending"]).values
    grad = torch.randn(out.shape)
    (want,) = torch.autograd.grad(out, [leaf], grad)
    got = x_.compile(g, pipeline="autodiff{wrt=0 part=joint}").run([xv, grad], "torch")
    torch.testing.assert_close(got[1], want)


@dataclass
class IndexPutCase:
    name: str
    self_shape: tuple[int, ...]
    values_shape: tuple[int, ...]
    indices: list[list[Any] | int | None]  # per leading dim: an index tensor's data or None
    accumulate: bool
    check_value: bool = True  # False: duplicate positions without accumulate (eager's order)


INDEX_PUT_CASES = [
    IndexPutCase("rows", (5, 4), (3, 4), [[0, 2, 4]], False),
    IndexPutCase("rows_accumulate", (5, 4), (3, 4), [[0, 2, 4]], True),
    # A position written twice: each write's value gets that position's gradient; the old
    # contents get none (accumulate false) or all of it (accumulate true).
    IndexPutCase("duplicates", (5, 4), (3, 4), [[1, 3, 1]], False, check_value=False),
    IndexPutCase("duplicates_accumulate", (5, 4), (3, 4), [[1, 3, 1]], True),
    IndexPutCase("broadcast_values", (5, 4), (4,), [[4, 0]], False),
    IndexPutCase("broadcast_values_accumulate", (5, 4), (2, 1), [[4, 0]], True),
    IndexPutCase("scalar_value", (5, 4), (), [[1, 2]], False),
    # out[:, t] = v (RWKV's loop): a 0-d index after a whole dim (none).
    IndexPutCase("column_of_0d_index", (2, 5, 4), (2, 4), [None, 3], False),
    # Two index tensors broadcast together, then a whole trailing dim.
    IndexPutCase("broadcast_indices", (5, 6, 4), (3, 2, 4), [[[0], [2], [4]], [[1, 5]]], True),
    # Indexed dims not adjacent: their broadcast shape leads the indexing result.
    IndexPutCase("apart", (5, 3, 6), (2, 3), [[0, 4], None, [5, 1]], False),
    IndexPutCase("negative", (5, 4), (2, 4), [[-1, 0]], False),
]


@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES.values()))
@pytest.mark.parametrize("case", INDEX_PUT_CASES, ids=[c.name for c in INDEX_PUT_CASES])
def test_index_put_rule_matches_autograd(case: IndexPutCase, dtype: Any) -> None:
    # aten's index_put backward: values get grad[indices] summed to their shape; self gets grad
    # with the written positions zeroed, or grad itself when accumulating.
    torch.manual_seed(5)
    d = DTYPES[dtype]
    idx = [None if i is None else torch.tensor(i) for i in case.indices]
    lines, operands, inputs = [], [], []
    for k, t in enumerate(idx):
        if t is None:
            lines.append(f"  %n{k} = constant() : none\n")
            operands.append(f"%n{k}")
        else:
            inputs.append(f"%i{k}: {ty('i64', tuple(t.shape))}")
            operands.append(f"%i{k}")
    acc = "true" if case.accumulate else "false"
    text = (f"graph @g(%x: {ty(d, case.self_shape)}, %v: {ty(d, case.values_shape)}, "
            + ", ".join(inputs) + f") -> ({ty(d, case.self_shape)}) {{\n" + "".join(lines)
            + f"  %y = index_put(%x, %v, {', '.join(operands)}) {{accumulate = {acc}}} : "
            + f"{ty(d, case.self_shape)}\n  return(%y)\n}}")
    xv, vv = torch.randn(case.self_shape, dtype=dtype), torch.randn(case.values_shape, dtype=dtype)
    x, v = xv.clone().requires_grad_(), vv.clone().requires_grad_()
    out = torch.ops.aten.index_put.default(x, idx, v, case.accumulate)
    grad = torch.randn(out.shape, dtype=dtype)
    want = torch.autograd.grad(out, [x, v], grad)
    tensors = [t for t in idx if t is not None]
    got = x_.compile(x_.parse(text), pipeline="autodiff{wrt=all part=joint}").run(
        [xv, vv, *tensors, grad], "torch")
    if case.check_value:
        torch.testing.assert_close(got[0], out.detach())
    torch.testing.assert_close(got[1], want[0], msg=lambda m: f"self: {m}")
    torch.testing.assert_close(got[2], want[1], msg=lambda m: f"values: {m}")
