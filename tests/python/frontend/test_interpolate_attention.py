"""F.interpolate (nearest, nearest-exact, linear/bilinear/trilinear, bicubic; src/frontend/torch_resample.cpp;
the linear modes are upsample_* ops with a native kernel and gradient, test_resample_kernel.py)
and nn.MultiheadAttention (torch._native_multi_head_attention in eval mode,
F.multi_head_attention_forward otherwise; src/frontend/torch_attention.cpp) compiled into IR ops:
values against eager (nearest bit for bit, including ATen's float index rounding at non-integer
scales; linear within 1e-6), gradients against eager, one graph with no PyTorch fallback node;
the variants the lowerings leave alone keep PyTorch's op with eager's values."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, external_calls, tensors  # noqa: E402, F401 (autouse fixture)
from frontend_fixtures import explain_strict as explain  # noqa: E402

nn = torch.nn
F = torch.nn.functional


def assert_native(report: Any) -> None:
    assert [b.reason for b in report.graph_breaks] == []
    assert report.graph_count == 1 and not report.graphs[0].runs_in_python, str(report)
    assert external_calls(report) == 0, str(report)


# (input shape, keyword arguments of F.interpolate)
NEAREST = [
    ((2, 3, 7, 9), {"scale_factor": 2.0}),
    ((2, 3, 7, 9), {"scale_factor": 3}),
    ((2, 3, 7, 9), {"scale_factor": 1.7}),
    ((2, 3, 7, 9), {"scale_factor": (0.6, 2.5)}),
    ((2, 3, 10, 9), {"scale_factor": 0.3}),
    ((2, 3, 7, 9), {"size": (5, 13)}),
    ((2, 3, 7, 9), {"size": 14}),
    ((2, 3, 7, 9), {"scale_factor": 1.7, "recompute_scale_factor": True}),
    ((2, 3, 7, 9), {"scale_factor": 0.7, "mode": "nearest-exact"}),
    ((2, 3, 7, 9), {"size": (17, 5), "mode": "nearest-exact"}),
    ((2, 3, 11), {"scale_factor": 2.3}),
    ((1, 2, 3, 4, 5), {"scale_factor": (2.0, 1.5, 0.8)}),
]
LINEAR = [
    ((2, 3, 7, 9), {"scale_factor": 2.0, "mode": "bilinear"}),
    ((2, 3, 7, 9), {"scale_factor": 2.0, "mode": "bilinear", "align_corners": True}),
    ((2, 3, 7, 9), {"scale_factor": 1.3, "mode": "bilinear", "align_corners": True}),
    ((2, 3, 7, 9), {"scale_factor": (0.45, 2.7), "mode": "bilinear"}),
    ((2, 3, 7, 9), {"size": (11, 4), "mode": "bilinear"}),
    ((2, 3, 7, 9), {"size": (1, 9), "mode": "bilinear", "align_corners": True}),
    ((2, 3, 7, 9), {"scale_factor": 1.7, "mode": "bilinear", "recompute_scale_factor": True}),
    ((2, 3, 11), {"scale_factor": 2.5, "mode": "linear"}),
    ((1, 2, 3, 4, 5), {"scale_factor": 1.5, "mode": "trilinear", "align_corners": False}),
    ((2, 3, 9, 7), {"size": (4, 5), "mode": "bilinear"}),  # downsampling, odd sizes
    ((2, 3, 8), {"size": 5, "mode": "linear", "align_corners": True}),
    ((1, 2, 5, 7, 6), {"size": (3, 9, 4), "mode": "trilinear", "align_corners": True}),
]


def ids(cases: list[tuple[Any, dict[str, Any]]]) -> list[str]:
    return [f"{len(s)}d-" + "-".join(f"{k}={v}" for k, v in kw.items()) for s, kw in cases]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("shape", "kw"), NEAREST + LINEAR, ids=ids(NEAREST + LINEAR))
def test_interpolate_is_native_and_matches(shape: Any, kw: dict[str, Any], dtype: Any) -> None:
    """Nearest modes bit for bit; linear ones within 1e-6 (f32) / 1e-12 (f64)."""
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=dtype)

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, **kw) + 1.0

    report = explain(f, x)
    assert_native(report)
    tol = 0.0 if "linear" not in kw.get("mode", "nearest") else 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(report.output, f(x), rtol=tol, atol=tol)


@pytest.mark.parametrize(("shape", "kw"), NEAREST[::2] + LINEAR[::2], ids=ids(NEAREST[::2] + LINEAR[::2]))
def test_interpolate_gradient_matches_eager(shape: Any, kw: dict[str, Any]) -> None:
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=torch.float64)
    w = torch.randn_like(F.interpolate(x, **kw))

    def step(fn: Any) -> tuple[torch.Tensor, torch.Tensor]:
        leaf = x.clone().requires_grad_()
        out = fn(leaf)
        (grad,) = torch.autograd.grad((out * w).sum(), [leaf])
        return out.detach(), grad

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, **kw)

    want = step(f)
    got = step(xjit.jit(f))
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("shape", "kw"), LINEAR, ids=ids(LINEAR))
def test_linear_modes_with_a_gradient_are_native(shape: Any, kw: dict[str, Any], dtype: Any,
                                                 channels_last: bool) -> None:
    """With the input needing a gradient, the linear modes are one upsample_* op in the forward
    graph and its native gradient in the backward (no PyTorch op): values and gradients as
    eager's (f32 within 1e-6, gradients as ATen's backward adds them)."""
    if channels_last and len(shape) != 4:
        pytest.skip("channels_last is 4-d")
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn_like(F.interpolate(x, **kw))

    def f(t: torch.Tensor) -> torch.Tensor:
        return F.interpolate(t * 2, **kw)

    leaf = x.clone().requires_grad_()
    report = explain(f, leaf)
    assert_native(report)
    assert any(k.startswith("upsample_") for k in report.graphs[0].ops), str(report)

    def step(fn: Any) -> tuple[torch.Tensor, torch.Tensor]:
        leaf = x.clone().requires_grad_()
        out = fn(leaf)
        (grad,) = torch.autograd.grad((out * w).sum(), [leaf])
        return out.detach(), grad

    tol = 1e-6 if dtype == torch.float32 else 1e-12
    for got, want in zip(step(xjit.jit(f)), step(f), strict=True):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


BICUBIC = [
    ((1, 8, 7, 7), {"size": (4, 4)}),  # DINOv2's position embeddings, downsampled
    ((2, 3, 5, 6), {"scale_factor": 2.0}),
    ((2, 3, 5, 6), {"scale_factor": (1.7, 0.6)}),
    ((2, 3, 5, 6), {"size": (9, 3), "align_corners": True}),
    ((2, 3, 5, 6), {"size": (1, 6), "align_corners": True}),
    ((2, 3, 3, 3), {"scale_factor": 1.3}),  # the same size by a scale: eager still resamples
    ((2, 3, 3, 3), {"size": (4, 3)}),  # one dim resampled
    ((2, 3, 5, 6), {"size": (5, 6)}),
]
# Eager's bicubic backward passes the gradient through unchanged where the sizes are equal,
# though its forward resampled by the scale factor (not the adjoint): the graph's gradient is
# the adjoint of the forward, so these cases compare values only.
BICUBIC_BACKWARD_COPIES = {"4d-scale_factor=1.3"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("shape", "kw"), BICUBIC, ids=ids(BICUBIC))
def test_bicubic_is_matmuls_and_matches_eager_with_its_gradient(shape: Any, kw: dict[str, Any], dtype: Any) -> None:
    """Bicubic as constant per-dim tap matrices applied by matmul: values and gradients as
    eager's (f32 within 1e-5 of their scale, f64 1e-12), one graph, no PyTorch op."""
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=dtype)
    w = torch.randn_like(F.interpolate(x, mode="bicubic", **kw))

    def f(t: torch.Tensor) -> torch.Tensor:
        return F.interpolate(t * 2, mode="bicubic", **kw)

    with torch.no_grad():
        report = explain(f, x)
    assert_native(report)
    want = f(x)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    scale = max(want.abs().max().item(), 1.0)
    torch.testing.assert_close(report.output, want, rtol=tol, atol=tol * scale)
    leaf = x.clone().requires_grad_()
    assert_native(explain(f, leaf))
    if ids([(shape, kw)])[0] in BICUBIC_BACKWARD_COPIES:
        return

    def step(fn: Any) -> tuple[torch.Tensor, torch.Tensor]:
        leaf = x.clone().requires_grad_()
        out = fn(leaf)
        (grad,) = torch.autograd.grad((out * w).sum(), [leaf])
        return out.detach(), grad

    for got, want in zip(step(xjit.jit(f)), step(f), strict=True):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * max(want.abs().max().item(), 1.0))


