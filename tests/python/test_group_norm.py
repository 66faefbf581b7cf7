"""group_norm through the default pipeline (decompose-group-norm: a native layer norm over
[N, groups, rest] rows and a per-channel affine map) against F.group_norm: f32 and f64, with
and without the affine parameters, 3-d and 4-d inputs, one group per channel, a non-contiguous
input, and under xjit.jit after convolutions (whose chain runs channels-last)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ir = pytest.importorskip("xjit.ir")
F = torch.nn.functional


def _ty(t: torch.Tensor) -> str:
    dt = {torch.float32: "f32", torch.float64: "f64"}[t.dtype]
    return f"{dt}[{','.join(map(str, t.shape))}]"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(
    "shape,groups,affine",
    [((2, 6, 5, 8), 3, True), ((2, 6, 5, 8), 6, False), ((1, 128, 1023), 128, True), ((3, 8, 7), 1, True)],
)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_group_norm_matches_torch(
    shape: tuple[int, ...], groups: int, affine: bool, dtype: torch.dtype, layout: str
) -> None:
    g = torch.Generator().manual_seed(groups)
    x = torch.randn(shape, generator=g, dtype=dtype) * 3 + 1
    if layout == "transposed":
        x = x.transpose(1, -1).contiguous().transpose(1, -1)
    c = shape[1]
    w = torch.randn(c, generator=g, dtype=dtype)
    b = torch.randn(c, generator=g, dtype=dtype)
    params = "%x, %w, %b" if affine else "%x"
    text = f"""
graph @f(%x: {_ty(x)}, %w: {_ty(w)}, %b: {_ty(b)}) -> ({_ty(x)}) {{
  %y = group_norm({params}) {{num_groups = {groups}, eps = 0.001}} : {_ty(x)}
  return(%y)
}}"""
    cg = ir.compile(ir.parse(text), keep_text=True)
    assert any("layer_norm" in n for n, _ in cg.dump_files()), "expected the decomposition"
    (got,) = cg(x, w, b)
    want = F.group_norm(x, groups, w if affine else None, b if affine else None, eps=1e-3)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_group_norm_in_a_conv_net_under_jit() -> None:
    import xjit

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.GroupNorm(4, 16),
        torch.nn.SiLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.GroupNorm(8, 16),
    ).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.uniform_(-0.5, 0.5)
        x = torch.randn(2, 3, 20, 20)
        want = net(x)
        got = xjit.jit(net)(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
