"""Convolutions and group_norm in the static layout rules (src/frontend/output_layout.cpp, docs/
frontend.md *Output layouts*): CPU convolutions give a channels-last result where the input or
the weight suggests channels-last, group_norm where its input does, else a contiguous one; the
rules decide that from the operands' strides instead of sending the capture to PyTorch's meta
walk (wav2vec2's conv1d of a transposed tensor, ConvNeXt's conv2d of a permuted one). Exact
strides and values against eager, and no meta walk."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import check_without_meta_walk, clean, counters  # noqa: E402, F401 (autouse fixture)


def layouts(rank: int) -> dict[str, Callable[[list[int]], torch.Tensor]]:
    """Ways to lay out a tensor of `sizes` (all with the same values for a seed)."""
    last = list(range(rank))
    cl = [0, *range(2, rank), 1]  # channels-last order

    def permuted(order: list[int]) -> Callable[[list[int]], torch.Tensor]:
        def make(sizes: list[int]) -> torch.Tensor:
            base = torch.empty([sizes[d] for d in order])
            return base.permute([order.index(d) for d in range(rank)])

        return make

    made: dict[str, Callable[[list[int]], torch.Tensor]] = {
        "contiguous": permuted(last),
        "channels_last": permuted(cl),
        "batch_inner": permuted([*range(1, rank), 0]),  # not channels-last-like
    }
    if rank == 3:
        made["transposed"] = permuted([0, 2, 1])
    return made


def filled(make: Callable[[list[int]], torch.Tensor], sizes: list[int], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return make(sizes).copy_(torch.randn(sizes, generator=g))


CASES: dict[str, tuple[int, list[int], list[int], Callable[..., Any]]] = {
    # name: (rank, input sizes, weight sizes, program)
    "conv1d": (3, [2, 4, 9], [6, 4, 3], lambda x, w: F.conv1d(x, w, padding=1)),
    "conv1d_grouped": (3, [2, 4, 9], [4, 1, 3], lambda x, w: F.conv1d(x, w, groups=4) * 2),
    "conv2d": (4, [2, 3, 6, 5], [4, 3, 3, 3], lambda x, w: F.conv2d(x, w, padding=1)),
    "conv2d_depthwise": (4, [2, 4, 6, 5], [4, 1, 3, 3], lambda x, w: torch.relu(F.conv2d(x, w, groups=4))),
    "conv3d": (5, [1, 2, 4, 5, 3], [3, 2, 2, 2, 2], lambda x, w: F.conv3d(x, w)),
    "conv_transpose2d": (4, [2, 3, 4, 5], [3, 2, 3, 3], lambda x, w: F.conv_transpose2d(x, w, stride=2)),
    "group_norm": (4, [2, 4, 3, 5], [4], lambda x, w: F.group_norm(x, 2, w)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_convolution_layouts_take_the_rules(name: str) -> None:
    rank, x_sizes, w_sizes, fn = CASES[name]
    w_layouts = layouts(len(w_sizes)) if len(w_sizes) == rank else {"contiguous": torch.empty}
    for (xl, make_x), (wl, make_w) in itertools.product(layouts(rank).items(), w_layouts.items()):
        if (rank == 3 and wl != "contiguous") or (rank == 5 and "channels_last" in (xl, wl)):
            continue  # left to the meta walk (test_layouts_left_to_the_walk)
        x, w = filled(make_x, x_sizes, 1), filled(make_w, w_sizes, 2)
        want, got = fn(x, w), xjit.jit(fn)(x, w)
        where = f"{name}: input {xl} {x.stride()}, weight {wl} {w.stride()}"
        check_without_meta_walk(got, want, where, rtol=1e-4)


def test_conv_of_a_computed_permute() -> None:
    # ConvNeXt's pattern: a layer norm over channels-last, permuted back, into a conv.
    w = torch.randn(8, 8, 3, 3)

    def f(x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(x.permute(0, 2, 3, 1), (8,)).permute(0, 3, 1, 2)
        return F.conv2d(y, w, padding=1) + x

    x = torch.randn(2, 8, 5, 6)
    want, got = f(x), xjit.jit(f)(x)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert counters()["layout_meta_walks"] == 0


def test_layouts_left_to_the_walk() -> None:
    # A 3-d convolution with a transposed weight (eager's result is then transposed: (66, 1, 6))
    # and a channels-last-3d conv3d input go to the meta walk: eager's values. (Their strides
    # are the walk's, which differ from eager's here: known, docs/frontend.md.)
    cases = [
        ("conv1d", [2, 4, 9], lambda: torch.randn(6, 3, 4).permute(0, 2, 1), lambda x, w: F.conv1d(x, w)),
        ("conv3d", [1, 2, 4, 5, 3], lambda: torch.randn(3, 2, 2, 2, 2), lambda x, w: F.conv3d(x, w)),
    ]
    for name, x_sizes, make_w, fn in cases:
        x = torch.randn(x_sizes)
        if name == "conv3d":
            x = x.contiguous(memory_format=torch.channels_last_3d)
        w = make_w()
        torch.testing.assert_close(xjit.jit(fn)(x, w), fn(x, w), rtol=1e-4, atol=1e-5)
        assert counters()["layout_meta_walks"] == 1, name
        fe.reset()
