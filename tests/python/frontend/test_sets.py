"""Sets the captured code makes ({a, b}, set(...), set comprehensions and their methods): built
at capture time from constants, returned or stored as a new set on every call."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402


def compiled_once(fn: Any) -> Any:
    fe.reset()
    return xjit.jit(fn, fullgraph=True)


def test_returned_set_is_a_new_object_on_every_call() -> None:
    def f(x: torch.Tensor) -> Any:
        s = {n % 3 for n in range(7)}
        s.add("tag")
        return x * len(s), s

    g = compiled_once(f)
    x = torch.randn(3)
    out1, s1 = g(x)
    s1.add("changed by the caller")
    out2, s2 = g(x)
    want_out, want_s = f(x)
    assert s2 == want_s and type(s2) is set and s2 is not s1
    torch.testing.assert_close(out2, want_out)
    assert len(fe.events()["graphs"]) == 1


class Holder:
    pass


def test_set_stored_on_an_object_and_returned_is_one_set() -> None:
    def f(x: torch.Tensor, h: Holder) -> Any:
        s = set(["a", "b"])
        h.names = s
        s.discard("a")  # after the store: the stored set sees it, as in Python
        return x + 1, s

    g = compiled_once(f)
    h1, h2 = Holder(), Holder()
    x = torch.randn(2)
    out, s = g(x, h1)
    _, s_again = g(x, h2)
    assert h1.names == {"b"} and s is h1.names
    assert s_again is h2.names and s_again is not s


def test_set_live_across_a_graph_break() -> None:
    def f(x: torch.Tensor) -> Any:
        s = {1, 2, 3}
        y = x * 2
        print("graph break")  # the set is rebuilt for the code after the break
        return y + len(s), 3 in s, s

    fe.reset()
    g = xjit.jit(f)
    x = torch.randn(3)
    got, found, gs = g(x)
    want, want_found, ws = f(x)
    torch.testing.assert_close(got, want)
    assert (found, gs) == (want_found, ws)
    assert len(fe.events()["breaks"]) == 1


GLOBAL_NAMES = {"relu"}


def test_membership_in_a_set_argument_or_global_is_guarded_by_its_contents() -> None:
    # The caller's sets: a later call with other contents, or after a mutation, must not reuse
    # a graph that took the other branch.
    def f(x: torch.Tensor, names: set[str]) -> torch.Tensor:
        return x + 1 if "relu" in names else x - 1

    def g(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if "relu" in GLOBAL_NAMES else x * 3

    x = torch.zeros(2)
    cf, cg = xjit.jit(f), xjit.jit(g)
    arg = {"relu"}
    torch.testing.assert_close(cf(x, arg), f(x, arg))
    arg.discard("relu")  # the same set object, mutated
    torch.testing.assert_close(cf(x, arg), f(x, arg))
    torch.testing.assert_close(cf(x, {"gelu"}), f(x, {"gelu"}))
    torch.testing.assert_close(cg(x), g(x))
    GLOBAL_NAMES.discard("relu")
    try:
        torch.testing.assert_close(cg(x), g(x))
    finally:
        GLOBAL_NAMES.add("relu")
