"""Training loops of unchanged scripts under `python -m xjit`: the model's forward trains as
compiled forward and backward graphs and `opt.step()` runs as the compiled update, though the
loop frame itself runs in Python (it breaks at `loss.backward()`); `opt.zero_grad()` is modeled,
not a graph break. Each script's losses are compared with the same script under `python`
(docs/frontend.md "Which frames are compiled", "Optimizer steps")."""

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
from frontend_fixtures import clean, counters  # noqa: E402, F401 (autouse fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.cli_training import HEAD, MLP  # noqa: E402


def _loop(extra: str = "") -> str:
    """The scripts' training loop in a function `train(steps)` (`extra`: lines after the step);
    each step's loss printed through .item()."""
    return (
        "def train(steps):\n"
        "    for i in range(steps):\n"
        "        opt.zero_grad()\n"
        "        loss = nn.functional.cross_entropy(m(x), y)\n"
        "        loss.backward()\n"
        "        opt.step()\n" + extra + '        print("loss", repr(loss.item()))\n'
    )


# The brief's loop (bench/cli_training.py's model, optimizer and batch) in a function.
LOOP = HEAD + MLP + _loop() + "train(12)\n"

# A step function (no loop around the break): its forward and loss train as one compiled graph,
# the break code runs backward(), the step compiles in the resume function; it returns the loss
# and the logits, which keep their autograd history.
STEP_FUNCTION = HEAD + MLP + """\
def train_step(x, y):
    opt.zero_grad()
    logits = m(x)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    return loss, logits
for i in range(8):
    loss, logits = train_step(x, y)
    print("loss", repr(loss.item()), logits.requires_grad, loss.grad_fn is not None)
"""

# At module level (no root frame around the loop): SGD with momentum under an LR schedule,
# gradients zeroed in place, clipped, and a forward hook on the model.
MODULE_LEVEL = """\
import torch, torch.nn as nn
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
seen = []
m.register_forward_hook(lambda mod, inp, out: seen.append(out.shape[0]))
opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
for i in range(10):
    x = torch.randn(8, 16); y = torch.randn(8, 4)
    opt.zero_grad(set_to_none=False)
    loss = nn.functional.mse_loss(m(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
    opt.step()
    sched.step()
    print("loss", repr(loss.item()))
print("hook calls", len(seen), "lr", sched.get_last_lr())
"""

# What must stay in Python: an optimizer subclass with its own zero_grad and a step pre-hook;
# with model.zero_grad() between two backward passes.
CUSTOM = """\
import torch, torch.nn as nn
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))

class CountingAdam(torch.optim.Adam):
    zeroed = 0
    def zero_grad(self, set_to_none=True):
        CountingAdam.zeroed += 1
        super().zero_grad(set_to_none)

opt = CountingAdam(m.parameters(), lr=1e-2)
hooked = torch.optim.SGD(m.parameters(), lr=1e-2)
calls = []
hooked.register_step_pre_hook(lambda o, args, kwargs: calls.append(1))
x = torch.randn(4, 8); y = torch.randint(0, 2, (4,))
""" + _loop(
    "        m.zero_grad()\n"
    "        nn.functional.cross_entropy(m(x), y).backward()\n"
    "        hooked.step()\n"
) + """\
train(6)
print("zeroed", CountingAdam.zeroed, "hook calls", len(calls))
"""


# More optimizers than the recompile limit (8), each stepped from Python: every optimizer's step
# is a frame of its own (xjit._optim.step_of), so each compiles once.
MANY_OPTIMIZERS = """\
import torch, torch.nn as nn
torch.manual_seed(0)
models = [nn.Linear(6, 3) for _ in range(11)]
opts = [torch.optim.Adam(m.parameters(), lr=1e-2) if i % 2 else torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for i, m in enumerate(models)]
x = torch.randn(5, 6)
def train(steps):
    for i in range(steps):
        total = 0.0
        for m, opt in zip(models, opts):
            opt.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
            total += loss.item()
        print("loss", repr(total))
train(4)
"""

