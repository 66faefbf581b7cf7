"""The autodiff pass's rules for convolutional nets (src/passes/autodiff_rules_nn.cpp) against
PyTorch autograd: a one-op graph is differentiated (the joint graph), compiled natively and run;
its output and gradients must equal torch.autograd.grad's. Convolution with bias, stride,
padding, dilation and groups; max pooling with tied maxima; average pooling with and without
counted padding; adaptive average pooling; batch_norm in training and eval mode and
batch_norm_with_update (whose new running statistics get no gradient)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

torch = pytest.importorskip("torch")
x_ = pytest.importorskip("xjit._xjit")

F = torch.nn.functional


@dataclass
class Case:
    name: str
    op: str
    shapes: list[tuple[int, ...]]  # float inputs (each requires grad)
    ref: Callable[..., Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    ties: bool = False  # small integers as floats: many equal maxima in a pooling window
    wide: bool = False  # inputs over every piece of an activation, its breakpoints included


def ty(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtype}[{','.join(map(str, shape))}]"


CASES = [
    Case("conv2d_bias_stride_pad", "conv2d", [(2, 4, 9, 9), (6, 4, 3, 3), (6,)],
         lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), {"stride": [2], "padding": [1]}),
    Case("conv2d_dilation_groups", "conv2d", [(2, 4, 8, 8), (6, 2, 3, 3)],
         lambda x, w: F.conv2d(x, w, padding=2, dilation=2, groups=2),
         {"padding": [2], "dilation": [2], "groups": 2}),
    Case("conv2d_depthwise_odd", "conv2d", [(2, 4, 7, 8), (4, 1, 3, 2), (4,)],
         lambda x, w, b: F.conv2d(x, w, b, stride=(2, 3), groups=4), {"stride": [2, 3], "groups": 4}),
    Case("conv2d_1x1", "conv2d", [(3, 5, 4, 4), (7, 5, 1, 1)], F.conv2d),
    Case("conv2d_same", "conv2d", [(2, 3, 6, 6), (4, 3, 3, 3)],
         lambda x, w: F.conv2d(x, w, padding="same"), {"padding_mode": "same"}),
    Case("conv1d_stride", "conv1d", [(2, 3, 11), (5, 3, 4), (5,)],
         lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), {"stride": [2], "padding": [1]}),
    Case("max_pool2d", "max_pool2d", [(2, 3, 8, 8)], lambda x: F.max_pool2d(x, 2),
         {"kernel_size": [2]}, ties=True),
    Case("max_pool2d_tiles_2x3", "max_pool2d", [(2, 3, 6, 9)], lambda x: F.max_pool2d(x, (2, 3)),
         {"kernel_size": [2, 3]}, ties=True),
    Case("max_pool1d_tiles", "max_pool1d", [(2, 3, 12)], lambda x: F.max_pool1d(x, 4),
         {"kernel_size": [4]}, ties=True),
    Case("max_pool3d_tiles", "max_pool3d", [(1, 2, 4, 4, 6)], lambda x: F.max_pool3d(x, 2),
         {"kernel_size": [2]}, ties=True),
    Case("max_pool2d_overlap_pad", "max_pool2d", [(2, 3, 9, 9)],
         lambda x: F.max_pool2d(x, 3, 2, 1), {"kernel_size": [3], "stride": [2], "padding": [1]},
         ties=True),
    Case("max_pool2d_ceil", "max_pool2d", [(1, 2, 7, 7)],
         lambda x: F.max_pool2d(x, 2, ceil_mode=True), {"kernel_size": [2], "ceil_mode": True}),
    Case("avg_pool2d_tiles", "avg_pool2d", [(2, 3, 8, 6)], lambda x: F.avg_pool2d(x, 2),
         {"kernel_size": [2]}),
    Case("avg_pool2d_pad_counted", "avg_pool2d", [(2, 3, 9, 9)],
         lambda x: F.avg_pool2d(x, 3, 2, 1), {"kernel_size": [3], "stride": [2], "padding": [1]}),
    Case("avg_pool2d_pad_not_counted", "avg_pool2d", [(2, 3, 9, 8)],
         lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
         {"kernel_size": [3], "stride": [2], "padding": [1], "count_include_pad": False}),
    Case("avg_pool2d_divisor", "avg_pool2d", [(2, 3, 7, 7)],
         lambda x: F.avg_pool2d(x, 3, 2, divisor_override=4),
         {"kernel_size": [3], "stride": [2], "divisor_override": 4}),
    # ceil_mode: the last windows overhang the padded input (each its own divisor)
    Case("avg_pool2d_ceil_pad", "avg_pool2d", [(2, 3, 9, 8)],
         lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
         {"kernel_size": [3], "stride": [2], "padding": [1], "ceil_mode": True}),
    Case("avg_pool2d_ceil_pad_not_counted", "avg_pool2d", [(2, 3, 10, 8)],
         lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
         {"kernel_size": [3], "stride": [2], "padding": [1], "ceil_mode": True,
          "count_include_pad": False}),
    Case("avg_pool2d_ceil_divisor", "avg_pool2d", [(2, 3, 10, 7)],
         lambda x: F.avg_pool2d(x, 3, 3, ceil_mode=True, divisor_override=2),
         {"kernel_size": [3], "stride": [3], "ceil_mode": True, "divisor_override": 2}),
    Case("avg_pool2d_ceil_tiles", "avg_pool2d", [(1, 4, 7, 5)],
         lambda x: F.avg_pool2d(x, 2, ceil_mode=True), {"kernel_size": [2], "ceil_mode": True}),
    # EfficientNet's pooler: AvgPool2d(hidden_dim, ceil_mode=True), a kernel larger than the input
    Case("avg_pool2d_ceil_kernel_past_input", "avg_pool2d", [(2, 3, 5, 6)],
         lambda x: F.avg_pool2d(x, 9, ceil_mode=True), {"kernel_size": [9], "ceil_mode": True}),
    Case("avg_pool1d_ceil_kernel_past_padded_input", "avg_pool1d", [(2, 3, 2)],
         lambda x: F.avg_pool1d(x, 5, 1, 2, ceil_mode=True),
         {"kernel_size": [5], "stride": [1], "padding": [2], "ceil_mode": True}),
    Case("avg_pool1d_ceil", "avg_pool1d", [(2, 3, 10)],
         lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True),
         {"kernel_size": [3], "stride": [2], "padding": [1], "ceil_mode": True}),
    Case("avg_pool3d_ceil", "avg_pool3d", [(1, 2, 5, 6, 7)],
         lambda x: F.avg_pool3d(x, 2, ceil_mode=True, count_include_pad=False),
         {"kernel_size": [2], "ceil_mode": True, "count_include_pad": False}),
    Case("adaptive_avg_pool2d_global", "adaptive_avg_pool2d", [(2, 5, 7, 6)],
         lambda x: F.adaptive_avg_pool2d(x, 1), {"output_size": [1, 1]}),
    Case("adaptive_avg_pool2d_2x2", "adaptive_avg_pool2d", [(2, 5, 8, 6)],
         lambda x: F.adaptive_avg_pool2d(x, 2), {"output_size": [2, 2]}),
    Case("batch_norm_train", "batch_norm", [(4, 3, 5, 5), (3,), (3,)],
         lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-3),
         {"training": True, "eps": 1e-3}),
    # 2^16 values: the per-channel sums in two stages (spatial, then batch; semantic_util.h).
    Case("batch_norm_train_two_stage", "batch_norm", [(8, 16, 16, 32), (16,), (16,)],
         lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
         {"training": True}),
    Case("batch_norm_train_no_affine", "batch_norm", [(6, 4, 3)],
         lambda x: F.batch_norm(x, None, None, training=True), {"training": True}),
    Case("batch_norm_train_2d_input", "batch_norm", [(8, 5), (5,), (5,)],
         lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), {"training": True}),
]


CASES += [
    Case("group_norm", "group_norm", [(3, 6, 4, 5), (6,), (6,)],
         lambda x, w, b: F.group_norm(x, 3, w, b, eps=1e-3), {"num_groups": 3, "eps": 1e-3}),
    Case("group_norm_no_affine_1d", "group_norm", [(4, 8, 7)], lambda x: F.group_norm(x, 2),
         {"num_groups": 2}),
    Case("group_norm_instance", "group_norm", [(2, 4, 3, 3), (4,), (4,)],
         lambda x, w, b: F.group_norm(x, 4, w, b), {"num_groups": 4}),
]

ACTIVATIONS = [
    Case("hardtanh", "hardtanh", [(6, 40)], lambda x: F.hardtanh(x, -1.5, 2.0),
         {"min_val": -1.5, "max_val": 2.0}, wide=True),
    Case("relu6", "relu6", [(6, 40)], F.relu6, wide=True),
    Case("leaky_relu", "leaky_relu", [(6, 40)], lambda x: F.leaky_relu(x, 0.2),
         {"negative_slope": 0.2}, wide=True),
    Case("elu", "elu", [(6, 40)], lambda x: F.elu(x, 0.7), {"alpha": 0.7}, wide=True),
    Case("hardswish", "hardswish", [(6, 40)], F.hardswish, wide=True),
    Case("hardsigmoid", "hardsigmoid", [(6, 40)], F.hardsigmoid, wide=True),
]
CASES += ACTIVATIONS


def make(shape: tuple[int, ...], dtype: Any, ties: bool, wide: bool = False) -> Any:
    if ties:
        return torch.randint(-2, 3, shape).to(dtype)
    if not wide:
        return torch.randn(*shape, dtype=dtype)
    # Wide enough for every piece of the activations' gradients (-3, 0, 3, 6), and exact
    # breakpoints, where PyTorch's backward picks a side.
    x = torch.randn(*shape, dtype=dtype) * 4
    x.view(-1)[:8] = torch.tensor([-3.0, -1.5, -1.0, 0.0, 1.0, 2.0, 3.0, 6.0], dtype=dtype)
    return x


def joint_run(graph: Any, inputs: list[Any], wrt: str = "all") -> list[Any]:
    compiled = x_.compile(graph, pipeline=f"autodiff{{wrt={wrt} part=joint}}")
    return compiled.run(inputs, framework="torch")


# Tolerances: oneDNN sums a convolution's (and its gradients') products in f32 in another order
# than PyTorch, over up to N*H*W terms: relative 1e-5 of the largest gradient element.
F32_TOL = {"rtol": 1e-5, "atol": 2e-5}
F64_TOL = {"rtol": 1e-10, "atol": 1e-10}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule_matches_autograd(case: Case, dtype: Any) -> None:
    torch.manual_seed(0)
    dt = "f32" if dtype == torch.float32 else "f64"
    g = x_.Graph("g")
    ins = [g.add_input(ty(dt, s), f"x{i}") for i, s in enumerate(case.shapes)]
    g.set_outputs([g.add_op(case.op, ins, case.attrs)[0]])
    xs = [make(s, dtype, case.ties and i == 0, case.wide) for i, s in enumerate(case.shapes)]
    leaves = [x.detach().clone().requires_grad_() for x in xs]
    want_out = case.ref(*leaves)
    grad = torch.randn(want_out.shape, dtype=dtype)
    want = torch.autograd.grad(want_out, leaves, grad)
    got = joint_run(g, [*xs, grad])
    tol = F32_TOL if dtype == torch.float32 else F64_TOL
    torch.testing.assert_close(got[0], want_out.detach(), **tol)
    assert len(got) == 1 + len(leaves)
    for i, (a, b) in enumerate(zip(got[1:], want, strict=True)):
        scale = b.abs().max().item()
        torch.testing.assert_close(
            a, b, rtol=tol["rtol"], atol=tol["atol"] * max(scale, 1.0),
            msg=lambda m, i=i: f"gradient of input {i}: {m}",
        )


def test_batch_norm_eval_mode_rule() -> None:
    # Running statistics (inputs that need no gradient) normalize; x, weight and bias get theirs.
    torch.manual_seed(0)
    g = x_.Graph("g")
    names = ["x", "w", "b", "rm", "rv"]
    shapes = [(4, 3, 5, 5), (3,), (3,), (3,), (3,)]
    ins = [g.add_input(ty("f32", s), n) for n, s in zip(names, shapes, strict=True)]
    g.set_outputs([g.add_op("batch_norm", ins, {"training": False, "eps": 1e-5})[0]])
    x, w, b = torch.randn(4, 3, 5, 5), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    out = F.batch_norm(leaves[0], rm, rv, leaves[1], leaves[2], training=False)
    grad = torch.randn(out.shape)
    want = torch.autograd.grad(out, leaves, grad)
    got = joint_run(g, [x, w, b, rm, rv, grad], wrt="0,1,2")
    torch.testing.assert_close(got[0], out.detach())
    for a, e in zip(got[1:], want, strict=True):
        torch.testing.assert_close(a, e, **F32_TOL)


def test_batch_norm_with_update_running_stats_get_no_gradient() -> None:
    # The joint graph takes one gradient (of the normalized output) and returns eager's new
    # running statistics as plain outputs.
    torch.manual_seed(0)
    g = x_.Graph("g")
    names = ["x", "w", "b", "rm", "rv"]
    shapes = [(4, 3, 5, 5), (3,), (3,), (3,), (3,)]
    ins = [g.add_input(ty("f32", s), n) for n, s in zip(names, shapes, strict=True)]
    g.set_outputs(g.add_op("batch_norm_with_update", ins, {"momentum": 0.1, "eps": 1e-5}))
    x, w, b = torch.randn(4, 3, 5, 5), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    rm_eager, rv_eager = rm.clone(), rv.clone()
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    out = F.batch_norm(leaves[0], rm_eager, rv_eager, leaves[1], leaves[2], training=True)
    grad = torch.randn(out.shape)
    want = torch.autograd.grad(out, leaves, grad)
    got = joint_run(g, [x, w, b, rm, rv, grad], wrt="0,1,2")
    assert len(got) == 3 + 3  # out, running mean, running var, then three gradients
    torch.testing.assert_close(got[0], out.detach(), **F32_TOL)
    torch.testing.assert_close(got[1], rm_eager)
    torch.testing.assert_close(got[2], rv_eager)
    for a, e in zip(got[3:], want, strict=True):
        torch.testing.assert_close(a, e, **F32_TOL)


def test_unbatched_conv_has_no_rule() -> None:
    g = x_.Graph("g")
    x = g.add_input("f32[3,8,8]", "x")
    w = g.add_input("f32[4,3,3,3]", "w")
    g.set_outputs([g.add_op("conv2d", [x, w], {})[0]])
    with pytest.raises(Exception, match="unbatched input"):
        x_.compile(g, pipeline="autodiff{wrt=all part=joint}")


def test_embedding_gradient_is_eagers_bit_for_bit() -> None:
    # The embedding rule's index_put(zeros, g, idx, accumulate) adds whole rows in index order,
    # as PyTorch's CPU embedding_dense_backward does: equal sums, bit for bit, repeated rows too.
    torch.manual_seed(0)
    g = x_.Graph("g")
    w = g.add_input("f32[50,16]", "w")
    idx = g.add_input("i64[4,64]", "idx")
    g.set_outputs(g.add_op("embedding", [w, idx], {}))
    weight, ids = torch.randn(50, 16), torch.randint(0, 50, (4, 64))  # each row ~5 times
    grad = torch.randn(4, 64, 16)
    want = torch.ops.aten.embedding_dense_backward(grad, ids, 50, -1, False)
    got = x_.compile(g, pipeline="autodiff{wrt=0 part=joint}").run([weight, ids, grad], "torch")
    assert torch.equal(got[1], want)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_index_put_accumulate_reads_values_aliasing_self_first(dtype: str) -> None:
    # values is a slice of self: the rows are read before any is written (no in-place reuse).
    g = x_.Graph("g")
    x = g.add_input(f"{dtype}[4,3]", "x")
    idx = g.add_input("i64[2]", "idx")
    v = g.add_op("slice", [x], {"dim": 0, "start": 0, "end": 2})[0]
    g.set_outputs(g.add_op("index_put", [x, v, idx], {"accumulate": True}))
    xv = torch.arange(12, dtype=torch.float32 if dtype == "f32" else torch.float64).reshape(4, 3)
    iv = torch.tensor([0, 0])
    got = x_.compile(g).run([xv, iv], "torch")[0]
    torch.testing.assert_close(got, xv.index_put((iv,), xv[0:2], accumulate=True), rtol=0, atol=0)


@pytest.mark.parametrize(
    "attrs,shape,tiled",
    [({"kernel_size": [2]}, "f32[2,3,8,8]", True), ({"kernel_size": [3], "stride": [2]}, "f32[2,3,9,9]", False)],
    ids=["tiles", "overlaps"],
)
def test_max_pool_gradient_without_indices_when_windows_tile(attrs: dict[str, Any], shape: str, tiled: bool) -> None:
    # Windows that tile the input: a compare-and-select kernel; overlapping windows:
    # max_pool2d_backward. Neither saves indices or scatters (max_pool_with_indices and
    # scatter_add, reference kernels, stay for dtypes other than f32 and f64).
    g = x_.Graph("g")
    x = g.add_input(shape, "x")
    g.set_outputs([g.add_op("max_pool2d", [x], attrs)[0]])
    text = x_.compile(g, pipeline="autodiff{wrt=all part=joint}").graph.print(locations=False)
    assert "max_pool2d_with_indices" not in text, text
    assert "scatter_add" not in text, text
    assert ("max_pool2d_backward" in text) != tiled, text
