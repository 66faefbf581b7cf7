"""Elementwise kernels reading a transposed view (src/backend/lower_fusion.cpp, emitTiledLoops):
the fast version runs the transposed dim and the last dim in 32x32 tiles. Values are checked
against PyTorch eager for sizes that are not multiples of the tile, permutations of 3-D and 4-D
inputs, several dtypes and a contiguous operand next to the transposed one, and
``general_versions`` in ``xjit.ir.backend_stats()`` must not grow (the fast version ran)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
xjit = pytest.importorskip("xjit")
ir = pytest.importorskip("xjit.ir")


def t_copy_scaled(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.t().contiguous() * 2 + b


def permute3(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.permute(2, 0, 1).contiguous() + 1) * b


def permute4(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(a.permute(0, 3, 1, 2).contiguous() - b)


CASES = [
    (t_copy_scaled, (45, 70), lambda s: (s[1], s[0])),
    (t_copy_scaled, (33, 1), lambda s: (s[1], s[0])),
    (t_copy_scaled, (64, 96), lambda s: (s[1], s[0])),
    (permute3, (5, 37, 66), lambda s: (s[2], s[0], s[1])),
    (permute4, (2, 7, 9, 35), lambda s: (1, s[3], 1, s[2])),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("fn,shape,other", CASES, ids=lambda c: getattr(c, "__name__", None))
def test_transposed_inputs_match_eager_on_the_fast_version(
    fn, shape, other, dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XJIT_NO_CACHE", "1")  # count compiles, not cache links
    g = torch.Generator().manual_seed(sum(shape))
    a = (torch.randn(*shape, generator=g) * 8).to(dtype)
    b = (torch.randn(*other(shape), generator=g) * 8).to(dtype)
    before = ir.backend_stats()["general_versions"]
    with torch.no_grad():
        got = xjit.jit(fn)(a, b)
        want = fn(a, b)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()
    assert ir.backend_stats()["general_versions"] == before
