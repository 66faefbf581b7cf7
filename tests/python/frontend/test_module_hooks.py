"""Forward hooks and pre-hooks of the modules a captured frame calls are inlined as
nn.Module._call_impl runs them (session 20): pre-hooks in order (a non-None result replaces the
arguments), forward, forward hooks in order (a non-None result replaces the output), hooks with
kwargs, prepend and always_call; their side effects replayed after the graph; the hook dicts
guarded, so that a hook added or removed between calls captures again. Backward hooks stay a
graph break. A hook reading a contextvars.ContextVar (transformers' output capturing) is guarded
on the variable's value. Every case checks values against eager PyTorch on the same modules,
and the graph count through explain or the frontend's events."""

from __future__ import annotations

import contextvars
import copy
import functools
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402

from frontend_fixtures import clean  # noqa: E402,F401

nn = torch.nn


class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 6)

    def forward(self, x: Any, scale: float = 1.0) -> Any:
        return self.b(self.a(x).relu() * scale)


def close(got: Any, want: Any) -> None:
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def one_graph(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) compiled: its result, checked to be one graph with no break."""
    report = xjit.explain(fn, backend="interp")(*args, **kwargs)
    assert [b.reason for b in report.graph_breaks] == [], str(report)
    assert report.graph_count == 1, str(report)
    return report.output


def graphs() -> int:
    return len(fe.events()["graphs"])


def test_hooks_replace_args_and_output_in_order() -> None:
    torch.manual_seed(0)
    m = Two()
    m.a.register_forward_pre_hook(lambda mod, args: args[0] * 2)  # not a tuple: wrapped
    m.a.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    m.a.register_forward_pre_hook(lambda mod, args: None)  # keeps the args
    m.a.register_forward_hook(lambda mod, args, out: out * 3)
    m.a.register_forward_hook(lambda mod, args, out: out - args[0].sum())  # the new args
    m.b.register_forward_hook(lambda mod, args, out: out + 0.5, prepend=True)
    m.b.register_forward_hook(lambda mod, args, out: out.tanh(), prepend=True)  # runs first
    m.b.register_forward_hook(lambda mod, args, out: out * 2, always_call=True)
    x = torch.randn(3, 6)
    with torch.no_grad():
        close(one_graph(m, x), m(x))


def test_hooks_with_kwargs() -> None:
    torch.manual_seed(0)
    m = nn.Sequential()  # an outer module calling Two with a keyword argument
    inner = Two()

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Any) -> Any:
            return self.inner(x, scale=0.5)

    def pre(mod: Any, args: Any, kwargs: Any) -> Any:
        return (args[0] - 1,), {"scale": kwargs["scale"] * 3}

    def post(mod: Any, args: Any, kwargs: Any, out: Any) -> Any:
        return out * kwargs["scale"] + args[0].mean()

    inner.register_forward_pre_hook(pre, with_kwargs=True)
    inner.register_forward_hook(post, with_kwargs=True)
    m = Outer()
    x = torch.randn(2, 6)
    with torch.no_grad():
        close(one_graph(m, x), m(x))


def test_hook_side_effect_appends_outputs() -> None:
    torch.manual_seed(0)
    m = Two()
    seen: list[Any] = []
    m.a.register_forward_hook(lambda mod, args, out: seen.append(out))
    m.b.register_forward_hook(lambda mod, args, out: seen.append(out.sum()))
    x = torch.randn(2, 6)
    with torch.no_grad():
        want = m(x)
        expected = list(seen)
        seen.clear()
        close(one_graph(m, x), want)
    assert len(seen) == len(expected) == 2
    for g, w in zip(seen, expected, strict=True):
        close(g, w)


def test_feature_dict_hooks_on_a_module_list_loop() -> None:
    """The feature-extraction pattern: one hook per layer of a ModuleList writes a dict the
    caller reads; the frame loops over the layers."""
    torch.manual_seed(0)

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(5, 5) for _ in range(4))

        def forward(self, x: Any) -> Any:
            for layer in self.layers:
                x = layer(x).sigmoid()
            return x

    features: dict[str, Any] = {}

    def keep(name: str, mod: Any, args: Any, out: Any) -> None:
        features[name] = out.detach()

    m = Stack()
    for i, layer in enumerate(m.layers):
        layer.register_forward_hook(functools.partial(keep, f"layer{i}"))
    c = xjit.jit(m, backend="interp")
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(3, 5)
            want = m(x)
            want_features = dict(features)
            features.clear()
            close(c(x), want)
            assert list(features) == list(want_features)
            for k in features:
                close(features[k], want_features[k])
    assert graphs() == 1  # the dict is empty at every call: one capture


def test_hook_added_and_removed_between_calls() -> None:
    torch.manual_seed(0)
    m = Two()
    c = xjit.jit(m, backend="interp")
    x = torch.randn(2, 6)
    with torch.no_grad():
        close(c(x), m(x))
        # The first hook on a module whose call was inlined without hooks.
        h1 = m.b.register_forward_hook(lambda mod, args, out: out * 10)
        close(c(x), m(x))
        h2 = m.b.register_forward_pre_hook(lambda mod, args: (args[0].flip(-1),))
        close(c(x), m(x))
        h1.remove()
        close(c(x), m(x))
        h2.remove()
        close(c(x), m(x))
        close(c(x), m(x))
    assert graphs() == 4  # no hooks (reused at the end), one hook, two hooks, the pre-hook


def test_gradients_through_a_hooked_module() -> None:
    torch.manual_seed(0)
    m = Two()
    ref = copy.deepcopy(m)
    for mod in (m, ref):
        mod.a.register_forward_pre_hook(lambda mod, args: (args[0] * 1.5,))
        mod.b.register_forward_hook(lambda mod, args, out: out.square())
    x = torch.randn(4, 6)
    c = xjit.jit(m)
    c(x).sum().backward()
    ref(x).sum().backward()
    assert graphs() == 1
    for p, q in zip(m.parameters(), ref.parameters(), strict=True):
        close(p.grad, q.grad)


def test_native_backend_with_hooks() -> None:
    torch.manual_seed(0)
    m = Two()
    m.a.register_forward_hook(lambda mod, args, out: out.relu() + 1)
    x = torch.randn(2, 6)
    c = xjit.jit(m)
    with torch.no_grad():
        for _ in range(3):
            close(c(x), m(x))
    assert graphs() == 1


def test_backward_hook_stays_a_graph_break() -> None:
    torch.manual_seed(0)
    m = Two()
    m.a.register_full_backward_hook(lambda mod, gin, gout: None)
    x = torch.randn(2, 6)
    with torch.no_grad():
        report = xjit.explain(m, backend="interp")(x)
        close(report.output, m(x))
    assert any("_backward_hooks" in b.reason for b in report.graph_breaks), str(report)


COLLECTOR: contextvars.ContextVar[Any] = contextvars.ContextVar("collector", default=None)


def collecting_hook(mod: Any, args: Any, out: Any) -> None:
    """transformers' output-capturing hook, reduced: inactive unless a collector is set."""
    collected = COLLECTOR.get()
    if collected is None:
        return
    collected.append(out)


