"""``backend="eager"``: captured graphs run op by op with PyTorch itself.

The frontend's C++ walker (``src/frontend/eager.cpp``) visits a graph's ops in order and calls
:func:`run_op` for each one with its operands (torch tensors, Python scalars, None, lists), its
attributes (ints, floats, bools, strings, lists; dtypes as their IR names such as ``"f32"``) and
its declared result types. :data:`TABLE` maps each IR op to the PyTorch call that computes the
same thing (the IR's ops are defined with PyTorch's semantics; docs/ir.md). An op without a row
returns ``NotImplemented`` and the walker runs it in the reference interpreter instead, so every
graph runs. Results are made to agree with the IR's declared result types (dtype), which define
what the graph computes.

``--check`` uses the same walk to find the first op whose PyTorch result differs from the
reference interpreter's on the same inputs: :func:`compare_op`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["TABLE", "compare_op", "empty_meta", "layout_of", "relayout", "run_op", "run_op_meta", "to_meta"]

DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "u8": torch.uint8,
    "i8": torch.int8,
    "i16": torch.int16,
    "i32": torch.int32,
    "i64": torch.int64,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "f64": torch.float64,
}

Attrs = dict[str, Any]
Row = Callable[..., Any]  # (operands, attrs) -> result; creation rows also get the dtype


def _dtype(name: Any) -> torch.dtype | None:
    return None if name is None else DTYPES[name]


def _dims(a: Attrs, key: str = "dims") -> Any:
    """A reduction's dims: [] means every dim (None for PyTorch)."""
    dims = a.get(key)
    return None if not dims else list(dims)


def _opt(args: list[Any], i: int) -> Any:
    return args[i] if i < len(args) else None


def _kw(a: Attrs, *names: str) -> dict[str, Any]:
    return {n: a[n] for n in names if n in a and a[n] is not None}


TABLE: dict[str, Row] = {}


def _unary(name: str, fn: Callable[..., Any], *attrs: str) -> None:
    TABLE[name] = lambda x, a: fn(x[0], **_kw(a, *attrs))


for _n in (
    "abs acos acosh asin asinh atan atanh ceil cos cosh erf erfc exp exp2 expm1 floor frac "
    "lgamma log log10 log1p log2 neg reciprocal relu rsqrt sigmoid sign signbit sin sinh sqrt "
    "square tan tanh trunc isfinite isinf isnan isneginf isposinf logical_not bitwise_not"
).split():
    _unary(_n, getattr(torch, _n))
for _n, _fn, _attrs in (
    ("relu6", F.relu6, ()),
    ("selu", F.selu, ()),
    ("silu", F.silu, ()),
    ("mish", F.mish, ()),
    ("hardsigmoid", F.hardsigmoid, ()),
    ("hardswish", F.hardswish, ()),
    ("log_sigmoid", F.logsigmoid, ()),
    ("gelu", F.gelu, ("approximate",)),
    ("elu", F.elu, ("alpha",)),
    ("celu", F.celu, ("alpha",)),
    ("leaky_relu", F.leaky_relu, ("negative_slope",)),
    ("hardtanh", F.hardtanh, ("min_val", "max_val")),
    ("softplus", F.softplus, ("beta", "threshold")),
    ("logit", torch.logit, ("eps",)),
    ("nan_to_num", torch.nan_to_num, ("nan", "posinf", "neginf")),
    ("round", torch.round, ("decimals",)),
    ("tril", torch.tril, ("diagonal",)),
    ("triu", torch.triu, ("diagonal",)),
    ("clamp", torch.clamp, ("min", "max")),
):
    _unary(_n, _fn, *_attrs)

# Binary ops. Operands may be Python numbers on either side (IR scalars: shape arithmetic);
# the Python operator covers number-number and number-tensor with PyTorch's promotion.
_PY_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "mul": operator.mul,
    "pow": operator.pow,
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "remainder": operator.mod,
    "floor_divide": operator.floordiv,
    "bitwise_and": operator.and_,
    "bitwise_or": operator.or_,
    "bitwise_xor": operator.xor,
}


def _binary(name: str) -> Row:
    fn = getattr(torch, name)
    py = _PY_BINARY.get(name)

    def row(x: list[Any], a: Attrs) -> Any:
        lhs, rhs = x
        if not isinstance(lhs, torch.Tensor):
            if py is not None:
                return py(lhs, rhs)
            lhs = torch.as_tensor(lhs)
        try:
            return fn(lhs, rhs)
        except TypeError:  # functions without a Scalar overload (atan2, hypot...)
            if isinstance(rhs, torch.Tensor):
                raise
            return fn(lhs, torch.as_tensor(rhs))

    return row


for _n in (
    "mul pow eq ne lt le gt ge maximum minimum fmax fmin fmod remainder atan2 copysign hypot "
    "xlogy floor_divide bitwise_and bitwise_or bitwise_xor logical_and logical_or logical_xor"
).split():
    TABLE[_n] = _binary(_n)


