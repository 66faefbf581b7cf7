"""Symbolic sizes beyond the input dims: slice bounds under range guards, and narrow / repeat /
unflatten / split / chunk / reshape sizes that come from symbolic dims (docs/frontend.md,
"Dynamic shapes"). Each op must serve several sizes from one capture (the frontend's compile
counter) and match eager; a call outside a capture's assumptions must recompile and give eager's
result, never an internal-error warning."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, counters  # noqa: E402, F401 (autouse fixture)

Fn = Callable[[torch.Tensor], object]


def assert_same(got: object, want: object) -> None:
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
        return
    assert isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)


def run_shapes(f: Fn, shapes: Sequence[tuple[int, ...]], backend: str = "xjit") -> None:
    """Calls f compiled (dynamic=True) and eager on an input of each shape; any xjit warning
    (an internal error, a fallback to Python) fails the test."""
    compiled = xjit.jit(f, backend=backend, dynamic=True)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        for shape in shapes:
            x = torch.randn(*shape)
            assert_same(compiled(x), f(x))
    assert counters()["frames_in_python"] == 0


# ---- slice bounds: range guards instead of run-time failures ----


def slice_to_first_dim(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return x[:, :n] * 2


@pytest.mark.parametrize("backend", ["xjit", "eager"])
def test_symbolic_slice_bound_past_the_dim_recompiles_and_clamps(backend: str) -> None:
    # x[:, :n] with n = x.shape[0]: one capture serves every call with n <= x.shape[1]; a call
    # with n > x.shape[1] (eager clamps) fails the range guard and recompiles, specialized.
    run_shapes(slice_to_first_dim, [(3, 8), (5, 9), (4, 10)], backend)
    assert counters()["compiles"] == 1
    run_shapes(slice_to_first_dim, [(12, 6)], backend)
    assert counters()["compiles"] == 2
    # Back inside the range: the first capture serves it again.
    run_shapes(slice_to_first_dim, [(6, 11)], backend)
    assert counters()["compiles"] == 2


def slice_static_end(x: torch.Tensor) -> torch.Tensor:
    return x[:, :5] + x[:, -4:-1].sum(dim=1, keepdim=True)


def test_static_slice_bounds_on_a_symbolic_dim_are_guarded() -> None:
    # :5 and -4:-1 assume x.shape[1] >= 5 (no clamping on a symbolic dim): a narrower input
    # recompiles with that size static and clamps as eager does.
    run_shapes(slice_static_end, [(3, 8), (3, 9), (4, 12)])
    assert counters()["compiles"] == 1
    run_shapes(slice_static_end, [(3, 4)])
    assert counters()["compiles"] == 2


def slice_between_sizes(x: torch.Tensor) -> torch.Tensor:
    a, b = x.shape[0], x.shape[0] * 2
    return x[:, a:b] - 1


def test_slice_start_past_end_recompiles() -> None:
    # x[:, n:2n] has length n while 2n <= x.shape[1]; past it eager clamps the end.
    run_shapes(slice_between_sizes, [(2, 9), (3, 10), (4, 12)])
    assert counters()["compiles"] == 1
    run_shapes(slice_between_sizes, [(5, 7)])
    assert counters()["compiles"] == 2


def test_explain_lists_the_range_guard() -> None:
    report = xjit.explain(xjit.jit(slice_to_first_dim, dynamic=True))(torch.randn(3, 8))
    guards = [g for graph in report.graphs for g in graph.guards]
    assert any(g.startswith("s0 <= s1 (slice end") for g in guards), guards


def test_relations_the_sizes_decide_are_not_guarded() -> None:
    # A symbolic dim is at least 2: x[:, 1:], x[:, :-1] and narrow(1, 1, n - 2) always fit, so
    # only the tensor and grad-mode guards remain.
    def f(x: torch.Tensor) -> torch.Tensor:
        return x[:, 1:] + x[:, :-1] + x.narrow(1, 1, x.shape[1] - 2).sum()

    report = xjit.explain(xjit.jit(f, dynamic=True))(torch.randn(3, 8))
    assert len(report.guards) == 2, report.guards


# ---- ops whose sizes come from symbolic dims: one capture for every size ----


def narrow_inner(x: torch.Tensor) -> torch.Tensor:
    return x.narrow(1, 1, x.shape[1] - 2) * 2


def narrow_negative_start(x: torch.Tensor) -> torch.Tensor:
    return x.narrow(-1, -3, 2) + x.narrow(0, 0, x.shape[0] // 2).sum()


def slice_last_columns(x: torch.Tensor) -> torch.Tensor:
    return x[:, -x.shape[0] :] * 2  # a symbolic negative bound counts from the end


def narrow_three_rows(x: torch.Tensor) -> torch.Tensor:
    return x.narrow(0, 0, 3) + 1


def repeat_by_size(x: torch.Tensor) -> torch.Tensor:
    return x.repeat(2, x.shape[0]) + 1


def unflatten_by_size(x: torch.Tensor) -> torch.Tensor:
    return x.unflatten(1, (x.shape[0], -1)) * 3


def unflatten_static_parts(x: torch.Tensor) -> torch.Tensor:
    return x.unflatten(1, (2, -1)) - 1


def split_fixed_pieces(x: torch.Tensor) -> list[torch.Tensor]:
    return [t * 2 for t in x.split(4, 1)]


def split_by_size(x: torch.Tensor) -> list[torch.Tensor]:
    n = x.shape[0]
    return [t + 1 for t in x.split(n, 1)]


def split_sections(x: torch.Tensor) -> list[torch.Tensor]:
    return [t * 2 for t in torch.split(x, [2, x.shape[1] - 2], dim=1)]


def chunk_two(x: torch.Tensor) -> list[torch.Tensor]:
    a, b = x.chunk(2, dim=-1)
    return [a * 2, b + 1]


def chunk_three(x: torch.Tensor) -> list[torch.Tensor]:
    return [t * 2 for t in torch.chunk(x, 3, 1)]


def view_inexact_minus_one(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], -1, 2) * 2


# (function, input shapes of one capture): dim 0 and dim 1 differ in every call so each gets a
# symbol of its own (equal sizes would share one, torch's duck sizing).
ONE_CAPTURE = [
    (narrow_inner, [(3, 8), (4, 9), (5, 12)]),
    (narrow_negative_start, [(4, 7), (6, 5), (9, 10)]),
    (narrow_three_rows, [(5, 4), (6, 3), (7, 9)]),
    (slice_last_columns, [(3, 8), (5, 9), (4, 10)]),
    (repeat_by_size, [(3, 4), (5, 6), (7, 2)]),
    (unflatten_by_size, [(3, 6), (4, 8), (5, 15)]),
    (unflatten_static_parts, [(3, 6), (4, 8), (5, 14)]),
    (split_fixed_pieces, [(3, 9), (2, 12), (5, 10)]),
    (split_by_size, [(3, 8), (4, 10), (5, 12)]),
    (split_sections, [(3, 8), (4, 9), (5, 12)]),
    (chunk_two, [(3, 8), (4, 9), (5, 13)]),
    (chunk_three, [(3, 8), (4, 9), (5, 13)]),
    (view_inexact_minus_one, [(3, 8), (5, 6), (7, 4)]),
]


@pytest.mark.parametrize("backend", ["xjit", "eager"])
@pytest.mark.parametrize("f, shapes", ONE_CAPTURE, ids=[f.__name__ for f, _ in ONE_CAPTURE])
def test_sizes_from_symbolic_dims_compile_once(
    f: Fn, shapes: list[tuple[int, ...]], backend: str
) -> None:
    run_shapes(f, shapes, backend)
    assert counters()["compiles"] == 1


@pytest.mark.parametrize(
    "f, inside, outside",
    [
        # the piece count changes: 9 and 12 give 3 pieces of 4 at most, 13 gives 4
        (split_fixed_pieces, [(3, 9), (2, 12)], (2, 13)),
        # chunk(3) of 4 gives 2 pieces (of 2), of 8 or 9 gives 3
        (chunk_three, [(3, 8), (2, 9)], (3, 4)),
        # the -1 of reshape(n, -1, 2) needs an even x.shape[1] (eager raises otherwise)
        (view_inexact_minus_one, [(3, 8), (5, 6)], (3, 7)),
        # unflatten's -1 needs x.shape[0] to divide x.shape[1] (eager raises otherwise)
        (unflatten_by_size, [(3, 6), (4, 8)], (4, 10)),
        # narrow(0, 0, 3) needs x.shape[0] >= 3 (eager raises otherwise)
        (narrow_three_rows, [(5, 4), (6, 3)], (2, 4)),
    ],
    ids=["split", "chunk", "reshape", "unflatten", "narrow"],
)
def test_a_size_outside_the_captured_assumptions_recompiles(
    f: Fn, inside: list[tuple[int, ...]], outside: tuple[int, ...]
) -> None:
    run_shapes(f, inside)
    assert counters()["compiles"] == 1
    x = torch.randn(*outside)
    compiled = xjit.jit(f, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        try:
            want = f(x)
        except RuntimeError as e:
            # Eager rejects it: so must the compiled frame, with PyTorch's own error (the new
            # capture stops at the op and Python runs it), not a wrong result or a warning.
            with pytest.raises(RuntimeError, match=re.escape(str(e)[:30])):
                compiled(x)
        else:
            assert_same(compiled(x), want)
            assert counters()["compiles"] == 2


def test_automatic_dynamic_compiles_twice() -> None:
    # dynamic=None: the first capture is static, the first size change makes the changed dims
    # symbolic, every later size reuses that capture (before: one capture per size).
    compiled = xjit.jit(chunk_two)
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        for shape in [(3, 8), (3, 10), (3, 13), (3, 7), (3, 22)]:
            x = torch.randn(*shape)
            assert_same(compiled(x), chunk_two(x))
    assert counters()["compiles"] == 2


# ---- slice assignment: the written region's indices as an arange with symbolic bounds ----


def write_first_columns(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    n = x.shape[0]
    x[:, :n] = x[:, -n:] * 2
    return x


def write_inner_block(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[1:-1, 2:] = 0.5
    return x


@pytest.mark.parametrize("backend", ["xjit", "eager"])
def test_slice_assignment_on_symbolic_dims_compiles_once(backend: str) -> None:
    # Before: an indexed assignment on a dynamic dim was a graph break, and a symbolic bound
    # on a static dim specialized.
    run_shapes(write_first_columns, [(3, 8), (5, 9), (4, 10)], backend)
    run_shapes(write_inner_block, [(4, 8), (5, 9), (7, 3)], backend)
    assert counters()["compiles"] == 2
    assert not fe.events()["breaks"]


def test_slice_assignment_past_the_dim_recompiles() -> None:
    # n > x.shape[1]: eager clamps both slices; the range guard recompiles, specialized.
    run_shapes(write_first_columns, [(3, 8), (5, 9)])
    assert counters()["compiles"] == 1
    run_shapes(write_first_columns, [(6, 4)])
    assert counters()["compiles"] == 2


def shift_right(ids: torch.Tensor) -> torch.Tensor:
    # transformers' shift_tokens_right (BART, T5): an int index and a slice of a symbolic dim
    shifted = torch.zeros_like(ids)
    shifted[:, 1:] = ids[:, :-1].clone()
    shifted[:, 0] = 7
    shifted[:, -1] = ids[:, 0]
    return shifted


def overwrite_whole(x: torch.Tensor) -> torch.Tensor:
    y, z = torch.empty_like(x), torch.empty_like(x)
    y[:] = x * 2
    z[...] = x[0]  # broadcast along dim 0
    return y + z


def read_int_indices(x: torch.Tensor) -> torch.Tensor:
    return x[:, -1] * 2 + x[:, 1] + x[-2]  # from the end of a symbolic dim: was specialized


def test_int_index_into_a_symbolic_dim() -> None:
    run_shapes(read_int_indices, [(3, 3), (4, 4), (6, 6)])
    assert counters()["compiles"] == 1
    # x[:, 1] assumes x.shape[1] >= 2: always true for a symbolic dim, so no guard; the guards
    # are the tensor's and the grad mode's.
    report = xjit.explain(xjit.jit(read_int_indices, dynamic=True))(torch.randn(5, 5))
    assert len(report.guards) == 2, report.guards


def test_int_index_past_a_symbolic_dim_recompiles() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x[:, 2] + 1

    run_shapes(f, [(3, 4), (4, 5)])
    assert counters()["compiles"] == 1
    with pytest.raises(IndexError):
        f(torch.randn(3, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        with pytest.raises(IndexError):
            xjit.jit(f, dynamic=True)(torch.randn(4, 2))


@pytest.mark.parametrize("backend", ["xjit", "eager"])
def test_int_index_and_whole_assignment_on_symbolic_dims(backend: str) -> None:
    # Both were graph breaks on a symbolic dim.
    run_shapes(shift_right, [(2, 5), (3, 9), (4, 6)], backend)
    run_shapes(overwrite_whole, [(2, 5), (3, 9), (4, 6)], backend)
    assert counters()["compiles"] == 2
    assert not fe.events()["breaks"]
