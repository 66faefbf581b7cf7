"""Instances of one module class share compiled entries (session 18): a frame whose module
(`self` of a forward) is another instance of the class an entry guarded by identity compiles
its next entry with that module guarded by type, and what the capture read from it guarded at
its source (attributes by value, submodules by type, parameters as inputs, hook dicts empty,
class attributes not shadowed by the instance). Every test checks values against eager
PyTorch on the same instances (or on deep copies where the call changes state)."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from xjit.jit import _options  # noqa: E402

from frontend_fixtures import clean  # noqa: E402,F401

nn = torch.nn


def xjit_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, xjit.XjitWarning)]


def each(modules: list[Any], x: Any) -> list[Any]:
    """m(x) for each module, called from Python (a generator: never a root), so that each
    module's forward is a root frame of its own."""
    return fe.call(_options("interp", "cpu", False, None), list, ((m(x) for m in modules),), {})


def graphs_of(name: str) -> int:
    return sum(1 for g in fe.events()["graphs"] if g["function"].startswith(name))


def check_each(modules: list[Any], x: Any, calls: int = 2) -> None:
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(calls):
            got = each(modules, x)
            want = [m(x) for m in modules]
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert not xjit_warnings(caught)


class Block(nn.Module):
    """inst.py's block: a graph break inside forward (here `.item()` of a bool, so that the
    resume function receives a bool, not a float guarded by value)."""

    def __init__(self, d: int = 16, scale: float = 2.0) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(d, d), nn.Linear(d, d)
        self.scale = scale

    def forward(self, x: Any) -> Any:
        y = torch.relu(self.l1(x))
        if (y.sum() > -1e9).item():
            y = y * self.scale
        return x + self.l2(y)


class Net(nn.Module):
    def __init__(self, n: int, d: int = 16) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))

    def forward(self, x: Any) -> Any:
        for b in self.blocks:
            x = b(x)
        return x


def test_twelve_blocks_share_two_entries_per_code_object() -> None:
    torch.manual_seed(0)
    net, x = Net(12).eval(), torch.randn(4, 16)
    f = xjit.jit(net)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(f(x), net(x), rtol=1e-5, atol=1e-6)
    assert not xjit_warnings(caught)
    # The first block's entry (identity), then one entry for the other 11; the same for the
    # resume function after the break.
    assert fe.code_state(Block.forward.__code__)["entries"] == 2
    assert graphs_of("Block.forward") <= 4, fe.events()["graphs"]
    assert not [r for r in fe.events()["recompiles"] if r["guard"].startswith("L['self'] is")][2:]


def test_eleven_linear_models_called_from_python_share_one_entry() -> None:
    torch.manual_seed(0)
    layers = [nn.Linear(8, 8) for _ in range(11)]
    check_each(layers, torch.randn(3, 8))
    assert fe.code_state(nn.Linear.forward.__code__)["state"] == "active"
    assert fe.code_state(nn.Linear.forward.__code__)["entries"] == 2


def test_different_float_attribute_gets_its_own_entry() -> None:
    torch.manual_seed(0)
    blocks = [Block(scale=2.0) for _ in range(4)] + [Block(scale=0.5) for _ in range(4)]
    check_each(blocks, torch.randn(4, 16))
    assert fe.code_state(Block.forward.__code__)["entries"] == 2  # scale is read after the break


class NormBlock(nn.Module):
    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.norm, self.proj = nn.LayerNorm(d, eps=eps), nn.Linear(d, d)

    def forward(self, x: Any) -> Any:
        return self.proj(self.norm(x)) * 0.5


def test_layer_norm_eps_and_hidden_size_differ() -> None:
    torch.manual_seed(0)
    blocks = [NormBlock(16, 1e-5) for _ in range(3)] + [NormBlock(16, 0.5) for _ in range(3)]
    blocks += [NormBlock(8, 1e-5) for _ in range(3)]
    xs = torch.randn(4, 16)
    with torch.no_grad():
        for _ in range(2):
            got = fe.call(
                _options("interp", "cpu", False, None),
                list,
                ((b(xs[:, : b.proj.in_features]) for b in blocks),),
                {},
            )
            for b, g in zip(blocks, got, strict=True):
                torch.testing.assert_close(g, b(xs[:, : b.proj.in_features]), rtol=1e-5, atol=1e-6)
    guards = [r["guard"] for r in fe.events()["recompiles"]]
    assert any("eps" in g for g in guards), guards


class HookedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        return torch.tanh(self.inner(x)) + 1


def test_forward_hook_on_one_instance_runs() -> None:
    torch.manual_seed(0)
    blocks = [HookedBlock() for _ in range(6)]
    x = torch.randn(2, 8)
    with torch.no_grad():
        each(blocks[:3], x)  # entries compiled before the hook exists
    blocks[4].inner.register_forward_hook(lambda m, args, out: out * 10)
    blocks[5].register_forward_hook(lambda m, args, out: out - 3)
    check_each(blocks, x)


class BNBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.bn = nn.Linear(8, 8), nn.BatchNorm1d(8)

    def forward(self, x: Any) -> Any:
        return self.bn(self.lin(x)).relu()


