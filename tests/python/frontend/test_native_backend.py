"""backend="xjit" (the runtime's native code, docs/runtime.md) against eager PyTorch: the analyzer
corpus (corpus/*.py) compiled with the default backend must give eager's outputs and input
mutations, and no graph may fall back to the interpreter (warning XJIT-E0103) except when that is
forced (XJIT_TEST_INJECT=native), where the result must still be right."""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from xjit.jit import config  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import Case, all_cases  # noqa: E402
from test_analyzer_corpus import assert_same, call, fresh  # noqa: E402

CASES = [c for c in all_cases() if not c.raises]


def native_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "XJIT-E0103" in str(w.message)]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_native(case: Case) -> None:
    fe.reset()
    fn_e, args, kwargs = fresh(case)
    fn_c = copy.deepcopy(fn_e) if isinstance(fn_e, torch.nn.Module) else fn_e
    compiled = xjit.jit(fn_c, backend="xjit", dynamic=case.dynamic)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for which in ("first call", "second call"):
            # The second call runs the compiled entry again (the runtime's pooled frame and
            # arena); eager runs a second time too (modules may update their state).
            args_e, kwargs_e = copy.deepcopy(args), copy.deepcopy(kwargs)
            args_c, kwargs_c = copy.deepcopy(args), copy.deepcopy(kwargs)
            torch.manual_seed(1)
            want = call(case, fn_e, args_e, kwargs_e)
            torch.manual_seed(1)
            got = call(case, compiled, args_c, kwargs_c)
            assert_same(got, want, case, f"result of the {which}")
            assert_same(args_c, args_e, case, f"inputs after the {which}")
            if isinstance(fn_e, torch.nn.Module):
                assert_same(fn_c, fn_e, case, f"module state after the {which}")
    assert native_warnings(caught) == []


def test_native_compile_failure_falls_back_with_one_warning() -> None:
    def f(x, y):
        return torch.tanh(x * y + 1), (x - y).sum(dim=0)

    x, y = torch.randn(5, 7), torch.randn(5, 7)
    fe.reset()
    old = fe.settings()["inject"]
    fe.configure(inject="native")
    try:
        compiled = xjit.jit(f, backend="xjit")
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            got = compiled(x, y)
            got_again = compiled(x, y)
    finally:
        fe.configure(inject=old)
    assert len(native_warnings(caught)) == 1, [str(w.message) for w in caught]
    want = f(x, y)
    for g in (got, got_again):
        torch.testing.assert_close(g[0], want[0])
        torch.testing.assert_close(g[1], want[1])


def test_dump_writes_kernel_code(tmp_path) -> None:
    def f(x):
        return torch.sigmoid(x * 3 - 1) + x

    fe.reset()
    old = config.dump_dir
    config.dump_dir = str(tmp_path)
    try:
        with torch.no_grad():
            xjit.jit(f, backend="xjit")(torch.randn(16))
    finally:
        config.dump_dir = old
    names = sorted(p.name for p in tmp_path.iterdir())
    for suffix in (".loops", ".ll", ".s"):
        assert any(n.endswith(suffix) for n in names), names
    ll = next(p for p in tmp_path.iterdir() if p.name.endswith(".ll")).read_text()
    assert "define" in ll
    # The graph the kernels came from, after the runtime's pipeline.
    runtime = [n for n in names if n.endswith(".runtime.xir")]
    assert len(runtime) == 1 and "fusion(" in (tmp_path / runtime[0]).read_text(), names


def test_dump_keeps_a_training_steps_forward_and_backward_apart(tmp_path) -> None:
    # Both graphs of one capture share its id: their IR and kernel files must not overwrite
    # each other.
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    fe.reset()
    old = config.dump_dir
    config.dump_dir = str(tmp_path)
    try:
        xjit.jit(model)(torch.randn(3, 8)).sum().backward()
    finally:
        config.dump_dir = old
    names = sorted(p.name for p in tmp_path.iterdir())
    for part in ("forward", "backward"):
        graph = [n for n in names if n.endswith(f".{part}.xir")]
        assert len(graph) == 1, names
        assert "linear" in (tmp_path / graph[0]).read_text() or part == "backward", graph
        assert any(f".{part}.runtime.xir" in n for n in names), names
        assert any(f".{part}.k000-" in n for n in names), names
    assert model[0].weight.grad is not None