def test_gathering_nearest_maps_keep_pytorchs_op_where_the_input_needs_a_gradient() -> None:
    # A gather's gradient is a reference scatter_add: with grad needed, only identity and
    # integer-repeat nearest maps are lowered.
    torch.manual_seed(0)
    x = torch.randn(1, 4, 8, 8, requires_grad=True)

    def nearest17(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x * 2, scale_factor=1.7, mode="nearest")

    def nearest2x(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x * 2, scale_factor=2.0, mode="nearest")

    assert external_calls(xjit.explain(xjit.jit(nearest17))(x)) == 1
    with torch.no_grad():
        assert external_calls(xjit.explain(xjit.jit(nearest17))(x)) == 0
    assert external_calls(xjit.explain(xjit.jit(nearest2x))(x)) == 0
    for f in (nearest17, nearest2x):
        leaf = x.detach().clone().requires_grad_()
        xjit.jit(f)(leaf).square().sum().backward()
        want = x.detach().clone().requires_grad_()
        f(want).square().sum().backward()
        torch.testing.assert_close(leaf.grad, want.grad)


def test_upsample_module_and_unsupported_modes_keep_eagers_values() -> None:
    """nn.Upsample goes through F.interpolate; antialias and area stay PyTorch's op."""
    x = torch.randn(2, 3, 6, 5)
    up = nn.Upsample(scale_factor=2, mode="nearest")
    assert_native(explain(up, x))
    torch.testing.assert_close(xjit.jit(up)(x), up(x), rtol=0, atol=0)
    for kw in ({"scale_factor": 2, "mode": "bicubic", "antialias": True}, {"size": (4, 3), "mode": "bilinear", "antialias": True},
               {"size": (4, 3), "mode": "area"}):

        def f(x: torch.Tensor, kw: dict[str, Any] = kw) -> torch.Tensor:
            return F.interpolate(x, **kw)

        report = explain(f, x)
        assert report.graph_count == 1 and external_calls(report) == 1, (kw, str(report))
        torch.testing.assert_close(report.output, f(x), rtol=0, atol=0)


