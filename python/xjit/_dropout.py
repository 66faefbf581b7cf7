"""The random part of F.dropout in training mode and of attention with dropout_p > 0, called from
compiled graphs (PyTorch fallback nodes that src/frontend/torch_ops.cpp's lowerDropout and
lowerSdpa emit): the noise is drawn by PyTorch from its
global generator exactly as eager's CPU F.dropout draws it, so a compiled step stays
bit-identical to eager under the same seed; the multiplication x * noise is compiled.

PyTorch's CPU bernoulli_ draws element by element (~6 ns each: a tenth of a BERT fine-tuning
step); xjit._frontend.draw_bernoulli_noise draws the same numbers from the generator's state
about 10x faster (src/frontend/dropout_draws.cpp). It is used for a (keep, dtype) only after it
reproduced PyTorch's own draws and end state on a private generator (`_checked_scale`); else,
off the CPU, or with XJIT_NATIVE_DROPOUT=0, PyTorch draws."""

from __future__ import annotations

import os

import torch

from xjit import _frontend


def noise(like: torch.Tensor, p: float, feature: bool = False) -> torch.Tensor:
    """ATen's _dropout_impl on CPU: empty_like(x).bernoulli_(1 - p).div_(1 - p) (`like` is
    empty_like(x): its shape, dtype, device and strides are read). bernoulli_ fills in memory
    order, and empty_like keeps a dense x's strides (a transposed or channels_last x: another
    mask than a contiguous draw), so the noise is drawn into empty_like(like). Compiled graphs
    pass a contiguous `like` of x's dims in eager's memory order and permute the noise back
    (the external_call's `layout_of`, output_layout.h). `feature` (dropout1d/2d/3d,
    feature_dropout): one draw per channel, the contiguous noise [N, C, 1, ...] that
    make_feature_noise makes. On the meta device (the compiler's shape walks) it draws nothing
    from the generator."""
    if feature:
        shape = (*like.shape[:2], *([1] * (like.dim() - 2)))
        return _draw(torch.empty(shape, dtype=like.dtype, device=like.device), p)
    return _draw(torch.empty_like(like), p)


def attention_noise(query: torch.Tensor, key: torch.Tensor, p: float, enable_gqa: bool) -> torch.Tensor:
    """The noise of F.scaled_dot_product_attention(..., dropout_p=p): on CPU eager takes the math
    path and applies at::dropout to the softmax weights [.., L, S] (their batch dims: query's and
    key's broadcast, key's heads repeated to query's under enable_gqa; contiguous, as softmax of
    a matmul is). `query` and `key` give shapes and dtype only. The op multiplies its weights by
    this noise."""
    key_batch = list(key.shape[:-2])
    if enable_gqa and query.dim() >= 3 and key.dim() >= 3:
        key_batch[-1] = query.shape[-3]
    batch = torch.broadcast_shapes(tuple(query.shape[:-2]), tuple(key_batch))
    shape = (*batch, query.shape[-2], key.shape[-2])
    return _draw(torch.empty(shape, dtype=query.dtype, device=query.device), p)


def _draw(out: torch.Tensor, p: float) -> torch.Tensor:
    """ATen's _dropout_impl: out.bernoulli_(1 - p).div_(1 - p), drawn in out's memory order (out
    is dense from offset 0, as empty and empty_like make it)."""
    keep = 1 - p
    if out.device.type == "cpu":
        scale = _checked_scale(keep, out.dtype)
        if scale is not None:
            state = torch.get_rng_state()
            if _frontend.draw_bernoulli_noise(state, out.as_strided((out.numel(),), (1,)), keep, scale):
                torch.set_rng_state(state)
                return out
    return out.bernoulli_(keep).div_(keep)


_NATIVE = os.environ.get("XJIT_NATIVE_DROPOUT", "1") != "0"
_scales: dict[tuple[float, torch.dtype], float | None] = {}


def _checked_scale(keep: float, dtype: torch.dtype) -> float | None:
    """The value eager's div_(keep) gives a kept element, if the native draws reproduce
    PyTorch's for this keep and dtype (checked once per process), else None."""
    key = (keep, dtype)
    if key not in _scales:
        _scales[key] = _native_check(keep, dtype) if _NATIVE else None
    return _scales[key]


def _native_check(keep: float, dtype: torch.dtype) -> float | None:
    """Draws of 1001, 700 and 1 elements (over two twists of the state, a word pair split by one,
    an odd count) from a private generator, by PyTorch and natively: the same values and the same
    end state, or None."""
    if dtype not in (torch.float32, torch.float64) or not 0.0 < keep < 1.0:
        return None
    scale = torch.ones(64, dtype=dtype).div_(keep)[0].item()
    gen = torch.Generator().manual_seed(0x5EED)
    state = gen.get_state()
    for n in (1001, 700, 1):
        expected = torch.empty(n, dtype=dtype).bernoulli_(keep, generator=gen).div_(keep)
        out = torch.empty(n, dtype=dtype)
        if not _frontend.draw_bernoulli_noise(state, out, keep, scale):
            return None
        if not torch.equal(out.view(torch.uint8), expected.view(torch.uint8)):
            return None
    return scale if torch.equal(state, gen.get_state()) else None
