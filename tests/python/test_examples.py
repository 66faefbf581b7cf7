"""The examples' comparison (examples/_compare.py) under `python -m xjit`: it prints the speedup
and the compile time, its eager column runs as plain PyTorch (program mode paused with
`xjit.jit.paused`), and the compiled result matches eager's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import xjit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TINY_EXAMPLE = f"""
import sys, torch
sys.path.insert(0, {str(EXAMPLES)!r})
from _compare import compare
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
compare("tiny MLP", model, torch.randn(8, 16), calls=2)
"""

TINY_TRAINING = f"""
import sys, torch
sys.path.insert(0, {str(EXAMPLES)!r})
from _compare import compare_training

class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.2),
                                       torch.nn.GELU(), torch.nn.Linear(32, 4))

    def forward(self, x, labels):
        logits = self.net(x)
        return type("Out", (), {{"loss": torch.nn.functional.cross_entropy(logits, labels)}})

torch.manual_seed(0)
compare_training("tiny classifier", Classifier(), {{"x": torch.randn(8, 16),
                 "labels": torch.randint(0, 4, (8,))}},
                 lambda ps: torch.optim.AdamW(ps, lr=1e-2), steps=4)
"""

# Frames run inside paused() stay unseen by the hook; the same function called afterwards is
# compiled by program mode again.
PAUSED = """
import torch
from xjit import _frontend
from xjit.jit import paused

def f(x):
    return x * 2 + 1

with paused():
    f(torch.ones(3))
print("inside:", _frontend.code_state(f.__code__)["state"])
f(torch.ones(3))
print("after:", _frontend.code_state(f.__code__)["state"])
"""


def _run_cli(tmp_path: Path, source: str) -> str:
    pytest.importorskip("xjit._frontend")
    (tmp_path / "script.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "XJIT_STRICT"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(xjit.__file__).parent.parent), *sys.path])
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(
        [sys.executable, "-m", "xjit", "script.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_compare_prints_speedup_and_compile_time(tmp_path: Path) -> None:
    out = _run_cli(tmp_path, TINY_EXAMPLE)
    line = next(l for l in out.splitlines() if l.startswith("tiny MLP: xjit"))
    assert re.search(r"[0-9.]+x eager", line), line
    assert re.search(r"compile \(first call\) [0-9.]+ s", line), line
    err = float(re.search(r"max abs error vs eager ([0-9.e+-]+)", line).group(1))
    assert err < 1e-5, line


def test_paused_runs_frames_uncompiled(tmp_path: Path) -> None:
    out = _run_cli(tmp_path, PAUSED).splitlines()
    assert "inside: unseen" in out, out
    assert "after: active" in out, out


def test_compare_training_prints_speedup_and_matching_losses(tmp_path: Path) -> None:
    out = _run_cli(tmp_path, TINY_TRAINING)
    line = next(l for l in out.splitlines() if l.startswith("tiny classifier: xjit"))
    assert re.search(r"[0-9.]+x eager; first step \(compile\) [0-9.]+ s", line), line
    diff = float(re.search(r"max relative difference vs eager ([0-9.e+-]+)", line).group(1))
    assert diff < 1e-5, line