def _add_sub(sign: int) -> Row:
    def row(x: list[Any], a: Attrs) -> Any:
        lhs, rhs = x
        alpha = a.get("alpha", 1)
        if alpha != 1:
            rhs = rhs * alpha
        return lhs + rhs if sign > 0 else lhs - rhs

    return row


TABLE["add"] = _add_sub(1)
TABLE["sub"] = _add_sub(-1)


def _div(x: list[Any], a: Attrs) -> Any:
    lhs, rhs = x
    mode = a.get("rounding_mode") or None
    if not isinstance(lhs, torch.Tensor) and not isinstance(rhs, torch.Tensor):
        if mode == "floor":
            return lhs // rhs
        if mode == "trunc":
            return float(int(lhs / rhs))
        return lhs / rhs
    if not isinstance(lhs, torch.Tensor):
        lhs = torch.as_tensor(lhs)
    return torch.div(lhs, rhs, rounding_mode=mode)


TABLE["div"] = _div


def _reduction(fn: Callable[..., Any], *extra: str) -> Row:
    def row(x: list[Any], a: Attrs) -> Any:
        kw = _kw(a, *extra)
        if "dtype" in kw:
            kw["dtype"] = _dtype(kw["dtype"])
        dims = _dims(a)
        if dims is None:
            return (
                fn(x[0], **kw)
                if not a.get("keepdim")
                else fn(x[0], dim=list(range(x[0].dim())), keepdim=True, **kw)
            )
        return fn(x[0], dim=dims, keepdim=bool(a.get("keepdim", False)), **kw)

    return row


TABLE["sum"] = _reduction(torch.sum, "dtype")
TABLE["mean"] = _reduction(torch.mean, "dtype")
TABLE["amax"] = _reduction(torch.amax)
TABLE["amin"] = _reduction(torch.amin)
TABLE["logsumexp"] = lambda x, a: torch.logsumexp(
    x[0], dim=_dims(a) or list(range(x[0].dim())), keepdim=bool(a.get("keepdim"))
)
TABLE["std"] = _reduction(torch.std, "correction")
TABLE["var"] = _reduction(torch.var, "correction")
TABLE["std_mean"] = _reduction(torch.std_mean, "correction")
TABLE["var_mean"] = _reduction(torch.var_mean, "correction")


def _all_any(fn: Callable[..., Any]) -> Row:
    def row(x: list[Any], a: Attrs) -> Any:
        dims = _dims(a)
        if dims is None:
            dims = list(range(x[0].dim()))
        r = x[0]
        for d in sorted((d % max(r.dim(), 1) for d in dims), reverse=True):
            r = fn(r, dim=d, keepdim=bool(a.get("keepdim")))
        return r if dims else fn(r)

    return row


TABLE["all"] = _all_any(torch.all)
TABLE["any"] = _all_any(torch.any)


def _prod(x: list[Any], a: Attrs) -> Any:
    dtype = _dtype(a.get("dtype"))
    dims = _dims(a)
    if dims is None:
        r = torch.prod(x[0], dtype=dtype)
        return r.reshape([1] * x[0].dim()) if a.get("keepdim") else r
    r = x[0] if dtype is None else x[0].to(dtype)
    for d in sorted((d % max(r.dim(), 1) for d in dims), reverse=True):
        r = torch.prod(r, dim=d, keepdim=bool(a.get("keepdim")))
    return r


TABLE["prod"] = _prod
TABLE["norm"] = lambda x, a: torch.linalg.vector_norm(
    x[0],
    ord=a.get("p", 2.0),
    dim=_dims(a),
    keepdim=bool(a.get("keepdim")),
    dtype=_dtype(a.get("dtype")),
)
TABLE["count_nonzero"] = lambda x, a: torch.count_nonzero(x[0], dim=_dims(a))
TABLE["max"] = lambda x, a: torch.max(x[0])
TABLE["min"] = lambda x, a: torch.min(x[0])
TABLE["max_dim"] = lambda x, a: tuple(torch.max(x[0], a["dim"], bool(a.get("keepdim"))))
TABLE["min_dim"] = lambda x, a: tuple(torch.min(x[0], a["dim"], bool(a.get("keepdim"))))
TABLE["argmax"] = lambda x, a: torch.argmax(x[0], dim=a.get("dim"), keepdim=bool(a.get("keepdim")))
TABLE["argmin"] = lambda x, a: torch.argmin(x[0], dim=a.get("dim"), keepdim=bool(a.get("keepdim")))
TABLE["cumsum"] = lambda x, a: torch.cumsum(x[0], a["dim"], dtype=_dtype(a.get("dtype")))
TABLE["cumprod"] = lambda x, a: torch.cumprod(x[0], a["dim"], dtype=_dtype(a.get("dtype")))
TABLE["softmax"] = lambda x, a: torch.softmax(x[0], a["dim"], dtype=_dtype(a.get("dtype")))
TABLE["log_softmax"] = lambda x, a: torch.log_softmax(x[0], a["dim"], dtype=_dtype(a.get("dtype")))
TABLE["sort"] = lambda x, a: tuple(
    torch.sort(
        x[0],
        dim=a.get("dim", -1),
        descending=bool(a.get("descending")),
        stable=bool(a.get("stable")),
    )
)
TABLE["argsort"] = lambda x, a: torch.argsort(
    x[0], dim=a.get("dim", -1), descending=bool(a.get("descending")), stable=bool(a.get("stable"))
)
TABLE["topk"] = lambda x, a: tuple(
    torch.topk(
        x[0],
        a["k"],
        dim=a.get("dim", -1),
        largest=bool(a.get("largest", True)),
        sorted=bool(a.get("sorted", True)),
    )
)


