"""The frame hook, cache, guards and driver (xjit._frontend) through xjit.jit / xjit.explain:
scoped enabling, results equal to eager, cache hits, recompiles on shape/dtype changes and the
recompile limit, internal errors (injected) that fall back to Python with one warning,
fullgraph/strict errors, which frames are compiled, backends and logging. The functions are
small straight-line tensor code so that the checks are about the hook, not the analyzer."""

from __future__ import annotations

import json
import os
import re
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from xjit.jit import config  # noqa: E402

THIS_FILE = os.path.basename(__file__)


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    """A clean cache and default settings around every test."""
    fe.reset()
    saved = (config.recompile_limit, config.log, config.strict)
    yield
    fe.configure(inject="")
    config.recompile_limit, config.log, config.strict = saved
    fe.set_recording(False)
    fe.reset()


def xjit_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, xjit.XjitWarning)]


def add_mul(x, y):
    return x * 2 + y


def relu_sub(x, y):
    return torch.relu(x - y)


# ---- enabling ------------------------------------------------------------------------------


def test_hook_is_installed_only_during_the_call() -> None:
    seen: list[bool] = []

    def probe(x):
        seen.append(fe.hook_installed())  # a call the analyzer cannot see into: runs in Python
        return x

    assert not fe.hook_installed()
    xjit.jit(probe)(torch.ones(2))
    assert seen == [True]
    assert not fe.hook_installed()


def test_hook_is_uninstalled_after_an_exception() -> None:
    def boom(x):
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        xjit.jit(boom)(torch.ones(2))
    assert not fe.hook_installed()


def test_other_threads_are_not_compiled() -> None:
    def other(x):
        return x + 1

    def caller(x):
        t = threading.Thread(target=other, args=(x,))
        t.start()
        t.join()
        return x

    xjit.jit(caller)(torch.ones(2))
    assert fe.code_state(other.__code__)["state"] == "unseen"
    # The same function called from the jit thread is compiled.
    xjit.jit(other)(torch.ones(2))
    assert fe.code_state(other.__code__)["state"] == "active"


def test_library_generator_and_comprehension_frames_are_not_compiled() -> None:
    import json as json_module

    def gen(x):
        yield x

    def uses_libraries(x):
        json_module.dumps([1, 2])
        next(gen(x))
        return [v for v in (1, 2)], x

    xjit.jit(uses_libraries)(torch.ones(2))
    assert fe.code_state(json.dumps.__code__)["state"] == "skipped"
    assert fe.code_state(gen.__code__)["state"] == "skipped"
    assert fe.code_state(torch.nn.Module.__call__.__code__)["state"] in ("skipped", "unseen")


# ---- results and the cache --------------------------------------------------------------------


@pytest.mark.parametrize("fn", [add_mul, relu_sub])
@pytest.mark.parametrize("backend", ["xjit", "interp"])
def test_outputs_equal_eager_and_second_call_hits_the_cache(fn: Any, backend: str) -> None:
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    compiled = xjit.jit(fn, backend=backend)
    torch.testing.assert_close(compiled(x, y), fn(x, y))
    state = fe.code_state(fn.__code__)
    assert (state["entries"], state["hits"]) == (1, 0)
    torch.testing.assert_close(compiled(x, y), fn(x, y))
    state = fe.code_state(fn.__code__)
    assert (state["entries"], state["hits"]) == (1, 1)
    counters = fe.events()["counters"]
    assert (counters["compiles"], counters["cache_hits"], counters["cache_misses"]) == (1, 1, 1)


def views(x):
    y = x * 2
    return y[1:], y.t(), x


def test_view_outputs_share_memory_and_inputs_keep_identity() -> None:
    x = torch.randn(3, 4)
    a, b, same = xjit.jit(views)(x)
    ea, eb, _ = views(x)
    assert torch.equal(a, ea) and torch.equal(b, eb) and b.stride() == eb.stride()
    assert same is x
    assert a.data_ptr() == b.data_ptr() + 4 * b.element_size()  # one buffer, as in eager


def fallback(x):
    return torch.special.erfcx(x) + 1  # no IR op: a PyTorch fallback node in the graph


