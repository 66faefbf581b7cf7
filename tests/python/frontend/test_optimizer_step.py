"""`opt.step()` of torch.optim's SGD, Adam and AdamW compiled (src/frontend/analyzer_optim.cpp,
xjit/_optim.py): the parameters and state it updates match eager's over several steps, for the
options the capture models; the update is written in the parameters' own memory with their
version counters bumped; guards see a changed learning rate, a new parameter group member
without state, and step hooks; what is not modeled still runs right, in Python."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, counters  # noqa: E402, F401 (autouse fixture)

Opt = torch.optim.Optimizer


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8), torch.nn.LayerNorm(8)
    )


CONFIGS: dict[str, Callable[[Any], Opt]] = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05),
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "sgd-nesterov-wd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01),
    "sgd-dampening-maximize": lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.5, dampening=0.3, maximize=True),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "adam-wd-amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, amsgrad=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, betas=(0.8, 0.95), eps=1e-6),
    "adamw-maximize-amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-3, maximize=True, amsgrad=True),
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=True),
}


def groups(m: torch.nn.Module) -> list[dict[str, Any]]:
    """Two parameter groups (the second with its own learning rate), and a frozen parameter."""
    layers = list(m)
    layers[3].bias.requires_grad_(False)
    return [
        {"params": list(layers[0].parameters())},
        {"params": list(layers[2].parameters()) + list(layers[3].parameters()), "lr": 3e-3},
    ]


def loss_of(m: torch.nn.Module, i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(i)
    x = torch.randn(4, 16, generator=g)
    return (m(x) * torch.randn(4, 8, generator=g)).sum()


def step_both(runs: Any, i: int) -> None:
    """One step of each (model, optimizer, step function) on batch i."""
    for m, o, s in runs:
        o.zero_grad()
        loss_of(m, i).backward()
        s()


def assert_same(m_eager: torch.nn.Module, m_xjit: torch.nn.Module, o_eager: Opt, o_xjit: Opt) -> None:
    for a, b in zip(m_eager.parameters(), m_xjit.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(m_eager.parameters(), m_xjit.parameters()):
        sa, sb = o_eager.state[a], o_xjit.state[b]
        assert sa.keys() == sb.keys()
        for k in sa:
            torch.testing.assert_close(sb[k], sa[k], rtol=1e-5, atol=1e-6)


def train(config: str, steps: int = 6) -> tuple[Any, ...]:
    m_eager = model()
    m_xjit = copy.deepcopy(m_eager)
    o_eager, o_xjit = CONFIGS[config](groups(m_eager)), CONFIGS[config](groups(m_xjit))

    @xjit.jit
    def step() -> None:
        o_xjit.step()

    for i in range(steps):
        step_both(((m_eager, o_eager, o_eager.step), (m_xjit, o_xjit, step)), i)
        assert_same(m_eager, m_xjit, o_eager, o_xjit)
    return m_eager, m_xjit, o_eager, o_xjit, step


@pytest.mark.parametrize("config", CONFIGS)
def test_steps_match_eager(config: str) -> None:
    m_eager, m_xjit, o_eager, o_xjit, step = train(config)
    # After the first step (which makes the state, in Python) the step is one graph.
    for m, o, s in ((m_eager, o_eager, o_eager.step), (m_xjit, o_xjit, xjit.explain(step))):
        o.zero_grad()
        loss_of(m, 11).backward()
        report = s()
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    assert_same(m_eager, m_xjit, o_eager, o_xjit)


@pytest.mark.parametrize("config", ["sgd-momentum", "adamw"])
def test_one_graph_in_place(config: str) -> None:
    m_eager, m_xjit, o_eager, o_xjit, step = train(config, steps=2)
    o_xjit.zero_grad()
    loss_of(m_xjit, 9).backward()
    params = [p for p in m_xjit.parameters() if p.grad is not None]
    pointers = [p.data_ptr() for p in params]
    versions = [p._version for p in params]
    report = xjit.explain(step)()
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    # Written in the parameters' memory, their version counters bumped as by an in-place op.
    assert [p.data_ptr() for p in params] == pointers
    assert all(p._version > v for p, v in zip(params, versions))


@pytest.mark.parametrize("config", ["sgd-momentum", "adamw"])
def test_update_kernels_write_the_parameters_in_place(config: str, tmp_path: Any) -> None:
    # The update reads each parameter through a detach (an alias autodiff stops at); in a graph
    # nothing differentiates, that mark is dropped so that reinplace sees the parameter written
    # and the kernel updates it in place (session 21's mark made every update a fresh buffer
    # copied back after the run: the MLP step's SGD 8.3 instead of ~4 ms).
    import re

    old = xjit.config.dump_dir
    xjit.config.dump_dir = str(tmp_path)
    try:
        train(config, steps=3)
    finally:
        xjit.config.dump_dir = old
    runtime = [f.read_text() for f in tmp_path.glob("*.runtime.xir")]
    assert runtime, list(tmp_path.iterdir())
    text = runtime[-1]
    assert "autodiff.stop" not in text
    # No update result is a fresh buffer (neither in place of an operand nor in the arena):
    # every parameter and state the graph returns is written in place of its input.
    fresh = []
    for attrs in re.findall(r"= fusion\([^)]*\) \{([^}]*)\}", text):
        placed = re.search(r"inplace_operand = \[([^\]]*)\]", attrs)
        offsets = re.search(r"mem\.offset = \[([^\]]*)\]", attrs)
        if not placed:
            continue
        ins = [int(v) for v in placed.group(1).split(",")]
        arena = [int(v) for v in offsets.group(1).split(",")] if offsets else [-1] * len(ins)
        fresh += [attrs for i, a in zip(ins, arena) if i < 0 and a < 0]
    assert not fresh, fresh


def test_first_step_runs_in_python_then_compiles() -> None:
    m = model()
    o = torch.optim.Adam(m.parameters(), lr=1e-2)

    @xjit.jit
    def step() -> None:
        o.step()

    loss_of(m, 0).backward()
    report = xjit.explain(step)()
    assert report.graph_break_count == 1 and "before its state exists" in report.graph_breaks[0].reason
    assert all(len(o.state[p]) == 3 for p in m.parameters())
    loss_of(m, 1).backward()
    report = xjit.explain(step)()
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)


def test_learning_rate_change_is_seen() -> None:
    m_eager, m_xjit, o_eager, o_xjit, step = train("adamw", steps=2)
    for o in (o_eager, o_xjit):
        o.param_groups[0]["lr"] = 0.5  # a scheduler's change: a guard fails, the step recompiles
    step_both(((m_eager, o_eager, o_eager.step), (m_xjit, o_xjit, step)), 7)
    assert_same(m_eager, m_xjit, o_eager, o_xjit)


def test_parameter_gaining_a_gradient() -> None:
    m_eager, m_xjit, o_eager, o_xjit, step = train("adam", steps=2)
    # The frozen LayerNorm bias starts training: it has no state yet (eager makes it).
    for m in (m_eager, m_xjit):
        list(m)[3].bias.requires_grad_(True)
    for i in (3, 4):
        step_both(((m_eager, o_eager, o_eager.step), (m_xjit, o_xjit, step)), i)
        assert_same(m_eager, m_xjit, o_eager, o_xjit)


def test_step_hooks_run() -> None:
    m_eager, m_xjit, o_eager, o_xjit, step = train("sgd-momentum", steps=2)
    seen: list[str] = []
    for o, tag in ((o_eager, "eager"), (o_xjit, "xjit")):
        o.register_step_pre_hook(lambda opt, args, kwargs, tag=tag: seen.append(tag))
    step_both(((m_eager, o_eager, o_eager.step), (m_xjit, o_xjit, step)), 5)
    assert seen == ["eager", "xjit"]
    assert_same(m_eager, m_xjit, o_eager, o_xjit)


class ClippedSGD(torch.optim.SGD):
    """A subclass with its own step: traced as ordinary code, not as SGD's."""

    def step(self, closure: Any = None) -> Any:
        with torch.no_grad():
            for g in self.param_groups:
                for p in g["params"]:
                    if p.grad is not None:
                        p.grad.clamp_(-0.1, 0.1)
        return torch.optim.SGD.step(self, closure)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: torch.optim.AdamW(p, lr=torch.tensor(1e-2)),
        lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),
        lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5),
        lambda p: ClippedSGD(p, lr=1e-2),
    ],
    ids=["tensor-lr", "fused", "rmsprop", "subclass"],
)
def test_unmodeled_options_stay_right(make: Callable[[Any], Opt]) -> None:
    m_eager = model()
    m_xjit = copy.deepcopy(m_eager)
    o_eager, o_xjit = make(m_eager.parameters()), make(m_xjit.parameters())

    @xjit.jit
    def step() -> None:
        o_xjit.step()

    for i in range(3):
        step_both(((m_eager, o_eager, o_eager.step), (m_xjit, o_xjit, step)), i)
    for a, b in zip(m_eager.parameters(), m_xjit.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_state_replaced_by_load_state_dict() -> None:
    m_eager, m_xjit, o_eager, o_xjit, step = train("adamw", steps=3)
    saved = copy.deepcopy(o_eager.state_dict())
    o_eager.load_state_dict(saved)
    o_xjit.load_state_dict(copy.deepcopy(saved))  # new state tensors, same shapes
    with torch.no_grad():
        for a, b in zip(m_eager.parameters(), m_xjit.parameters()):
            b.copy_(a)
    for i in (4, 5):
        step_both(((m_eager, o_eager, o_eager.step), (m_xjit, o_xjit, step)), i)
        assert_same(m_eager, m_xjit, o_eager, o_xjit)


@pytest.mark.parametrize("config", ["sgd-momentum", "adamw"])
def test_scheduled_learning_rate_needs_no_recompile(config: str) -> None:
    # A float learning rate is read at run time: a scheduler's new rate at every step reuses the
    # one graph (torch.compile would recompile for each rate). The scheduler wraps opt.step.
    m_eager = model()
    m_xjit = copy.deepcopy(m_eager)
    o_eager, o_xjit = CONFIGS[config](groups(m_eager)), CONFIGS[config](groups(m_xjit))
    schedules = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s)) for o in (o_eager, o_xjit)]
    step = xjit.jit(lambda: o_xjit.step())
    misses = []
    for i in range(6):
        step_both(((m_eager, o_eager, o_eager.step), (m_xjit, o_xjit, step)), i)
        for sched in schedules:
            sched.step()
        assert_same(m_eager, m_xjit, o_eager, o_xjit)
        assert o_xjit._opt_called  # what the scheduler's wrapper records
        misses.append(counters()["cache_misses"])
    assert o_xjit.param_groups[1]["lr"] < 0.5 * 3e-3
    # Captured at the first two steps (the first makes the state), then reused.
    assert misses[1] == misses[-1], misses
    report = xjit.explain(step)()
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)

