"""Module weights reordered once for oneDNN (content tags from PyTorch's version counters,
src/frontend/param_versions.cpp, src/backend/dnnl_common.cpp TaggedWeights): the cached copy is
reused while a parameter is unchanged, and every way of changing one (in-place ops under no_grad,
load_state_dict, replacing .data, an optimizer step) gives eager's results at the next call. The
cache is opt-in (weight_cache=True): by default a write PyTorch's version counter misses
(`param.data.mul_()`) is seen too."""

from __future__ import annotations

import gc
import threading
import weakref

import torch
from torch import nn

import xjit
import xjit.ir as ir


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(16, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 6 * 6, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv1(x))
        y = torch.relu(self.conv2(y) + y)
        return self.fc(y.flatten(1))


def _counts() -> tuple[int, int]:
    s = ir.backend_stats()
    return s["weight_packs"], s["weight_pack_hits"]


def _check(compiled, model, x) -> None:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def _model(seed: int) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    return Net().eval(), torch.randn(2, 16, 6, 6)


def test_weights_packed_once_while_unchanged() -> None:
    model, x = _model(0)
    compiled = xjit.jit(model, fullgraph=True, weight_cache=True)
    _check(compiled, model, x)
    packs, hits = _counts()
    for _ in range(3):
        _check(compiled, model, x)
    packs2, hits2 = _counts()
    assert packs2 == packs, "an unchanged weight was reordered again"
    assert hits2 - hits >= 3 * 2, "the two convs' cached weights were not reused"


def test_in_place_change_under_no_grad() -> None:
    model, x = _model(1)
    compiled = xjit.jit(model, fullgraph=True, weight_cache=True)
    _check(compiled, model, x)
    _check(compiled, model, x)
    packs, _ = _counts()
    with torch.no_grad():
        model.conv1.weight.mul_(2)
        model.conv2.weight[:, :4].zero_()  # through a view: the same version counter
    _check(compiled, model, x)
    assert _counts()[0] >= packs + 2  # both convs repacked


def test_load_state_dict() -> None:
    model, x = _model(2)
    other, _ = _model(3)
    compiled = xjit.jit(model, fullgraph=True, weight_cache=True)
    _check(compiled, model, x)
    _check(compiled, model, x)
    model.load_state_dict(other.state_dict())
    _check(compiled, model, x)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), other(x), rtol=1e-4, atol=1e-4)


def test_replacing_data() -> None:
    model, x = _model(4)
    compiled = xjit.jit(model, fullgraph=True, weight_cache=True)
    _check(compiled, model, x)
    for i in range(4):
        # .data = keeps the version counter: the data pointer tells. Dropping the old tensor
        # first lets the allocator hand its address to the next one; the tag's pin forbids it.
        w = model.conv2.weight
        w.data = torch.empty(0)
        w.data = torch.randn(32, 32, 3, 3).mul_(i + 1)
        _check(compiled, model, x)


def test_optimizer_step() -> None:
    model, x = _model(5)
    compiled = xjit.jit(model, fullgraph=True, weight_cache=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    _check(compiled, model, x)
    _check(compiled, model, x)
    for _ in range(2):
        opt.zero_grad()
        model(x).square().sum().backward()  # eager: autograd
        opt.step()
        _check(compiled, model, x)


def test_parameters_sharing_a_storage() -> None:
    """Two Parameters over one storage have separate version counters: a write through one
    must not leave the other's cached copy in use (such aliases are never cached)."""
    model, x = _model(6)
    model.conv3 = nn.Conv2d(32, 32, 3, padding=1)
    model.conv3.weight = nn.Parameter(model.conv2.weight.data)  # same memory, own version

    def forward(x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(model.conv1(x))
        y = torch.relu(model.conv2(y))
        return model.fc(torch.relu(model.conv3(y)).flatten(1))

    compiled = xjit.jit(forward, fullgraph=True, weight_cache=True)
    for _ in range(2):
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), forward(x), rtol=1e-4, atol=1e-4)
    reorders = ir.backend_stats()["weight_reorders"]
    with torch.no_grad():
        model.conv3.weight.mul_(-1)  # conv2.weight's version counter does not move
        torch.testing.assert_close(compiled(x), forward(x), rtol=1e-4, atol=1e-4)
    assert ir.backend_stats()["weight_reorders"] - reorders >= 2  # both aliases reordered per call


def test_threads_racing_on_a_new_version() -> None:
    model, x = _model(7)
    compiled = xjit.jit(model, fullgraph=True, weight_cache=True)
    _check(compiled, model, x)
    with torch.no_grad():
        model.conv1.weight.mul_(0.5)  # a new tag: the threads below race to pack it
        want = model(x)
    results: list[torch.Tensor] = []

    def work() -> None:
        with torch.no_grad():
            for _ in range(3):
                results.append(compiled(x))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 12
    for r in results:
        torch.testing.assert_close(r, want, rtol=1e-4, atol=1e-4)


def test_a_dropped_model_frees_its_weights() -> None:
    """The tags hold a parameter weakly: once the model is gone its weight storage is freed."""
    model, x = _model(8)
    compiled = xjit.jit(model, fullgraph=True, weight_cache=True)
    _check(compiled, model, x)
    param = weakref.ref(model.conv2.weight)
    storage = weakref.ref(model.conv2.weight.untyped_storage())  # what the tag pins
    del compiled, model
    gc.collect()
    assert param() is None
    assert storage() is None


def test_default_reorders_per_call_and_sees_writes_through_data() -> None:
    """Without weight_cache=True nothing is cached: a write through `.data`, which leaves the
    version counter as it was, still gives eager's result at the next call."""
    model, x = _model(9)
    compiled = xjit.jit(model, fullgraph=True)
    _check(compiled, model, x)
    packs, hits = _counts()
    model.conv1.weight.data.mul_(-3)
    model.fc.weight.data.zero_()
    _check(compiled, model, x)
    _check(compiled, model, x)
    assert _counts() == (packs, hits), "weights were cached without weight_cache=True"


def test_one_copy_per_weight_across_instructions() -> None:
    """A weight used by many instructions (a loop unrolled over time steps) is reordered once
    for all of them, not once per instruction (each kept its own copy: an LSTM held 20x its
    weights)."""

    class Loop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(8):
                x = torch.tanh(self.cell(x))
            return x

    torch.manual_seed(10)
    model, x = Loop().eval(), torch.randn(4, 64)
    compiled = xjit.jit(model, fullgraph=True, weight_cache=True)
    packs, hits = _counts()
    _check(compiled, model, x)
    packs1, hits1 = _counts()
    assert packs1 - packs <= 1, f"{packs1 - packs} copies of one weight"
    _check(compiled, model, x)
    assert _counts()[1] - hits1 >= 8, "the eight steps did not reuse the copy"