def test_pytorch_fallback_nodes_call_torch() -> None:
    x = torch.randn(5)
    compiled = xjit.jit(fallback)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), fallback(x))
    graph = fe.events()["graphs"][0]
    assert graph["ops"].get("external_call") == 1
    assert fe.code_state(fallback.__code__)["hits"] == 1


def test_decorator_forms() -> None:
    @xjit.jit
    def f(x):
        return x + 1

    @xjit.jit(backend="interp")
    def g(x):
        return x * 3

    x = torch.arange(4.0)
    assert torch.equal(f(x), x + 1) and torch.equal(g(x), x * 3)
    assert f.__name__ == "f"
    with pytest.raises(ValueError, match="backend"):
        xjit.jit(f, backend="nope")


def test_shape_change_recompiles_then_shapes_become_dynamic() -> None:
    compiled = xjit.jit(add_mul)
    for n in (2, 3, 5, 7):  # never 4: equal sizes may share a symbol (duck sizing)
        x, y = torch.randn(n, 4), torch.randn(n, 4)
        torch.testing.assert_close(compiled(x, y), add_mul(x, y))
    ev = fe.events()
    assert len(ev["recompiles"]) == 1
    assert ev["recompiles"][0]["guard"] == "L['x'] size(0) == 2"
    # After the size miss both inputs were made dynamic: one recompile served 3, 5 and 7.
    assert fe.code_state(add_mul.__code__)["entries"] == 2
    assert any("s0" in g for g in ev["graphs"][1]["guards"])


def test_dtype_change_recompiles() -> None:
    compiled = xjit.jit(add_mul)
    for dtype in (torch.float32, torch.float64, torch.float32):
        x, y = torch.ones(3, dtype=dtype), torch.ones(3, dtype=dtype)
        out = compiled(x, y)
        assert out.dtype == dtype and torch.equal(out, add_mul(x, y))
    ev = fe.events()
    assert [r["guard"] for r in ev["recompiles"]] == ["L['x'].dtype == torch.f32"]
    assert ev["counters"]["cache_hits"] == 1


def test_static_shapes_when_dynamic_false() -> None:
    compiled = xjit.jit(add_mul, dynamic=False)
    for n in (1, 2, 3):
        compiled(torch.ones(n), torch.ones(n))
    assert fe.code_state(add_mul.__code__)["entries"] == 3
    assert not any("s0" in g for graph in fe.events()["graphs"] for g in graph["guards"])


