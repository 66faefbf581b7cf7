"""Other tracers of PyTorch programs under `python -m xjit`: torch.jit.trace's tracer records
the ops a frame runs, torch.fx runs it on Proxy objects, TorchDynamo (torch.compile) has its
own frame callback. Their frames must run unmodified in Python: a compiled frame would hide its
ops from the tracer (the trace would hold the first input's outputs as constants)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402

# References are computed at the top level (module bodies are never compiled), each check
# prints one line; the same script runs under plain Python and under the CLI.
SCRIPT = """\
import torch
from torch._dynamo.utils import counters

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2

def scaled_tanh(x):
    return torch.tanh(x) * 3 + 1

def with_break(x):
    y = torch.cos(x) * 2
    print("python between the graphs")
    return y + torch.sin(y)

torch.manual_seed(0)
m = Block().eval()
x, y = torch.randn(2, 4), torch.randn(5, 4)
with torch.no_grad():
    m(x)  # compiled by xjit (a root): the cached entry must not serve the tracer below
    want_y = torch.relu(torch.nn.functional.linear(y, m.lin.weight, m.lin.bias)) * 2
    traced = torch.jit.trace(m, x)
    print("jit.trace module:", torch.allclose(traced(y), want_y),
          "aten::relu" in {n.kind() for n in traced.graph.nodes()})
    traced_fn = torch.jit.trace(scaled_tanh, x)
    print("jit.trace function:", torch.allclose(traced_fn(y), torch.tanh(y) * 3 + 1))
    gm = torch.fx.symbolic_trace(m)
    print("fx:", torch.allclose(gm(y), want_y),
          sorted(n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"))
    cf = torch.compile(scaled_tanh, backend="eager")
    cb = torch.compile(with_break, backend="eager")
    for t in (x, y):
        print("torch.compile:", torch.allclose(cf(t), torch.tanh(t) * 3 + 1),
              torch.allclose(cb(t), torch.cos(t) * 2 + torch.sin(torch.cos(t) * 2)))
print("dynamo graphs:", counters["stats"]["unique_graphs"])
"""


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(Path(xjit.__file__).parent.parent), *sys.path])
    env = {k: v for k, v in os.environ.items() if not k.startswith("XJIT_")}
    return dict(env, PYTHONPATH=path)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=_env(), timeout=300
    )


def test_traced_and_dynamo_frames_run_unmodified_under_the_cli(tmp_path: Path) -> None:
    # (One run, under the CLI: each interpreter start imports torch, seconds on a loaded
    # machine; every printed check is against eager PyTorch values.)
    (tmp_path / "tracers.py").write_text(SCRIPT)
    via = _run(["-m", "xjit", "--explain", "tracers.py"], tmp_path)
    assert via.returncode == 0, via.stderr
    out = via.stdout.splitlines()
    assert "jit.trace module: True True" in out, via.stdout
    assert "jit.trace function: True" in out, via.stdout
    assert "fx: True ['mul', 'relu']" in out, via.stdout
    assert out.count("torch.compile: True True") == 2, via.stdout
    assert out.count("python between the graphs") == 2, via.stdout
    # xjit compiled the direct call m(x) once (the tracers' runs of Block.forward, on Proxy
    # objects or other shapes, were no recompiles) and none of the frames TorchDynamo runs.
    # (torch.jit.trace's check_trace reruns scaled_tanh eagerly, and fx's GraphModule calls the
    # Linear layer from Python: those plain runs may be compiled.)
    graphs = [line for line in via.stderr.splitlines() if line.startswith("  graph ")]
    assert [g for g in graphs if "Block.forward" in g] == [graphs[0]], via.stderr
    assert "0 graph break(s), 0 recompile(s)" in via.stderr, via.stderr
    assert "with_break" not in via.stderr
