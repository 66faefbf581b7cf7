"""Graph breaks: constructs that cannot be captured end the graph, with a reason and the user's
line; the graph before the break is compiled, the breaking instruction runs in Python and a
generated resume function continues the frame (its graph counts here too). A frame that breaks
before any tensor work compiles no graph of its own (its entry only leads to the resume
function). tests/python/frontend/test_graph_breaks.py checks the break machinery itself."""

from __future__ import annotations

import torch

from corpus import Case


def x34():
    return (torch.randn(3, 4),)


def helper(t):
    return t * 2 + 1


def print_call(x):
    y = helper(x)
    print("y computed")  # breaks the frame; helper() is its own graph
    return y + 1


def item_control_flow(x):
    if x.sum().item() > 0:
        return helper(x)
    return helper(-x)


def tensor_bool(x):
    if x.mean() > 0:
        return x * 2
    return x * 3


def tolist_call(x):
    vals = x[0].tolist()
    return x + len(vals)


def numpy_call(x):
    return torch.from_numpy(x.numpy() * 2)


def try_except(x):
    try:
        y = helper(x)
    except RuntimeError:
        y = x
    finally:
        y = y + 1
    return y


def try_raise_caught(x):
    try:
        raise KeyError("k")
    except KeyError:
        return helper(x)


def raise_value_error(x, n=3):
    if n > 2:
        raise ValueError("n too large")
    return x


def generator_function(x):
    for i in range(2):
        yield x * i


def consume_generator(x):
    return list(generator_function(x))


def unknown_c_function(x):
    import os
    return x + len(os.getcwd())


def nonzero_shape(x):
    return torch.nonzero(x > 0) + 1


def data_dependent_while(x):
    while x.sum() < 100:
        x = x * 2
    return x


CASES = [
    Case("print_call", print_call, x34, graphs=2, breaks=1, reason="print"),
    Case("item_control_flow", item_control_flow, x34, graphs=2, breaks=1, reason="item"),
    Case("tensor_bool", tensor_bool, x34, graphs=2, breaks=1, reason="data-dependent"),
    Case("tolist_call", tolist_call, x34, graphs=2, breaks=1, reason="tolist"),
    # .numpy() breaks, then `ndarray * 2` in the resume function breaks again.
    Case("numpy_call", numpy_call, x34, graphs=1, breaks=2, reason="numpy", fallback=True),
    Case("try_except_normal_path", try_except, x34),
    Case("try_raise_caught", try_raise_caught, x34, graphs=1, breaks=1, reason="raise"),
    Case("raise_value_error", raise_value_error, x34, graphs=0, breaks=1, reason="raise",
         raises=ValueError),
    Case("consume_generator", consume_generator, x34, graphs=1, breaks=0),
    Case("unknown_c_function", unknown_c_function, x34, graphs=1, breaks=1, reason="getcwd"),
    Case("nonzero_shape", nonzero_shape, x34, graphs=2, breaks=1, reason="nonzero"),
    # One break (and resume function) per iteration: torch.rand(3, 4) doubles 5 times.
    Case("data_dependent_while", data_dependent_while, lambda: (torch.rand(3, 4),), graphs=6,
         breaks=6, reason="data-dependent"),
]