def test_recompile_limit_warns_once_and_runs_in_python() -> None:
    config.recompile_limit = 2
    compiled = xjit.jit(add_mul, dynamic=False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for n in range(1, 8):
            x, y = torch.randn(n), torch.randn(n)
            torch.testing.assert_close(compiled(x, y), add_mul(x, y))
    msgs = xjit_warnings(record)
    assert len(msgs) == 1, msgs
    assert msgs[0].startswith(f"xjit: add_mul at {THIS_FILE}:")
    assert "recompiled 2 times; last failing guard: L['x'] size(0) == 3; " in msgs[0]
    assert msgs[0].endswith("calls its entries do not match run in Python from now on")
    assert fe.code_state(add_mul.__code__)["state"] == "limited"


def test_entries_past_the_recompile_limit_still_serve_their_calls() -> None:
    config.recompile_limit = 2
    compiled = xjit.jit(add_mul, dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", xjit.XjitWarning)
        for n in range(1, 6):  # sizes 1-3 compile, 4 and 5 run in Python
            compiled(torch.randn(n), torch.randn(n))
    state = fe.code_state(add_mul.__code__)
    assert state["entries"] == 3 and state["hits"] == 0, state
    for n in (2, 5, 1):
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(compiled(x, y), add_mul(x, y))
    state = fe.code_state(add_mul.__code__)
    assert state["entries"] == 3 and state["hits"] == 2 and state["compiles"] == 3, state


def test_recompile_limit_from_the_environment(tmp_path: Any) -> None:
    import subprocess
    import sys

    script = "import xjit; print(xjit.config.recompile_limit)"
    env = dict(os.environ, XJIT_RECOMPILE_LIMIT="3", PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "3", out.stderr


# ---- modules --------------------------------------------------------------------------------


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_module_outputs_and_in_place_parameter_updates_are_seen() -> None:
    torch.manual_seed(0)
    model = MLP()
    compiled = xjit.jit(model)
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        model.fc1.weight.mul_(2)  # no stale weights: parameters are inputs, read at every call
        torch.testing.assert_close(compiled(x), model(x))
        model.load_state_dict({k: torch.randn_like(v) for k, v in model.state_dict().items()})
        torch.testing.assert_close(compiled(x), model(x))
    state = fe.code_state(MLP.forward.__code__)
    assert (state["entries"], state["hits"]) == (1, 2)
    assert compiled.fc1 is model.fc1 and compiled.state_dict().keys() >= {"_orig_mod.fc1.weight"}


def test_grad_mode_with_parameters_compiles_a_training_step() -> None:
    model = MLP()
    compiled = xjit.jit(model)
    x = torch.randn(2, 8)
    out = compiled(x)  # grad mode on and parameters require grad: autograd must work
    assert out.grad_fn is not None
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()  # eager's gradients
    for got, want in zip(grads, (p.grad for p in model.parameters()), strict=True):
        torch.testing.assert_close(got, want)
    graph = fe.events()["graphs"][0]
    assert not graph["runs_in_python"]  # the compiled forward and backward (autodiff pass)
    with torch.no_grad():  # the same frame compiles for inference (a new entry)
        torch.testing.assert_close(compiled(x), model(x))
    assert not fe.events()["graphs"][1]["runs_in_python"]


# ---- graph breaks, errors, strictness -----------------------------------------------------------


def breaks(x):
    print("side effect", end="")
    return x + 1


def test_graph_break_resumes_and_is_reported(capsys: Any) -> None:
    x = torch.ones(2)
    assert torch.equal(xjit.jit(breaks)(x), x + 1)
    assert capsys.readouterr().out == "side effect"
    ev = fe.events()
    assert len(ev["breaks"]) == 1 and "print" in ev["breaks"][0]["reason"]
    assert ev["breaks"][0]["resumed"]
    # The frame keeps an entry (it leads to the resume function, where `x + 1` is compiled).
    assert fe.code_state(breaks.__code__)["state"] == "active"
    line = breaks.__code__.co_firstlineno + 1
    assert [g["function"] for g in ev["graphs"]] == [f"breaks.<resume at line {line}>"]


def iterator_breaks(x):
    items = iter([x, x * 2])
    first = next(items)
    print("side effect", end="")
    return first + next(items) + 1


def test_graph_break_that_cannot_resume_runs_the_frame_in_python(capsys: Any) -> None:
    x = torch.ones(2)
    assert torch.equal(xjit.jit(iterator_breaks)(x), x * 3 + 1)
    assert capsys.readouterr().out == "side effect"
    ev = fe.events()
    assert len(ev["breaks"]) == 1 and not ev["breaks"][0]["resumed"]
    # `items` (an iterator held in a variable, half consumed at the break) cannot be rebuilt.
    assert "cannot resume after it" in ev["breaks"][0]["reason"]
    assert fe.code_state(iterator_breaks.__code__)["state"] == "python"


def test_fullgraph_raises_with_location() -> None:
    with pytest.raises(xjit.XjitCompileError, match=rf"graph break in breaks at {THIS_FILE}:\d+: "):
        xjit.jit(breaks, fullgraph=True)(torch.ones(2))


def test_strict_config_raises() -> None:
    config.strict = True
    with pytest.raises(xjit.XjitCompileError, match="print"):
        xjit.jit(breaks)(torch.ones(2))


@pytest.mark.parametrize(
    "stage,error_id",
    [
        ("analyze", "XJIT-E0001"),
        ("compile", "XJIT-E0100"),
        ("run", "XJIT-E0101"),
        ("reject", "XJIT-E0101"),  # a kernel rejecting values that Python accepts
    ],
)
def test_internal_error_warns_once_and_result_is_correct(stage: str, error_id: str) -> None:
    fe.configure(inject=stage)
    compiled = xjit.jit(relu_sub)
    x, y = torch.randn(3), torch.randn(3)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(compiled(x, y), relu_sub(x, y))
    msgs = xjit_warnings(record)
    assert len(msgs) == 1, msgs
    assert msgs[0].startswith(f"xjit: {error_id} at {THIS_FILE}:") and "injected" in msgs[0]
    assert (stage == "reject") == ("rejected values that Python accepts" in msgs[0]), msgs
    assert record[0].filename == __file__
    assert fe.code_state(relu_sub.__code__)["state"] == "python"


def test_internal_error_under_fullgraph_raises() -> None:
    fe.configure(inject="compile")
    with pytest.raises(xjit.XjitCompileError, match="XJIT-E0100"):
        xjit.jit(relu_sub, fullgraph=True)(torch.ones(2), torch.ones(2))


# ---- backends, explain, check, logging -------------------------------------------------------


def test_eager_backend_runs_the_captured_graph() -> None:
    # Op by op with PyTorch (tests/python/frontend/test_eager_backend.py has the details).
    x, y = torch.randn(3), torch.randn(3)
    compiled = xjit.jit(add_mul, backend="eager")
    torch.testing.assert_close(compiled(x, y), add_mul(x, y))
    graph = fe.events()["graphs"][0]
    assert graph["backend"] == "eager" and not graph["runs_in_python"]


def test_explain_report() -> None:
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    report = xjit.explain(add_mul)(x, y)
    assert (report.graph_count, report.graph_break_count) == (1, 0)
    g = report.graphs[0]
    assert g.function == "add_mul" and g.ops.get("add") == 1 and g.ops.get("mul") == 1
    assert "L['x']: tensor f32[4,3] cpu requires_grad=False" in report.guards
    assert "graph @add_mul" in g.ir
    torch.testing.assert_close(report.output, add_mul(x, y))
    text = str(report)
    assert "1 graph(s), 0 graph break(s)" in text and f"add_mul at {THIS_FILE}:" in text

    report = xjit.explain(breaks)(x)
    assert (report.graph_count, report.graph_break_count) == (1, 1)
    assert "print" in report.graph_breaks[0].reason and report.graph_breaks[0].resumed
    assert report.graphs_per_frame == {"breaks": 1}
    assert "resumed after it" in str(report)
    assert report.graph_breaks[0].where.startswith(f"{THIS_FILE}:")

    report = xjit.explain(MLP())(torch.randn(2, 8))
    assert report.graph_count == 1


def test_check_mode_compares_with_python() -> None:
    x, y = torch.randn(3), torch.randn(3)
    opts = fe.Options("xjit", "cpu", False, None, True)
    assert torch.equal(fe.call(opts, add_mul, (x, y), {}), add_mul(x, y))
    assert fe.events()["checks"] == [
        {
            "file": __file__,
            "line": add_mul.__code__.co_firstlineno,
            "function": "add_mul",
            "message": "",
        }
    ]
    # A difference is reported as a warning naming the first output that differs.
    from xjit._backends import compare_outputs

    fe.configure(check_compare=lambda compiled, eager: "output: injected difference")
    try:
        with pytest.warns(xjit.XjitWarning, match="--check: add_mul at .*injected difference"):
            fe.call(opts, add_mul, (x, y), {})
    finally:
        from xjit import jit as jit_module  # noqa: F401 - restores the real comparison

        fe.configure(check_compare=lambda a, b: compare_outputs(a, b))
    assert compare_outputs((torch.ones(2),), (torch.ones(2) * 2,)).startswith("output[0]:")
    assert compare_outputs([1, torch.ones(1)], [1, torch.ones(1)]) is None


def test_log_categories(capsys: Any) -> None:
    config.log = "graph_breaks,recompiles,graphs,guards"
    xjit.jit(breaks)(torch.ones(2))
    compiled = xjit.jit(add_mul)
    compiled(torch.ones(2), torch.ones(2))
    compiled(torch.ones(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
    err = capsys.readouterr().err
    assert "[xjit] graph break in " in err and "print" in err
    assert "[xjit] graph 0 for " in err and "graph @add_mul" in err
    assert "[xjit] guards of graph 0" in err
    assert "[xjit] recompiling " in err and "L['x'].dtype == torch.f32" in err
    with pytest.raises(ValueError, match="unknown category"):
        config.log = "nope"


def test_log_passes_times_each_pass_and_code_generation(capfd: Any) -> None:
    config.log = "passes"

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 3.0 + 1.0).sum(0)

    x = torch.randn(4, 5)
    assert torch.allclose(xjit.jit(f)(x), f(x))
    err = capfd.readouterr().err
    # One line per pass of the default pipeline, then the code generation of the same graph.
    assert re.search(r"\[xjit passes\] fuse +[0-9.]+ ms  ops \d+ -> \d+", err), err
    assert re.search(r"\[xjit passes\] codegen +[0-9.]+ ms  cpu [0-9.]+ ms  kernels compiled \d+", err), err
    assert err.index("[xjit passes] fuse") < err.index("[xjit passes] codegen")


# ---- library model forwards called from Python --------------------------------------------------


def test_library_forwards_called_from_python_are_roots_quiet_at_the_limit() -> None:
    """nn.Linear.forward (torch.nn: a filtered file) called from code that runs in Python (a
    generator expression: never a root) is compiled as a root (the first instance's entry
    guards self by identity, the next one by type and serves the other instances of a dtype);
    past the recompile limit it runs in Python without a warning."""
    from xjit.jit import _options

    config.recompile_limit = 2
    dtypes = [torch.float32, torch.float64, torch.float32, torch.float64, torch.bfloat16]
    layers = [torch.nn.Linear(4, 4, dtype=dt) for dt in dtypes]
    xs = [torch.randn(2, 4, dtype=dt) for dt in dtypes]
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opts = _options("interp", "cpu", False, None)
        pairs = list(zip(layers, xs))
        got = fe.call(opts, list, ((layer(x) for layer, x in pairs),), {})
        got += fe.call(opts, list, ((layer(x) for layer, x in pairs),), {})  # cached / Python
        want = [layer(x) for layer, x in pairs] * 2
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    assert not [w for w in caught if issubclass(w.category, xjit.XjitWarning)]
    ev = fe.events()
    # f32 by identity, f64 shared, f32 shared; bfloat16 is past the limit.
    assert [g["function"] for g in ev["graphs"]] == ["Linear.forward"] * 3, ev["graphs"]
    assert fe.code_state(torch.nn.Linear.forward.__code__)["state"] == "limited"


def test_library_callees_of_a_frame_past_the_recompile_limit_are_not_roots() -> None:
    """A library forward past the recompile limit (a new shape every call) runs in Python, and
    the library forwards it calls are not compiled either (they would see the same changing
    shapes and recompile to the limit in turn)."""
    from xjit.jit import _options

    config.recompile_limit = 1
    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    xs = [torch.randn(n, 4) for n in (2, 3, 5, 6, 7)]
    with torch.no_grad():
        opts = _options("interp", "cpu", False, False)  # static shapes: each size recompiles
        got = fe.call(opts, list, ((seq(x) for x in xs),), {})
        want = [seq(x) for x in xs]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    assert [g["function"] for g in fe.events()["graphs"]] == ["Sequential.forward"] * 2
    assert fe.code_state(torch.nn.Linear.forward.__code__)["state"] in ("unseen", "active")
    assert fe.code_state(torch.nn.Linear.forward.__code__)["entries"] == 0


def test_data_parallel_forward_is_not_a_root_but_the_model_inside_is() -> None:
    from xjit.jit import _options

    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    wrapped = torch.nn.DataParallel(seq)  # CPU only: its forward calls seq directly
    x = torch.randn(2, 4)
    with torch.no_grad():
        opts = _options("interp", "cpu", False, None)
        got = fe.call(opts, list, ((wrapped(x) for _ in "a"),), {})
        torch.testing.assert_close(got[0], seq(x))
    assert [g["function"] for g in fe.events()["graphs"]] == ["Sequential.forward"]


def gather_rows(x: Any, index: Any) -> Any:
    return torch.gather(x, 1, index) * 2


def test_values_a_kernel_rejects_raise_the_programs_error_and_stay_compiled() -> None:
    # An index out of range: the compiled gather stops with its error, the call reruns in
    # Python, which raises PyTorch's own IndexError-like RuntimeError; no xjit warning, and the
    # next call with good values runs the compiled graph again.
    compiled = xjit.jit(gather_rows)
    x, good = torch.randn(4, 9), torch.randint(0, 9, (4, 5))
    bad = good.clone()
    bad[2, 3] = 40
    torch.testing.assert_close(compiled(x, good), gather_rows(x, good))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="index 40 is out of bounds"):
            compiled(x, bad)
        torch.testing.assert_close(compiled(x, good), gather_rows(x, good))
    assert not xjit_warnings(record)
    state = fe.code_state(gather_rows.__code__)
    assert state["state"] == "active" and state["compiles"] == 1, state
