"""Command-line tools: xjit-run on .npy files (checked against numpy), its .npy reader/writer
(header versions, byte order, Fortran order, every IR dtype incl. bf16 as '|V2'), its errors; and
`python -m xjit script.py` behaving exactly like `python script.py`."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import xjit

NP_DTYPES = {
    "f64": np.float64,
    "f32": np.float32,
    "f16": np.float16,
    "i64": np.int64,
    "i32": np.int32,
    "i16": np.int16,
    "i8": np.int8,
    "u8": np.uint8,
    "bool": np.bool_,
}


def run_tool(
    tool: str, *args: str | Path, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def write_graph(tmp_path: Path, text: str, name: str = "g.xir") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip())
    return p


def bf16_to_v2(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view("V2")


def v2_to_bf16(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)


# ---- xjit-run ------------------------------------------------------------------------------


def test_elementwise_against_numpy(xjit_run: str, tmp_path: Path) -> None:
    g = write_graph(
        tmp_path,
        """
        graph @main(%x: f32[2,3], %y: f32[3], %s: float) -> (f32[2,3], f32[3,2], bool[2,3]) {
          %0 = mul(%x, %y) : f32[2,3]
          %1 = add(%0, %s) : f32[2,3]
          %2 = t(%x) : f32[3,2]
          %3 = gt(%x, %y) : bool[2,3]
          return(%1, %2, %3)
        }
        """,
    )
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = rng.standard_normal(3).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    r = run_tool(
        xjit_run, g, tmp_path / "x.npy", tmp_path / "y.npy", "float:2.5", "-o", tmp_path / "out"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""
    out = [np.load(tmp_path / "out" / f"out{i}.npy") for i in range(3)]
    np.testing.assert_allclose(out[0], x * y + np.float32(2.5), rtol=1e-6)
    assert out[0].dtype == np.float32
    np.testing.assert_array_equal(out[1], x.T)  # a strided view, written in C order
    assert out[1].flags.c_contiguous
    np.testing.assert_array_equal(out[2], x > y)
    assert out[2].dtype == np.bool_


@pytest.mark.parametrize("name", list(NP_DTYPES))
def test_every_dtype_round_trips(xjit_run: str, tmp_path: Path, name: str) -> None:
    g = write_graph(
        tmp_path, f"graph @main(%x: {name}[2,3]) -> ({name}[2,3]) {{\n  return(%x)\n}}\n"
    )
    x: np.ndarray = (np.arange(6) % 4 - 1).astype(NP_DTYPES[name]).reshape(2, 3)
    np.save(tmp_path / "x.npy", x)
    r = run_tool(xjit_run, g, tmp_path / "x.npy", "--out", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == x.dtype and np.array_equal(y, x)
    # Byte-identical to numpy's own file (same header text and padding).
    assert (tmp_path / "y.npy").read_bytes() == (tmp_path / "x.npy").read_bytes()


def test_bf16_as_void2(xjit_run: str, tmp_path: Path) -> None:
    g = write_graph(
        tmp_path,
        """
        graph @main(%x: bf16[4]) -> (bf16[4]) {
          %0 = mul(%x, %x) : bf16[4]
          return(%0)
        }
        """,
    )
    x = torch.tensor([1.5, -2.0, 3.25, 0.1], dtype=torch.bfloat16)
    np.save(tmp_path / "x.npy", bf16_to_v2(x))
    r = run_tool(xjit_run, g, tmp_path / "x.npy", "--out", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.dtype("V2")
    assert torch.equal(v2_to_bf16(y), x * x)


def test_fortran_big_endian_and_header_versions(xjit_run: str, tmp_path: Path) -> None:
    g = write_graph(
        tmp_path,
        """
        graph @main(%a: f64[3,4], %b: i32[3,4]) -> (f64[3,4]) {
          %0 = add(%a, %b) : f64[3,4]
          return(%0)
        }
        """,
    )
    a = np.asfortranarray(np.arange(12, dtype=">f8").reshape(3, 4) / 3)
    b = np.arange(12, dtype=np.int32).reshape(3, 4) * 7
    for version in [(1, 0), (2, 0), (3, 0)]:
        with open(tmp_path / "a.npy", "wb") as f:
            np.lib.format.write_array(f, a, version=version)
        with open(tmp_path / "b.npy", "wb") as f:
            np.lib.format.write_array(f, b, version=version)
        r = run_tool(
            xjit_run, g, tmp_path / "a.npy", tmp_path / "b.npy", "--out", tmp_path / "o.npy"
        )
        assert r.returncode == 0, r.stderr
        np.testing.assert_array_equal(np.load(tmp_path / "o.npy"), a.astype("<f8") + b)


def test_zero_d_empty_and_scalar_outputs(xjit_run: str, tmp_path: Path) -> None:
    g = write_graph(
        tmp_path,
        """
        graph @main(%x: f32[], %e: i64[0,3], %n: int) -> (f32[], i64[0,3], int, bool) {
          %0 = neg(%x) : f32[]
          %1 = neg(%e) : i64[0,3]
          %2 = mul(%n, %n) : int
          %3 = constant() {value = true} : bool
          return(%0, %1, %2, %3)
        }
        """,
    )
    np.save(tmp_path / "x.npy", np.array(1.5, np.float32))
    np.save(tmp_path / "e.npy", np.zeros((0, 3), np.int64))
    r = run_tool(xjit_run, g, tmp_path / "x.npy", tmp_path / "e.npy", "int:-7", "-o", tmp_path)
    assert r.returncode == 0, r.stderr
    outs = [np.load(tmp_path / f"out{i}.npy") for i in range(4)]
    assert outs[0].shape == () and outs[0] == -1.5 and outs[0].dtype == np.float32
    assert outs[1].shape == (0, 3) and outs[1].dtype == np.int64
    assert outs[2].dtype == np.int64 and outs[2] == 49
    assert outs[3].dtype == np.bool_ and bool(outs[3])


def test_prints_without_output_option(xjit_run: str, tmp_path: Path) -> None:
    g = write_graph(
        tmp_path, "graph @main(%a: int, %b: bool) -> (int, bool) {\n  return(%a, %b)\n}\n"
    )
    r = run_tool(xjit_run, g, "int:3", "bool:true")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "out0: int = 3\nout1: bool = true\n"


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


ADD_GRAPH = "graph @main(%x: f32[2]) -> (f32[2]) {\n  %0 = add(%x, %x) : f32[2]\n  return(%0)\n}\n"


@pytest.mark.parametrize(
    "setup, args, message",
    [
        (lambda d: None, ["MISSING.xir"], "cannot open"),
        (
            lambda d: (d / "bad.xir").write_text(
                "graph @main(%x: f32[2]) -> (f32[2]) {\n  return(%y)\n}\n"
            ),
            ["bad.xir", "x.npy"],
            "bad.xir:2:10: error:",
        ),
        (
            lambda d: (d / "wrong.xir").write_text(
                ADD_GRAPH.replace("f32[2]", "f32[3]").replace("%x: f32[3]", "%x: f32[2]")
            ),
            ["wrong.xir", "x.npy"],
            "wrong.xir: error: 'add'",
        ),
        (lambda d: None, ["g.xir"], "takes 1 inputs, got 0"),
        (lambda d: None, ["g.xir", "int:x"], "not a 64-bit integer"),
        (lambda d: None, ["g.xir", "bool:maybe"], "expected bool:true or bool:false"),
        (
            lambda d: np.save(d / "d.npy", np.zeros(2, np.float64)),
            ["g.xir", "d.npy"],
            "input 0 (d.npy): f64[2] does not match the declared type f32[2]",
        ),
        (
            lambda d: np.save(d / "s.npy", np.zeros(2, [("a", "<f4")])),
            ["g.xir", "s.npy"],
            "s.npy: malformed .npy header (structured",
        ),
        (
            lambda d: np.save(d / "c.npy", np.zeros(2, np.complex64)),
            ["g.xir", "c.npy"],
            "c.npy: unsupported dtype '<c8'",
        ),
        (
            lambda d: (d / "t.npy").write_bytes(_npy_bytes(np.ones(2, np.float32))[:-1]),
            ["g.xir", "t.npy"],
            "t.npy: truncated data: shape (2,) of <f4 needs 8 bytes, the file has 7",
        ),
        (
            lambda d: (d / "j.npy").write_bytes(b"not numpy at all"),
            ["g.xir", "j.npy"],
            "not a .npy file",
        ),
        (
            lambda d: None,
            ["g.xir", "x.npy", "--out", "a.npy,b.npy"],
            "--out names 2 files but the graph has 1 outputs",
        ),
        (lambda d: None, ["g.xir", "x.npy", "--bogus"], "unknown option '--bogus'"),
        (lambda d: None, ["g.xir", "x.npy", "-o"], "-o needs a value"),
    ],
)
def test_user_errors(
    xjit_run: str,
    tmp_path: Path,
    setup: Callable[[Path], object],
    args: list[str],
    message: str,
) -> None:
    (tmp_path / "g.xir").write_text(ADD_GRAPH)
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    setup(tmp_path)
    r = run_tool(xjit_run, *args, cwd=tmp_path)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert message in r.stderr


def test_kernel_error_names_the_op(xjit_run: str, tmp_path: Path) -> None:
    g = write_graph(
        tmp_path,
        """
        graph @main(%x: f32[3], %i: i64[1]) -> (f32[1]) {
          %0 = index_select(%x, %i) {dim = 0} : f32[1] loc("model.py":12 "forward")
          return(%0)
        }
        """,
    )
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    np.save(tmp_path / "i.npy", np.array([9]))
    r = run_tool(xjit_run, g, tmp_path / "x.npy", tmp_path / "i.npy")
    assert r.returncode == 1
    assert "index_select" in r.stderr and "model.py:12" in r.stderr


def test_help(xjit_run: str) -> None:
    r = run_tool(xjit_run, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: xjit-run")


# ---- python -m xjit ----------------------------------------------------------------------------


SCRIPT = """\
import sys, os
assert sys.modules["__main__"].__dict__ is globals()
print("argv", sys.argv)
print("name", __name__, os.path.isabs(__file__))
print("path0", sys.path[0])
if len(sys.argv) > 2 and sys.argv[2] == "raise":
    def inner():
        raise ValueError("boom")
    inner()
sys.exit(int(sys.argv[1]))
"""


def _env() -> dict[str, str]:
    return dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(Path(xjit.__file__).parent.parent), *sys.path])
    )


@pytest.mark.parametrize("args", [["0"], ["3", "x"], ["0", "raise"], ["syntax"]])
def test_python_m_xjit_runs_script_like_python(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "s.py").write_text(SCRIPT if args != ["syntax"] else "x = (1,\n")
    cmd_args = ["sub/s.py", *args]
    plain = subprocess.run(
        [sys.executable, *cmd_args], capture_output=True, text=True, cwd=tmp_path, env=_env()
    )
    via = subprocess.run(
        [sys.executable, "-m", "xjit", *cmd_args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
    )
    assert (via.returncode, via.stdout, via.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )
    assert plain.returncode == (1 if "raise" in args or "syntax" in args else int(args[0]))


def test_python_m_xjit_usage() -> None:
    r = subprocess.run([sys.executable, "-m", "xjit"], capture_output=True, text=True, env=_env())
    assert r.returncode == 2 and "usage: python -m xjit script.py" in r.stderr