# ---- shapes and views ----


def _view(x: list[Any], a: Attrs) -> Any:
    try:
        return x[0].view(a["shape"])
    except RuntimeError:  # the IR's view also accepts inputs PyTorch could only copy
        return x[0].reshape(a["shape"])


def _slice(x: list[Any], a: Attrs) -> Any:
    t = x[0]
    dim = a.get("dim", 0) % t.dim()
    index = (slice(None),) * dim + (slice(a.get("start", 0), a.get("end"), a.get("step", 1)),)
    return t[index]


def _squeeze(x: list[Any], a: Attrs) -> Any:
    dims = a.get("dim")
    return x[0].squeeze() if dims is None else x[0].squeeze(tuple(dims))


def _index_key(indices: list[Any]) -> tuple[Any, ...]:
    # aten::index: a None index keeps that dim whole (in Python indexing None would add one).
    return tuple(slice(None) if i is None else i for i in indices)


TABLE.update(
    {
        "view": _view,
        "reshape": lambda x, a: x[0].reshape(a["shape"]),
        "expand": lambda x, a: x[0].expand(a["shape"]),
        "expand_as": lambda x, a: x[0].expand_as(x[1]),
        "permute": lambda x, a: x[0].permute(a["dims"]),
        "transpose": lambda x, a: x[0].transpose(a["dim0"], a["dim1"]),
        "t": lambda x, a: x[0].t(),
        "squeeze": _squeeze,
        "unsqueeze": lambda x, a: x[0].unsqueeze(a["dim"]),
        "flatten": lambda x, a: x[0].flatten(a.get("start_dim", 0), a.get("end_dim", -1)),
        "unflatten": lambda x, a: x[0].unflatten(a["dim"], a["sizes"]),
        "movedim": lambda x, a: x[0].movedim(a["source"], a["destination"]),
        "narrow": lambda x, a: x[0].narrow(a["dim"], a["start"], a["length"]),
        "select": lambda x, a: x[0].select(a["dim"], a["index"]),
        "slice": _slice,
        "diagonal": lambda x, a: x[0].diagonal(
            a.get("offset", 0), a.get("dim1", 0), a.get("dim2", 1)
        ),
        "contiguous": lambda x, a: x[0].contiguous(),
        "clone": lambda x, a: x[0].clone(),
        "alias": lambda x, a: x[0],
        "repeat": lambda x, a: x[0].repeat(a["repeats"]),
        "tile": lambda x, a: x[0].tile(a["dims"]),
        "flip": lambda x, a: x[0].flip(a["dims"]),
        "roll": lambda x, a: x[0].roll(a["shifts"], a.get("dims") or None),
        "chunk": lambda x, a: tuple(x[0].chunk(a["chunks"], a.get("dim", 0))),
        "split": lambda x, a: tuple(x[0].split(a["split_size"], a.get("dim", 0))),
        "split_with_sizes": lambda x, a: tuple(x[0].split(a["split_sizes"], a.get("dim", 0))),
        "unbind": lambda x, a: tuple(x[0].unbind(a.get("dim", 0))),
        "cat": lambda x, a: torch.cat(list(x), a.get("dim", 0)),
        "stack": lambda x, a: torch.stack(list(x), a.get("dim", 0)),
        "gather": lambda x, a: torch.gather(x[0], a["dim"], x[1]),
        "index_select": lambda x, a: torch.index_select(x[0], a["dim"], x[1]),
        "take_along_dim": lambda x, a: torch.take_along_dim(x[0], x[1], dim=a.get("dim")),
        "scatter_add": lambda x, a: torch.scatter_add(x[0], a["dim"], x[1], x[2]),
        "scatter_reduce": lambda x, a: torch.scatter_reduce(
            x[0], a["dim"], x[1], x[2], a["reduce"], include_self=bool(a.get("include_self", True))
        ),
        "index": lambda x, a: x[0][_index_key(x[1:])],
        "index_put": lambda x, a: _index_put(x[0].clone(), x, a),
        "index_put_": lambda x, a: _index_put(x[0], x, a),
        "masked_fill": lambda x, a: x[0].masked_fill(x[1], x[2] if len(x) > 2 else a["value"]),
        "masked_scatter": lambda x, a: x[0].masked_scatter(x[1], x[2]),
        "where": lambda x, a: torch.where(x[0], x[1], x[2]),
        "copy_": lambda x, a: x[0].copy_(x[1]),
        "fill_": lambda x, a: x[0].fill_(x[1] if len(x) > 1 else a["value"]),
        "numel": lambda x, a: x[0].numel(),
        "dim": lambda x, a: x[0].dim(),
        "size": lambda x, a: x[0].size(a["dim"]),
        # A float input's carrier (0-d f64); on meta tensors (the layout walk) any number does.
        "item": lambda x, a: 1.0 if x[0].device.type == "meta" else x[0].item(),
        "tuple_construct": lambda x, a: tuple(x),
        "tuple_get": lambda x, a: x[0][a["index"]],
        "cast": lambda x, a: x[0].to(_dtype(a["dtype"])),
        "to_copy": lambda x, a: x[0].to(
            dtype=_dtype(a.get("dtype")), device=a.get("device"), copy=True
        ),
        "to_device": lambda x, a: x[0].to(a["device"]),
    }
)


