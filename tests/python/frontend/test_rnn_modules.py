"""nn.LSTM, nn.GRU and nn.RNN under xjit.jit: torch.lstm / gru / rnn_tanh / rnn_relu unrolled
into IR ops over the sequence length known at capture (src/frontend/torch_rnn.cpp). Every option
against eager: layers, bidirectional, batch_first, bias=False, initial states given or omitted,
proj_size, unbatched inputs, f64 (an f32 LSTM at batch > 1 in inference keeps PyTorch's fused
oneDNN op, which is faster there); the gradients of a training step (one compiled graph, no
PyTorch fallback) against eager; inter-layer dropout drawing eager's masks; a PackedSequence
and a symbolic sequence length keep PyTorch's op, with eager's values."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe, tensors  # noqa: E402, F401 (autouse fixture)

nn = torch.nn
IN, HIDDEN, STEPS, BATCH = 6, 8, 5, 3

# (module class, keyword arguments): each option of nn.RNNBase the lowering covers.
CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "lstm": (nn.LSTM, {}),
    "lstm_layers_bidirectional": (nn.LSTM, {"num_layers": 2, "bidirectional": True}),
    "lstm_batch_first_no_bias": (nn.LSTM, {"batch_first": True, "bias": False}),
    "lstm_proj": (nn.LSTM, {"num_layers": 2, "proj_size": 4, "bidirectional": True}),
    "gru": (nn.GRU, {}),
    "gru_layers_bidirectional_batch_first": (
        nn.GRU,
        {"num_layers": 2, "bidirectional": True, "batch_first": True},
    ),
    "gru_no_bias": (nn.GRU, {"bias": False}),
    "rnn_tanh": (nn.RNN, {"num_layers": 2}),
    "rnn_relu_bidirectional": (nn.RNN, {"nonlinearity": "relu", "bidirectional": True}),
}


def build(name: str, dtype: Any = torch.float32) -> tuple[Any, torch.Tensor]:
    cls, kw = CASES[name]
    torch.manual_seed(0)
    module = cls(IN, HIDDEN, **kw).to(dtype)
    shape = (BATCH, STEPS, IN) if kw.get("batch_first") else (STEPS, BATCH, IN)
    return module, torch.randn(*shape, dtype=dtype)


def initial_state(module: Any, dtype: Any = torch.float32) -> Any:
    """hx (and cx) of the module's shapes, random."""
    n = module.num_layers * (2 if module.bidirectional else 1)
    out = module.proj_size if getattr(module, "proj_size", 0) else module.hidden_size
    h = torch.randn(n, BATCH, out, dtype=dtype)
    if isinstance(module, nn.LSTM):
        return h, torch.randn(n, BATCH, module.hidden_size, dtype=dtype)
    return h


def assert_one_native_graph(report: Any) -> None:
    assert [b.reason for b in report.graph_breaks] == []
    assert report.graph_count == 1, str(report)
    assert not report.graphs[0].runs_in_python, str(report)
    assert sum(g.ops.get("external_call", 0) for g in report.graphs) == 0, str(report)


