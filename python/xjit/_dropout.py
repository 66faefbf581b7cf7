"""The random part of F.dropout in training mode and of attention with dropout_p > 0, called from
compiled graphs (PyTorch fallback nodes that src/frontend/torch_ops.cpp's lowerDropout and
lowerSdpa emit): the noise is drawn by PyTorch from its
global generator exactly as eager's CPU F.dropout draws it, so a compiled step stays
bit-identical to eager under the same seed; the multiplication x * noise is compiled."""

from __future__ import annotations

import torch


def noise(like: torch.Tensor, p: float, feature: bool = False) -> torch.Tensor:
    """ATen's _dropout_impl on CPU: empty_like(x).bernoulli_(1 - p).div_(1 - p), for a
    contiguous x (`like` has x's shape, dtype and device; only those are read). `feature`
    (dropout1d/2d/3d, feature_dropout): one draw per channel, the noise [N, C, 1, ...] that
    make_feature_noise shapes. On the meta device (the compiler's shape walks) it draws nothing
    from the generator."""
    shape = (*like.shape[:2], *([1] * (like.dim() - 2))) if feature else like.shape
    return _draw(shape, like, p)


def attention_noise(query: torch.Tensor, key: torch.Tensor, p: float, enable_gqa: bool) -> torch.Tensor:
    """The noise of F.scaled_dot_product_attention(..., dropout_p=p): on CPU eager takes the math
    path and applies at::dropout to the softmax weights [.., L, S] (their batch dims: query's and
    key's broadcast, key's heads repeated to query's under enable_gqa). `query` and `key` give
    shapes and dtype only. The op multiplies its weights by this noise."""
    key_batch = list(key.shape[:-2])
    if enable_gqa and query.dim() >= 3 and key.dim() >= 3:
        key_batch[-1] = query.shape[-3]
    batch = torch.broadcast_shapes(tuple(query.shape[:-2]), tuple(key_batch))
    return _draw((*batch, query.shape[-2], key.shape[-2]), query, p)


def _draw(shape: tuple[int, ...] | torch.Size, like: torch.Tensor, p: float) -> torch.Tensor:
    """ATen's _dropout_impl: empty(shape).bernoulli_(1 - p).div_(1 - p) in like's dtype."""
    keep = 1 - p
    return torch.empty(shape, dtype=like.dtype, device=like.device).bernoulli_(keep).div_(keep)
