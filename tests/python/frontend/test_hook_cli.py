"""`python -m xjit [options] script.py`: the script runs as under `python script.py` (argv,
__main__, stdout, stderr, exit status) with its frames compiled; --explain, --dump, --check and
--backend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402

SCRIPT = """\
import sys
import torch

def scale(x, y):
    return torch.relu(x * 2 - y)

def noisy(x):
    print("noisy", tuple(x.shape))
    return scale(x, x) + 1

torch.manual_seed(0)
x = torch.randn(4, 3)
for _ in range(3):
    out = noisy(x)
print(sys.argv[1:], round(float(out.sum()), 4))
if len(sys.argv) > 1 and sys.argv[1] == "raise":
    def inner():
        raise ValueError("boom")
    inner()
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 0)
"""


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(Path(xjit.__file__).parent.parent), *sys.path])
    env = {k: v for k, v in os.environ.items() if not k.startswith("XJIT_")}
    return dict(env, PYTHONPATH=path, **extra)


def _run(cmd: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, cwd=cwd, env=_env(**env), timeout=120
    )


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cli")
    (d / "s.py").write_text(SCRIPT)
    return d


@pytest.fixture(scope="module")
def plain(script: Path) -> subprocess.CompletedProcess[str]:
    """`python s.py` without arguments (each interpreter start imports torch: a few seconds
    on a loaded machine, so runs are shared)."""
    return _run([sys.executable, "s.py"], script)


@pytest.mark.parametrize("args", [[], ["raise"]])
def test_same_argv_stdout_stderr_and_status_as_python(
    script: Path, plain: subprocess.CompletedProcess[str], args: list[str]
) -> None:
    want = _run([sys.executable, "s.py", *args], script) if args else plain
    via = _run([sys.executable, "-m", "xjit", "s.py", *args], script)
    assert (via.returncode, via.stdout, via.stderr) == (want.returncode, want.stdout, want.stderr)
    assert want.returncode == (1 if args == ["raise"] else 0)
    assert "noisy (4, 3)" in want.stdout
    if args:
        assert want.stderr.endswith("ValueError: boom\n") and 'File "' in want.stderr


def test_explain_dump_log_and_check(script: Path, plain: subprocess.CompletedProcess[str]) -> None:
    dump = script / "ir"
    cmd = ["-m", "xjit", "--check", "--explain", "--dump", str(dump), "s.py", "7"]
    via = _run([sys.executable, *cmd], script, XJIT_LOG="graph_breaks")
    assert via.returncode == 7
    assert via.stdout == plain.stdout.replace("[] ", "['7'] ")
    assert "[xjit] graph break in s.py:7 (noisy) at s.py:8: call to print" in via.stderr
    # noisy() breaks at its print; under --check a frame that breaks runs in Python (only whole
    # frames are compared), so scale() is compiled as a frame of its own.
    assert "1 graph(s), 1 graph break(s)" in via.stderr
    assert "graph 0: scale at s.py:4" in via.stderr
    assert "graph break in noisy at s.py:8: call to print(); resumed after it" in via.stderr
    assert "--check" not in via.stderr  # compiled and Python outputs agreed
    files = sorted(p.name for p in dump.iterdir())
    # The graph's IR before/after the passes, and its native kernel's loop IR, LLVM IR and
    # assembly (backend "xjit", docs/runtime.md).
    kernel = [f for f in files if f.startswith("000-scale.k000-")]
    assert sorted(f.rsplit(".", 1)[1] for f in kernel) == ["ll", "loops", "s"], files
    assert [f for f in files if f not in kernel] == [
        "000-noisy.bytecode.txt",
        "000-scale.after.xir",
        "000-scale.before.xir",
    ]
    assert "define" in (dump / next(f for f in kernel if f.endswith(".ll"))).read_text()
    assert "relu" in (dump / "000-scale.before.xir").read_text()
    assert "resume code noisy.<resume at line 8>" in (dump / "000-noisy.bytecode.txt").read_text()


def test_usage_errors(script: Path) -> None:
    r = _run([sys.executable, "-m", "xjit", "--backend", "nope", "s.py"], script)
    assert r.returncode == 2 and "unknown backend" in r.stderr
    r = _run([sys.executable, "-m", "xjit", "--bogus", "s.py"], script)
    assert r.returncode == 2 and "unknown option --bogus" in r.stderr
    r = _run([sys.executable, "-m", "xjit", "--help"], script)
    assert r.returncode == 0 and "--explain" in r.stderr


def test_strict_environment_fails_on_a_graph_break(script: Path) -> None:
    r = _run([sys.executable, "-m", "xjit", "--backend", "interp", "s.py"], script, XJIT_STRICT="1")
    assert r.returncode == 1
    assert "XjitCompileError: xjit: graph break in noisy at s.py:8: call to print" in r.stderr


MODEL_SCRIPT = """\
import torch
from transformers import BertConfig, BertModel

torch.manual_seed(0)
config = BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64)
model = BertModel(config).eval()
ids = torch.randint(0, 300, (2, 12))


def encode(ids):
    with torch.no_grad():
        return model(ids).last_hidden_state


for _ in range(2):
    out = encode(ids)
torch.save(out, "out.pt")
"""


def test_a_transformers_model_under_the_cli(tmp_path: Path) -> None:
    """`python -m xjit` on a script that calls a Hugging Face model from a function: the
    model's code (in site-packages) is inlined into the user's frame, one graph, no breaks, and
    the output equals plain Python's."""
    pytest.importorskip("transformers")
    (tmp_path / "m.py").write_text(MODEL_SCRIPT)
    plain_run = _run([sys.executable, "m.py"], tmp_path)
    assert plain_run.returncode == 0, plain_run.stderr
    want = torch.load(tmp_path / "out.pt")
    via = _run([sys.executable, "-m", "xjit", "--explain", "m.py"], tmp_path)
    assert via.returncode == 0, via.stderr
    assert "1 graph(s), 0 graph break(s)" in via.stderr, via.stderr
    assert "graph 0: encode at m.py:" in via.stderr, via.stderr
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), want, rtol=1e-5, atol=1e-5)
