"""Graph breaks in the middle of a frame: the graph before the break is compiled, the breaking
instruction runs in Python, and a generated resume function continues (and is compiled in turn).
Each case checks the result against eager PyTorch, the number of graphs and breaks (explain),
the order of printed output relative to tensor and Python side effects, and that tracebacks
of exceptions raised after a break point at the user's own lines."""

from __future__ import annotations

import functools
import inspect
import io
import dis
import os
import subprocess
import sys
import types
import traceback
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
    fe.reset()
    saved = (config.recompile_limit, config.log, config.strict, config.dump_dir)
    yield
    config.recompile_limit, config.log, config.strict, config.dump_dir = saved
    fe.set_recording(False)
    fe.reset()


def line_of(fn: Any, marker: str) -> int:
    """The line of `fn`'s source that contains `# <marker>`."""
    lines, first = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if f"# {marker}" in text:
            return first + i
    raise AssertionError(f"no line marked {marker!r} in {fn.__name__}")


def helper3(a, b, c):
    return a * 2 + c


# ---- the cases (each takes `out`, a StringIO its prints go to) -----------------------------


def print_middle(x, out):
    y = torch.relu(x) * 2
    print("y", y.shape, file=out)  # BREAK
    return y + 1


def item_arithmetic(x, out):
    s = x.sum().item()  # BREAK
    return x * s + 1


def item_if(x, out):
    if (x * 2).sum().item() > 0:  # BREAK
        return x - 1
    return x + 1


def tolist_call(x, out):
    vals = (x[0] * 2).tolist()  # BREAK
    return x + len(vals)


def numpy_call(x, out):
    a = (x + 1).numpy()  # BREAK
    return torch.from_numpy(a * 2) + x


def unknown_c_call(x, out):
    y = x * 3
    n = len(os.getcwd())  # BREAK
    return y + n


def loop_break(x, out):
    for i in range(3):
        x = x * 2
        print("iteration", i, file=out)  # BREAK
        x = x + i
    return x


def two_breaks(x, out):
    y = x * 2
    print("first", file=out)  # BREAK
    z = torch.sin(y)
    print("second", file=out)
    return z + y


def deep_stack(x, out):
    a = x + 1
    b = x * 2
    c = x - 3
    d = 4
    e = "name"
    unused = x * 5  # dead after the break: not passed on
    r = helper3(a, print("mid", file=out), b)  # BREAK
    return r + c + d + len(e)


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x, out):
        h = self.lin(x)
        self.calls += 1
        print("calls", self.calls, file=out)  # BREAK
        return torch.relu(self.lin(h))


def no_grad_block(x, out):
    with torch.no_grad():
        y = x * 2
        print("grad enabled:", torch.is_grad_enabled(), file=out)  # BREAK
        z = y + 1
    return z, torch.is_grad_enabled()


def try_block(x, out):
    try:
        y = x * 2
        print("in try", file=out)  # BREAK
        raise KeyError("k")
    except KeyError:
        y = x * 3
    return y + 1


def effects_order(x, log, out):
    x.add_(1)
    log.append("added")
    print("x", x.tolist(), "log", list(log), file=out)  # BREAK
    x.mul_(2)
    log.append("multiplied")
    print("x", x.tolist(), "log", list(log), file=out)
    return x.sum()


def raises_after_break(x, out):
    y = x * 2
    print("before the error", file=out)  # BREAK
    z = y + 1
    return z + {}["missing"]  # RAISE


CASES: list[tuple[Any, int, int]] = [
    # (function, graphs compiled by the first call, graph breaks)
    (print_middle, 2, 1),
    (item_arithmetic, 2, 1),
    (item_if, 2, 1),
    (tolist_call, 2, 1),
    (unknown_c_call, 2, 1),
    (two_breaks, 3, 2),
    (deep_stack, 2, 1),
    (no_grad_block, 2, 1),
]


def x34() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(3, 4)


def run_both(fn: Any, *args: Any) -> tuple[Any, str, Any, str]:
    out_e, out_c = io.StringIO(), io.StringIO()
    want = fn(*args, out_e)
    got = xjit.jit(fn, backend="interp")(*args, out_c)
    return want, out_e.getvalue(), got, out_c.getvalue()


