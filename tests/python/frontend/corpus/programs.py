"""Small programs mixing the analyzer's features the way models do: module containers iterated
with Python logic, forward methods inlined, tensor attributes and shape arithmetic feeding Python
decisions, grad-mode blocks, in-place writes to inputs and module state, Python state mutated
and replayed after the graph, structured outputs (dataclass, NamedTuple, dict), graph breaks in
the middle of such code, and the guards that send other inputs to new entries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus import Case


def x34():
    return (torch.randn(3, 4),)


def x2():
    return (torch.randn(3, 4), torch.randn(3, 4))


# --- modules -------------------------------------------------------------------------------------


class GatedStack(nn.Module):
    """ModuleList iterated with enumerate/zip against a Python list of gates."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.gates = [1.0, 0.0, 0.5]

    def forward(self, x):
        for i, (layer, g) in enumerate(zip(self.layers, self.gates)):
            if g == 0.0:
                continue  # skipped at capture time
            x = x + g * layer(x) / (i + 1)
        return x


class Heads(nn.Module):
    """ModuleDict iterated by items(), a dict output built in the loop."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"cls": nn.Linear(4, 2), "reg": nn.Linear(4, 1)})

    def forward(self, x):
        return {name: head(x).sum(-1) for name, head in self.heads.items()}


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def residual(self, x):  # a helper method, inlined
        return x + self.ff(self.norm(x))

    def forward(self, x):
        return self.residual(x)


class Encoder(nn.Module):
    """Nested modules: a Sequential of custom blocks walked with enumerate and a break."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(4) for _ in range(3)])
        self.final = nn.Linear(4, 4)

    def forward(self, x):
        for i, blk in enumerate(self.blocks):
            if i == 2:
                break
            x = blk(x)
        x = self.blocks[-1].forward(x)  # forward called directly
        return self.final(x), len(self.blocks)


class ChildCalls(nn.Module):
    """named_children()/children() walked in Python (a submodule registered twice once)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4, bias=False)
        self.b = nn.Linear(4, 4)
        self.again = self.a

    def forward(self, x):
        for name, child in self.named_children():
            x = child(x) if name != "b" else child(x).relu()
        return x, len(list(self.children())), [n for n, _ in self.named_children()]


class ShapeDriven(nn.Module):
    """A Python decision on the input's size and dtype chooses the path (guards)."""

    def __init__(self):
        super().__init__()
        self.small = nn.Linear(4, 4)
        self.large = nn.Linear(4, 4)

    def forward(self, x):
        if x.size(0) * x.size(1) > 12:
            return self.large(x)
        return self.small(x)


