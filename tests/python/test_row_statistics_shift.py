"""Row statistics (layer norm, var, std) computed as x0 + mean(x - x0), x0 each row's first element
(lower_fusion.cpp, rowStats): a row of equal values has its exact mean and zero deviations, as
eager's Welford kernels give, so layer norm returns its bias exactly and var 0. With the plain
sum / n the mean was an ulp off, which layer norm's 1 / sqrt(eps) amplified to ~1e-4 (fuzzer
seeds 81159, 89295, 93462). Rows with a large offset keep about eager's error against float64."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
xjit = pytest.importorskip("xjit")
F = torch.nn.functional


pytestmark = pytest.mark.usefixtures("fresh_frontend")  # (conftest.py)

STATISTICS: dict[str, Callable[[Any], Any]] = {
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "layer_norm_affine": lambda x: F.layer_norm(
        x, x.shape[-1:], torch.linspace(0.5, 2, x.shape[-1]), torch.linspace(-1, 1, x.shape[-1])
    ),
    "layer_norm_two_dims": lambda x: F.layer_norm(x.reshape(x.shape[0], 1, -1), (1, x.shape[-1])),
    "var": lambda x: x.var(dim=-1),
    "std_keepdim": lambda x: x.std(dim=-1, keepdim=True),
    "var_all": lambda x: x.var(),  # (every dim reduced: the sum runs in parallel chunks)
    "layer_norm_of_a_row": lambda x: F.layer_norm(x[0], x.shape[-1:]),  # (seed 89295)
    # (the mean read back from the kernel's output buffer, where a softmax keeps its exp: seed
    # 114504 read x0 there after the output pass had overwritten it)
    "layer_norm_of_softmax": lambda x: F.layer_norm(torch.softmax(x * 0 + 1, -1), x.shape[-1:]),
}


@pytest.mark.parametrize("width", [3, 7, 64, 768, 1000])
@pytest.mark.parametrize("name", sorted(STATISTICS))
def test_rows_of_equal_values_are_exact(name: str, width: int) -> None:
    fn = STATISTICS[name]
    # rows of one value each whose sum / n is not that value in f32 (0.1, 1/3, ...)
    values = torch.tensor([0.1, 1 / 3, -7.3, 1e3 / 7, 2.0**-20 * 3, 12345.678])
    x = values[:, None].expand(-1, width).contiguous()
    want = fn(x)
    got = xjit.jit(lambda t: fn(t) * 1.0, dynamic=False)(x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["layer_norm", "var", "var_all"])
def test_offset_rows_keep_about_eagers_error(name: str) -> None:
    fn = STATISTICS[name]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 768, generator=g) + 1e3
    ref = fn(x.double())
    eager = float((fn(x).double() - ref).abs().max())
    got = float((xjit.jit(lambda t: fn(t) * 1.0, dynamic=False)(x).double() - ref).abs().max())
    assert got <= 2 * eager + 1e-6, (got, eager)


def test_rows_of_symbolic_width_still_match_eager() -> None:
    # (no shift where a row may be empty: the width is symbolic under dynamic=True)
    fn = STATISTICS["layer_norm"]
    compiled = xjit.jit(lambda t: fn(t) * 1.0, dynamic=True)
    for width in (5, 9, 33):
        x = torch.randn(4, width, generator=torch.Generator().manual_seed(width)) * 3 + 2
        torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(3,), (4, 3), (16, 33)])
def test_layer_norm_of_a_softmax_in_one_kernel(shape: tuple[int, ...]) -> None:
    # seed 114504: the softmax keeps its exp in the kernel's output buffer, which the output pass
    # overwrites; x0 read there during that pass was another element's output (values off by 2)
    def fn(x: Any) -> Any:
        return F.layer_norm(torch.softmax(x, -1), x.shape[-1:], torch.linspace(0.5, 1.5, x.shape[-1]))

    x = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape)))
    torch.testing.assert_close(xjit.jit(fn, dynamic=False)(x), fn(x), rtol=1e-4, atol=1e-4)


# Lane mode (lower_fusion.cpp): the reduced dim is not the one with unit stride, so a "row" is a
# block of lanes along the kept unit-stride dim and x0 is one accumulator per lane.
LANES: dict[str, Callable[[Any], Any]] = {
    "var_dim0": lambda x: x.var(dim=0),
    "std_dim0_keepdim": lambda x: x.std(dim=0, keepdim=True),
    "layer_norm_of_transposed": lambda x: F.layer_norm(x.t(), x.t().shape[-1:]),
    "layer_norm_of_softmax_of_transposed": lambda x: F.layer_norm(
        torch.softmax(x.t(), -1), x.t().shape[-1:]
    ),
}


@pytest.mark.parametrize("name", sorted(LANES))
def test_lane_rows_of_equal_values_are_exact(name: str) -> None:
    fn = LANES[name]
    values = torch.tensor([0.1, 1 / 3, -7.3, 1e3 / 7, 12345.678] * 7)  # one value per column
    x = values[None, :].expand(37, -1).contiguous()
    torch.testing.assert_close(xjit.jit(lambda t: fn(t) * 1.0, dynamic=False)(x), fn(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(LANES))
# (35 lanes: one block; 200: blocks of 64 with a tail of 8; 768: 6 blocks of 128; 2000: 8 blocks
# of 256, the last of 208: lower_fusion.cpp laneBlockFor)
@pytest.mark.parametrize("shape", [(37, 35), (33, 200), (9, 768), (5, 2000)])
def test_lane_rows_match_eager(name: str, shape: tuple[int, int]) -> None:
    fn = LANES[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(shape[1])) * 2 + 3
    torch.testing.assert_close(xjit.jit(lambda t: fn(t) * 1.0, dynamic=False)(x), fn(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("shape", [(1, 96, 7, 9), (2, 24, 5, 5)])
def test_channel_norm_of_nchw_in_lane_mode(norm: str, shape: tuple[int, ...]) -> None:
    # ConvNeXt's LayerNorm over channels of a permuted NCHW tensor: lane mode, its mean and rstd
    # kept per lane before the output pass (lower_fusion.cpp perRow)
    c = shape[1]
    w, b = torch.linspace(0.5, 1.5, c), torch.linspace(-1, 1, c)

    def fn(x: Any) -> Any:
        y = x.permute(0, 2, 3, 1)
        if norm == "rms_norm":
            return F.rms_norm(y, (c,), w, eps=1e-6) * 2
        return F.layer_norm(y, (c,), w, b) * 2

    x = torch.randn(shape, generator=torch.Generator().manual_seed(c)) * 3 + 1
    torch.testing.assert_close(xjit.jit(fn, dynamic=False)(x), fn(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_channel_norm_of_nchw_compiles_natively(norm: str) -> None:
    # (a per-lane statistic read at the wrong lane made the kernel invalid, "loop variable used
    # outside its loop": it then ran on the reference kernel, 20x slower)
    import xjit.ir as ir

    params = "%w" if norm == "rms_norm" else "%w, %w"
    g = ir.parse(
        f"""graph @f(%x: f32[1,96,7,7], %w: f32[96]) -> (f32[1,7,7,96]) {{
  %0 = permute(%x) {{dims = [0, 2, 3, 1]}} : f32[1,7,7,96]
  %1 = {norm}(%0, {params}) {{eps = 1e-05, normalized_shape = [96]}} : f32[1,7,7,96]
  return(%1)
}}"""
    )
    compiled = ir.compile(g)
    assert compiled.stats["not_compiled"] == [] and compiled.stats["target_ops"] == 1
    x, w = torch.randn(1, 96, 7, 7), torch.rand(96) + 0.5
    want = getattr(F, norm)(x.permute(0, 2, 3, 1), (96,), w, *([w] if norm == "layer_norm" else []), eps=1e-5)
    torch.testing.assert_close(torch.as_tensor(compiled.run([x, w])[0]), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(1024, 768), (33, 200), (7, 1000), (3, 4096)])
def test_column_sums_in_lane_blocks_match_eager(shape: tuple[int, int]) -> None:
    # a bias gradient's column sum: the lane dim is the only kept dim, cut into blocks that run
    # in parallel (each lane sums its rows in order, as one block of 1024 lanes did)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(shape[1]))
    for fn in (lambda t: t.sum(0) * 1.0, lambda t: t.amax(0) + 0, lambda t: torch.softmax(t, 0) * 1.0):
        torch.testing.assert_close(xjit.jit(fn, dynamic=False)(x), fn(x), rtol=1e-5, atol=1e-5)
