"""`python -m xjit [options] script.py`: the script runs as under `python script.py` (argv,
__main__, stdout, stderr, exit status) with its frames compiled; --explain, --dump, --check and
--backend."""

from __future__ import annotations

import os
import re
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
    # The graph's IR before/after the passes and after the runtime's pipeline, and its native
    # kernel's loop IR, LLVM IR and assembly (backend "xjit", docs/runtime.md).
    kernel = [f for f in files if f.startswith("000-scale.k000-")]
    assert sorted(f.rsplit(".", 1)[1] for f in kernel) == ["ll", "loops", "s"], files
    assert [f for f in files if f not in kernel] == [
        "000-noisy.bytecode.txt",
        "000-scale.after.xir",
        "000-scale.before.xir",
        "000-scale.runtime.xir",
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


MODELS_SCRIPT = """\
import sys
import torch
from torch import nn
from transformers import (BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM)

torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x))) + x[:, :, ::2, ::2]
        return self.head(x.mean(dim=(2, 3)))


class LoopLSTM(nn.Module):
    def __init__(self, vocab=50, hidden=16, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.cells = nn.ModuleList(nn.LSTMCell(hidden, hidden) for _ in range(layers))
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        b, steps = tokens.shape
        x = self.embed(tokens)
        state = [(x.new_zeros(b, c.hidden_size), x.new_zeros(b, c.hidden_size))
                 for c in self.cells]
        outs = []
        for t in range(steps):  # a Python loop over time steps and layers
            h = x[:, t]
            for i, cell in enumerate(self.cells):
                state[i] = cell(h, state[i])
                h = state[i][0]
            outs.append(self.out(h))
        return torch.stack(outs, dim=1)


mlp, cnn, lstm = MLP().eval(), CNN().eval(), LoopLSTM().eval()
with torch.no_grad():  # batch norm statistics that are not the identity
    for bn in (cnn.bn1, cnn.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
bert = BertModel(BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=64,
                            max_position_embeddings=64)).eval()
gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=4,
                                  n_positions=64, use_cache=False)).eval()
llama = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=64,
                                     use_cache=False)).eval()
seq = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
x, img, tokens = torch.randn(4, 16), torch.randn(2, 3, 8, 8), torch.randint(0, 50, (2, 6))
ids = torch.randint(0, 300, (2, 10))


def run_mlp(x):
    with torch.no_grad():
        return mlp(x)


def run_cnn(img):
    with torch.no_grad():
        return cnn(img)


def run_lstm(tokens):
    with torch.no_grad():
        return lstm(tokens)


def run_bert(ids):
    with torch.no_grad():
        return bert(ids).last_hidden_state


def run_gpt2(ids):
    with torch.no_grad():
        return gpt2(ids).logits


def run_llama(ids):
    with torch.no_grad():
        return llama(ids).logits


outs = {}
for _ in range(2):  # the second round runs the cached graphs
    outs.update(mlp=run_mlp(x), cnn=run_cnn(img), lstm=run_lstm(tokens), bert=run_bert(ids),
                gpt2=run_gpt2(ids), llama=run_llama(ids))
    # Models called at the top level of the script, with no function of the user's around.
    with torch.no_grad():
        outs["bert_top"] = bert(ids[:, :7]).last_hidden_state
        outs["seq_top"] = seq(x)
    outs["seq_top_grad"] = seq(x * 2).detach()
torch.save(outs, sys.argv[1])
"""

# What each model gives under the CLI: the function around it is one graph (the models' code,
# in site-packages or not, is inlined into it). A model called at the top level of the script
# is compiled from its own forward: BertModel.forward and Sequential.forward (installed code)
# are roots when called from code that runs in Python. Sequential.forward has a second entry
# for the call with grad enabled (parameters that require grad: a compiled training step,
# docs/frontend.md "Autograd").
EXPECTED_GRAPHS = {
    "run_mlp": 1,
    "run_cnn": 1,
    "run_lstm": 1,
    "run_bert": 1,
    "run_gpt2": 1,
    "run_llama": 1,
    "BertModel.forward": 1,
    "Sequential.forward": 2,
}


def test_real_models_under_the_cli(tmp_path: Path) -> None:
    """`python -m xjit --explain` on a script with an MLP, a CNN with batch norm, an LSTM
    written as a Python loop, and Hugging Face BERT, GPT-2 and LLaMA from small configs, each
    called from a function, plus BERT and an nn.Sequential called at the top level: every
    output equals plain Python's, one graph per model, no graph breaks."""
    pytest.importorskip("transformers")
    (tmp_path / "m.py").write_text(MODELS_SCRIPT)
    plain_run = _run([sys.executable, "m.py", "plain.pt"], tmp_path)
    assert plain_run.returncode == 0, plain_run.stderr
    via = _run([sys.executable, "-m", "xjit", "--explain", "m.py", "xjit.pt"], tmp_path)
    assert via.returncode == 0, via.stderr
    report = via.stderr[via.stderr.index("xjit explain:") :]
    graphs = re.findall(r"^  graph \d+: (\S+) at ", report, re.M)
    assert {f: graphs.count(f) for f in set(graphs)} == EXPECTED_GRAPHS, report
    assert f"{len(graphs)} graph(s), 0 graph break(s)" in report, report
    assert "runs in Python" not in report, report  # the grad-enabled call trains compiled
    assert "XjitWarning" not in via.stderr, via.stderr
    want, got = torch.load(tmp_path / "plain.pt"), torch.load(tmp_path / "xjit.pt")
    assert sorted(got) == sorted(want)
    for name in want:
        torch.testing.assert_close(
            got[name], want[name], rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}"
        )
