"""3x3 stride-1 convolutions through oneDNN's Winograd kernels (docs/backend.md): taken where
they pay (weights transformed once, or enough output pixels to repay a per-call transform;
XJIT_CONV_WINOGRAD=1 forces them, =0 turns them off), with values checked against eager.
Winograd rounds differently from a direct convolution: results are compared relative to the
largest output, within 1e-5 as the benchmark suite checks its models."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xjit
import xjit.ir as ir


def _winograd_available() -> bool:
    # oneDNN 2.6 has Winograd convolutions for AVX-512 machines only.
    return "avx512" in torch.backends.cpu.get_cpu_capability().lower()


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    err = (got - want).abs().max().item()
    assert err <= 1e-5 * want.abs().max().item(), err


def _conv_impl(text: str, *args: torch.Tensor) -> tuple[torch.Tensor, str]:
    """Runs a one-conv IR graph; its result and the oneDNN implementation that ran it."""
    compiled = ir.compile(ir.parse(text))
    got = compiled(*args)[0]
    impls = [t for name, t in compiled.dump_files() if name.endswith(".onednn")]
    assert len(impls) == 1, impls
    return got, impls[0]


_NCHW = """graph @c(%x: f32[{n},{c},{h},{w}], %k: f32[{o},{c},3,3], %b: f32[{o}]) -> (f32[{n},{o},{h},{w}]) {{
  %y = conv2d(%x, %k, %b) {{padding = [1, 1]}} : f32[{n},{o},{h},{w}]
  %r = relu(%y) : f32[{n},{o},{h},{w}]
  return(%r)
}}"""

_NHWC = """graph @c(%x: f32[{n},{h},{w},{c}], %k: f32[{o},{c},3,3]) -> (f32[{n},{h},{w},{o}]) {{
  %y = conv2d(%x, %k) {{padding = [1, 1], layout = "nhwc"}} : f32[{n},{h},{w},{o}]
  return(%y)
}}"""


@pytest.mark.parametrize(
    "n,c,o,h,w",
    [(2, 16, 16, 12, 12), (1, 5, 7, 9, 11), (3, 32, 48, 7, 7), (1, 64, 64, 20, 20)],
    ids=["16ch", "odd-channels", "wide", "64ch"],
)
def test_forced_winograd_matches_eager(monkeypatch: pytest.MonkeyPatch, n, c, o, h, w) -> None:
    monkeypatch.setenv("XJIT_CONV_WINOGRAD", "1")
    torch.manual_seed(n * 1000 + c + o + h)
    x, k, b = torch.randn(n, c, h, w), torch.randn(o, c, 3, 3) * 0.2, torch.randn(o)
    got, impl = _conv_impl(_NCHW.format(n=n, c=c, o=o, h=h, w=w), x, k, b)
    _close(got, torch.relu(F.conv2d(x, k, b, padding=1)))
    if _winograd_available():
        assert "wino" in impl, impl

    xl = x.permute(0, 2, 3, 1).contiguous()
    got, impl = _conv_impl(_NHWC.format(n=n, c=c, o=o, h=h, w=w), xl, k)
    _close(got, F.conv2d(x, k, padding=1).permute(0, 2, 3, 1))
    if _winograd_available():
        assert "wino" in impl, impl


def test_winograd_off_and_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(3)
    k, b = torch.randn(8, 8, 3, 3) * 0.2, torch.randn(8)
    big, small = torch.randn(1, 8, 12, 12), torch.randn(1, 8, 9, 9)
    monkeypatch.setenv("XJIT_CONV_WINOGRAD", "0")
    got, impl = _conv_impl(
        _NCHW.format(n=1, c=8, o=8, h=131, w=129), torch.randn(1, 8, 131, 129), k, b
    )
    assert "wino" not in impl, impl
    monkeypatch.delenv("XJIT_CONV_WINOGRAD")
    # Run-time weights: the per-call weight transform pays from 100 output pixels (144 here;
    # 1K before session 11's faster transform).
    got, impl = _conv_impl(_NCHW.format(n=1, c=8, o=8, h=12, w=12), big, k, b)
    _close(got, torch.relu(F.conv2d(big, k, b, padding=1)))
    assert ("wino" in impl) == _winograd_available(), impl
    got, impl = _conv_impl(_NCHW.format(n=1, c=8, o=8, h=9, w=9), small, k, b)
    _close(got, torch.relu(F.conv2d(small, k, b, padding=1)))
    assert "wino" not in impl, impl


def test_winograd_skips_few_input_channels() -> None:
    # An RGB stem: Winograd's blocked layout pads 3 input channels to 16; the direct conv runs
    # (8x3x32x32, one thread: 0.17 ms against Winograd's 0.65 plus 0.09 of reorders).
    torch.manual_seed(4)
    x, k, b = torch.randn(2, 3, 32, 32), torch.randn(16, 3, 3, 3) * 0.2, torch.randn(16)
    got, impl = _conv_impl(_NCHW.format(n=2, c=3, o=16, h=32, w=32), x, k, b)
    _close(got, torch.relu(F.conv2d(x, k, b, padding=1)))
    assert "wino" not in impl, impl


class Block(nn.Module):
    """A ResNet basic block (conv-bn-relu-conv-bn + residual, relu) at 64 channels."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = (nn.Conv2d(64, 64, 3, padding=1, bias=False) for _ in range(2))
        self.b1, self.b2 = nn.BatchNorm2d(64), nn.BatchNorm2d(64)
        for bn in (self.b1, self.b2):
            nn.init.uniform_(bn.weight, 0.5, 1.5)
            nn.init.uniform_(bn.running_var, 0.5, 1.5)
            nn.init.normal_(bn.running_mean, 0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + x)


@pytest.mark.parametrize("weight_cache", [False, True], ids=["per-call-weights", "weight-cache"])
def test_resnet_block_matches_eager(weight_cache: bool) -> None:
    # 2 x 96 x 96 = 18K output pixels: Winograd by default, channels-last chain (layout pass).
    # Per-call weights go through xjit's transform (winograd_weights.cpp), tagged ones once.
    torch.manual_seed(4)
    block = Block().eval()
    x = torch.randn(2, 64, 96, 96)
    fn = xjit.jit(block, weight_cache=weight_cache)
    with torch.no_grad():
        want = block(x)
        for _ in range(2):
            got = fn(x)
    _close(got, want)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_non_finite_input_gives_eagers_result(monkeypatch: pytest.MonkeyPatch, bad: float) -> None:
    # Winograd would spread one NaN/Inf over a whole output tile; such calls run the direct
    # convolution, and later finite calls Winograd again.
    monkeypatch.setenv("XJIT_CONV_WINOGRAD", "1")
    torch.manual_seed(5)
    n, c, o, h, w = 1, 16, 16, 14, 13
    k, b = torch.randn(o, c, 3, 3) * 0.2, torch.randn(o)
    compiled = ir.compile(ir.parse(_NCHW.format(n=n, c=c, o=o, h=h, w=w)))
    x = torch.randn(n, c, h, w)
    for poison in (True, False):
        xi = x.clone()
        if poison:
            xi[0, 3, 5, 6] = bad
        want = torch.relu(F.conv2d(xi, k, b, padding=1))
        got = compiled(xi, k, b)[0]
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
        finite = want.isfinite()
        _close(got[finite], want[finite])
    if _winograd_available():
        impl = [t for name, t in compiled.dump_files() if name.endswith(".onednn")][0]
        assert "wino" in impl, impl