@pytest.mark.parametrize(
    "kw", [{"size": (4.0, 5)}, {"scale_factor": -2.0}, {"scale_factor": 2.0, "size": 3}, {"size": (0, 3)}]
)
def test_interpolate_invalid_arguments_raise_like_eager(kw: dict[str, Any]) -> None:
    """What F.interpolate (or its ATen op) rejects keeps PyTorch's call, which raises."""
    x = torch.randn(2, 3, 6, 5)

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, **kw) * 2

    with pytest.raises(Exception) as want:
        f(x)
    with pytest.raises(type(want.value)):
        xjit.jit(f)(x)


E, HEADS, L, S, B = 16, 4, 5, 7, 3

# (constructor keywords, call form): self-attention unless "cross"; masks are float (additive),
# as nn.MultiheadAttention.forward hands them on.
MHA = {
    "self_batch_first": ({"batch_first": True}, {}),
    "self_seq_first": ({}, {}),
    "self_no_bias": ({"batch_first": True, "bias": False}, {}),
    "cross_kdim_vdim": ({"batch_first": True, "kdim": 6, "vdim": 10}, {"cross": True}),
    "cross_same_dims": ({}, {"cross": True}),
    "attn_mask": ({"batch_first": True}, {"attn_mask": "2d"}),
    "attn_mask_3d": ({"batch_first": True}, {"attn_mask": "3d"}),
    "key_padding_mask": ({"batch_first": True}, {"key_padding_mask": True}),
    "bool_key_padding_mask": ({"batch_first": True}, {"key_padding_mask": "bool"}),
}


