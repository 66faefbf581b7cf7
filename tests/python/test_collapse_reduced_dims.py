"""collapse-reduced-dims (src/passes/collapse_reduced_dims.cpp): a reduction over a trailing run
of dims (mean over H and W) runs over one flattened dim of their product, alone or in a fusion
with its elementwise producers and consumers; so does one that keeps a trailing run (a sum over
the channels keeps H and W). Values are checked against eager (f32 sums in
another order: 1e-5), for keepdim and not, per-channel operands, batch norm's (0, 2, 3),
variance with a correction, max / min / prod, full-shaped outputs unflattened back, symbolic
batch sizes, and inputs the pass must leave alone (channels_last: their unit_dim hint; slices
and views, whose flatten would copy)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
xjit = pytest.importorskip("xjit")
ir = pytest.importorskip("xjit.ir")
fe = pytest.importorskip("xjit._frontend")
F = torch.nn.functional


pytestmark = pytest.mark.usefixtures("fresh_frontend")  # (conftest.py)


def _bias(c: int) -> torch.Tensor:
    return torch.linspace(-1, 1, c).reshape(c, 1, 1)


CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "mean_hw": lambda x: x.mean((2, 3)),
    "mean_hw_keepdim": lambda x: x.mean((-2, -1), keepdim=True),
    "relu_bias_mean": lambda x: torch.relu(x + _bias(x.shape[1])).mean((2, 3)),
    "batch_norm_stats": lambda x: (x.sum((0, 2, 3)), (x * x).sum((0, 2, 3))),
    "var_std": lambda x: (x.var((2, 3)), x.std((2, 3), correction=0, keepdim=True)),
    "amax_amin": lambda x: (x.amax((2, 3)), x.amin((1, 2, 3), keepdim=True)),
    "prod": lambda x: (1 + x / 64).prod(3).prod(2),
    "centered": lambda x: x - x.mean((2, 3), keepdim=True),
    "softmax_hw": lambda x: torch.softmax(x.flatten(2), -1).view(x.shape),
    "exp_norm": lambda x: torch.exp(x - x.amax((2, 3), keepdim=True)).sum((2, 3), keepdim=True),
    "se_block": lambda x: x * torch.sigmoid(x.mean((2, 3), keepdim=True) * 2 - 1),
    "three_dims": lambda x: x.unsqueeze(2).expand(-1, -1, 3, -1, -1).sum((2, 3, 4)),
    # kept trailing runs: lanes along H*W
    "channel_sum": lambda x: x.sum(1),
    "channel_mean_keepdim": lambda x: torch.relu(x).mean(1, keepdim=True) * 2,
    "channel_amax_broadcast": lambda x: x - x.amax(1, keepdim=True),
    "batch_and_channel": lambda x: (x * x).sum((0, 1)),
    "channel_var": lambda x: x.var(1, keepdim=True),
}

INPUTS: dict[str, Callable[[torch.Generator], torch.Tensor]] = {
    "contiguous": lambda g: torch.randn(4, 24, 14, 14, generator=g),
    "odd_sizes": lambda g: torch.randn(3, 5, 7, 9, generator=g),
    "channels_last": lambda g: torch.randn(2, 16, 9, 11, generator=g).contiguous(
        memory_format=torch.channels_last
    ),
    "sliced": lambda g: torch.randn(2, 8, 10, 20, generator=g)[:, :, :, 3:17],
    "transposed_hw": lambda g: torch.randn(2, 8, 12, 10, generator=g).transpose(2, 3),
}


@pytest.mark.parametrize("layout", sorted(INPUTS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_reductions_over_trailing_dims_match_eager(case: str, layout: str) -> None:
    g = torch.Generator().manual_seed(len(case) * 31 + len(layout))
    x = INPUTS[layout](g)
    fn = CASES[case]
    with torch.no_grad():
        got, want = xjit.jit(fn)(x), fn(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_symbolic_batch_sizes() -> None:
    fn = CASES["relu_bias_mean"]
    f = xjit.jit(fn, dynamic=True)
    with torch.no_grad():
        for b in (2, 5, 3):
            x = torch.randn(b, 12, 7, 7, generator=torch.Generator().manual_seed(b))
            torch.testing.assert_close(f(x), fn(x), rtol=1e-5, atol=1e-5)


def _compiled_text(text: str) -> str:
    return str(ir.compile(ir.parse(text)).graph)


def test_the_runtime_pipeline_flattens_the_run() -> None:
    text = """
graph @f(%x: f32[4,8,6,5], %b: f32[8,1,1]) -> (f32[4,8], f32[4,8,6,5]) {
  %a = add(%x, %b) : f32[4,8,6,5]
  %r = relu(%a) : f32[4,8,6,5]
  %m = mean(%r) {dims = [2, 3], keepdim = false} : f32[4,8]
  %k = mean(%r) {dims = [2, 3], keepdim = true} : f32[4,8,1,1]
  %c = sub(%r, %k) : f32[4,8,6,5]
  return(%m, %c)
}"""
    compiled = _compiled_text(text)
    assert "flatten(%x) {end_dim = 3, start_dim = 2} : f32[4,8,30]" in compiled, compiled
    assert "unflatten(" in compiled
    cg = ir.compile(ir.parse(text))
    x, b = torch.randn(4, 8, 6, 5), torch.randn(8, 1, 1)
    m, c = cg(x, b)
    r = torch.relu(x + b)
    torch.testing.assert_close(m, r.mean((2, 3)), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c, r - r.mean((2, 3), keepdim=True), rtol=1e-5, atol=1e-6)


def test_a_transposed_input_is_not_flattened() -> None:
    # (its unit_dim hint: a flatten of it would copy; its kernel reads H along memory)
    compiled = _compiled_text("""
graph @f(%x: f32[4,8,6,5] {unit_dim = 2}) -> (f32[4,8]) {
  %m = mean(%x) {dims = [2, 3], keepdim = false} : f32[4,8]
  return(%m)
}""")
    assert "flatten" not in compiled, compiled


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_global_average_pool_is_a_mean_over_hw(layout: str) -> None:
    # adaptive_avg_pool2d to 1x1 is captured as ATen computes it, a mean over H and W (keepdim):
    # one reduction kernel fused with the relu before it; gradients as eager's
    fe.set_recording(True)
    model = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d((1, 1)))
    x = INPUTS[layout](torch.Generator().manual_seed(3)).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    got, want = xjit.jit(model)(x), model(x2)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    got.square().sum().backward()
    want.square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)
    irs = [g["ir"] for g in fe.events()["graphs"]]
    assert any("mean(" in t for t in irs) and not any("adaptive_avg_pool2d" in t for t in irs)