def assert_close(got: Any, want: Any) -> None:
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w)
    elif isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    else:
        assert got == want


@pytest.mark.parametrize("fn,graphs,breaks", CASES, ids=[c[0].__name__ for c in CASES])
def test_break_matches_eager(fn: Any, graphs: int, breaks: int) -> None:
    x = x34()
    want, printed_e, got, printed_c = run_both(fn, x)
    assert_close(got, want)
    assert printed_c == printed_e
    fe.reset()
    report = xjit.explain(fn, backend="interp")(x, io.StringIO())
    assert report.graph_count == graphs, str(report)
    assert report.graph_break_count == breaks, str(report)
    first = report.graph_breaks[0]
    assert first.resumed, str(report)
    assert first.where == f"{THIS_FILE}:{line_of(fn, 'BREAK')}", str(report)
    # The graphs before and after the break belong to this frame (resume functions count).
    assert report.graphs_per_frame.get(fn.__qualname__) == graphs, str(report)
    # Later calls reuse every entry (the frame and its resume functions).
    compiled = xjit.jit(fn, backend="interp")
    out = io.StringIO()
    assert_close(compiled(x, out), want)
    assert out.getvalue() == printed_e
    ev = fe.events()
    before = len(ev["graphs"])
    hits = ev["counters"]["cache_hits"]
    compiled(x, io.StringIO())
    ev = fe.events()
    assert len(ev["graphs"]) == before
    assert ev["counters"]["cache_hits"] >= hits + graphs


def test_numpy_break() -> None:
    x = x34()
    want, printed_e, got, printed_c = run_both(numpy_call, x)
    assert_close(got, want)
    report = xjit.explain(numpy_call, backend="interp")(x, io.StringIO())
    assert report.graph_breaks[0].resumed
    assert report.graph_breaks[0].where == f"{THIS_FILE}:{line_of(numpy_call, 'BREAK')}"
    assert report.graph_count >= 1


def test_break_in_loop_body() -> None:
    x = x34()
    want, printed_e, got, printed_c = run_both(loop_break, x)
    assert_close(got, want)
    assert printed_c == printed_e == "iteration 0\niteration 1\niteration 2\n"
    report = xjit.explain(loop_break, backend="interp")(x, io.StringIO())
    # One graph per iteration up to the print, and the tail after the loop.
    assert report.graph_count == 4, str(report)
    assert all(b.resumed for b in report.graph_breaks), str(report)


def test_break_in_method_using_self() -> None:
    torch.manual_seed(0)
    m_e = Block()
    m_c = Block()
    m_c.load_state_dict(m_e.state_dict())
    x = x34()
    out_e, out_c = io.StringIO(), io.StringIO()
    with torch.no_grad():
        want = m_e(x, out_e)
        compiled = xjit.jit(m_c, backend="interp")
        got = compiled(x, out_c)
        got2 = compiled(x, out_c)
    assert_close(got, want)
    assert_close(got2, want)
    assert m_c.calls == 2 and m_e.calls == 1
    assert out_c.getvalue() == "calls 1\ncalls 2\n"
    fe.reset()
    with torch.no_grad():
        report = xjit.explain(Block(), backend="interp")(x, io.StringIO())
    assert report.graph_count == 2, str(report)
    assert report.graph_breaks[0].resumed


def test_no_grad_block_restores_grad_mode() -> None:
    x = x34()
    with torch.enable_grad():
        out = io.StringIO()
        z, grad_after = xjit.jit(no_grad_block, backend="interp")(x, out)
        assert torch.is_grad_enabled()
    assert grad_after is True
    assert out.getvalue() == "grad enabled: False\n"
    torch.testing.assert_close(z, x * 2 + 1)


def test_break_inside_try_block() -> None:
    x = x34()
    want, printed_e, got, printed_c = run_both(try_block, x)
    assert_close(got, want)
    assert printed_c == printed_e


def test_side_effect_order() -> None:
    x_e, x_c = x34(), x34()
    log_e: list[str] = []
    log_c: list[str] = []
    out_e, out_c = io.StringIO(), io.StringIO()
    want = effects_order(x_e, log_e, out_e)
    got = xjit.jit(effects_order, backend="interp")(x_c, log_c, out_c)
    assert_close(got, want)
    torch.testing.assert_close(x_c, x_e)
    assert log_c == log_e == ["added", "multiplied"]
    assert out_c.getvalue() == out_e.getvalue()
    report = xjit.explain(effects_order, backend="interp")(x34(), [], io.StringIO())
    assert report.graph_breaks and report.graph_breaks[0].resumed, str(report)


