"""`python -m xjit --no-cache script.py` turns the persistent compile cache off for the run: it
sets XJIT_NO_CACHE=1, which the backend reads at every compile (docs/backend.md). Runs without
the compiled extensions too (the CLI then runs the script as plain Python)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import xjit

SCRIPT = "import os\nprint('XJIT_NO_CACHE=' + repr(os.environ.get('XJIT_NO_CACHE')))\n"


def _run(tmp_path: Path, *options: str) -> str:
    (tmp_path / "s.py").write_text(SCRIPT)
    path = os.pathsep.join([str(Path(xjit.__file__).parent.parent), *sys.path])
    env = {k: v for k, v in os.environ.items() if not k.startswith("XJIT_")}
    env["PYTHONPATH"] = path
    proc = subprocess.run(
        [sys.executable, "-m", "xjit", *options, "s.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_no_cache_sets_the_variable(tmp_path: Path) -> None:
    assert _run(tmp_path, "--no-cache") == "XJIT_NO_CACHE='1'"


def test_cache_is_on_by_default(tmp_path: Path) -> None:
    assert _run(tmp_path) == "XJIT_NO_CACHE=None"


def test_no_cache_takes_no_value(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-m", "xjit", "--no-cache=1", "s.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(Path(xjit.__file__).parent.parent)),
        timeout=120,
    )
    assert proc.returncode == 2 and "unknown option --no-cache=1" in proc.stderr