def test_training_flag_differs_between_instances() -> None:
    torch.manual_seed(0)
    blocks = [BNBlock() for _ in range(6)]
    for b in blocks[3:]:
        b.train()
    for b in blocks[:3]:
        b.eval()
        b.bn.running_mean.uniform_(-1, 1)
    ref = copy.deepcopy(blocks)
    x = torch.randn(5, 8)
    with torch.no_grad():
        for _ in range(2):
            got = each(blocks, x)
            want = [m(x) for m in ref]
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    for b, r in zip(blocks, ref, strict=True):  # running statistics updated where training
        torch.testing.assert_close(b.bn.running_mean, r.bn.running_mean)


def test_training_step_gradients_land_on_each_instance() -> None:
    torch.manual_seed(0)
    blocks = [HookedBlock() for _ in range(5)]
    ref = copy.deepcopy(blocks)
    x = torch.randn(3, 8)
    for step in range(2):
        for m in blocks + ref:
            m.zero_grad()
        outs = each(blocks, x)
        sum((o * (i + 1)).sum() for i, o in enumerate(outs)).backward()
        sum((m(x) * (i + 1)).sum() for i, m in enumerate(ref)).backward()
        for b, r in zip(blocks, ref, strict=True):
            for (name, p), q in zip(b.named_parameters(), r.parameters(), strict=True):
                assert p.grad is not None, (step, name)
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


def test_replaced_parameter_and_load_state_dict() -> None:
    torch.manual_seed(0)
    layers = [nn.Linear(8, 8) for _ in range(4)]
    x = torch.randn(2, 8)
    check_each(layers, x)
    layers[2].weight = nn.Parameter(torch.randn(8, 8))
    layers[3].load_state_dict(nn.Linear(8, 8).state_dict())
    check_each(layers, x)


class Activated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def act(self, t: Any) -> Any:
        return torch.relu(t)

    def forward(self, x: Any) -> Any:
        return self.act(self.lin(x))


def test_instance_attribute_shadowing_a_method_is_guarded() -> None:
    torch.manual_seed(0)
    mods = [Activated() for _ in range(4)]
    x = torch.randn(2, 8)
    check_each(mods[:2], x)
    mods[3].act = lambda t: t * 3  # an instance attribute wins over the class's method
    check_each(mods, x)


class Tied(nn.Module):
    def __init__(self, share: bool) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = self.a if share else nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        if self.a is self.b:
            return self.a(x)
        return self.a(x) - self.b(x)


def test_module_identity_comparison_keeps_identity_guards() -> None:
    torch.manual_seed(0)
    mods = [Tied(share=i % 2 == 0) for _ in range(2) for i in range(2)]
    check_each(mods, torch.randn(2, 8))
    # `self.a is self.b` cannot be guarded: one entry per instance, as before sharing.
    assert fe.code_state(Tied.forward.__code__)["entries"] == len(mods)


def test_submodule_of_another_class_recompiles() -> None:
    torch.manual_seed(0)
    mods = [HookedBlock() for _ in range(4)]
    mods[3].inner = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    check_each(mods, torch.randn(2, 8))
    guards = [r["guard"] for r in fe.events()["recompiles"]]
    assert any(g.startswith("type(L['self'].inner)") for g in guards), guards



class Optional(nn.Module):
    def __init__(self, act: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        if act:
            self.act = nn.Tanh()

    def forward(self, x: Any) -> Any:
        y = self.lin(x)
        return self.act(y) if hasattr(self, "act") else y * 2


def test_hasattr_answer_is_guarded() -> None:
    torch.manual_seed(0)
    mods = [Optional(act) for act in (False, False, True, False, True)]
    check_each(mods, torch.randn(2, 8))
    assert fe.code_state(Optional.forward.__code__)["entries"] == 3


class Writes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        self.calls = getattr(self, "calls", 0) + 1
        return self.lin(x) + self.calls


def test_attribute_write_keeps_identity_guards() -> None:
    torch.manual_seed(0)
    mods = [Writes() for _ in range(3)]
    ref = copy.deepcopy(mods)
    x = torch.randn(2, 8)
    with torch.no_grad():
        for _ in range(2):
            got = each(mods, x)
            for g, r in zip(got, ref, strict=True):
                torch.testing.assert_close(g, r(x))
    assert [m.calls for m in mods] == [r.calls for r in ref] == [2, 2, 2]


class ConvBlock(nn.Module):
    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel, padding=kernel // 2)

    def forward(self, x: Any) -> Any:
        y = self.conv(x)
        if (y.sum() > -1e9).item():
            y = y * 2
        return y + x


def test_parameters_of_shared_modules_keep_static_shapes() -> None:
    """Instances whose weights differ in shape (SegFormer's stages) get entries of their own:
    automatic dynamic does not make a shared module's weight shape symbolic (a conv's kernel
    must be static: that was a graph break)."""
    torch.manual_seed(0)
    blocks = [ConvBlock(c, k) for c, k in ((4, 3), (8, 5), (4, 3), (8, 5), (4, 5), (8, 3))]
    xs = {c: torch.randn(1, c, 6, 6) for c in (4, 8)}
    with torch.no_grad():
        for _ in range(2):
            got = fe.call(
                _options("xjit", "cpu", False, None),
                list,
                ((b(xs[b.conv.in_channels]) for b in blocks),),
                {},
            )
            for b, g in zip(blocks, got, strict=True):
                torch.testing.assert_close(g, b(xs[b.conv.in_channels]), rtol=1e-5, atol=1e-5)
    events = fe.events()
    assert not [b for b in events["breaks"] if "static" in b["reason"]], events["breaks"]
    assert not any("weight" in s for g in events["graphs"] for s in g.get("dynamic", [])), events
