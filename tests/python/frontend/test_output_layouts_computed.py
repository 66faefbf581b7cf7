"""Outputs that eager lays out as a permutation of contiguous (a transposed elementwise result,
channels_last through convolutions, reductions over permuted inputs) are computed by the native
code in that layout, not copied into it after the run (docs/frontend.md, *Output layouts*;
the `sink-permutes` pass). Each case compares values and strides with eager, checks that no
copy was made after the run and that no frame ran in Python; outputs that view another output
share its memory as in eager."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import check_layouts, clean, counters  # noqa: E402, F401 (autouse fixture)

F = torch.nn.functional


def run_compiled(fn: Callable[..., Any], *args: torch.Tensor, **jit: Any) -> Any:
    """fn(*args) through xjit, checked against eager: values, strides, no copy, no fallback."""
    want = fn(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        got = xjit.jit(fn, **jit)(*args)
    check_layouts(got, want)
    assert counters()["frames_in_python"] == 0
    assert counters()["layout_copies"] == 0
    return got


def channels_last(*sizes: int) -> torch.Tensor:
    return torch.randn(*sizes).to(memory_format=torch.channels_last)


torch.manual_seed(0)
CONV1 = torch.nn.Conv2d(3, 8, 3).eval()
CONV2 = torch.nn.Conv2d(8, 8, 3, padding=1).eval()
# channels_last weights make eager's conv channels_last for a contiguous input too
CONV_CL = torch.nn.Conv2d(3, 8, 3).eval().to(memory_format=torch.channels_last)

CASES: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = {
    # transposed 2-d: eager keeps the input's dim order in elementwise results
    "transposed_mul": (lambda x: x.t() * 2, lambda: [torch.randn(64, 48)]),
    "transposed_chain": (lambda x: torch.sin(x.t()) * 2 + 1, lambda: [torch.randn(64, 48)]),
    "transposed_broadcast": (lambda x, b: torch.relu(x.t() + b), lambda: [torch.randn(6, 5), torch.randn(6)]),
    "non_square_size1": (lambda x: x.t() * 2, lambda: [torch.randn(7, 1)]),
    # elementwise in the IR, but eager's masked_fill allocates a contiguous result
    "masked_fill_transposed": (lambda x: x.t().masked_fill(x.t() > 0, 1.0), lambda: [torch.randn(6, 5)]),
    # permuted 4-d: NCHW -> NHWC views, channels_last in and out, convolutions
    "nchw_to_nhwc": (lambda x: x.permute(0, 2, 3, 1) * 2 + 1, lambda: [torch.randn(2, 3, 5, 6)]),
    "channels_last_elementwise": (lambda x: torch.relu(x) + 1, lambda: [channels_last(2, 3, 5, 6)]),
    "channels_last_conv_relu": (lambda x: F.relu(CONV1(x)), lambda: [channels_last(2, 3, 10, 10)]),
    "channels_last_weights": (lambda x: F.relu(CONV_CL(x)), lambda: [torch.randn(2, 3, 10, 10)]),
    "channels_last_two_convs": (
        lambda x: F.relu(CONV2(F.relu(CONV1(x)))),
        lambda: [channels_last(2, 3, 10, 10)],
    ),
    # reductions over permuted inputs: eager's reductions allocate contiguous results, then
    # elementwise ops on a transposed reduction keep it transposed
    "sum_transposed_mul": (lambda x: x.permute(0, 2, 1).sum(0).t() * 2, lambda: [torch.randn(4, 6, 5)]),
    "normalize_transposed": (lambda x: x.t() / x.t().sum(1, keepdim=True), lambda: [torch.randn(6, 5)]),
    "amax_keepdim_transposed": (
        lambda x: x.permute(0, 2, 1).amax(1, keepdim=True).transpose(0, 2) - 1,
        lambda: [torch.randn(4, 6, 5)],
    ),
    "sum_permuted": (lambda x: x.permute(0, 2, 1).sum(0), lambda: [torch.randn(4, 6, 5)]),
    "amax_keepdim": (lambda x: x.permute(0, 2, 1).amax(1, keepdim=True), lambda: [torch.randn(4, 6, 5)]),
    "mean_transposed": (lambda x: x.transpose(0, 1).mean(-1), lambda: [torch.randn(4, 6, 5)]),
    "sum_then_mul": (lambda x: x.transpose(0, 2).sum(1) * 3, lambda: [torch.randn(4, 6, 5)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_permuted_outputs_computed_in_eager_layout(name: str) -> None:
    fn, make = CASES[name]
    with torch.no_grad():
        run_compiled(fn, *make())


def views_of_output(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y = torch.sin(x.t()) + 1
    return y, y[1], y.t()


def test_outputs_viewing_another_output_share_its_memory() -> None:
    # Before, the first output was copied into eager's layout after the run, which would have
    # cut the views off it: the frame ran in Python instead.
    x = torch.randn(6, 5)
    with torch.no_grad():
        y, row, yt = run_compiled(views_of_output, x)
    assert row.data_ptr() == y[1].data_ptr()
    assert yt.data_ptr() == y.data_ptr()
    y[1, 2] = 100.0  # a write through one output reaches the others, as in eager
    assert row[2].item() == 100.0 and yt[2, 1].item() == 100.0


def test_same_output_twice_is_one_tensor() -> None:
    def twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.t() * 2
        return y, y

    with torch.no_grad():
        a, b = run_compiled(twice, torch.randn(5, 3))
    assert a.data_ptr() == b.data_ptr()


def test_dynamic_shapes_compile_once() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.relu(x.t()) * 3, x.permute(1, 0).sum(1, keepdim=True)

    jitted = xjit.jit(fn, dynamic=True)
    with torch.no_grad():
        for rows, cols in [(5, 7), (9, 4), (16, 33)]:
            x = torch.randn(rows, cols)
            want = fn(x)
            got = jitted(x)
            for a, b in zip(got, want):
                assert a.stride() == b.stride()
                torch.testing.assert_close(a, b)
    assert counters()["compiles"] == 1
    assert counters()["frames_in_python"] == 0
    assert counters()["layout_copies"] == 0


def test_other_backends_keep_the_copy() -> None:
    # The reference interpreter runs the captured graph as it is: its contiguous result is
    # copied into eager's layout after the run (and counted, which the checks above rely on).
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.t() * 2

    x = torch.randn(4, 3)
    with torch.no_grad():
        got = xjit.jit(fn, backend="interp")(x)
    assert got.stride() == fn(x).stride()
    torch.testing.assert_close(got, fn(x))
    assert counters()["layout_copies"] == 1


def test_the_graph_computes_in_memory_order() -> None:
    # The copy is gone from the compiled graph itself, not only moved into it: the
    # sink-permutes pass reports one removed copy per permuted output (XJIT_LOG=passes, read at
    # startup, hence a subprocess).
    script = textwrap.dedent(
        """
        import torch, xjit
        F = torch.nn.functional
        conv = torch.nn.Conv2d(3, 4, 3).eval()
        fns = [lambda x: torch.sin(x.t()) * 2,
               lambda x: x.permute(0, 2, 1).sum(0).t() * 2,
               lambda x: F.relu(conv(x))]
        args = [torch.randn(8, 6), torch.randn(3, 4, 5),
                torch.randn(1, 3, 8, 8).to(memory_format=torch.channels_last)]
        with torch.no_grad():
            for f, a in zip(fns, args):
                xjit.jit(f)(a)
        """
    )
    env = dict(os.environ, XJIT_LOG="passes", XJIT_NO_CACHE="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if "sink-permutes" in ln]
    assert len(lines) == 3, out.stderr
    assert all("copies-removed=1" in ln for ln in lines), lines
