"""Dropout on a non-contiguous input (docs/frontend.md "Autograd"): eager's bernoulli_ fills
empty_like(input) in memory order, and empty_like keeps a dense input's strides (transposed,
permuted, channels_last; a strided slice gets infer_dense_strides' order), so the mask differs
from a contiguous draw. Compiled dropout draws in eager's order (the noise call's `layout_of`,
layoutCallsInEagersOrder in output_layout.cpp): forward values and gradients bit for bit
eager's and the generator in eager's end state, on every backend."""

from __future__ import annotations

from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)

nn = torch.nn
F = torch.nn.functional


def dropout_times_two(x: Any) -> Any:
    return F.dropout(x, 0.3, True) * 2.0


def dropout_of_transpose(x: Any) -> Any:
    # The dropout's input is an intermediate eager lays out transposed.
    return F.dropout(x.transpose(0, 1) * 3.0, 0.4, True) + 1.0


def dropout_of_relu(x: Any) -> Any:
    # relu keeps a channels_last operand's layout: the noise is drawn channels_last.
    return F.dropout(torch.relu(x), 0.5, True)


def inputs() -> dict[str, tuple[Callable[[Any], Any], Any]]:
    torch.manual_seed(0)
    base = torch.randn(4, 6, 5, 3)
    return {
        "transposed": (dropout_times_two, torch.randn(6, 4).t()),
        "permuted": (dropout_times_two, base.permute(0, 2, 3, 1)),
        "channels_last": (dropout_times_two, base.contiguous(memory_format=torch.channels_last)),
        "channels_last_relu": (dropout_of_relu, base.contiguous(memory_format=torch.channels_last)),
        "sliced": (dropout_times_two, torch.randn(8, 6)[:, 1:5]),
        "sliced_transposed": (dropout_times_two, torch.randn(6, 8).t()[1:5]),
        "strided_transposed": (dropout_times_two, torch.randn(5, 12).t()[::2]),
        "intermediate_transpose": (dropout_of_transpose, torch.randn(5, 7)),
        "f64_transposed": (dropout_times_two, torch.randn(7, 9, dtype=torch.float64).t()),
    }


CASES = list(inputs())


@pytest.mark.parametrize("backend", ["xjit", "interp", "eager"])
@pytest.mark.parametrize("case", CASES)
def test_noise_is_eagers_for_any_layout(case: str, backend: str) -> None:
    fn, x = inputs()[case]
    compiled = xjit.jit(fn, backend=backend)
    for seed in range(2):
        torch.manual_seed(seed)
        want, want_next = fn(x), torch.rand(3)
        torch.manual_seed(seed)
        got, got_next = compiled(x), torch.rand(3)
        assert torch.equal(got, want), seed
        assert got.stride() == want.stride()
        assert torch.equal(got_next, want_next), seed  # the generator's end state
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]


@pytest.mark.parametrize("case", ["transposed", "channels_last", "sliced_transposed", "intermediate_transpose"])
def test_training_step_gradients_are_eagers(case: str) -> None:
    fn, x = inputs()[case]
    compiled = xjit.jit(fn)
    for seed in range(2):
        leaves = [x.detach().clone().requires_grad_() for _ in range(2)]
        torch.manual_seed(seed)
        got = compiled(leaves[0])
        torch.manual_seed(seed)
        want = fn(leaves[1])
        assert torch.equal(got, want), seed
        weight = torch.randn(got.shape)
        (got * weight).sum().backward()
        (want * weight).sum().backward()
        assert torch.equal(leaves[0].grad, leaves[1].grad), seed
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]
    assert graphs[0]["note"].startswith("training step: forward"), graphs[0]["note"]


def test_channels_last_conv_with_dropout_trains_like_eager() -> None:
    # A channels_last model: the conv's output, and so the noise, is channels_last in eager.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Dropout(0.25))
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    torch.manual_seed(3)
    got = xjit.jit(model)(x)
    got.square().sum().backward()
    got_grads = [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    torch.manual_seed(3)
    want = model(x)
    want.square().sum().backward()
    # The same entries dropped (a contiguous draw drops others); the conv's own rounding is
    # oneDNN's against eager's, so values are close, not bit for bit.
    assert torch.equal(got == 0, want == 0)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, p in zip(got_grads, model.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]
    assert graphs[0]["note"].startswith("training step: forward"), graphs[0]["note"]


def test_noise_follows_a_transposed_input_of_symbolic_shape() -> None:
    compiled = xjit.jit(dropout_times_two, dynamic=True)
    for rows, cols in [(6, 4), (9, 5), (7, 11)]:
        x = torch.randn(rows, cols).t()
        torch.manual_seed(1)
        want, want_next = dropout_times_two(x), torch.rand(2)
        torch.manual_seed(1)
        got, got_next = compiled(x), torch.rand(2)
        assert torch.equal(got, want) and torch.equal(got_next, want_next), (rows, cols)
    events = fe.events()
    assert not events["breaks"], events["breaks"]
    assert not any(g["runs_in_python"] for g in events["graphs"])


def test_contiguous_and_transposed_inputs_recompile() -> None:
    # The layout class of an input is guarded: a transposed input after a contiguous one gets a
    # capture of its own, whose noise is drawn in its order.
    compiled = xjit.jit(dropout_times_two)
    for x in [torch.randn(6, 4), torch.randn(4, 6).t(), torch.randn(6, 4)]:
        torch.manual_seed(2)
        want = dropout_times_two(x)
        torch.manual_seed(2)
        assert torch.equal(compiled(x), want)
