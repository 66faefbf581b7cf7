"""Training-mode batch norm's output against float64 (docs/passes.md decompose-batch-norm): xjit's
error is about eager's. Eager accumulates the batch statistics in double; with f32 statistics
the mean's error, scaled by the mean's size over the deviation's, reached the output: up to 2.7x
eager's error where activations have a large mean (before session 16: 2.67x on the offset
[32, 64, 8, 8] case below). The statistics now accumulate in f64 and beta = b - mean * alpha is
rounded once; the rest of the difference is eager's fused multiply-add in x * alpha + beta."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)

F = torch.nn.functional

# The bound on xjit's error over eager's (relative L2 against float64, median over seeds): the
# measured ratios are 0.3-1.33 (1.2-2.7 before); a missing fused multiply-add accounts for ~10%.
RATIO = 1.5


def batch_norm_train(x: Any, w: Any, b: Any) -> Any:
    return F.batch_norm(x, None, None, w, b, training=True)


def relative_error(y: Any, ref: Any) -> float:
    return float((y.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("shape", [(8, 16, 32, 32), (32, 64, 8, 8), (64, 256), (4, 3, 56, 56)])
@pytest.mark.parametrize("data", ["offset5", "offset1.5", "relu"])
def test_training_output_error_is_about_eagers(shape: tuple[int, ...], data: str) -> None:
    compiled = xjit.jit(batch_norm_train, dynamic=False)
    eager_errors, xjit_errors = [], []
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(shape, generator=g)
        x = torch.relu(x) if data == "relu" else x + float(data[len("offset") :])
        channels = shape[1]
        w, b = torch.rand(channels, generator=g) + 0.5, torch.randn(channels, generator=g)
        ref = batch_norm_train(x.double(), w.double(), b.double())
        eager_errors.append(relative_error(batch_norm_train(x, w, b), ref))
        xjit_errors.append(relative_error(compiled(x, w, b), ref))
    got, want = statistics.median(xjit_errors), statistics.median(eager_errors)
    assert got <= RATIO * want, (got, want)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]