def eager_traceback(fn: Any, *args: Any) -> Any:
    try:
        fn(*args, io.StringIO())
    except Exception as e:  # noqa: BLE001
        return e.__traceback__.tb_next  # the frame of fn onwards
    raise AssertionError("did not raise")


def test_traceback_after_break_points_at_user_line() -> None:
    x = x34()
    out = io.StringIO()
    with pytest.raises(KeyError) as info:
        xjit.jit(raises_after_break, backend="interp")(x, out)
    assert out.getvalue() == "before the error\n"
    frames = traceback.extract_tb(info.value.__traceback__)
    last = frames[-1]
    assert os.path.basename(last.filename) == THIS_FILE
    assert last.lineno == line_of(raises_after_break, "RAISE")
    assert last.name == "raises_after_break"
    # As without xjit: one entry for the frame (the generated break code and resume function
    # entries that only lead on to the next piece of the frame are dropped).
    assert [f.name for f in frames].count("raises_after_break") == 1
    assert frames[-1:] == traceback.extract_tb(eager_traceback(raises_after_break, x))


def test_fullgraph_raises_on_break() -> None:
    with pytest.raises(xjit.XjitCompileError, match="graph break"):
        xjit.jit(print_middle, backend="interp", fullgraph=True)(x34(), io.StringIO())


def test_log_and_dump_rewritten_bytecode(tmp_path: Any, capsys: Any) -> None:
    config.log = "bytecode"
    config.dump_dir = str(tmp_path)
    xjit.jit(print_middle, backend="interp")(x34(), io.StringIO())
    err = capsys.readouterr().err
    assert "break code" in err and "resume code" in err
    dumped = list(tmp_path.glob("*.bytecode.txt"))
    assert dumped, list(tmp_path.iterdir())
    text = dumped[0].read_text()
    assert "CALL" in text and "print_middle" in text


def test_dump_dir_is_made_when_missing(tmp_path: Any) -> None:
    config.dump_dir = str(tmp_path / "new" / "dumps")  # as --dump DIR: the folder is made
    xjit.jit(print_middle, backend="interp")(x34(), io.StringIO())
    dumped = list((tmp_path / "new" / "dumps").glob("*.xir"))
    assert dumped
    for path in dumped:  # the dumps are IR text that parses back (xjit-opt reads them)
        xjit.ir.parse(path.read_text())


def write_method(x, out):
    y = x * 2
    out.write("hi")  # BREAK: a C method bound to an argument
    return y + 1


def test_break_at_bound_method_of_an_argument() -> None:
    compiled = xjit.jit(write_method, backend="interp")
    first, second = io.StringIO(), io.StringIO()
    x = x34()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: the capture's guards hold
        assert_close(compiled(x, first), x * 2 + 1)
        assert_close(compiled(x, second), x * 2 + 1)
    # The method is looked up on the object passed in, not on the first call's.
    assert (first.getvalue(), second.getvalue()) == ("hi", "hi")


def noisy_helper(t, out):
    print("helper", file=out)  # BREAK
    return t * 3


def calls_noisy_helper(x, out):
    y = x * 2
    z = noisy_helper(y, out)  # CALL
    return z + 1


def test_break_inside_an_inlined_call_resumes_at_the_call() -> None:
    x = x34()
    want, printed_e, got, printed_c = run_both(calls_noisy_helper, x)
    assert_close(got, want)
    assert printed_c == printed_e == "helper\n"
    report = xjit.explain(calls_noisy_helper, backend="interp")(x, io.StringIO())
    # The caller breaks at its call (graphs before and after it); the helper runs as a frame of
    # its own and breaks at its print (its graph after the print).
    assert report.graphs_per_frame == {"calls_noisy_helper": 2, "noisy_helper": 1}, str(report)
    first = report.graph_breaks[0]
    assert first.resumed and first.where == f"{THIS_FILE}:{line_of(noisy_helper, 'BREAK')}"


