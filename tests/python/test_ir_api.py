"""xjit.ir from Python: parse/print/verify, graph building, the op registry, running graphs and
single ops, and the zero-copy DLPack exchange with numpy and torch."""

from __future__ import annotations

import ast
import gc
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import xjit
from xjit import _xjit, ir

REPO = Path(__file__).resolve().parents[2]

ADD_RELU = """\
graph @main(%x: f32[2,s0], %y: f32[]) -> (f32[2,s0]) {
  %0 = add(%x, %y) {alpha = 2.0} : f32[2,s0] loc("model.py":3 "forward")
  %1 = relu(%0) : f32[2,s0]
  return(%1)
}
"""


def identity_graph(ty: str) -> ir.Graph:
    return ir.parse(f"graph @main(%x: {ty}) -> ({ty}) {{\n  return(%x)\n}}\n")


def one_op_graph(op: str, in_ty: str, attrs: dict[str, object] | None = None) -> ir.Graph:
    g = ir.Graph("main")
    x = g.add_input(in_ty, "x")
    g.set_outputs(g.add_op(op, [x], attrs))
    return g


# ---- package ---------------------------------------------------------------------------------


def run_python(code: str) -> str:
    """Runs code in a fresh interpreter that imports the same xjit as this one."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(Path(xjit.__file__).parent.parent), *sys.path])
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout


def test_import_is_cheap() -> None:
    code = (
        "import sys, xjit; print([m for m in ('torch', 'numpy', 'xjit._xjit') if m in sys.modules])"
    )
    assert run_python(code).strip() == "[]"


def test_import_ir_does_not_import_torch() -> None:
    code = "import sys; from xjit import ir; ir.ops(); print('torch' in sys.modules)"
    assert run_python(code).strip() == "False"


def test_version_comes_from_cmake() -> None:
    m = re.search(r"project\(xjit\s+VERSION\s+([0-9.]+)", (REPO / "CMakeLists.txt").read_text())
    assert m and xjit.__version__ == m.group(1)


def test_stubs_match_the_extension() -> None:
    tree = ast.parse((Path(xjit.__file__).parent / "_xjit.pyi").read_text())
    stubbed = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            stubbed.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stubbed.add(node.target.id)
    public = {n for n in dir(_xjit) if not n.startswith("_")} | {"__version__"}
    assert stubbed == public


# ---- text, verification, building ------------------------------------------------------------


def test_parse_print_round_trip() -> None:
    g = ir.parse(ADD_RELU)
    assert str(g) == ADD_RELU
    assert str(ir.parse(str(g))) == ADD_RELU
    assert g.inputs == ["f32[2,s0]", "f32[]"]
    assert g.outputs == ["f32[2,s0]"]
    assert g.num_ops == 3  # add, relu, return
    assert g.name == "main"
    assert 'loc("model.py":3' not in g.print(locations=False)
    assert ir.verify(g) == []
    ir.verify_or_raise(g)


def test_parse_error_has_position() -> None:
    with pytest.raises(ir.ParseError) as e:
        ir.parse("graph @main(%x: f32[2]) -> (f32[2]) {\n  return(%y)\n}\n", "bad.xir")
    assert (e.value.line, e.value.col) == (2, 10)
    assert "undefined value '%y'" in e.value.message
    assert str(e.value).startswith("bad.xir:2:10: error:")
    assert isinstance(e.value, ir.XjitError)


@pytest.mark.parametrize(
    "text", ["", "graph", "graph @g(%x: f99[2]) -> () {}", "\x00\xff", "graph @g() -> () {\n"]
)
def test_malformed_text_raises_not_crashes(text: str) -> None:
    with pytest.raises(ir.ParseError):
        ir.parse(text)


def test_verify_reports_wrong_declared_type() -> None:
    g = ir.parse(
        "graph @main(%x: f32[2]) -> (f32[3]) {\n"
        '  %0 = relu(%x) : f32[3] loc("m.py":7 "f")\n'
        "  return(%0)\n}\n"
    )
    problems = g.verify()
    assert problems and "relu" in problems[0] and "m.py:7" in problems[0]
    with pytest.raises(ir.VerifyError, match="relu"):
        g.verify_or_raise()


def test_build_graph() -> None:
    g = ir.Graph("built")
    x = g.add_input("f32[2,s0]", "x")
    y = g.add_input("f32[]", "y")
    (s,) = g.add_op("add", [x, y], {"alpha": 2.0}, ("model.py", 3, "forward"))
    (r,) = g.add_op("relu", [s])
    assert (x.type, r.type) == ("f32[2,s0]", "f32[2,s0]")
    g.set_outputs([r])
    assert g.verify() == []
    assert str(g) == ADD_RELU.replace("@main", "@built")
    g.set_outputs([r, x])  # replaces the return
    assert g.outputs == ["f32[2,s0]", "f32[2,s0]"]
    clone = g.clone()
    del g
    gc.collect()
    assert r.type == "f32[2,s0]"  # values keep their graph alive
    assert clone.num_ops == 3


def test_build_graph_inference_error() -> None:
    g = ir.Graph()
    a, b = g.add_input("f32[3]"), g.add_input("f32[4]")
    with pytest.raises(ir.InferenceError, match="add"):
        g.add_op("add", [a, b])
    with pytest.raises(ir.XjitError, match="unknown op 'nope'"):
        g.add_op("nope", [a])
    other = ir.Graph("other")
    with pytest.raises(ir.XjitError, match="belongs to another graph"):
        other.add_op("neg", [a])
    with pytest.raises(ir.XjitError, match="belongs to another graph"):
        other.set_outputs([a])


# ---- registry --------------------------------------------------------------------------------


def test_ops_and_op_info() -> None:
    names = ir.ops()
    assert names == sorted(names) and "add" in names and "return" in names
    info = ir.op_info("add")
    assert info["name"] == "add"
    assert [o["name"] for o in info["operands"]] == ["self", "other"]
    alpha = next(a for a in info["attrs"] if a["name"] == "alpha")
    assert alpha["kind"] == "float" and not alpha["required"]
    assert "elementwise" in info["traits"] and info["has_kernel"]
    assert "view" in ir.op_info("transpose")["traits"]
    with pytest.raises(ir.XjitError):
        ir.op_info("no_such_op")


# ---- running ---------------------------------------------------------------------------------


def test_run_numpy_and_torch() -> None:
    g = ir.parse(ADD_RELU)
    x = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], dtype=np.float32)
    (out,) = ir.run(g, [x, np.array(0.5, np.float32)])
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, np.maximum(x + 1.0, 0))
    (tout,) = ir.run(g, [torch.from_numpy(x), torch.tensor(0.5)])
    assert isinstance(tout, torch.Tensor)
    torch.testing.assert_close(tout, torch.relu(torch.from_numpy(x) + 1.0))
    (fw,) = ir.run(g, [x, np.array(0.5, np.float32)], framework="torch")
    assert isinstance(fw, torch.Tensor)


def test_run_checks_inputs() -> None:
    g = ir.parse(ADD_RELU)
    with pytest.raises(ir.XjitError, match="takes 2 inputs, got 1"):
        ir.run(g, [np.zeros((2, 3), np.float32)])
    with pytest.raises(ir.XjitError, match="input 0"):
        ir.run(g, [np.zeros((3, 3), np.float32), np.float32(1)])  # static dim 2 violated
    with pytest.raises(ir.XjitError, match="input 0"):
        ir.run(g, [np.zeros((2, 3), np.float64), np.float32(1)])


def test_numpy_scalars_are_python_scalars() -> None:
    (out,) = ir.run_op("add", [np.ones(2, np.float16), np.float64(1.0)])
    assert out.dtype == np.float16  # a scalar does not promote a tensor of the same category


def test_scalars_and_none() -> None:
    g = ir.parse(
        "graph @main(%a: int, %b: float, %c: bool) -> (int, float, bool) {\n"
        "  return(%a, %b, %c)\n}\n"
    )
    assert ir.run(g, [3, 2, True]) == [3, 2.0, True]  # an int is accepted for a float input
    assert ir.run_op("add", [2, 3]) == [5]
    assert ir.run_op("mul", [2.5, 2]) == [5.0]


def data_ptr(x: np.ndarray | torch.Tensor) -> int:
    if isinstance(x, torch.Tensor):
        return x.data_ptr()
    return int(x.__array_interface__["data"][0])


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_identity_is_zero_copy(framework: str) -> None:
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    inp = x if framework == "torch" else x.numpy()
    (out,) = ir.run(identity_graph("f32[3,4]"), [inp])
    assert type(out) is type(inp)
    assert data_ptr(out) == data_ptr(inp)
    out[0, 0] = 42.0  # same memory both ways
    assert x[0, 0].item() == 42.0


def test_view_op_is_zero_copy() -> None:
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    (t,) = ir.run(one_op_graph("transpose", "f32[3,4]", {"dim0": 0, "dim1": 1}), [x])
    assert t.data_ptr() == x.data_ptr() and t.stride() == (1, 4)
    assert torch.equal(t, x.t())
    (s,) = ir.run_op("select", [x], {"dim": 0, "index": 2})
    assert s.data_ptr() == x[2].data_ptr() and torch.equal(s, x[2])


def test_inplace_op_writes_borrowed_input() -> None:
    x = torch.zeros(2, 3)
    (out,) = ir.run_op("fill_", [x], {"value": 7.0})
    assert out.data_ptr() == x.data_ptr()
    assert torch.equal(x, torch.full((2, 3), 7.0))


def test_output_outlives_inputs_and_graph() -> None:
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    g = identity_graph("f32[2,3]")
    (view,) = ir.run(g, [x])
    (fresh,) = ir.run_op("neg", [x])
    del x, g
    gc.collect()
    assert view.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert fresh.tolist() == [[-0.0, -1.0, -2.0], [-3.0, -4.0, -5.0]]


def test_noncontiguous_and_negative_strides() -> None:
    x = torch.randn(4, 6)
    (out,) = ir.run_op("neg", [x.t()[:, ::2]])
    torch.testing.assert_close(out, -x.t()[:, ::2], rtol=0, atol=0)
    a = np.arange(10, dtype=np.float64)[::-3]  # negative stride
    (r,) = ir.run_op("neg", [a])
    np.testing.assert_array_equal(r, -a)
    (same,) = ir.run(identity_graph("f64[4]"), [a])
    np.testing.assert_array_equal(same, a)


@pytest.mark.parametrize(
    "dtype",
    [
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
    ],
)
def test_dtypes_round_trip_torch(dtype: torch.dtype) -> None:
    x = (
        (torch.arange(-3, 3) % 2 if dtype == torch.bool else torch.arange(-3, 3))
        .to(dtype)
        .reshape(2, 3)
    )
    if dtype == torch.uint8:
        x = torch.arange(6, dtype=dtype).reshape(2, 3)
    name = {
        torch.bool: "bool",
        torch.uint8: "u8",
        torch.int8: "i8",
        torch.int16: "i16",
        torch.int32: "i32",
        torch.int64: "i64",
        torch.float16: "f16",
        torch.bfloat16: "bf16",
        torch.float32: "f32",
        torch.float64: "f64",
    }[dtype]
    g = ir.parse(
        f"graph @main(%x: {name}[2,3]) -> ({name}[3,2]) {{\n"
        f"  %0 = contiguous(%x) : {name}[2,3]\n"
        f"  %1 = t(%0) : {name}[3,2]\n"
        "  return(%1)\n}\n"
    )
    assert g.verify() == []
    (out,) = ir.run(g, [x])
    assert out.dtype == dtype and torch.equal(out, x.t())


@pytest.mark.parametrize(
    "dtype",
    [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64],
)
def test_dtypes_numpy(dtype: type) -> None:
    x: np.ndarray = (np.arange(6) % 3).astype(dtype).reshape(2, 3)
    (out,) = ir.run_op("clone", [x])
    assert out.dtype == x.dtype and np.array_equal(out, x) and data_ptr(out) != data_ptr(x)


def test_bf16_outputs_are_torch() -> None:
    (out,) = ir.run_op("full", [], {"shape": [2], "fill_value": 1.5, "dtype": "bf16"})
    assert (
        isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.tolist() == [1.5, 1.5]
    )


def test_zero_d_and_empty() -> None:
    (s,) = ir.run_op("add", [torch.tensor(2.0), 1])
    assert s.shape == () and s.item() == 3.0
    (e,) = ir.run_op("neg", [torch.empty(0, 3)])
    assert e.shape == (0, 3)
    (n,) = ir.run_op("neg", [np.empty((3, 0), np.int32)])
    assert n.shape == (3, 0) and n.dtype == np.int32


def test_readonly_numpy_input() -> None:
    x = np.arange(4, dtype=np.float32)
    x.setflags(write=False)
    (out,) = ir.run_op("neg", [x])
    np.testing.assert_array_equal(out, -x)


def test_requires_grad_input() -> None:
    x = torch.ones(3, requires_grad=True)
    (out,) = ir.run_op("mul", [x, 2.0])
    assert torch.equal(out, torch.full((3,), 2.0)) and not out.requires_grad


def test_run_op_attrs() -> None:
    x = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    (a,) = ir.run_op("sum", [x], {"dims": [1], "dtype": torch.float64})
    (b,) = ir.run_op("sum", [x], {"dims": 1, "dtype": "f64"})  # a single int for an ints attr
    assert a.dtype == torch.float64 and torch.equal(a, b) and a.tolist() == [3.0, 12.0]
    with pytest.raises(ValueError, match="not a dtype"):
        ir.run_op("sum", [x], {"dtype": "float99"})
    with pytest.raises(TypeError, match="attribute 'dims'"):
        ir.run_op("sum", [x], {"dims": [object()]})


def test_run_op_errors() -> None:
    with pytest.raises(ir.InferenceError) as e:
        ir.run_op("add", [torch.zeros(3), torch.zeros(4)])
    assert isinstance(e.value, TypeError) and "add" in str(e.value)
    with pytest.raises(ir.KernelError, match="index"):
        ir.run_op("index_select", [torch.zeros(3), torch.tensor([5])], {"dim": 0})
    with pytest.raises(ir.XjitError, match="unknown op"):
        ir.run_op("no_such_op", [])


def test_gil_is_released_while_interpreting() -> None:
    """While one thread interprets a long op, another keeps running Python: the largest pause
    between its loop iterations stays far below the op's duration."""
    x = torch.randn(500, 500)
    span: list[float] = []

    def work() -> None:
        t0 = time.perf_counter()
        ir.run_op("matmul", [x, x])
        span.append(time.perf_counter() - t0)

    worker = threading.Thread(target=work)
    stamps = [time.perf_counter()]
    worker.start()
    while worker.is_alive():
        stamps.append(time.perf_counter())
    worker.join()
    max_gap = max(b - a for a, b in zip(stamps, stamps[1:]))
    if span[0] < 0.05:
        pytest.skip(f"the op ran too briefly ({span[0]:.3f}s) to tell")
    assert max_gap < span[0] / 2, f"main thread stalled {max_gap:.3f}s of a {span[0]:.3f}s run"


def test_threads_run_concurrently() -> None:
    """The interpreter releases the GIL; concurrent runs stay correct."""
    x = torch.randn(64, 64)
    expected = x @ x
    results: list[torch.Tensor] = []

    def work() -> None:
        results.append(ir.run_op("matmul", [x, x])[0])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    for r in results:
        torch.testing.assert_close(r, expected)