def _index_put(target: Any, x: list[Any], a: Attrs) -> Any:
    indices = x[2:]
    if any(i is None for i in indices):
        if a.get("accumulate"):  # Python's += would not accumulate repeated indices; ATen's op
            return torch.ops.aten.index_put_(target, list(indices), x[1], True)  # takes None
        target[_index_key(indices)] = x[1]
        return target
    return target.index_put_(tuple(indices), x[1], accumulate=bool(a.get("accumulate")))


def _scatter(x: list[Any], a: Attrs) -> Any:
    kw = {"reduce": a["reduce"]} if a.get("reduce") else {}
    src = x[2] if len(x) > 2 and x[2] is not None else a["value"]
    return torch.scatter(x[0], a["dim"], x[1], src, **kw)


TABLE["scatter"] = _scatter
TABLE["lerp"] = lambda x, a: torch.lerp(x[0], x[1], x[2] if len(x) > 2 else a["weight"])

# ---- creation: the result type gives the dtype (see run_op) ----
TABLE.update(
    {
        "zeros": lambda x, a, dt: torch.zeros(a["shape"], dtype=dt),
        "ones": lambda x, a, dt: torch.ones(a["shape"], dtype=dt),
        "empty": lambda x, a, dt: torch.zeros(a["shape"], dtype=dt),
        "full": lambda x, a, dt: torch.full(a["shape"], a["fill_value"], dtype=dt),
        "zeros_like": lambda x, a, dt: torch.zeros_like(x[0], dtype=dt),
        "ones_like": lambda x, a, dt: torch.ones_like(x[0], dtype=dt),
        "empty_like": lambda x, a, dt: torch.zeros_like(x[0], dtype=dt),
        "full_like": lambda x, a, dt: torch.full_like(x[0], a["fill_value"], dtype=dt),
        "new_zeros": lambda x, a, dt: x[0].new_zeros(a["shape"], dtype=dt),
        "new_ones": lambda x, a, dt: x[0].new_ones(a["shape"], dtype=dt),
        "new_empty": lambda x, a, dt: x[0].new_zeros(a["shape"], dtype=dt),
        "new_full": lambda x, a, dt: x[0].new_full(a["shape"], a["fill_value"], dtype=dt),
        "arange": lambda x, a, dt: torch.arange(
            a.get("start", 0), a["end"], a.get("step", 1), dtype=dt
        ),
        "linspace": lambda x, a, dt: torch.linspace(a["start"], a["end"], a["steps"], dtype=dt),
        "eye": lambda x, a, dt: torch.eye(a["n"], a.get("m") or a["n"], dtype=dt),
    }
)
_CREATION = set(
    (
        "zeros ones empty full zeros_like ones_like empty_like full_like new_zeros new_ones "
        "new_empty new_full arange linspace eye"
    ).split()
)

# ---- linear algebra and nn ----
TABLE["histc"] = lambda x, a: torch.histc(x[0], bins=a.get("bins", 100), min=a.get("min", 0), max=a.get("max", 0))


def _grouped_mm(x: list[Any], a: Attrs, weight_grad: bool = False) -> torch.Tensor:
    """grouped_mm (weight_grad: grouped_mm_weight) as transformers' loop over the groups' rows."""
    inp, other, offs = x
    if weight_grad:
        out = inp.new_zeros(offs.shape[0], inp.shape[1], other.shape[1])
    else:
        out = inp.new_zeros(inp.shape[0], other.shape[2])
    if inp.is_meta:
        return out
    start = 0
    for e, end in enumerate(offs.tolist()):
        if end < start or end > inp.shape[0]:
            raise RuntimeError("grouped_mm: offsets must be non-decreasing within [0, rows]")
        if weight_grad:
            out[e] = inp[start:end].T @ other[start:end]
        else:
            out[start:end] = inp[start:end] @ other[e]
        start = end
    return out


TABLE["grouped_mm"] = _grouped_mm
TABLE["grouped_mm_weight"] = lambda x, a: _grouped_mm(x, a, weight_grad=True)

