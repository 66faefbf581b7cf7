"""The model importer (tests/models/fx_import.py): the IR it writes for an MLP and a small CNN
verifies, carries source locations, and the reference interpreter reproduces the eager output,
with parameters as graph inputs and as constants; freezing the CNN folds every batch norm and
removes the dropout without changing the output beyond float rounding."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import xjit.ir as ir
from conftest import find_tool

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import fx_import  # noqa: E402


@pytest.fixture(scope="module", params=["mlp", "cnn"])
def model(request: pytest.FixtureRequest) -> tuple[str, torch.nn.Module, tuple[Any, ...]]:
    m, args = fx_import.build(request.param)
    return request.param, m, args


def _eager(m: torch.nn.Module, args: tuple[Any, ...]) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = m(*args)
    return out


def test_params_as_inputs_match_eager(model: tuple[str, torch.nn.Module, tuple[Any, ...]]) -> None:
    name, m, args = model
    imp = fx_import.import_model(m, args)
    g = ir.parse(imp.text, f"{name}.xir")
    assert ir.verify(g) == []
    assert imp.param_values, "parameters should be graph inputs"
    (out,) = ir.run(g, imp.inputs(*args))
    torch.testing.assert_close(out, _eager(m, args), rtol=1e-5, atol=1e-5)
    # Every op points at the model's source.
    ops = [line for line in imp.text.splitlines() if " = " in line and "constant()" not in line]
    assert ops and all('loc("' in line for line in ops)
    assert "fx_import.py" in imp.text


def test_params_as_constants_match_eager(
    model: tuple[str, torch.nn.Module, tuple[Any, ...]],
) -> None:
    name, m, args = model
    imp = fx_import.import_model(m, args, params="constants")
    assert not imp.param_values
    g = ir.parse(imp.text, f"{name}.xir")
    assert ir.verify(g) == []
    (out,) = ir.run(g, list(args))
    torch.testing.assert_close(out, _eager(m, args), rtol=1e-5, atol=1e-5)


def test_large_constants_are_refused() -> None:
    m = torch.nn.Linear(300, 300).eval()
    with pytest.raises(ValueError, match="too large"):
        fx_import.import_model(m, (torch.randn(2, 300),), params="constants")


def test_pad_attributes_and_unknown_ops() -> None:
    class Pad(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.pad(x, (1, 2), mode="constant", value=0.5)

    x = torch.randn(2, 3)
    imp = fx_import.import_model(Pad().eval(), (x,))
    (out,) = ir.run(ir.parse(imp.text), [x])
    torch.testing.assert_close(out, Pad()(x))

    class Bessel(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.special.bessel_j0(x)

    with pytest.raises(NotImplementedError, match="xjit has no op 'special_bessel_j0'"):
        fx_import.import_model(Bessel().eval(), (x,))


def _opt(text: str, passes: str, tmp_path: Path) -> str:
    tool = find_tool("xjit-opt")
    if tool is None:
        pytest.skip("xjit-opt not built")
    listed = subprocess.run([tool, "--list-passes"], capture_output=True, text=True)
    if "freeze" not in listed.stdout:
        pytest.skip("this xjit-opt has no freeze pass")
    src = tmp_path / "in.xir"
    src.write_text(text)
    r = subprocess.run([tool, str(src), f"--passes={passes}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_freeze_folds_the_cnn(tmp_path: Path) -> None:
    m, args = fx_import.build("cnn")
    imp = fx_import.import_model(m, args, params="constants")
    frozen = _opt(imp.text, "freeze", tmp_path)

    def count(text: str, op: str) -> int:
        return len(re.findall(rf"= {op}\(", text))

    assert count(imp.text, "batch_norm") == 4 and count(imp.text, "dropout") == 1
    assert count(frozen, "batch_norm") == 0 and count(frozen, "dropout") == 0
    assert count(frozen, "conv2d") == 3 and count(frozen, "linear") == 1
    g = ir.parse(frozen)
    (out,) = ir.run(g, list(args))
    torch.testing.assert_close(out, _eager(m, args), rtol=1e-4, atol=1e-5)