def assert_tensors_close(got: Any, want: Any, rtol: float = 1e-5) -> None:
    g, w = tensors(got), tensors(want)
    assert len(g) == len(w) and g
    for a, b in zip(g, w, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * max(b.abs().max().item(), 1.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rnn_inference_matches_eager(name: str, with_state: bool, dtype: Any) -> None:
    module, x = build(name, dtype)
    module.eval()
    args = (x, initial_state(module, dtype)) if with_state else (x,)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        want = module(*args)
        compiled = xjit.jit(module)
        report = xjit.explain(compiled)(*args)
        again = compiled(*args)
    if CASES[name][0] is nn.LSTM and dtype == torch.float32:
        # Batch 3 in inference: eager's fused oneDNN LSTM beats the unrolled steps there, so
        # the graph keeps PyTorch's op (torch_rnn.cpp, readCall).
        assert report.graph_count == 1 and not report.graphs[0].runs_in_python, str(report)
        assert report.graphs[0].ops.get("external_call", 0) >= 1, str(report)
    else:
        assert_one_native_graph(report)
    assert_tensors_close(report.output, want)
    assert_tensors_close(again, want)


@pytest.mark.parametrize("name", [n for n, (cls, _) in CASES.items() if cls is nn.LSTM])
def test_lstm_batch_one_inference_is_native(name: str) -> None:
    module, x = build(name)
    x = x[:1] if CASES[name][1].get("batch_first") else x[:, :1]
    with torch.no_grad():
        want = module(x)
        report = xjit.explain(xjit.jit(module.eval()))(x)
    assert_one_native_graph(report)
    assert_tensors_close(report.output, want)


def test_unbatched_input_matches_eager() -> None:
    module, x = build("lstm_layers_bidirectional")
    with torch.no_grad():
        want = module(x[:, 0])
        report = xjit.explain(xjit.jit(module))(x[:, 0])
    assert_one_native_graph(report)
    assert_tensors_close(report.output, want)


def grads_of_step(module: Any, fn: Any, x: torch.Tensor, state: Any) -> list[torch.Tensor]:
    """Output, and the gradients of input, state and parameters after a random projection."""
    x = x.clone().requires_grad_()
    leaves = [x] + [s.clone().requires_grad_() for s in tensors(state)]
    st = tuple(leaves[1:]) if isinstance(state, tuple) else leaves[1]
    out = fn(x, st)
    g = torch.Generator().manual_seed(3)
    loss = sum((t * torch.randn(t.shape, generator=g, dtype=t.dtype)).sum() for t in tensors(out))
    params = list(module.parameters())
    return [*tensors(out), *torch.autograd.grad(loss, leaves + params)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_rnn_training_step_compiles_and_matches_eager(name: str) -> None:
    """One forward and backward graph; values against float64 eager, no farther than eager's
    float32 is (the recurrence amplifies rounding: 2x eager's error, floored at 1e-6)."""
    module, x = build(name)
    state = initial_state(module)
    ref64 = copy.deepcopy(module).double()
    want64 = grads_of_step(
        ref64, ref64, x.double(), tuple(s.double() for s in state) if isinstance(state, tuple) else state.double()
    )
    eager = grads_of_step(module, module, x, state)
    compiled_module = copy.deepcopy(module)
    reports = []

    def explained(*args: Any) -> Any:
        reports.append(xjit.explain(xjit.jit(compiled_module))(*args))
        return reports[-1].output

    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        got = grads_of_step(compiled_module, explained, x, state)
    (report,) = reports
    assert_one_native_graph(report)
    assert report.graphs[0].note.startswith("training step: forward"), report.graphs[0].note
    for i, (g, e, w) in enumerate(zip(got, eager, want64, strict=True)):
        err = ((g.double() - w).norm() / w.norm().clamp_min(1e-30)).item()
        eager_err = ((e.double() - w).norm() / w.norm().clamp_min(1e-30)).item()
        assert err <= max(2 * eager_err, 1e-6), (i, err, eager_err)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_inter_layer_dropout_draws_eagers_masks(cls: Any) -> None:
    """train() mode with dropout between layers: under the same seed the compiled step draws
    eager's masks (outputs and gradients equal eager's), and the generator ends where eager's
    does."""
    torch.manual_seed(0)
    module = cls(IN, HIDDEN, num_layers=3, dropout=0.4, bidirectional=True).train()
    x = torch.randn(STEPS, BATCH, IN)
    compiled = xjit.jit(copy.deepcopy(module))
    results = []
    for fn in (module, compiled):
        torch.manual_seed(11)
        leaf = x.clone().requires_grad_()
        out = fn(leaf)
        loss = sum((t * t).sum() for t in tensors(out))
        grads = torch.autograd.grad(loss, [leaf])
        results.append((tensors(out), grads, torch.rand(3)))
    (want, want_grads, want_next), (got, got_grads, got_next) = results
    with torch.no_grad():
        plain = module.eval()(x)
    assert (plain[0] - want[0]).abs().max() > 1e-3  # the noise matters
    assert_tensors_close(got, want)
    assert_tensors_close(list(got_grads), list(want_grads))
    assert torch.equal(got_next, want_next)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs
    assert graphs[0]["note"].startswith("training step: forward"), graphs[0]["note"]


def test_packed_sequence_keeps_pytorchs_lstm() -> None:
    module, x = build("lstm_layers_bidirectional")
    packed = nn.utils.rnn.pack_padded_sequence(x, [5, 3, 2])

    def f(p: Any) -> Any:
        out, (h, c) = module(p)
        return nn.utils.rnn.pad_packed_sequence(out)[0], h, c

    with torch.no_grad():
        want = f(packed)
        got = xjit.jit(f)(packed)
    assert_tensors_close(got, want)


def test_symbolic_sequence_length_keeps_pytorchs_gru() -> None:
    module, x = build("gru")
    compiled = xjit.jit(module, dynamic=True)
    with torch.no_grad():
        for steps in (5, 7):
            xs = torch.randn(steps, BATCH, IN)
            assert_tensors_close(compiled(xs), module(xs))


def test_functional_gru_call_is_lowered() -> None:
    """torch.gru called directly (the overload nn.GRU calls) with weights that are frame inputs."""
    module, x = build("gru_layers_bidirectional_batch_first")
    weights = [p.detach() for p in module._flat_weights]
    h0 = initial_state(module)

    def f(x: torch.Tensor, h0: torch.Tensor, weights: list[torch.Tensor]) -> Any:
        return torch.gru(x, h0, weights, True, 2, 0.0, False, True, True)

    with torch.no_grad():
        want = f(x, h0, weights)
        report = xjit.explain(xjit.jit(f))(x, h0, weights)
    assert_one_native_graph(report)
    assert_tensors_close(report.output, want)