TABLE.update(
    {
        "matmul": lambda x, a: torch.matmul(x[0], x[1]),
        "mm": lambda x, a: torch.mm(x[0], x[1]),
        "bmm": lambda x, a: torch.bmm(x[0], x[1]),
        "mv": lambda x, a: torch.mv(x[0], x[1]),
        "dot": lambda x, a: torch.dot(x[0], x[1]),
        "outer": lambda x, a: torch.outer(x[0], x[1]),
        "addmm": lambda x, a: torch.addmm(
            x[0], x[1], x[2], beta=a.get("beta", 1.0), alpha=a.get("alpha", 1.0)
        ),
        "baddbmm": lambda x, a: torch.baddbmm(
            x[0], x[1], x[2], beta=a.get("beta", 1.0), alpha=a.get("alpha", 1.0)
        ),
        "addcmul": lambda x, a: torch.addcmul(x[0], x[1], x[2], value=a.get("value", 1)),
        "addcdiv": lambda x, a: torch.addcdiv(x[0], x[1], x[2], value=a.get("value", 1)),
        "linear": lambda x, a: F.linear(x[0], x[1], _opt(x, 2)),
        "embedding": lambda x, a: F.embedding(x[1], x[0]),
        "layer_norm": lambda x, a: F.layer_norm(
            x[0], a["normalized_shape"], _opt(x, 1), _opt(x, 2), a.get("eps", 1e-5)
        ),
        "rms_norm": lambda x, a: F.rms_norm(x[0], a["normalized_shape"], _opt(x, 1), a.get("eps")),
        "group_norm": lambda x, a: F.group_norm(
            x[0], a["num_groups"], _opt(x, 1), _opt(x, 2), a.get("eps", 1e-5)
        ),
        "batch_norm": lambda x, a: F.batch_norm(
            x[0],
            _opt(x, 3),
            _opt(x, 4),
            _opt(x, 1),
            _opt(x, 2),
            bool(a.get("training")),
            a.get("momentum", 0.1),
            a.get("eps", 1e-5),
        ),
        "instance_norm": lambda x, a: F.instance_norm(
            x[0],
            _opt(x, 3),
            _opt(x, 4),
            _opt(x, 1),
            _opt(x, 2),
            bool(a.get("use_input_stats", True)),
            a.get("momentum", 0.1),
            a.get("eps", 1e-5),
        ),
        "local_response_norm": lambda x, a: F.local_response_norm(
            x[0], a["size"], a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("k", 1.0)
        ),
        "pad": lambda x, a: F.pad(
            x[0],
            a["pad"],
            a.get("mode", "constant"),
            a.get("value", 0.0) if a.get("mode", "constant") == "constant" else None,
        ),
        "pixel_shuffle": lambda x, a: F.pixel_shuffle(x[0], a["upscale_factor"]),
        "pixel_unshuffle": lambda x, a: F.pixel_unshuffle(x[0], a["downscale_factor"]),
    }
)