def loop_over_tensors(xs, out):
    acc = xs[0] * 0
    for t in xs:
        acc = acc + t * 2
        print("step", file=out)  # BREAK
    return acc


def test_break_in_loop_over_a_list_of_tensors() -> None:
    xs = [x34() * i for i in range(3)]
    want, printed_e, got, printed_c = run_both(loop_over_tensors, xs)
    assert_close(got, want)
    assert printed_c == printed_e


def long_loop(x, out):
    for i in range(40):
        x = x + i
        print(i, end=",", file=out)  # BREAK
    return x


def test_break_in_a_long_loop_is_bounded() -> None:
    x = x34()
    want, printed_e, got, printed_c = run_both(long_loop, x)
    assert_close(got, want)
    assert printed_c == printed_e
    report = xjit.explain(long_loop, backend="interp")(x, io.StringIO())
    # One resume function per iteration up to the nesting bound, then the rest runs in Python.
    assert 10 <= report.graph_count <= 20, str(report)
    assert not report.graph_breaks[-1].resumed
    assert "nested" in report.graph_breaks[-1].reason


class FailingWriter:
    def write(self, text: str) -> None:
        raise OSError("disk full")


def print_fails_in_no_grad(x, out):
    with torch.no_grad():
        y = x * 2
        print("no grad", file=out)  # BREAK
        y = y + 1
    return y


def test_exception_from_the_breaking_instruction_in_no_grad_restores_grad_mode() -> None:
    compiled = xjit.jit(print_fails_in_no_grad, backend="interp")
    with torch.enable_grad():
        with pytest.raises(OSError, match="disk full") as info:
            compiled(x34(), FailingWriter())
        assert torch.is_grad_enabled()
    lines = [f.lineno for f in traceback.extract_tb(info.value.__traceback__)]
    assert line_of(print_fails_in_no_grad, "BREAK") in lines


