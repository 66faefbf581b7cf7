"""Pools and linear resampling in the static layout rules (src/frontend/output_layout.cpp,
docs/frontend.md *Output layouts*): the 2-d ops, max_pool3d and trilinear upsampling give the
memory format their input suggests (channels-last where its strides are channels-last-like), the
1-d avg/adaptive pools the format `input.unsqueeze(-2)` suggests (a transposed [N, L, C] input
gives a transposed result), and max_pool1d, linear upsampling and the other 3-d pools a
contiguous one; the rules decide that from the input's strides instead of sending the capture to
PyTorch's meta walk (1.1-1.3 s for a first call in a process without `torch._dynamo` imported:
`F.interpolate` of a channels-last tensor, SegFormer's and MobileViT's upsampling, Swin's
adaptive_avg_pool1d of a transposed tensor). Every dim order and a step slice, exact strides and
values against eager, and no meta walk."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import check_without_meta_walk, clean  # noqa: E402, F401 (autouse fixture)

SIZES = {3: [2, 6, 8], 4: [2, 6, 8, 10], 5: [2, 3, 4, 6, 8]}


def inputs(rank: int) -> dict[str, tuple[torch.Tensor, Callable[[Any], Any]]]:
    """A tensor of SIZES[rank] in every dim order (and the operand: it, or a computed tensor of
    its layout), and one whose operand is a step slice of its last dim (made in the frame: a
    step-sliced input is not dense, and such a frame goes to the walk whatever it does)."""
    sizes = SIZES[rank]
    g = torch.Generator().manual_seed(rank)
    made: dict[str, tuple[torch.Tensor, Callable[[Any], Any]]] = {}
    for order in itertools.permutations(range(rank)):
        base = torch.randn([sizes[d] for d in order], generator=g)
        x = base.permute([order.index(d) for d in range(rank)])
        made["order" + "".join(map(str, order))] = (x, lambda t: t)
        made["computed" + "".join(map(str, order))] = (x, lambda t: t * 2)
    made["step"] = (torch.randn([*sizes[:-1], 2 * sizes[-1]], generator=g), lambda t: t[..., ::2])
    return made


CASES: dict[str, tuple[int, Callable[[Any], Any]]] = {
    "max_pool1d": (3, lambda x: F.max_pool1d(x, 2)),
    "avg_pool1d": (3, lambda x: F.avg_pool1d(x, 2)),
    "adaptive_avg_pool1d": (3, lambda x: F.adaptive_avg_pool1d(x, 3)),
    "adaptive_max_pool1d": (3, lambda x: F.adaptive_max_pool1d(x, 3)),
    "linear1d": (3, lambda x: F.interpolate(x, scale_factor=2, mode="linear")),
    "max_pool2d": (4, lambda x: F.max_pool2d(x, 2)),
    "max_pool2d_indices": (4, lambda x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True)),
    "avg_pool2d": (4, lambda x: F.avg_pool2d(x, 2)),
    "adaptive_avg_pool2d": (4, lambda x: F.adaptive_avg_pool2d(x, 3)),
    "adaptive_max_pool2d": (4, lambda x: F.adaptive_max_pool2d(x, (3, 4))),
    "bilinear": (4, lambda x: F.interpolate(x, scale_factor=2, mode="bilinear")),
    "bilinear_align": (4, lambda x: F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=True)),
    "max_pool3d": (5, lambda x: F.max_pool3d(x, 2)),
    "avg_pool3d": (5, lambda x: F.avg_pool3d(x, 2)),
    "adaptive_avg_pool3d": (5, lambda x: F.adaptive_avg_pool3d(x, 3)),
    "adaptive_max_pool3d": (5, lambda x: F.adaptive_max_pool3d(x, 3)),
    "trilinear": (5, lambda x: F.interpolate(x, scale_factor=2, mode="trilinear")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_pool_and_resample_layouts_take_the_rules(name: str) -> None:
    rank, op = CASES[name]

    for layout, (x, operand) in inputs(rank).items():

        def fn(x: torch.Tensor) -> Any:  # an elementwise op after it: its layout is followed
            y = op(operand(x))
            return (y[0] + 1, y[1]) if isinstance(y, tuple) else y + 1

        want, got = fn(x), xjit.jit(fn)(x)
        check_without_meta_walk(got, want, f"{name}: input {layout} {x.stride()}")


def test_upsampled_channels_last_features_in_a_decoder() -> None:
    # SegFormer's decode head: features upsampled to one size and concatenated (channels-last
    # here, from a permuted MLP output).
    w = torch.randn(6, 6)

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ups = [F.interpolate((t @ w).permute(0, 3, 1, 2), size=(8, 8), mode="bilinear") for t in (a, b)]
        return torch.cat(ups, 1).relu()

    a, b = torch.randn(2, 4, 4, 6), torch.randn(2, 2, 2, 6)
    check_without_meta_walk(xjit.jit(f)(a, b), f(a, b), "decoder")
