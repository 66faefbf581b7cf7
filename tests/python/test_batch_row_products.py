"""batch-row-products (src/passes/batch_row_products.cpp): single-row linears sharing a weight,
none depending on another, run as one linear over the stacked rows; an unrolled recurrence's
input projections (a Python loop over nn.LSTMCell, GRUCell or RNNCell, which the frontend
lowers to their gate arithmetic, and nn.LSTM at batch 1)
then read their weight once per call instead of once per step. Values are checked against eager
(f32 sums in another order) and the batched product is looked for in the compiled graph; an
autoregressive loop (each step's input is the step before's output) must stay per step, and
gradients through a batched loop must match eager's."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
xjit = pytest.importorskip("xjit")
nn = torch.nn

pytestmark = pytest.mark.usefixtures("fresh_frontend")  # (conftest.py)

STEPS, EMBED, HIDDEN = 10, 16, 32


CELLS = {
    "lstm": nn.LSTMCell,
    "gru": nn.GRUCell,
    "rnn_tanh": nn.RNNCell,
    "rnn_relu_no_bias": lambda i, h: nn.RNNCell(i, h, bias=False, nonlinearity="relu"),
}


class CellLoop(nn.Module):
    def __init__(self, kind: str = "lstm", layers: int = 2) -> None:
        super().__init__()
        self.lstm = kind == "lstm"
        self.cells = nn.ModuleList(
            CELLS[kind](EMBED if i == 0 else HIDDEN, HIDDEN) for i in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        states = [(x.new_zeros(1, HIDDEN), x.new_zeros(1, HIDDEN)) for _ in self.cells]
        outs = []
        for t in range(x.shape[1]):
            h = x[:, t]
            for i, cell in enumerate(self.cells):
                if self.lstm:
                    states[i] = cell(h, states[i])
                    h = states[i][0]
                else:
                    h = cell(h, states[i][0])
                    states[i] = (h, h)
            outs.append(h)
        return torch.stack(outs, 1)


class Autoregressive(nn.Module):
    """Each step's input is the output of the step before: nothing to batch."""

    def __init__(self) -> None:
        super().__init__()
        self.cell, self.out = nn.LSTMCell(EMBED, HIDDEN), nn.Linear(HIDDEN, EMBED)

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        h = c = x0.new_zeros(1, HIDDEN)
        x, outs = x0, []
        for _ in range(STEPS):
            h, c = self.cell(x, (h, c))
            x = torch.tanh(self.out(h))
            outs.append(x)
        return torch.cat(outs)


def _batched_products(dump: Path, rows: int) -> int:
    text = "".join(p.read_text() for p in dump.glob("*.runtime.xir"))
    return sum(1 for line in text.splitlines() if "= linear(" in line and f"f32[{rows}," in line)


def _run(model: nn.Module, x: torch.Tensor, tmp_path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    xjit.config.dump_dir = str(tmp_path)
    try:
        with torch.no_grad():
            got = xjit.jit(model)(x)
            want = model(x)
    finally:
        xjit.config.dump_dir = None
    return got, want


@pytest.mark.parametrize("kind", list(CELLS))
def test_cell_loops_batch_their_input_projections(kind: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = CellLoop(kind).eval(), torch.randn(1, STEPS, EMBED)
    got, want = _run(model, x, tmp_path)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # Both layers' input projections (the second layer's of the first layer's h), no fallback.
    assert _batched_products(tmp_path, STEPS) == 2
    assert "external_call" not in "".join(p.read_text() for p in tmp_path.glob("*.runtime.xir"))


def test_nn_lstm_at_batch_one(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model, x = nn.LSTM(EMBED, HIDDEN, num_layers=2, batch_first=True).eval(), torch.randn(1, STEPS, EMBED)
    got, want = _run(model, x, tmp_path)
    for g, w in zip(got[0:1] + got[1], want[0:1] + want[1]):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert _batched_products(tmp_path, STEPS) == 2


def test_an_autoregressive_loop_stays_per_step(tmp_path: Path) -> None:
    torch.manual_seed(2)
    model, x0 = Autoregressive().eval(), torch.randn(1, EMBED)
    got, want = _run(model, x0, tmp_path)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert _batched_products(tmp_path, STEPS) == 0


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_gradients_through_a_batched_loop(kind: str) -> None:
    torch.manual_seed(3)
    model, x = CellLoop(kind), torch.randn(1, STEPS, EMBED, requires_grad=True)
    compiled = xjit.jit(model)
    got = compiled(x)
    got.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    want = model(x)
    want.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, [p.grad for p in model.parameters()] + [x.grad]):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["gru", "rnn_tanh"])
def test_cells_without_a_state_or_a_batch_dim_still_match(kind: str) -> None:
    # No h (zeros made by PyTorch's forward) or an unbatched input: the module's forward runs
    # (its _VF call a PyTorch fallback node), with eager's values.
    torch.manual_seed(4)
    cell = CELLS[kind](EMBED, HIDDEN)
    x, h = torch.randn(3, EMBED), torch.randn(3, HIDDEN)
    with torch.no_grad():
        for args in [(x,), (x[0], h[0]), (x, h)]:
            got = xjit.jit(lambda *a: cell(*a) * 2)(*args)
            torch.testing.assert_close(got, cell(*args) * 2, rtol=1e-5, atol=1e-6)