def _sdpa(x: list[Any], a: Attrs) -> Any:
    kw = dict(is_causal=bool(a.get("is_causal")), scale=a.get("scale"), enable_gqa=bool(a.get("enable_gqa")))
    noise = _opt(x, 4)
    if noise is None:
        return F.scaled_dot_product_attention(
            x[0], x[1], x[2], attn_mask=_opt(x, 3), dropout_p=a.get("dropout_p", 0.0), **kw
        )
    # dropout_noise multiplies the softmax weights: eager's math path, with the noise given
    # (a bool mask made additive first, as F.scaled_dot_product_attention does before it).
    mask = _opt(x, 3)
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=x[0].dtype, device=mask.device).masked_fill(~mask, float("-inf"))
    _, weights = torch.ops.aten._scaled_dot_product_attention_math(x[0], x[1], x[2], mask, **kw)
    v = x[2]
    if kw["enable_gqa"] and v.dim() >= 3 and v.shape[-3] != x[0].shape[-3]:
        v = v.repeat_interleave(x[0].shape[-3] // v.shape[-3], -3)
    return torch.matmul(weights * noise, v)


TABLE["scaled_dot_product_attention"] = _sdpa


def _dropout(x: list[Any], a: Attrs) -> Any:
    if a.get("train", True) and a.get("p", 0.5) > 0:
        return NotImplemented  # random numbers: the interpreter's generator defines them
    return x[0]


TABLE["dropout"] = _dropout


def _nd(value: Any, nd: int) -> Any:
    """An IR size list for nd spatial dims: one element stands for all of them."""
    if isinstance(value, list) and len(value) == 1 and nd > 1:
        return value * nd
    return value


def _conv(nd: int, transpose: bool) -> Row:
    fn = getattr(F, f"conv_transpose{nd}d" if transpose else f"conv{nd}d")

    def row(x: list[Any], a: Attrs) -> Any:
        if a.get("layout", "nchw") != "nchw" or a.get("padding_mode"):
            return NotImplemented
        stride, padding = _nd(a.get("stride", [1]), nd), _nd(a.get("padding", [0]), nd)
        dilation, groups = _nd(a.get("dilation", [1]), nd), a.get("groups", 1)
        if transpose:
            out_pad = _nd(a.get("output_padding", [0]), nd)
            return fn(x[0], x[1], _opt(x, 2), stride, padding, out_pad, groups, dilation)
        return fn(x[0], x[1], _opt(x, 2), stride, padding, dilation, groups)

    return row


def _conv_weight(nd: int) -> Row:
    """conv{nd}d_weight: the weight's gradient, as torch.nn.grad computes it."""

    def row(x: list[Any], a: Attrs) -> Any:
        if a.get("padding_mode"):
            return NotImplemented
        fn = getattr(torch.nn.grad, f"conv{nd}d_weight")
        stride, padding = _nd(a.get("stride", [1]), nd), _nd(a.get("padding", [0]), nd)
        dilation, groups = _nd(a.get("dilation", [1]), nd), a.get("groups", 1)
        return fn(x[0], list(a["weight_size"]), x[1], stride, padding, dilation, groups)

    return row


def _pool(kind: str, nd: int, with_indices: bool = False) -> Row:
    fn = getattr(F, f"{kind}_pool{nd}d")

    def row(x: list[Any], a: Attrs) -> Any:
        if a.get("layout", "nchw") != "nchw":
            return NotImplemented
        stride = _nd(a.get("stride"), nd) or None
        kernel, padding = _nd(a["kernel_size"], nd), _nd(a.get("padding", [0]), nd)
        if kind == "max":
            r = fn(
                x[0],
                kernel,
                stride,
                padding,
                _nd(a.get("dilation", [1]), nd),
                ceil_mode=bool(a.get("ceil_mode")),
                return_indices=with_indices,
            )
            return tuple(r) if with_indices else r
        kw = {"divisor_override": a.get("divisor_override")} if nd > 1 else {}
        return fn(
            x[0],
            kernel,
            stride,
            padding,
            bool(a.get("ceil_mode")),
            bool(a.get("count_include_pad", True)),
            **kw,
        )

    return row


def _max_pool_backward(nd: int) -> Row:
    """max_pool{nd}d_backward(grad_output, input): max_pool's input gradient, by autograd."""
    fn = getattr(F, f"max_pool{nd}d")

    def row(x: list[Any], a: Attrs) -> Any:
        stride = _nd(a.get("stride"), nd) or None
        kernel, padding = _nd(a["kernel_size"], nd), _nd(a.get("padding", [0]), nd)
        with torch.enable_grad():
            leaf = x[1].detach().requires_grad_()
            out = fn(leaf, kernel, stride, padding, _nd(a.get("dilation", [1]), nd),
                     ceil_mode=bool(a.get("ceil_mode")))
            (dx,) = torch.autograd.grad(out, leaf, x[0])
        return dx

    return row


def _adaptive(kind: str, nd: int, with_indices: bool = False) -> Row:
    fn = getattr(F, f"adaptive_{kind}_pool{nd}d")

    def row(x: list[Any], a: Attrs) -> Any:
        if a.get("layout", "nchw") != "nchw":
            return NotImplemented
        # -1: that dim keeps the input's size (None for PyTorch).
        size = [None if s < 0 else s for s in _nd(a["output_size"], nd)]
        if kind == "max":
            r = fn(x[0], size, return_indices=with_indices)
            return tuple(r) if with_indices else r
        return fn(x[0], size)

    return row


for _d in (1, 2, 3):
    TABLE[f"conv{_d}d"] = _conv(_d, False)
    TABLE[f"conv_transpose{_d}d"] = _conv(_d, True)
    TABLE[f"conv{_d}d_weight"] = _conv_weight(_d)
    TABLE[f"max_pool{_d}d"] = _pool("max", _d)
    TABLE[f"max_pool{_d}d_with_indices"] = _pool("max", _d, True)
    TABLE[f"max_pool{_d}d_backward"] = _max_pool_backward(_d)
    TABLE[f"avg_pool{_d}d"] = _pool("avg", _d)
    TABLE[f"adaptive_avg_pool{_d}d"] = _adaptive("avg", _d)
    TABLE[f"adaptive_max_pool{_d}d"] = _adaptive("max", _d)
    TABLE[f"adaptive_max_pool{_d}d_with_indices"] = _adaptive("max", _d, True)


def _linear_resample(name: str, backward: bool) -> Row:
    """upsample_{linear1d,bilinear2d,trilinear3d}(input) and their _backward(grad_output): ATen's
    op with the scales it was given ([] or <= 0: none)."""
    op = getattr(torch.ops.aten, name + ("_backward" if backward else ""))

    def row(x: list[Any], a: Attrs) -> Any:
        nd = x[0].dim() - 2
        scales = [s if s > 0 else None for s in a.get("scales") or []] or [None] * nd
        ac = bool(a.get("align_corners"))
        if backward:
            out = list(x[0].shape[2:])
            return op(x[0], out, [*x[0].shape[:2], *a["input_size"]], ac, *scales)
        return op(x[0], list(a["output_size"]), ac, *scales)

    return row


for _name in ("upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d"):
    TABLE[_name] = _linear_resample(_name, False)
    TABLE[_name + "_backward"] = _linear_resample(_name, True)


def _batch_norm_with_update(x: list[Any], a: Attrs) -> Any:
    """F.batch_norm(training=True) updating copies of the running statistics: (out, new running
    mean, new running var), the op's functional form (on meta tensors: the layouts)."""
    mean, var = x[3].clone(), x[4].clone()
    out = F.batch_norm(
        x[0], mean, var, _opt(x, 1), _opt(x, 2), True, a.get("momentum", 0.1), a.get("eps", 1e-5)
    )
    return out, mean, var


TABLE["batch_norm_with_update"] = _batch_norm_with_update


# ---- entry points for the C++ walker ----


def _result_dtype(type_str: str) -> torch.dtype | None:
    """The dtype of a tensor type such as "f32[1,16]" (None for scalars and other types)."""
    bracket = type_str.find("[")
    return DTYPES.get(type_str[:bracket]) if bracket > 0 else None


def _conform(value: Any, type_str: str) -> Any:
    if isinstance(value, torch.Tensor):
        dt = _result_dtype(type_str)
        if dt is not None and value.dtype != dt:
            return value.to(dt)
        if dt is None and type_str in ("int", "float", "bool") and value.dim() == 0:
            return {"int": int, "float": float, "bool": bool}[type_str](value.item())
        return value
    if type_str == "float" and isinstance(value, (int, bool)):
        return float(value)
    if type_str == "int" and isinstance(value, bool):
        return int(value)
    return value


def run_op(name: str, args: list[Any], attrs: Attrs, result_types: list[str]) -> Any:
    """One IR op with PyTorch: its result (a tuple for several results), or NotImplemented
    when PyTorch has no row for it (the caller then runs the reference interpreter)."""
    row = TABLE.get(name)
    if row is None:
        return NotImplemented
    if name in _CREATION:
        r = row(args, attrs, _result_dtype(result_types[0]))
    else:
        r = row(args, attrs)
    if r is NotImplemented:
        return r
    if len(result_types) == 1:
        return _conform(r, result_types[0])
    return tuple(_conform(v, t) for v, t in zip(r, result_types))


def compare_op(torch_results: list[Any], interp_results: list[Any]) -> str | None:
    """None when PyTorch's results of one op agree with the interpreter's (the tolerances of
    ``--check``), else how they first differ."""
    from xjit._backends import compare_outputs

    message = compare_outputs(list(interp_results), list(torch_results))
    return message.replace("output", "result", 1) if message else None


# ---- eager's output layouts (src/frontend/output_layout.cpp) ------------------------------
# At capture the frontend walks the graph once more on meta tensors (sizes and strides, no
# data) made from the real inputs: PyTorch's meta kernels apply eager's stride rules, so each
# graph output's meta tensor has the strides eager would give it (docs/decisions.md).


# Ops whose CPU kernels pick the result's memory format from their operands where the meta
# kernels (which cannot tell the device) return contiguous results: convolutions (oneDNN's
# mkldnn_conv_use_channels_last: input or weight channels_last) and group_norm (the input's
# suggested format). Checked against eager in tests/python/frontend/test_output_strides.py.
_CHANNELS_LAST_OPS = {f"conv{d}d" for d in (1, 2, 3)} | {f"conv_transpose{d}d" for d in (1, 2, 3)}
_CHANNELS_LAST_OPS.add("group_norm")
# Ops whose CPU kernel makes its result in the input's suggested memory format (channels-last,
# else contiguous) where the meta kernel keeps the input's strides (batch norm) or makes it
# contiguous (pixel_shuffle, roll along given dims; a roll of the flattened tensor is contiguous
# on both: sweep of output strides, session 33).
_SUGGESTED_FORMAT_OPS = {"batch_norm", "batch_norm_with_update", "pixel_shuffle", "roll"}
# Ops whose CPU kernel allocates a contiguous result where the meta kernel keeps the operand's
# layout (log_sigmoid_forward: `F.logsigmoid` of a permuted tensor).
_CONTIGUOUS_ON_CPU = {"log_sigmoid"}


def _suggested_channels_last(t: Any) -> torch.memory_format | None:
    if not isinstance(t, torch.Tensor) or t.dim() not in (4, 5):
        return None
    fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
    # PyTorch's suggest_memory_format: channels_last strides, not also contiguous ones.
    if t.is_contiguous(memory_format=fmt) and not t.is_contiguous():
        return fmt
    return None


# Advanced indexing with a size-1 dim before an indexed one: ATen's CPU kernel lays the
# result out contiguously where the meta kernel moves the indexed dim inward (`a[:, [1, 0]]`
# of a [1, 4, 4] tensor: CPU (8, 4, 1), meta (1, 1, 2); fuzzer seed 208732). Such an index runs
# on the CPU on uninitialized operands of the same sizes and strides (index tensors of zeros),
# up to this many elements of storage; a larger one keeps the meta kernel's layout.
_INDEX_ON_CPU_MAX_ELEMENTS = 1 << 24


def _index_layout_on_cpu(args: list[Any], attrs: Attrs, result_types: list[str]) -> Any:
    """The CPU index's result as a meta tensor, or None where the meta kernel agrees (no size-1
    dim in self), cannot be matched (boolean masks: their counts) or the storage is too big."""
    self_ = args[0]
    if not isinstance(self_, torch.Tensor) or 1 not in self_.shape or self_.numel() == 0:
        return None

    def storage_like(t: torch.Tensor) -> torch.Tensor | None:
        extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0)
        if extent > _INDEX_ON_CPU_MAX_ELEMENTS or any(st < 0 for st in t.stride()):
            return None
        return torch.zeros(extent, dtype=t.dtype).as_strided(t.size(), t.stride())

    operands: list[Any] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if a is not self_ and (a.dtype == torch.bool or a.dtype == torch.uint8):
                return None
            a = storage_like(a)
            if a is None:
                return None
        operands.append(a)
    return to_meta(run_op("index", operands, attrs, result_types))


