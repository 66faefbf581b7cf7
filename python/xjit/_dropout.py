"""The random part of F.dropout in training mode, called from compiled graphs (a PyTorch fallback
node that src/frontend/torch_ops.cpp's lowerDropout emits): the noise is drawn by PyTorch from its
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
    keep = 1 - p
    shape = (*like.shape[:2], *([1] * (like.dim() - 2))) if feature else like.shape
    return torch.empty(shape, dtype=like.dtype, device=like.device).bernoulli_(keep).div_(keep)
