"""Large host buffers reuse released pages for any size (src/backend/host_buffers.cpp): a
training step's gradients take the pages of the saved values its backward frees, so once warm a
step takes no new pages, and its results stay eager's."""

from __future__ import annotations

import copy
import os

import pytest

torch = pytest.importorskip("torch")
import xjit  # noqa: E402
from xjit import ir  # noqa: E402


@pytest.mark.skipif(os.environ.get("XJIT_HOST_BUFFER_CACHE") == "0", reason="reuse switched off")
def test_training_step_takes_no_new_pages_once_warm() -> None:
    torch.manual_seed(0)
    # Batch 256: activations of 2 MiB, gradients of 6-16 MiB, all kept and reused.
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
        torch.nn.Linear(2048, 10),
    )
    ref = copy.deepcopy(model)
    x, y = torch.randn(256, 784), torch.randint(0, 10, (256,))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    fwd, update = xjit.jit(model), xjit.jit(lambda: opt.step())

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(fwd(x), y)
        loss.backward()
        update()
        return loss.item()

    def ref_step() -> float:
        ref_opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ref(x), y)
        loss.backward()
        ref_opt.step()
        return loss.item()

    for _ in range(3):
        assert step() == pytest.approx(ref_step(), rel=1e-5)
    warm = ir.backend_stats()
    for _ in range(4):
        assert step() == pytest.approx(ref_step(), rel=1e-5)
    now = ir.backend_stats()
    assert now["host_buffer_fresh_mb"] == warm["host_buffer_fresh_mb"]
    assert now["host_buffer_reused_mb"] - warm["host_buffer_reused_mb"] > 4 * 16
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
