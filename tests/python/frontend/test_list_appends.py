"""Lists the caller can see (a global, an argument, an attribute) that a frame only appends to
are captured once for any length: their length and items are guarded and wrapped only when the
capture reads them (ListVar's lazy items, docs/frontend.md), and the appends are replayed after
the graph. A hook collecting a layer's outputs no longer recompiles at every call. A frame that
reads such a list (len, iteration, indexing) still guards its length and items. Every case checks
values against eager PyTorch."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
import xjit  # noqa: E402

from frontend_fixtures import clean, counters  # noqa: E402,F401

nn = torch.nn
collected: list[Any] = []


def close(got: Any, want: Any) -> None:
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_forward_hook_appending_to_a_global_list_compiles_once(clean: None) -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    m[1].register_forward_hook(lambda mod, inp, out: collected.append(out * 2))
    f = xjit.jit(m)
    collected.clear()
    with torch.no_grad():
        for i in range(10):
            x = torch.randn(4, 8)
            y = f(x)
            assert len(collected) == i + 1
            close(collected[-1], torch.relu(m[0](x)) * 2)
            close(y, m(x)[:])  # eager (its hook appends too)
            collected.pop()  # keep only the compiled call's item
    assert counters()["compiles"] == 1


def test_append_to_an_argument_list_for_any_length(clean: None) -> None:
    def f(x: Any, acc: list[Any]) -> Any:
        acc.append(x.sin())
        acc.extend([x * 3, x + 1])
        return x.cos()

    fc = xjit.jit(f)
    acc: list[Any] = ["not a tensor"]
    for n in range(6):
        x = torch.randn(5)
        close(fc(x, acc), x.cos())
        assert len(acc) == 1 + 3 * (n + 1) and acc[0] == "not a tensor"
        close(acc[-3], x.sin())
        close(acc[-2], x * 3)
        close(acc[-1], x + 1)
    assert counters()["compiles"] == 1


def test_a_list_that_is_read_still_guards_its_length(clean: None) -> None:
    def f(x: Any, acc: list[Any]) -> Any:
        acc.append(x)
        total = x * len(acc)
        for t in acc[:-1]:
            total = total + t
        return total

    fc = xjit.jit(f)
    acc_c: list[Any] = []
    acc_e: list[Any] = []
    for _ in range(4):
        x = torch.randn(3)
        close(fc(x, acc_c), f(x, acc_e))
        assert len(acc_c) == len(acc_e)
    assert counters()["compiles"] == 4  # one capture per length: the frame reads it


def test_cleared_and_rebound_lists(clean: None) -> None:
    global collected

    def g(x: Any) -> Any:
        collected.append(x + 1)
        return x * 2

    gc = xjit.jit(g)
    collected = [torch.zeros(2)]
    for i in range(8):
        x = torch.randn(2)
        close(gc(x), x * 2)
        close(collected[-1], x + 1)
        if i == 2:
            collected.clear()
        if i == 5:
            collected = []
    assert len(collected) == 2
    assert counters()["compiles"] == 1
