"""A frame whose capture does no tensor work runs in Python, and is captured again after 1, 4, 16
and 64 more calls (then in Python for good): a frame whose first call took a branch without
tensor work, or got no tensors, is still compiled when later calls do tensor work."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from frontend_fixtures import clean, counters, fe  # noqa: E402,F401 - clean is autouse

import xjit  # noqa: E402


def scale(x, k):  # type: ignore[no-untyped-def]
    return x * k + 1


def warm_up(x, cache):  # type: ignore[no-untyped-def]
    if cache is None:  # the first call only fills the cache: no tensor work
        return None
    return torch.relu(x @ cache) - x


def test_frame_first_called_without_tensors_compiles_when_tensors_come() -> None:
    f = xjit.jit(scale)
    assert f(3, 2) == 7  # ints only: nothing to compile
    assert fe.code_state(scale.__code__)["state"] == "no_work"
    x = torch.randn(4, 4)
    for _ in range(3):
        torch.testing.assert_close(f(x, 2.0), x * 2.0 + 1)
    state = fe.code_state(scale.__code__)
    assert state["state"] == "active" and state["entries"] == 1, state
    assert counters()["compiles"] == 1 and counters()["skipped_no_ops"] == 1, counters()


def test_frame_whose_first_call_takes_a_branch_without_tensor_work() -> None:
    f = xjit.jit(warm_up)
    x, w = torch.randn(3, 3), torch.randn(3, 3)
    assert f(x, None) is None
    for _ in range(3):
        torch.testing.assert_close(f(x, w), torch.relu(x @ w) - x)
    assert fe.code_state(warm_up.__code__)["entries"] == 1
    assert counters()["compiles"] == 1, counters()


def test_frame_without_tensor_work_is_captured_a_bounded_number_of_times() -> None:
    f = xjit.jit(scale)
    for i in range(200):
        assert f(i, 3) == 3 * i + 1
    # Captured at calls 1, 2, 6, 22 and 86 (countdowns 1, 4, 16, 64), then Python for good.
    assert counters()["skipped_no_ops"] == 5, counters()
    assert fe.code_state(scale.__code__)["state"] == "python"
    assert counters()["compiles"] == 0, counters()