def _env() -> dict[str, str]:
    path = os.pathsep.join([str(Path(xjit.__file__).parent.parent), *sys.path])
    env = {k: v for k, v in os.environ.items() if not k.startswith("XJIT_")}
    return dict(env, PYTHONPATH=path, XJIT_NO_CACHE="1")


def _run(script: str, tmp_path: Path, *xjit_args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "train.py").write_text(script)
    cmd = [sys.executable, *(["-m", "xjit", *xjit_args] if xjit_args else []), "train.py"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def _losses(out: str) -> list[float]:
    return [float(line.split()[1]) for line in out.splitlines() if line.startswith("loss ")]


def _compare(script: str, tmp_path: Path) -> str:
    """Runs the script with and without xjit; returns xjit's explain report."""
    eager = _run(script, tmp_path)
    compiled = _run(script, tmp_path, "--explain")
    want, got = _losses(eager.stdout), _losses(compiled.stdout)
    assert len(want) == len(got) > 0
    for w, g in zip(want, got):
        assert abs(g - w) <= 1e-6 * abs(w) + 1e-12, (want, got)
    other = [line for line in eager.stdout.splitlines() if not line.startswith("loss ")]
    assert other == [line for line in compiled.stdout.splitlines() if not line.startswith("loss ")]
    return compiled.stderr


def _graphs(report: str) -> list[str]:
    return re.findall(r"^  graph \d+: (.*)$", report, re.M)


def test_loop_in_a_function_trains_the_model_and_step_compiled(tmp_path: Path) -> None:
    report = _compare(LOOP, tmp_path)
    graphs = _graphs(report)
    assert any(g.startswith("Sequential.forward at container.py") for g in graphs), report
    assert any(g.startswith("step at _optim.py") for g in graphs), report
    assert "training step: forward" in report
    # The loop breaks once, at backward(), inside the loop: the frame runs in Python (each
    # iteration would resume in a function of its own). zero_grad() is no break (it was, at torch's
    # _disable_dynamo wrapper); the step's first call, which makes the state, runs in Python.
    breaks = re.findall(r"^  graph break in (.*)$", report, re.M)
    assert len(breaks) == 2, report
    assert "tensor.backward()" in breaks[0] and "before its state exists" in breaks[1]
    assert "DisableContext" not in report
    assert re.search(r"\d+ graph\(s\), 2 graph break\(s\), 1 recompile\(s\)", report), report
    assert "the frame has a graph break inside a loop" in report, report


def test_step_function_trains_compiled_around_its_break(tmp_path: Path) -> None:
    report = _compare(STEP_FUNCTION, tmp_path)
    graphs = _graphs(report)
    assert graphs[0].startswith("train_step at train.py"), report
    assert "training step: forward" in report.split("graph 1:")[0], report
    assert any(g.startswith("train_step.<resume at line") for g in graphs), report
    assert "runs in Python:" not in report, report


def test_module_level_loop_with_schedule_clipping_and_hooks(tmp_path: Path) -> None:
    report = _compare(MODULE_LEVEL, tmp_path)
    graphs = _graphs(report)
    assert any(g.startswith("Sequential.forward") for g in graphs), report
    # SGD with momentum makes its state at the first step; the LR scheduler's changing rate is
    # a run-time input, so the step compiles once.
    assert sum(g.startswith("step at _optim.py") for g in graphs) == 1, report


def test_custom_zero_grad_and_step_hooks_stay_in_python(tmp_path: Path) -> None:
    report = _compare(CUSTOM, tmp_path)
    # Neither step compiles (a subclass of Adam; an SGD with a step pre-hook), and both run as
    # in eager: the counts printed were compared with eager's above.
    assert "step() with step hooks" in report, report
    assert "zeroed 6 hook calls 6" in _run(CUSTOM, tmp_path).stdout


# ---- zero_grad in a captured frame -----------------------------------------------------------


def _model_and_grads() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    m(torch.randn(5, 4)).sum().backward()
    return m, opt


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_is_captured(set_to_none: bool) -> None:
    m, opt = _model_and_grads()
    grads = [p.grad for p in m.parameters()]

    def f(x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=set_to_none)
        return x * 2

    report = xjit.explain(f)(torch.ones(3))
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    for p, g in zip(m.parameters(), grads):
        if set_to_none:
            assert p.grad is None
        else:  # zeroed in place, the same tensor (as eager's zero_())
            assert p.grad is g and not g.any()
    # A later call with gradients again (the guards hold: the same parameters).
    m(torch.randn(5, 4)).sum().backward()
    compiled = xjit.jit(f)
    compiled(torch.ones(3))
    compiled(torch.ones(3))
    assert all(p.grad is None if set_to_none else not p.grad.any() for p in m.parameters())


def test_step_after_zero_grad_in_one_capture_sees_no_gradients() -> None:
    m, opt = _model_and_grads()
    before = [p.detach().clone() for p in m.parameters()]

    def f() -> None:
        opt.zero_grad()
        opt.step()  # eager: every .grad is None now, so nothing moves

    report = xjit.explain(f)()
    assert "after zero_grad() in the same capture" in str(report), str(report)
    for p, b in zip(m.parameters(), before):
        assert torch.equal(p, b) and p.grad is None


def test_zero_grad_of_a_subclass_that_overrides_it_is_its_own() -> None:
    m, _ = _model_and_grads()

    class Keep(torch.optim.SGD):
        def zero_grad(self, set_to_none: bool = True) -> None:
            pass  # keeps the gradients

    opt = Keep(m.parameters(), lr=0.1)

    @xjit.jit
    def f(x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        return x + 1

    f(torch.ones(2))
    assert all(p.grad is not None for p in m.parameters())


def test_module_zero_grad_is_captured() -> None:
    torch.manual_seed(0)
    shared = torch.nn.Linear(3, 3)
    m = torch.nn.Sequential(shared, torch.nn.Sequential(torch.nn.ReLU(), shared), torch.nn.Linear(3, 1))
    m[2].bias = None  # a None entry in _parameters

    def f(x: torch.Tensor) -> torch.Tensor:
        m.zero_grad()
        return x - 1

    m(torch.randn(2, 3)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    report = xjit.explain(f)(torch.ones(2))
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    assert all(p.grad is None for p in m.parameters())
    # A parameter added later is seen (the module's _parameters keys are guarded).
    m[2].bias = torch.nn.Parameter(torch.zeros(1))
    m(torch.randn(2, 3)).sum().backward()
    compiled = xjit.jit(f)
    compiled(torch.ones(2))
    assert all(p.grad is None for p in m.parameters())


def test_module_zero_grad_in_place_is_captured() -> None:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
    m(torch.randn(4, 3)).sum().backward()
    m[1].bias.grad = None  # a parameter without a gradient: skipped, as eager
    grads = [p.grad for p in m.parameters()]

    def f(x: torch.Tensor) -> torch.Tensor:
        m.zero_grad(set_to_none=False)  # each gradient zeroed in place (it was a graph break)
        return x * 3

    report = xjit.explain(f)(torch.ones(2))
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    assert all(p.grad is g and (g is None or not g.any()) for p, g in zip(m.parameters(), grads))
    # Gradients again: the compiled entry zeroes the same tensors.
    m(torch.randn(4, 3)).sum().backward()
    assert m[1].bias.grad is not None
    compiled = xjit.jit(f)
    compiled(torch.ones(2))
    assert all(p.grad is not None and not p.grad.any() for p in m.parameters())


def test_optimizer_made_from_a_parameters_generator_gets_the_parameters() -> None:
    # The capture breaks inside model.parameters() (a generator) and resumes with the generator
    # on the stack; AdamW(...) is a PyTorch fallback whose meta run at capture consumed it, so
    # the break code made an optimizer of an exhausted generator ("empty parameter list").
    m = torch.nn.Linear(3, 2)

    def make(model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=1e-3)

    opt = xjit.jit(make)(m)
    assert [id(p) for p in opt.param_groups[0]["params"]] == [id(p) for p in m.parameters()]


def test_more_optimizers_than_the_recompile_limit_each_compile(tmp_path: Path) -> None:
    report = _compare(MANY_OPTIMIZERS, tmp_path)
    assert "run in Python from now on" not in report, report
    steps = [g for g in _graphs(report) if g.startswith("step at _optim.py")]
    assert len(steps) == 11, report