def logged(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        print("called", fn.__name__, file=kwargs["out"])  # BREAK
        return out * 2

    return wrapper


@logged
def decorated(x, out):
    return torch.tanh(x) + 1


class Base(torch.nn.Module):
    def forward(self, x, out):
        return x * 3


class Derived(Base):
    def forward(self, x, out):
        y = super().forward(x, out)  # a free variable (__class__)
        print("derived", file=out)  # BREAK
        return y - 1


def test_break_in_closures_with_varargs_and_super() -> None:
    x = x34()
    out_e, out_c = io.StringIO(), io.StringIO()
    want = decorated(x, out=out_e)
    got = xjit.jit(decorated, backend="interp")(x, out=out_c)
    assert_close(got, want)
    assert out_c.getvalue() == out_e.getvalue() == "called decorated\n"
    report = xjit.explain(decorated, backend="interp")(x, out=io.StringIO())
    assert report.graphs_per_frame == {"logged.<locals>.wrapper": 2}, str(report)

    out_e, out_c = io.StringIO(), io.StringIO()
    with torch.no_grad():
        want = Derived()(x, out_e)
        got = xjit.jit(Derived(), backend="interp")(x, out_c)
        report = xjit.explain(Derived(), backend="interp")(x, io.StringIO())
    assert_close(got, want)
    assert out_c.getvalue() == out_e.getvalue()
    assert report.graph_breaks[0].resumed and report.graph_count == 2, str(report)


def views_across_break(x, out):
    v = x[0]  # a view of an input
    w = x * 2 + 1
    u = w[1]  # a view of a tensor the graph made
    print("views", file=out)  # BREAK
    x.add_(1)
    w.mul_(10)
    return v, u


@pytest.mark.parametrize("backend", ["interp", "xjit"])
def test_views_live_across_a_break_alias_their_base(backend: str) -> None:
    x_e, x_c = torch.zeros(2, 2), torch.zeros(2, 2)
    want = views_across_break(x_e, io.StringIO())
    got = xjit.jit(views_across_break, backend=backend)(x_c, io.StringIO())
    assert_close(got, want)
    torch.testing.assert_close(x_c, x_e)


def test_long_code_with_extended_args(tmp_path: Any) -> None:
    # Jumps over more than 255 code units and over 256 constants need EXTENDED_ARG prefixes in
    # the rewritten code.
    body = "\n".join(f"        y = y + {i}.5" for i in range(300))
    src = (
        "import torch\n"
        "def big(x, flag, out):\n"
        "    y = x * 2\n"
        "    if flag:\n"
        f"{body}\n"
        "    print('mid', file=out)\n"
        "    for i in range(2):\n"
        f"{body}\n"
        "    return y\n"
    )
    path = tmp_path / "bigmod.py"
    path.write_text(src)
    ns: dict[str, Any] = {}
    exec(compile(src, str(path), "exec"), ns)
    big = ns["big"]
    assert any(i.opname == "EXTENDED_ARG" for i in __import__("dis").get_instructions(big))
    x = x34()
    want = big(x, True, io.StringIO())
    out = io.StringIO()
    got = xjit.jit(big, backend="interp")(x, True, out)
    assert_close(got, want)
    assert out.getvalue() == "mid\n"
    report = xjit.explain(big, backend="interp")(x, True, io.StringIO())
    assert report.graph_breaks[0].resumed and report.graph_count == 2, str(report)


class Comprehension(torch.nn.Module):
    """`self` is a cell variable of forward (the comprehensions read it)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])

    def forward(self, x, out):
        hs = [layer(x) for layer in self.layers]
        print("hs", len(hs), file=out)  # BREAK
        return sum(h * self.layers[0].weight.sum() for h in hs)


def cell_after_break(x, out):
    print("first", file=out)  # BREAK
    double = lambda: x * 2  # noqa: E731  (x is a cell variable)
    return double() + 1


def test_break_in_frames_with_cell_variables() -> None:
    torch.manual_seed(0)
    m = Comprehension()
    x = x34()
    with torch.no_grad():
        out_e, out_c = io.StringIO(), io.StringIO()
        want = m(x, out_e)
        assert_close(xjit.jit(m, backend="interp")(x, out_c), want)
        assert out_c.getvalue() == out_e.getvalue()
        report = xjit.explain(m, backend="interp")(x, io.StringIO())
    assert report.graph_count == 2 and report.graph_breaks[0].resumed, str(report)

    want, printed_e, got, printed_c = run_both(cell_after_break, x)
    assert_close(got, want)
    assert printed_c == printed_e
    report = xjit.explain(cell_after_break, backend="interp")(x, io.StringIO())
    assert report.graph_breaks[0].resumed and report.graph_count == 1, str(report)


def introspect(x, out):
    y = x * 2
    frame = sys._getframe()  # BREAK: runs in the break code, so this is the break code's frame
    z = y + 1
    return z, frame.f_code


def code_lines(code: types.CodeType) -> set[int]:
    return {line for _, _, line in code.co_lines() if line is not None}


def test_generated_code_objects_are_well_formed() -> None:
    x = x34()
    z, break_code = xjit.jit(introspect, backend="interp")(x, io.StringIO())
    assert_close(z, x * 2 + 1)
    original = introspect.__code__
    line = line_of(introspect, "BREAK")
    assert break_code is not original
    assert break_code.co_name == original.co_name and break_code.co_filename == original.co_filename
    assert break_code.co_qualname == f"introspect.<graph break at line {line}>"
    resumes = [c for c in break_code.co_consts if isinstance(c, types.CodeType)]
    assert [c.co_qualname for c in resumes] == [f"introspect.<resume at line {line}>"]
    for code in [break_code, *resumes]:
        # Every instruction maps to one of the function's own lines (the prologue and the break
        # tails to the breaking line); the instruction stream and tables decode.
        assert code_lines(code) <= code_lines(original) | {line}
        instrs = list(dis.get_instructions(code))
        offsets = {i.offset for i in instrs}
        for entry in dis._parse_exception_table(code):  # type: ignore[attr-defined]
            assert entry.target in offsets and entry.start in offsets
        assert code.co_stacksize >= original.co_stacksize
        assert not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
        assert code.co_names == original.co_names
    # The resume code's arguments: the stack (the break's result) and the live local y (x and
    # out are dead after the break).
    assert resumes[0].co_varnames[: resumes[0].co_argcount] == ("___stack0", "y")
    # A second call reuses the entry, hence the same generated code (and the resume code's cache).
    _, again = xjit.jit(introspect, backend="interp")(x, io.StringIO())
    assert again is break_code


def aliased_list(x, out):
    a = [x * 2]
    b = a  # the same list under two names, live across the break
    print("aliased", file=out)  # BREAK
    a.append(x + 1)
    return b


def list_in_tuple(x, out):
    a = [x * 2]
    pair = (a, 1)
    print("nested", file=out)  # BREAK
    a.append(x)
    return pair


def test_aliased_lists_stay_one_object() -> None:
    for fn in (aliased_list, list_in_tuple):
        x = x34()
        want, printed_e, got, printed_c = run_both(fn, x)
        assert_close(got, want)
        assert printed_c == printed_e
        report = xjit.explain(fn, backend="interp")(x, io.StringIO())
        # Not resumed (the list would be rebuilt twice): the frame runs in Python.
        assert not report.graph_breaks[0].resumed, str(report)
        assert "reachable twice" in report.graph_breaks[0].reason


def item_in_comprehension(xs, out):
    scale = 2.0  # a cell variable: the comprehensions read it
    ys = [t * scale for t in xs]
    vals = [y.sum().item() * scale for y in ys]  # BREAK: inside the comprehension
    print(vals, file=out)
    return torch.stack(ys).sum() + len(vals)


def lambda_called_at_break(x, out, k=3):
    y = x * k
    r = (lambda t, m=k: print(t.shape, m, file=out))(y)  # BREAK: the lambda is on the stack
    return y + 1, r


def test_break_inside_a_comprehension_or_a_fresh_lambda() -> None:
    xs = [x34() * i for i in range(3)]
    want, printed_e, got, printed_c = run_both(item_in_comprehension, xs)
    assert_close(got, want)
    assert printed_c == printed_e
    report = xjit.explain(item_in_comprehension, backend="interp")(xs, io.StringIO())
    # The frame breaks at the comprehension's call (made again in the break code, over the
    # frame's cell `scale`), then at the print.
    assert [b.resumed for b in report.graph_breaks] == [True, True], str(report)
    assert report.graphs_per_frame == {"item_in_comprehension": 2}, str(report)

    x = x34()
    want, printed_e, got, printed_c = run_both(lambda_called_at_break, x)
    assert_close(got, want)
    assert printed_c == printed_e
    report = xjit.explain(lambda_called_at_break, backend="interp")(x, io.StringIO())
    assert report.graph_breaks[0].resumed and report.graph_count == 2, str(report)


CLI_SCRIPT = """\
import sys
import torch

def step(x):
    y = torch.relu(x) * 2
    print("step", tuple(y.shape))
    z = y + 1
    if len(sys.argv) > 1:
        raise ValueError("boom after the break")
    return z

x = torch.ones(2, 3)
for _ in range(2):
    out = step(x)
print(float(out.sum()))
step(x) if len(sys.argv) > 1 else None
"""


def test_cli_output_and_traceback_through_a_break_match_python(tmp_path: Any) -> None:
    (tmp_path / "s.py").write_text(CLI_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XJIT_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(xjit.__file__)), *sys.path]
    )

    def run(*cmd: str) -> Any:
        return subprocess.run(
            [sys.executable, *cmd],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
        )

    want = run("s.py", "raise")
    got = run("-m", "xjit", "--explain", "s.py", "raise")
    assert want.returncode == got.returncode == 1
    assert got.stdout == want.stdout
    # The traceback is Python's, frame for frame (the --explain report comes before it).
    assert want.stderr.startswith("Traceback") and got.stderr.endswith(want.stderr), got.stderr
    assert "graph break in step at s.py:6: call to print(); resumed after it" in got.stderr


class BreakingBase:
    def step(self, x, out):
        y = x * 2
        print("base step", file=out)  # BREAK
        return y + 1


class CallsSuper(BreakingBase):
    def step(self, x, out):
        y = super().step(torch.relu(x), out)  # the break inside resumes at this call
        return y - 3


def test_break_inside_a_super_call_runs_the_base_method() -> None:
    """The breaking call is `super().step(...)`: the break code must call the base class's
    method, not `getattr(self, "step")` (the subclass's own method: endless recursion)."""
    x = x34()
    obj = CallsSuper()
    out_e, out_c = io.StringIO(), io.StringIO()
    want = obj.step(x, out_e)
    got = xjit.jit(obj.step, backend="interp")(x, out_c)
    assert_close(got, want)
    assert out_c.getvalue() == out_e.getvalue() == "base step\n"
    report = xjit.explain(obj.step, backend="interp")(x, io.StringIO())
    # The base method, called from the break code in Python, is a root of its own and breaks
    # at its print in turn.
    assert report.graphs_per_frame == {"CallsSuper.step": 2, "BreakingBase.step": 2}, str(report)
    assert [b.resumed for b in report.graph_breaks] == [True, True], str(report)


class ActivationHolder:
    """`holder.activation(y)` is a LOAD_METHOD whose attribute (a property) breaks."""

    def __init__(self, out: Any) -> None:
        self.out = out

    @property
    def activation(self) -> Any:
        print("activation looked up", file=self.out)  # a graph break inside the property
        return torch.tanh


def break_at_load_method(x, holder):
    y = x * 2 + 1
    z = holder.activation(y)  # BREAK (at LOAD_METHOD)
    return z - y


def test_break_at_load_method_resumes_after_it() -> None:
    x = x34()
    out_e, out_c = io.StringIO(), io.StringIO()
    want = break_at_load_method(x, ActivationHolder(out_e))
    got = xjit.jit(break_at_load_method, backend="interp")(x, ActivationHolder(out_c))
    assert_close(got, want)
    assert out_c.getvalue() == out_e.getvalue() == "activation looked up\n"
    report = xjit.explain(break_at_load_method, backend="interp")(
        x, ActivationHolder(io.StringIO())
    )
    # Resumed right after the LOAD_METHOD (the property itself, called from the break code, is
    # a root that breaks at its print: no tensor work, no graph).
    first = report.graph_breaks[0]
    assert first.function == "break_at_load_method" and first.resumed, str(report)
    assert report.graphs_per_frame == {"break_at_load_method": 2}, str(report)


def closure_across_break(x, out):
    scale = 3.0

    def shifted(t, bias=1.0):  # made before the break, called after it
        return t * scale + bias

    y = shifted(x)
    print("between", file=out)  # BREAK
    return shifted(y, bias=-2.0) + shifted(x)


def test_function_made_before_the_break_is_made_again_after_it() -> None:
    """A closure defined before the break and called after it: the resume function makes it
    again (MAKE_FUNCTION over the frame's cells) instead of receiving it as an argument (a new
    object per call, guarded by identity: a recompile every call)."""
    x = x34()
    compiled = xjit.jit(closure_across_break, backend="interp")
    for k in range(3):  # later calls hit the cached entries: no recompiles
        out_e, out_c = io.StringIO(), io.StringIO()
        want = closure_across_break(x + k, out_e)
        got = compiled(x + k, out_c)
        assert_close(got, want)
        assert out_c.getvalue() == out_e.getvalue() == "between\n"
    report = xjit.explain(closure_across_break, backend="interp")(x, io.StringIO())
    assert [b.resumed for b in report.graph_breaks] == [True], str(report)
    assert report.graphs_per_frame == {"closure_across_break": 2}, str(report)
    fe.reset()
    for k in range(3):
        compiled(x + k, io.StringIO())
    assert fe.events()["recompiles"] == [], fe.events()["recompiles"]
    state = fe.code_state(closure_across_break.__code__)
    assert (state["entries"], state["hits"]) == (1, 2), state


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda: torch.eye(3).to_sparse(), "tensor with layout torch.sparse_coo"),
        (lambda: torch.quantize_per_tensor(torch.rand(3), 0.1, 0, torch.quint8), "of dtype torch.quint8"),
    ],
    ids=["sparse", "quantized"],
)
def test_an_input_the_graph_cannot_take_runs_the_frame_in_python(make: Any, why: str) -> None:
    # The capture reads each input's layout, dtype and quantization first (readTensorMeta).
    def f(x: Any) -> Any:
        return (x.dequantize() if x.is_quantized else x) * 2

    report = xjit.explain(f)(make())
    assert report.graph_count == 0 and report.graph_break_count == 1, str(report)
    assert why in report.graph_breaks[0].reason, report.graph_breaks[0].reason