def build_mha(name: str, dtype: Any = torch.float32) -> tuple[Any, Any]:
    kw, form = MHA[name]
    torch.manual_seed(0)
    m = nn.MultiheadAttention(E, HEADS, **kw).to(dtype)
    bf = kw.get("batch_first", False)
    shape = (lambda n, d: (B, n, d)) if bf else (lambda n, d: (n, B, d))
    q = torch.randn(*shape(L, E), dtype=dtype)
    if form.get("cross"):
        k = torch.randn(*shape(S, kw.get("kdim", E)), dtype=dtype)
        v = torch.randn(*shape(S, kw.get("vdim", E)), dtype=dtype)
    else:
        k = v = q
    n = S if form.get("cross") else L
    extra: dict[str, Any] = {}
    if form.get("attn_mask") == "2d":
        extra["attn_mask"] = torch.randn(L, n, dtype=dtype)
    elif form.get("attn_mask") == "3d":
        extra["attn_mask"] = torch.randn(B * HEADS, L, n, dtype=dtype)
    if form.get("key_padding_mask") is True:
        extra["key_padding_mask"] = torch.randn(B, n, dtype=dtype)
    elif form.get("key_padding_mask") == "bool":
        extra["key_padding_mask"] = torch.arange(n).expand(B, n) >= n - 2
    return m, (q, k, v, extra)


def call(m: Any, inputs: Any, need_weights: bool, average: bool) -> Any:
    q, k, v, extra = inputs
    if q is k:
        return lambda x: m(x, x, x, need_weights=need_weights, average_attn_weights=average, **extra)
    return lambda q, k, v: m(q, k, v, need_weights=need_weights, average_attn_weights=average, **extra)


def args_of(inputs: Any) -> tuple[Any, ...]:
    q, k, v, _ = inputs
    return (q,) if q is k else (q, k, v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("need_weights", "average"), [(False, True), (True, True), (True, False)])
@pytest.mark.parametrize("name", sorted(MHA))
def test_mha_inference_is_native_and_matches(name: str, need_weights: bool, average: bool, dtype: Any) -> None:
    m, inputs = build_mha(name, dtype)
    fn = call(m.eval(), inputs, need_weights, average)
    with torch.no_grad():
        want = fn(*args_of(inputs))
        report = explain(fn, *args_of(inputs))
    fast_path_mask = MHA[name][0].get("batch_first") and (
        "key_padding_mask" in inputs[3] or "attn_mask" in inputs[3]
    )
    if fast_path_mask and not any(t.is_floating_point() for t in inputs[3].values()):
        # The fast path with a mask keeps PyTorch's op (masked_softmax semantics).
        assert report.graph_count == 1 and external_calls(report) == 1, str(report)
    else:
        assert_native(report)
    assert len(tensors(report.output)) == len(tensors(want)) == (2 if need_weights else 1)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for g, w in zip(tensors(report.output), tensors(want), strict=True):
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("name", sorted(MHA))
def test_mha_training_step_is_one_graph_and_matches(name: str, need_weights: bool, dtype: Any) -> None:
    """f32 without weights runs scaled_dot_product_attention (decompose-attention's gradient);
    f64 and need_weights the explicit softmax form."""
    m, inputs = build_mha(name, dtype)
    m.train()
    compiled_m = copy.deepcopy(m)
    reports = []

    def step(module: Any, compile_it: bool) -> list[torch.Tensor]:
        q, k, v, extra = inputs
        leaves = [t.clone().requires_grad_() for t in args_of(inputs)]
        fn = call(module, (leaves[0], leaves[0] if q is k else leaves[1], leaves[0] if q is k else leaves[2], extra),
                  need_weights, True)
        if compile_it:
            reports.append(explain(fn, *leaves))
            out = reports[-1].output
        else:
            out = fn(*leaves)
        g = torch.Generator().manual_seed(3)
        loss = sum((t * torch.randn(t.shape, generator=g, dtype=t.dtype)).sum() for t in tensors(out))
        return [*tensors(out), *torch.autograd.grad(loss, leaves + list(module.parameters()))]

    want = step(m, False)
    got = step(compiled_m, True)
    (report,) = reports
    assert_native(report)
    assert report.graphs[0].note.startswith("training step: forward"), report.graphs[0].note
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=tol, atol=tol * max(w.abs().max().item(), 1.0))


def test_mha_dropout_in_training_keeps_pytorchs_op() -> None:
    torch.manual_seed(0)
    m = nn.MultiheadAttention(E, HEADS, dropout=0.3, batch_first=True).train()
    x = torch.randn(B, L, E)
    fn = lambda x: m(x, x, x, need_weights=False)[0]  # noqa: E731
    torch.manual_seed(5)
    want = fn(x)
    torch.manual_seed(5)
    report = explain(fn, x)
    assert external_calls(report) == 1, str(report)
    torch.testing.assert_close(report.output, want, rtol=0, atol=0)
