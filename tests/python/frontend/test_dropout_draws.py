"""Dropout's noise drawn natively (xjit._frontend.draw_bernoulli_noise, python/xjit/_dropout.py):
the same values as PyTorch's CPU `empty(n).bernoulli_(keep).div_(keep)` and the generator left
in PyTorch's end state, for counts that cross mt19937's twists and split a word pair; the
self-check refuses draws that differ and PyTorch draws instead; a compiled dropout equals
eager's under the same seed."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)
from xjit import _dropout, _frontend  # noqa: E402

DTYPES = [torch.float32, torch.float64]


def native(n: int, keep: float, dtype: Any, scale: float) -> torch.Tensor:
    out = torch.empty(n, dtype=dtype)
    state = torch.get_rng_state()
    assert _frontend.draw_bernoulli_noise(state, out, keep, scale)
    torch.set_rng_state(state)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keep", [0.9, 0.5, 0.1, 1 / 3, 1.0])
@pytest.mark.parametrize("counts", [[1001, 700, 1], [5, 8, 3000], [624], [8 * 4 * 64 * 64]])
def test_native_draws_are_pytorchs(dtype: Any, keep: float, counts: list[int]) -> None:
    scale = torch.ones(64, dtype=dtype).div_(keep)[0].item()
    torch.manual_seed(7)
    torch.rand(3)  # a state in the middle of the engine's words, not a fresh seed
    got = [native(n, keep, dtype, scale) for n in counts]
    got_state = torch.get_rng_state()
    torch.manual_seed(7)
    torch.rand(3)
    want = [torch.empty(n, dtype=dtype).bernoulli_(keep).div_(keep) for n in counts]
    for g, w in zip(got, want):
        assert torch.equal(g.view(torch.uint8), w.view(torch.uint8))
    assert torch.equal(got_state, torch.get_rng_state())


def test_unknown_state_or_dtype_is_refused() -> None:
    out = torch.zeros(10)
    assert not _frontend.draw_bernoulli_noise(torch.zeros(100, dtype=torch.uint8), out, 0.9, 1.0)
    state = torch.get_rng_state()
    state[8:12] = torch.tensor([0, 7, 0, 0], dtype=torch.uint8)  # left = 1792 > 624 words
    assert not _frontend.draw_bernoulli_noise(state, out, 0.9, 1.0)
    assert not _frontend.draw_bernoulli_noise(torch.get_rng_state(), torch.zeros(10, dtype=torch.int32), 0.9, 1.0)
    assert torch.equal(out, torch.zeros(10))


def test_draws_that_differ_are_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _frontend.draw_bernoulli_noise

    def off_by_one_word(state: Any, out: Any, keep: float, scale: float) -> bool:
        ok = real(state, out, keep, scale)
        out[0] = scale - out[0]  # one element flipped
        return ok

    monkeypatch.setattr(_dropout._frontend, "draw_bernoulli_noise", off_by_one_word)
    monkeypatch.setattr(_dropout, "_scales", {})
    assert _dropout._checked_scale(0.75, torch.float32) is None
    like = torch.empty(4, 300)
    torch.manual_seed(3)
    got = _dropout.noise(like, 0.25)
    torch.manual_seed(3)
    assert torch.equal(got, torch.empty(4, 300).bernoulli_(0.75).div_(0.75))


@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_dropout_is_eagers(dtype: Any) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.1, training=True) * 2 + 1

    x = torch.randn(8, 33, 65, dtype=dtype)
    compiled = xjit.jit(f)
    for seed in range(3):
        torch.manual_seed(seed)
        want = f(x)
        want_state = torch.get_rng_state()
        torch.manual_seed(seed)
        got = compiled(x)
        assert torch.equal(got, want)
        assert torch.equal(torch.get_rng_state(), want_state)
    assert _dropout._checked_scale(0.9, dtype) is not None  # the native draws were used
