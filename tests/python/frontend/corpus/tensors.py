"""Tensor operations through the op table: torch functions, Tensor methods, attributes,
indexing, dtype conversions, creation, reductions and views."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from corpus import Case


def x34():
    return (torch.randn(3, 4),)


def x234():
    return (torch.randn(2, 3, 4),)


def unary_math(x):
    return (torch.exp(x).log1p() + x.abs().sqrt() - torch.sin(x) * x.cos() + x.tanh().neg()
            + torch.sigmoid(x) + x.rsqrt().nan_to_num(0.0).clamp(max=3.0))


def binary_with_scalars(x):
    return (torch.add(x, 2, alpha=3), torch.rsub(x, 5.0), torch.mul(x, x), torch.div(x, 2),
            torch.pow(x, 2), torch.maximum(x, x.flip(0)), torch.where(x > 0, x, 0.0))


def comparisons(x, y):
    return (x > y) & (x != 0), x <= 0.5, torch.eq(x, y), (x == y) | (x >= y)


def int_tensor_ops(x):
    i = (x * 10).long()
    return i // 3, i % 4, i + 1, i * 2, (i & 7) | 8, i.float() / 2


def reductions(x):
    return (x.sum(), x.sum(dim=1), x.mean(-1, keepdim=True), x.amax(dim=(0, 1)),
            torch.prod(x, 1), x.std(), x.var(dim=0, unbiased=False), x.logsumexp(1),
            torch.argmax(x, dim=1), x.max(), x.min(dim=0).values, x.norm(), x.all(), x.any(1))


def max_with_indices(x):
    values, indices = torch.max(x, dim=1, keepdim=True)
    return values * 2, indices


def topk_and_sort(x):
    v, i = x.topk(2, dim=1)
    s = torch.sort(x, dim=0, descending=True)
    return v, i, s.values, s.indices, x.argsort(dim=1)


def views_and_shapes(x):
    a = x.view(2, 12)
    b = x.reshape(-1, 4).t()
    c = x.permute(2, 0, 1).contiguous()
    d = x.transpose(0, 1).flatten(1)
    e = x.unsqueeze(0).squeeze(0).unsqueeze(-1).squeeze()
    f = x.flatten().unflatten(0, (6, 4))
    return a, b, c, d, e, f


def expand_repeat(x):
    y = x[:, :1]
    return y.expand(3, 4), y.expand(-1, 5), x.repeat(2, 1), x.tile((1, 2)), y.expand_as(x)


def cat_stack_split(x):
    parts = torch.split(x, 2, dim=1)
    chunks = x.chunk(3, dim=0)
    cols = x.unbind(1)
    return torch.cat([parts[0], parts[1]], dim=0), torch.stack(cols, dim=0), chunks[2], \
        torch.cat((x, x), -1), x.split([1, 3], dim=1)[1]


def basic_indexing(x):
    return x[0], x[:, 1], x[1:3], x[..., -1], x[None, 0, ::2], x[:, None, :2], x[-1, -2]


def advanced_indexing(x):
    idx = torch.tensor([2, 0])
    return x[idx], x[:, [1, 3]], x[idx, 1], x[[0, 2], [1, 3]]


def gather_index_select(x):
    idx = torch.tensor([[0, 1], [2, 3], [1, 1]])
    return x.gather(1, idx), torch.index_select(x, 1, torch.tensor([3, 0])), \
        torch.take_along_dim(x, idx, dim=1)


def dtype_conversions(x):
    return x.double(), x.half().float(), x.to(torch.int32), x.to(dtype=torch.float64), \
        x.long().bool(), x.type(torch.int16), x.type_as(x.double())


def tensor_attributes(x):
    out = x
    if x.dtype == torch.float32 and x.is_floating_point() and not x.requires_grad:
        out = out + 1
    if x.device.type == "cpu" and x.ndim == 2 and x.shape[1] == 4:
        out = out * 2
    return out, x.numel(), x.element_size(), x.size(-1)


def creation_ops(x):
    z = torch.zeros(3, 4)
    o = torch.ones((3, 4), dtype=torch.float64)
    f = torch.full((2, 2), 7)
    a = torch.arange(4)
    af = torch.arange(0, 1, 0.25)
    e = torch.eye(3)
    ls = torch.linspace(0, 1, 5)
    return x + z + 1, o, f, a, af, e, ls, torch.zeros_like(x), torch.ones_like(x, dtype=torch.int64), \
        torch.full_like(x, 2.5), x.new_zeros(2), x.new_ones((1, 2)), x.new_full((2,), 3.0)


def tensor_constant(x):
    w = torch.tensor([1.0, 2.0, 3.0, 4.0])
    m = torch.tensor([[1, 0, 0, 1]], dtype=torch.bool)
    return x * w, x.masked_fill(m, 0.0)


def matmul_family(x):
    w = torch.ones(4, 5)
    b = torch.arange(5, dtype=torch.float32)
    return x @ w, torch.mm(x, w), torch.addmm(b, x, w, beta=0.5), F.linear(x, w.t(), b), \
        torch.bmm(x.unsqueeze(0), w.unsqueeze(0)), x.matmul(w[:, 0]), torch.outer(x[0], b)


def softmax_family(x):
    return x.softmax(-1), F.log_softmax(x, dim=0), torch.softmax(x, 1, dtype=torch.float64)


def activations(x):
    return (F.relu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), F.leaky_relu(x, 0.2),
            F.elu(x), F.hardtanh(x, -0.5, 0.5), F.softplus(x, beta=2), torch.relu(x),
            F.mish(x), F.hardswish(x), F.hardsigmoid(x), F.logsigmoid(x), F.selu(x), F.relu6(x))


def clamp_variants(x):
    lo = torch.full((4,), -0.5)
    hi = torch.full((3, 1), 0.5)
    return x.clamp(-1, 1), x.clamp(min=0), torch.clamp(x, lo, hi), x.clip(max=0.2), x.clamp(max=hi)


def cumulative(x):
    return x.cumsum(0), torch.cumprod(x, dim=1), x.tril(), x.triu(1), x.flip(1), x.roll(1, 0)


def where_and_masks(x):
    m = x > 0
    return torch.where(m, x, -x), x.masked_fill(~m, 0.0), m.logical_and(x < 1), m.float().mean()


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True)


def norms_functional(x):
    w = torch.ones(4)
    b = torch.zeros(4)
    return F.layer_norm(x, (4,), w, b), F.layer_norm(x, [4]), F.rms_norm(x, (4,), w)


def conv_pool_functional(x):
    w = torch.ones(2, 3, 3, 3) * 0.1
    y = F.conv2d(x, w, padding=1)
    # (a 1x1 adaptive pool is a mean over H and W, as in ATen)
    return F.max_pool2d(y, 2), F.avg_pool2d(y, 2, stride=1), F.adaptive_avg_pool2d(y, (1, 1)), \
        F.adaptive_avg_pool2d(y, (2, 3)), F.conv2d(x, w, stride=2), F.pad(y, (1, 1, 2, 0))


def embedding_functional(idx):
    w = torch.arange(20, dtype=torch.float32).view(5, 4)
    return F.embedding(idx, w), F.embedding(idx, w, padding_idx=0)


def method_chain(x):
    return x.add(1).mul_(2).sub(0.5).div(3).pow(2).sum(dim=-1).mean()


def movedim_diag(x):
    return x.movedim(0, -1), torch.diagonal(x[0]), x.narrow(2, 1, 2), x.select(1, 0)


def detach_and_clone(x):
    y = x.detach()
    z = x.clone()
    return y + z, x.data * 2


def size_args_to_view(x):
    b = x.size(0)
    return x.view(b, -1), x.reshape(x.shape[0], x.shape[1] * x.shape[2]), x.view(x.size())


def dropout_eval(x):
    return F.dropout(x, 0.5, training=False), F.dropout(x, p=0.0)


CASES = [
    Case("unary_math", unary_math, x34),
    Case("binary_with_scalars", binary_with_scalars, x34, ops=("where", "maximum")),
    Case("comparisons", comparisons, lambda: (torch.randn(3, 4), torch.randn(3, 4))),
    Case("int_tensor_ops", int_tensor_ops, x34),
    Case("reductions", reductions, x34),
    Case("max_with_indices", max_with_indices, x34, ops=("max_dim",)),
    Case("topk_and_sort", topk_and_sort, x34),
    Case("views_and_shapes", views_and_shapes, x234),
    Case("expand_repeat", expand_repeat, x34),
    Case("cat_stack_split", cat_stack_split, lambda: (torch.randn(3, 4),)),
    Case("basic_indexing", basic_indexing, lambda: (torch.randn(4, 5),)),
    Case("advanced_indexing", advanced_indexing, lambda: (torch.randn(4, 5),), ops=("index",)),
    Case("gather_index_select", gather_index_select, x34),
    Case("dtype_conversions", dtype_conversions, x34, atol=1e-3),
    Case("tensor_attributes", tensor_attributes, x34),
    Case("creation_ops", creation_ops, x34),
    Case("tensor_constant", tensor_constant, x34),
    Case("matmul_family", matmul_family, x34),
    Case("softmax_family", softmax_family, x34),
    Case("activations", activations, x34),
    Case("clamp_variants", clamp_variants, x34),
    Case("cumulative", cumulative, x34),
    Case("where_and_masks", where_and_masks, x34),
    Case("sdpa", sdpa, lambda: (torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)),
         ops=("scaled_dot_product_attention",)),
    Case("norms_functional", norms_functional, x34, ops=("layer_norm",)),
    Case("conv_pool_functional", conv_pool_functional, lambda: (torch.randn(1, 3, 8, 8),),
         ops=("conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "mean", "pad")),
    Case("embedding_functional", embedding_functional, lambda: (torch.tensor([[0, 2], [4, 1]]),)),
    Case("method_chain", method_chain, x34),
    Case("movedim_diag", movedim_diag, x234),
    Case("detach_and_clone", detach_and_clone, x34),
    Case("size_args_to_view", size_args_to_view, x234),
    Case("dropout_eval", dropout_eval, x34, graphs=0),  # no ops: returns its input
]