def run_op_meta(name: str, args: list[Any], attrs: Attrs, result_types: list[str]) -> Any:
    """:func:`run_op` with factories making meta tensors (the operands are meta tensors)."""
    if name == "view":  # as Tensor.view: it raises where eager's would (run_op's row copies)
        return args[0].view(attrs["shape"])
    if name == "index" and (r := _index_layout_on_cpu(args, attrs, result_types)) is not None:
        return r
    with torch.device("meta"):
        r = run_op(name, args, attrs, result_types)
    if name in _CONTIGUOUS_ON_CPU and isinstance(r, torch.Tensor):
        return r.contiguous()
    if name in _CHANNELS_LAST_OPS and isinstance(r, torch.Tensor):
        operands = args[:1] if name == "group_norm" else args[:2]
        for fmt in map(_suggested_channels_last, operands):
            if fmt is not None and r.dim() == args[0].dim():
                return r.contiguous(memory_format=fmt)
    if name in _SUGGESTED_FORMAT_OPS and (name != "roll" or attrs.get("dims")):
        # (Batch norm, fuzzer seed 6401: of a transposed 2-D input eager's result is
        # contiguous, so its flatten() is a view of it.)
        fmt = _suggested_channels_last(args[0]) or torch.contiguous_format
        if isinstance(r, torch.Tensor):
            return r.contiguous(memory_format=fmt)
        return (r[0].contiguous(memory_format=fmt), *r[1:])
    return r


