"""backend="eager" (captured graphs run op by op with PyTorch, python/xjit/_eager.py driven by
src/frontend/eager.cpp) and --check's op-by-op search for the first op whose PyTorch result
differs from the reference interpreter's, reported with the user's source line."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from xjit import _eager  # noqa: E402

F = torch.nn.functional


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    fe.reset()
    yield
    fe.configure(check_compare=_default_compare)
    fe.set_recording(False)
    fe.reset()


def _default_compare(compiled: Any, eager: Any) -> str | None:
    from xjit._backends import compare_outputs

    return compare_outputs(compiled, eager)


def xjit_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, xjit.XjitWarning)]


def mlp_block(x, w, b):
    h = F.linear(x, w, b)
    h = F.gelu(h)  # GELU_LINE
    return torch.softmax(h * 2 - 1, dim=-1), h.sum(dim=0)


GELU_LINE = mlp_block.__code__.co_firstlineno + 2


def inputs() -> tuple[Any, ...]:
    torch.manual_seed(0)
    return torch.randn(4, 6), torch.randn(5, 6), torch.randn(5)


def test_eager_backend_runs_the_graph_op_by_op(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def recording(name: str) -> Any:
        row = _eager.TABLE[name]
        return lambda x, a: (seen.append(name), row(x, a))[1]

    for name in ("linear", "gelu", "softmax", "sum"):
        monkeypatch.setitem(_eager.TABLE, name, recording(name))
    compiled = xjit.jit(mlp_block, backend="eager")
    want = mlp_block(*inputs())
    got = compiled(*inputs())
    torch.testing.assert_close(got, want)
    assert not fe.events()["graphs"][0]["runs_in_python"]
    assert {"linear", "gelu", "softmax", "sum"} <= set(seen)
    seen.clear()
    torch.testing.assert_close(compiled(*inputs()), want)  # the cached entry, still op by op
    assert "gelu" in seen and fe.events()["counters"]["cache_hits"] == 1


def test_eager_backend_in_place_writes_reach_the_caller() -> None:
    def bump(x, y):
        x.add_(y)
        x[0] = 7.0
        return x * 2

    a, b = torch.randn(3), torch.randn(3)
    a2 = a.clone()
    want = bump(a2, b)
    got = xjit.jit(bump, backend="eager")(a, b)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(a, a2)


def test_eager_backend_runs_pytorch_fallback_nodes_and_interpreter_ops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def f(x):
        return torch.special.i0(x).sum() + torch.relu(x)  # i0: no IR op (external_call)

    x = torch.randn(5)
    report = xjit.explain(f, backend="eager")(x)
    assert report.graphs[0].ops.get("external_call") == 1
    torch.testing.assert_close(report.output, f(x))
    # An op without a PyTorch row runs in the reference interpreter.
    monkeypatch.delitem(_eager.TABLE, "relu")
    fe.reset()
    torch.testing.assert_close(xjit.jit(f, backend="eager")(x), f(x))


def test_check_names_the_first_differing_op_and_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # A wrong PyTorch row (tanh-approximated GELU) makes the eager backend's graph differ from
    # Python: --check finds that op by comparing every op with the reference interpreter.
    monkeypatch.setitem(_eager.TABLE, "gelu", lambda x, a: F.gelu(x[0], approximate="tanh"))
    opts = fe.Options("eager", "cpu", False, None, True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = fe.call(opts, mlp_block, inputs(), {})
    torch.testing.assert_close(got, mlp_block(*inputs()))  # --check returns Python's result
    (message,) = xjit_warnings(record)
    assert "--check: mlp_block" in message and "max abs difference" in message
    assert f"first differing op: 'gelu' at test_eager_backend.py:{GELU_LINE} (mlp_block)" in message


def test_check_without_a_differing_op_says_so() -> None:
    # The graph and Python agree op by op; a difference injected into the output comparison is
    # then reported as coming from the capture rather than from an op.
    fe.configure(check_compare=lambda compiled, eager: "output[0]: injected difference")
    opts = fe.Options("xjit", "cpu", False, None, True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fe.call(opts, mlp_block, inputs(), {})
    (message,) = xjit_warnings(record)
    assert "injected difference" in message and "every op agrees with PyTorch" in message


def test_check_clean_run_reports_nothing() -> None:
    opts = fe.Options("eager", "cpu", False, None, True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fe.call(opts, mlp_block, inputs(), {})
    assert xjit_warnings(record) == []
    assert [c["message"] for c in fe.events()["checks"]] == [""]