def test_hook_reading_a_context_variable() -> None:
    torch.manual_seed(0)
    m = Two()
    m.a.register_forward_hook(collecting_hook)
    m.b.register_forward_hook(collecting_hook)
    c = xjit.jit(m, backend="interp")
    x = torch.randn(2, 6)
    with torch.no_grad():
        close(c(x), m(x))  # inactive
        assert graphs() == 1
        got: list[Any] = []
        token = COLLECTOR.set(got)
        try:
            out = c(x)
        finally:
            COLLECTOR.reset(token)
        want: list[Any] = []
        token = COLLECTOR.set(want)
        try:
            close(out, m(x))
        finally:
            COLLECTOR.reset(token)
        assert len(got) == len(want) == 2
        for g, w in zip(got, want, strict=True):
            close(g, w)
        close(c(x), m(x))  # inactive again: the first entry
    assert graphs() == 2


def test_model_output_item_assignment() -> None:
    """capture_outputs stores what its hooks collected with `outputs[key] = tuple(...)`: the
    field is set, and the mapping's order stays eager's (a key set before one already there
    would be out of the fields' order: a graph break, the frame in Python)."""
    outputs = pytest.importorskip("transformers.modeling_outputs")

    def in_order(x: Any) -> Any:
        out = outputs.BaseModelOutput(last_hidden_state=x * 2)
        out["hidden_states"] = (x, x + 1)
        return out

    def out_of_order(x: Any) -> Any:
        out = outputs.BaseModelOutput(last_hidden_state=x * 2)
        out["attentions"] = (x - 1,)
        out["hidden_states"] = (x + 1,)
        return out

    x = torch.randn(2, 3)
    for fn, graphs_expected in ((in_order, 1), (out_of_order, None)):
        report = xjit.explain(fn, backend="interp")(x)
        got, want = report.output, fn(x)
        if graphs_expected:
            assert report.graph_count == 1 and not report.graph_breaks, str(report)
        assert list(got.keys()) == list(want.keys())
        for g, w in zip(got.to_tuple(), want.to_tuple(), strict=True):
            torch.testing.assert_close(g, w)