def to_meta(value: Any) -> Any:
    """A tensor as a meta tensor with its sizes and strides (other values unchanged)."""
    if isinstance(value, torch.Tensor) and value.device.type != "meta":
        return torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device="meta")
    return value


def meta_strided(sizes: list[int], strides: list[int], like: torch.Tensor) -> torch.Tensor:
    """A meta tensor of these sizes and strides with `like`'s dtype (the walk at representative
    sizes, output_layout.cpp)."""
    return torch.empty_strided(sizes, strides, dtype=like.dtype, device="meta")


def empty_meta(sizes: list[int], dtype: str) -> torch.Tensor:
    """A contiguous meta tensor (an op the meta walk could not run, with contiguous operands)."""
    return torch.empty(sizes, dtype=DTYPES[dtype], device="meta")


def layout_of(value: Any) -> Any:
    """(sizes, strides, storage offset, contiguous operand, the (sizes, strides) of the tensor
    it views or None) of a meta tensor, None otherwise."""
    if not isinstance(value, torch.Tensor):
        return None
    base = value._base
    viewed = None if base is None else (tuple(base.shape), base.stride())
    return (tuple(value.shape), value.stride(), value.storage_offset(), value.is_contiguous(),
            viewed)


def relayout(value: torch.Tensor, strides: list[int], offset: int) -> torch.Tensor:
    """`value`'s elements in a new tensor with these strides and storage offset (eager's
    layout for it). Dims of stride 0 (expanded) hold one element: copied from index 0."""
    sizes = value.shape
    extent = offset + 1
    for n, s in zip(sizes, strides):
        if n == 0:
            extent = offset
            break
        extent += (n - 1) * abs(s)
    buffer = torch.empty(max(extent, 0), dtype=value.dtype, device=value.device)
    out = buffer.as_strided(sizes, strides, offset)
    if value.numel():
        # Expanded dims (stride 0) would make copy_ write one location many times: write
        # their first index only (the values agree along them: eager broadcast them).
        one = [slice(0, 1) if s == 0 and n > 1 else slice(None) for n, s in zip(sizes, strides)]
        out[tuple(one)].copy_(value[tuple(one)])
    return out