class Counting(nn.Module):
    """Python attribute updates on the module, replayed after the graph."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.mode = "fresh"

    def forward(self, x):
        # Attributes written without being read (a counter read back would be guarded and
        # recompile on every call).
        self.mode = "seen"
        self.last_shape = tuple(x.shape)
        self.last_norm = x.norm()
        return self.lin(x)


# --- tensor attributes and shapes ----------------------------------------------------------------


def attributes_into_python(x):
    out = x
    if x.dtype.is_floating_point and x.device.type == "cpu" and x.ndim == 2:
        out = out * 2
    if x.requires_grad:
        out = out + 100
    return out, x.numel(), x.size(-1), x.shape[-2], x.element_size(), x.is_contiguous()


def shape_math_views(x):
    b, n = x.shape
    half = n // 2
    y = x.reshape(b, half, n // half).transpose(1, 2).contiguous()
    return y.view(-1, half).sum(0) / (b * n), y.shape, x.stride()


def dyn_shape_scalar_math(x):
    b, n = x.shape  # symbolic under dynamic=True: the arithmetic stays symbolic
    return x.sum(0) / (b * n) + x.view(b, -1).mean(1).sum(), x.shape, x.size(0) + 1


def new_tensors_from_shapes(x):
    z = torch.zeros(x.shape[0], 2 * x.shape[1], dtype=x.dtype)
    o = x.new_full((x.size(1),), 0.5)
    r = torch.arange(x.numel(), dtype=torch.float32).reshape(x.shape)
    return z[:, : x.shape[1]] + x * o + r


def dtype_arithmetic(x):
    i = (x * 10).to(torch.int64)
    h = x.to(torch.float64) * 3
    same = i.dtype == torch.int64 and h.dtype is torch.float64
    return i // 3 + (1 if same else 0), h.sum(), (i.float() / 7).dtype


# --- grad mode -----------------------------------------------------------------------------------


def no_grad_decorated_helper(x, w):
    return _frozen_proj(x, w) + x.sum()


@torch.no_grad()
def _frozen_proj(x, w):
    return x @ w


def grad_mode_query(x):
    if torch.is_grad_enabled():
        return x * 2
    return x * 3


def set_grad_enabled_block(x, w):
    with torch.set_grad_enabled(False):
        y = x @ w
    return y * 2, torch.is_grad_enabled()


# --- in-place writes ------------------------------------------------------------------------------


def setitem_from_python_loop(x, y):
    for i in range(x.shape[0]):
        x[i] = y[i] * i
    return x.sum()


def inplace_on_view_of_input(x):
    row = x[1]
    row.mul_(10)  # writes through the view into the input
    x.t()[0].fill_(-1.0)
    return x


def inplace_clamp_and_index_add(x):
    x.clamp_(-0.5, 0.5)
    x.index_add_(0, torch.tensor([0, 2]), torch.ones(2, 4))
    return x.mean()


def conditional_inplace_on_flag(x, y, accumulate=True):
    if accumulate:
        y += x
    else:
        y.copy_(x)
    return y * 2


# --- Python state --------------------------------------------------------------------------------


class Config:
    def __init__(self):
        self.scale = 2.0
        self.seen = 0

    def __eq__(self, other):
        return vars(self) == vars(other)


def mutate_object_attributes(x, cfg):
    cfg.seen = cfg.seen + 1
    cfg.last = "mutated"
    return x * cfg.scale


def list_mutations_replayed(x, log):
    log.append(x.shape[0])
    log.extend([1, 2])
    log[0] = log[-1] * 10
    log.append("end")
    return x + len(log)


def dict_mutations_replayed(x, cache):
    cache["n"] = cache.get("n", 0) + 1
    cache.setdefault("shape", tuple(x.shape))
    cache.update(done=True)
    return x * cache["n"]


# --- structured outputs --------------------------------------------------------------------------


@dataclass
class Output:
    logits: torch.Tensor
    loss: torch.Tensor | None = None
    n: int = 0


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


class Stats(NamedTuple):
    mean: torch.Tensor
    scale: float = 2.0
    KIND = "stats"  # a plain class attribute

    def scaled(self):  # a method the user wrote: inlined on the tuple
        return self.mean * self.scale

    @property
    def doubled(self):
        return self.mean * 2


def namedtuple_class_members(x):
    s = Stats(x.mean(0))
    # _fields, a class attribute, a method, a property, a default and _asdict; comparing
    # _fields used to see a bound method (False).
    ok = s._fields == ("mean", "scale") and s.KIND == "stats" and s.scale == 2.0
    return s.scaled() + s.doubled if ok else x.sum(0), len(s), s._asdict()["scale"]


def dataclass_output(x, y):
    logits = x @ y.t()
    return Output(logits=logits, loss=(logits ** 2).mean(), n=x.shape[0])


def namedtuple_output_roundtrip(x, y):
    p = Pair(x + y, x - y)
    q = p._replace(second=p.second * 2)
    a, b = Pair(q.first, second=q[1])
    assert q._fields == ("first", "second")
    return Pair(first=a.relu(), second=b + q.first)


def nested_dict_output(x):
    return {"stats": {"mean": x.mean(), "std": x.std()}, "rows": [x[i] for i in range(2)],
            "meta": ("ok", x.shape[1])}


def dataclass_input_fields(x, out):
    return out.logits * x + (out.loss if out.loss is not None else 0) + out.n


# --- try/except ----------------------------------------------------------------------------------


def try_except_else(x):
    try:
        y = x * 2
    except ValueError:
        y = x
    else:
        y = y + 1
    return y


def caught_key_error_from_dict(x, key="missing"):
    d = {"a": x}
    try:
        v = d[key]
    except KeyError:
        v = x * -1
    return v + 1


def with_and_try_finally(x):
    out = x
    with torch.no_grad():
        try:
            out = out.exp()
        finally:
            out = out - 1
    return out


# --- graph breaks mid-program ---------------------------------------------------------------


def item_in_arithmetic(x):
    s = x.abs().max().item()  # a Python float from the tensor
    return x / (s + 1.0)


def tolist_loop(x):
    total = x * 0
    for v in x[:, 0].tolist():
        total = total + v
    return total


def print_between_modules(x, w):
    h = (x @ w).relu()
    print(end="")  # prints nothing, still a break
    return (h @ w.t()).sum()


def break_inside_helper(x):
    y = x * 2
    y = _logging_helper(y)
    return y - 1


def _logging_helper(t):
    print(end="")
    return t + 1


def break_in_loop_body(x):
    for i in range(2):
        x = x + i
        if x.sum().item() > 1e9:  # never true; one break per iteration
            break
    return x


def numpy_roundtrip_then_ops(x):
    arr = x.numpy()  # the array shares the input's memory; the shape is read in Python
    return x * 2, arr.shape


class VerboseBlock(nn.Module):
    """A submodule whose forward prints: the break is inside the inlined submodule call."""

    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.inner = _Printing()
        self.post = nn.Linear(4, 2)

    def forward(self, x):
        return self.post(self.inner(self.pre(x)))


class _Printing(nn.Module):
    def forward(self, x):
        print(end="")
        return x.relu()


# --- fallbacks -----------------------------------------------------------------------------------


def fallback_in_module_path(x):
    y = torch.kron(x, torch.ones(1, 2))  # no xjit op: a PyTorch fallback inside the graph
    return F.relu(y).sum(1)


def nan_to_num_python_kwargs(x):
    return torch.nan_to_num(x.log(), nan=0.0, neginf=-5.0) * 2


# --- guards --------------------------------------------------------------------------------------


def guard_on_string_arg(x, mode):
    return x.relu() if mode == "relu" else x.tanh()


def guard_on_tuple_arg(x, shape):
    return x.reshape(shape) * len(shape)


def guard_on_none_vs_tensor(x, bias):
    return x * 2 + bias if bias is not None else x * 2


def guard_on_dtype_of_second_input(x, idx):
    return x[idx].sum(0)


def guard_on_dict_value(x, opts):
    return x * opts["scale"] + opts["shift"]


CASES = [
    Case("modulelist_with_gates", GatedStack(), x34),
    Case("moduledict_items_to_dict", Heads(), x34),
    Case("nested_sequential_blocks", Encoder(), x34, ops=("layer_norm",)),
    Case("named_children_walk", ChildCalls(), x34),
    Case("module_shape_decision", ShapeDriven(), x34, second=lambda: (torch.randn(4, 4),)),
    Case("module_python_state", Counting(), x34),
    Case("attributes_into_python", attributes_into_python, x34),
    Case("shape_math_views", shape_math_views, x34),
    Case("new_tensors_from_shapes", new_tensors_from_shapes, x34),
    Case("dtype_arithmetic", dtype_arithmetic, x34),
    Case("no_grad_decorated_helper", no_grad_decorated_helper,
         lambda: (torch.randn(3, 4), torch.randn(4, 2))),
    Case("grad_mode_query", grad_mode_query, x34),
    Case("grad_mode_query_grad_on", grad_mode_query, x34, grad=True),  # the other branch
    Case("dyn_shape_scalar_math", dyn_shape_scalar_math, lambda: (torch.randn(3, 4),),
         dynamic=True, second=lambda: (torch.randn(5, 4),), recompile=False),
    # torch.zeros(x.shape[0], ...), new_full, arange(numel).reshape(x.shape) and z[:, :x.shape[1]]
    # take symbolic sizes (docs/ir.md): other sizes reuse the capture.
    Case("dyn_new_tensors_from_shapes", new_tensors_from_shapes, lambda: (torch.randn(3, 4),),
         dynamic=True, second=lambda: (torch.randn(6, 5),), recompile=False),
    Case("set_grad_enabled_block", set_grad_enabled_block,
         lambda: (torch.randn(3, 4), torch.randn(4, 2))),
    Case("setitem_from_python_loop", setitem_from_python_loop, x2),
    # Writing through a view of an input writes the view's new value into the input (one
    # graph); the caller sees both writes.
    Case("inplace_on_view_of_input", inplace_on_view_of_input, x34),
    # index_add_ is an index_put accumulate (a PyTorch fallback until session 23).
    Case("inplace_clamp_and_index_add", inplace_clamp_and_index_add, x34, ops=("index_put",)),
    Case("conditional_inplace_on_flag", conditional_inplace_on_flag, x2),
    Case("conditional_inplace_copy", conditional_inplace_on_flag, x2,
         kwargs=lambda: {"accumulate": False}),
    Case("mutate_object_attributes", mutate_object_attributes,
         lambda: (torch.randn(3, 4), Config())),
    Case("list_mutations_replayed", list_mutations_replayed, lambda: (torch.randn(3, 4), [7])),
    Case("dict_mutations_replayed", dict_mutations_replayed,
         lambda: (torch.randn(3, 4), {"n": 2, "drop": 0})),
    Case("namedtuple_class_members", namedtuple_class_members, x34),
    Case("dataclass_output", dataclass_output, x2),
    Case("namedtuple_output_roundtrip", namedtuple_output_roundtrip, x2),
    Case("nested_dict_output", nested_dict_output, x34),
    Case("dataclass_input_fields", dataclass_input_fields,
         lambda: (torch.randn(3, 4), Output(torch.randn(3, 4), torch.randn(()), 5))),
    Case("try_except_else", try_except_else, x34),
    # The KeyError raised at capture time is a break inside a try block: the frame runs in
    # Python (no graph of its own), with the right handler.
    Case("caught_key_error_from_dict", caught_key_error_from_dict, x34, graphs=0, breaks=1,
         reason="KeyError"),
    Case("with_and_try_finally", with_and_try_finally, x34),
    Case("item_in_arithmetic", item_in_arithmetic, x34, graphs=2, breaks=1, reason="item"),
    Case("tolist_loop", tolist_loop, x34, graphs=2, breaks=1, reason="tolist"),
    Case("print_between_modules", print_between_modules,
         lambda: (torch.randn(3, 4), torch.randn(4, 5)), graphs=2, breaks=1, reason="print"),
    # The print inside the inlined helper breaks the root at the helper's call; the helper then
    # runs as a root of its own and breaks again: 2 breaks, graphs y*2, t+1, y-1.
    Case("break_inside_helper", break_inside_helper, x34, graphs=3, breaks=2, reason="print"),
    # One break per iteration; the last resume function only returns x (no graph).
    Case("break_in_loop_body", break_in_loop_body, x34, graphs=2, breaks=2, reason="item"),
    Case("numpy_roundtrip_then_ops", numpy_roundtrip_then_ops, x34, graphs=1, breaks=1,
         reason="numpy"),
    # The root breaks at self.inner(...); _Printing.forward then runs as a root and breaks at
    # its print; graphs: pre, relu, post.
    Case("break_in_submodule_forward", VerboseBlock(), x34, graphs=3, breaks=2, reason="print"),
    Case("fallback_in_module_path", fallback_in_module_path, x34, fallback=True),
    Case("nan_to_num_python_kwargs", nan_to_num_python_kwargs, lambda: (torch.randn(3, 4),),
         ops=("nan_to_num",)),
    Case("guard_on_string_arg", guard_on_string_arg, lambda: (torch.randn(3), "relu"),
         second=lambda: (torch.randn(3), "tanh")),
    Case("guard_on_tuple_arg", guard_on_tuple_arg, lambda: (torch.randn(12), (3, 4)),
         second=lambda: (torch.randn(12), (2, 2, 3))),
    Case("guard_on_none_vs_tensor", guard_on_none_vs_tensor, lambda: (torch.randn(3), None),
         second=lambda: (torch.randn(3), torch.randn(3))),
    Case("guard_on_index_dtype", guard_on_dtype_of_second_input,
         lambda: (torch.randn(4, 3), torch.tensor([0, 2])),
         second=lambda: (torch.randn(4, 3), torch.tensor([True, False, True, False]))),
    Case("guard_on_dict_value", guard_on_dict_value,
         lambda: (torch.randn(3), {"scale": 2.0, "shift": 1.0}),
         second=lambda: (torch.randn(3), {"scale": 2.0, "shift": -1.0})),
    Case("guard_dict_value_same", guard_on_dict_value,
         lambda: (torch.randn(3), {"scale": 2.0, "shift": 1.0}),
         second=lambda: (torch.randn(3), {"scale": 2.0, "shift": 1.0}), recompile=False),
]
