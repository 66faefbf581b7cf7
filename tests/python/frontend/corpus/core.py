"""Core Python bytecode around tensor code: locals, constants, arithmetic, branches folded on
Python values, loops (unrolled), containers, unpacking, comprehensions, closures, f-strings,
identity and membership tests, with-blocks for grad mode, globals."""

from __future__ import annotations

import math

import torch

from corpus import Case

SCALE = 3.0
OFFSETS = (1.0, 2.0, 3.0)
CONFIG = {"act": "relu", "depth": 2}


def x4():
    return (torch.randn(4, 4),)


def x2():
    return (torch.randn(4, 4), torch.randn(4, 4))


def add_const(x):
    return x + 1


def arith_chain(x, y):
    a = x * y - y / 2.0
    b = a ** 2 + x @ y
    return -b, a % 3.0, b // 2.0


def inplace_binops(x, y):
    z = x + 0  # a fresh tensor: += on it is an in-place write nobody else sees
    z += y
    z *= 2
    z -= 1
    z /= 4
    return z


def scalar_math(x):
    n = 3
    m = n * 2 + 1
    f = math.sqrt(16.0) + SCALE
    return x * m + f


def branch_on_constant(x, flag=True):
    if flag:
        y = x.relu()
    else:
        y = x.sigmoid()
    if not flag:
        y = y + 100
    return y


def branch_on_none(x, bias=None):
    y = x * 2
    if bias is not None:
        y = y + bias
    if bias is None:
        y = y - 1
    return y


def and_or_chain(x, a=3, b=0):
    if a > 2 and b == 0 or a < 0:
        x = x + 1
    c = b or a
    d = a and b
    return x * c + d


def range_loop(x):
    for i in range(3):
        x = x * 2 + i
    return x


def while_loop(x):
    i = 0
    while i < 4:
        x = x + i
        i += 1
    return x


def list_loop(x):
    acc = []
    for s in [1.0, 2.0, 3.0]:
        acc.append(x * s)
    return acc[0] + acc[1] + acc[2]


def enumerate_zip(x, y):
    out = x
    for i, (a, b) in enumerate(zip([x, y], [y, x])):
        out = out + a * b * (i + 1)
    return out


def dict_ops(x):
    d = {"a": x, "b": x * 2}
    d["c"] = d["a"] + d["b"]
    total = x
    for k, v in d.items():
        total = total + v
    keys = list(d.keys())
    return total, len(keys), d.get("zz", 5)


def tuple_unpack(x, y):
    a, b = x, y
    (c, d), e = (a + b, a - b), a * b
    first, *rest = [c, d, e]
    return first + sum(rest)


def star_args_helper(*args, scale=1.0, **kwargs):
    out = args[0]
    for a in args[1:]:
        out = out + a
    return out * scale + kwargs.get("shift", 0.0)


def call_star_args(x, y):
    parts = [x, y]
    extra = {"shift": 2.0}
    return star_args_helper(*parts, scale=0.5, **extra)


def default_args_helper(x, a=1, *, b=2):
    return x * a + b


def call_defaults(x):
    return default_args_helper(x) + default_args_helper(x, 3, b=4)


def list_comprehension(x):
    ys = [x * i for i in range(4) if i % 2 == 0]
    return torch.stack(ys)


def dict_comprehension(x):
    d = {f"k{i}": x + i for i in range(3)}
    return d["k0"] + d["k2"]


def set_comprehension(x):
    sizes = {n % 3 for n in range(10)}
    return x * len(sizes) + max(sizes)


def set_methods_and_operators(x):
    s = {1, 2}
    s.add(3)
    s |= {4}
    t = s | {5}
    s.discard(1)
    if s and {2, 3} <= s and 1 not in s and t.issuperset(s):
        x = x + len(t - s)
    for k in sorted(t & {2, 4, 6}):
        x = x * 1.5 + k
    return x, s, t, set(CONFIG) - {"depth"}, frozenset(s)


def set_of_names_filters_a_list(x):
    # As transformers' config code does: field names into a set, then membership tests.
    known = set(CONFIG.keys())
    missing = [k for k in ("act", "depth", "width") if k not in known]
    return x * len(missing), missing


def set_of_a_tensor(x):
    seen = {x}  # a tensor hashes by identity: a graph break
    return x + len(seen)


def generator_expression(x):
    return sum(x * i for i in range(4))


def closure_counter(x):
    scale = 2.0

    def inner(t):
        return t * scale

    scale = 3.0  # the cell is read when inner runs
    return inner(x)


def nonlocal_update(x):
    total = 0

    def bump(k):
        nonlocal total
        total += k

    for k in range(4):
        bump(k)
    return x * total


def lambda_map(x):
    f = lambda t, k=2: t * k + 1  # noqa: E731
    return list(map(f, [x, x + 1]))


def fstring_constant(x, name="layer"):
    key = f"{name}_{3:02d}_{SCALE:.1f}"
    if key == "layer_03_3.0":
        return x + 1
    return x - 1


def identity_and_membership(x):
    a = "relu" in ("relu", "gelu")
    b = 3 not in [1, 2]
    c = x is x
    d = None is None
    if a and b and c and d:
        return x * 2
    return x


def isinstance_checks(x, n=3):
    out = x
    if isinstance(x, torch.Tensor):
        out = out + 1
    if isinstance(n, (int, float)):
        out = out * n
    if not isinstance(n, str):
        out = out - 1
    return out


def builtins_on_python_values(x):
    n = len([1, 2, 3]) + abs(-2) + min(3, 1, 2) + max([4, 5]) + int(2.7) + round(2.4)
    s = sum([1, 2, 3])
    f = float(n) / 2
    ok = all([True, 1]) and not any([0, False])
    return x * n + s + f + (1 if ok else 0)


def no_grad_block(x, w):
    with torch.no_grad():
        y = x @ w
    return y.relu()


def enable_grad_nested(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
        z = y + 1
    return z


def assert_true(x):
    assert x.dim() == 2, "needs a matrix"
    assert isinstance(x, torch.Tensor)
    return x.sum(0)


def global_constants(x):
    out = x * SCALE
    for o in OFFSETS:
        out = out + o
    if CONFIG["act"] == "relu":
        out = out.relu()
    return out * CONFIG["depth"]


def shape_arithmetic(x):
    n, m = x.shape
    h = n // 2
    return x.view(h, 2 * m).sum(-1) * (n + m) / x.numel()


def size_and_dims(x):
    return x.reshape(x.size(0) * x.size(1)), x.dim(), x.ndim, tuple(x.shape), x.size()


def returns_python_values(x):
    return x + 1, 3, "text", None, (1, 2.5)


def returns_input(x, y):
    return x, y + 1


def returns_dict(x):
    return {"double": x * 2, "neg": -x, "n": 2}


def nested_helpers(x):
    return helper_a(x) + helper_b(x)


def helper_a(t):
    return helper_b(t) * 2


def helper_b(t):
    return t.tanh()


def recursive_sum(x, depth=3):
    if depth == 0:
        return x
    return recursive_sum(x * 0.5, depth - 1) + x


def slicing_lists(x):
    items = [x, x + 1, x + 2, x + 3]
    a = items[1:3]
    b = items[::-1][0]
    return a[0] + a[1] + b


def swap_and_copy(x, y):
    x, y = y, x
    return x - y


def chained_compare(x, n=5):
    if 0 < n < 10:
        return x + n
    return x


def string_methods(x, name="Encoder.Layer"):
    parts = name.lower().split(".")
    if parts[0].startswith("enc") and "layer" in parts:
        return x * len(parts)
    return x


def getattr_hasattr(x):
    fn = getattr(torch, "relu")
    y = fn(x)
    if hasattr(x, "shape") and not hasattr(x, "nonexistent_attr"):
        y = y + 1
    return y


def divmod_and_power(x):
    q, r = divmod(17, 5)
    return x ** 2 * q + r + 2 ** 3


def unpack_shape_tuple(x):
    b, *rest = x.shape
    return x.reshape(b, -1).sum(1) + len(rest)


def nested_function_default(x):
    def scale(t, k=2.0):
        return t * k

    return scale(x) + scale(x, k=0.5)


CASES = [
    Case("add_const", add_const, x4, ops=("add",)),
    Case("arith_chain", arith_chain, x2, ops=("matmul", "pow", "remainder", "floor_divide")),
    Case("inplace_binops", inplace_binops, x2),
    Case("scalar_math", scalar_math, x4),
    Case("branch_on_constant", branch_on_constant, x4, ops=("relu",)),
    Case("branch_on_constant_false", branch_on_constant, x4, kwargs=lambda: {"flag": False}),
    Case("branch_on_none", branch_on_none, x4),
    Case("branch_on_none_bias", branch_on_none, lambda: (torch.randn(4, 4), torch.randn(4))),
    Case("and_or_chain", and_or_chain, x4),
    Case("range_loop", range_loop, x4),
    Case("while_loop", while_loop, x4),
    Case("list_loop", list_loop, x4),
    Case("enumerate_zip", enumerate_zip, x2),
    Case("dict_ops", dict_ops, x4),
    Case("tuple_unpack", tuple_unpack, x2),
    Case("call_star_args", call_star_args, x2),
    Case("call_defaults", call_defaults, x4),
    Case("list_comprehension", list_comprehension, x4, ops=("stack",)),
    Case("dict_comprehension", dict_comprehension, x4),
    Case("set_comprehension", set_comprehension, x4),
    Case("set_methods_and_operators", set_methods_and_operators, x4),
    Case("set_of_names_filters_a_list", set_of_names_filters_a_list, x4),
    Case("set_of_a_tensor", set_of_a_tensor, x4, graphs=1, breaks=1,
         reason="a set of values known only at run time"),
    Case("generator_expression", generator_expression, x4),
    Case("closure_counter", closure_counter, x4),
    Case("nonlocal_update", nonlocal_update, x4),
    Case("lambda_map", lambda_map, x4),
    Case("fstring_constant", fstring_constant, x4),
    Case("identity_and_membership", identity_and_membership, x4),
    Case("isinstance_checks", isinstance_checks, x4),
    Case("builtins_on_python_values", builtins_on_python_values, x4),
    Case("no_grad_block", no_grad_block,
         lambda: (torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)), grad=True),
    Case("enable_grad_nested", enable_grad_nested, x4, grad=True),
    Case("assert_true", assert_true, x4),
    Case("global_constants", global_constants, x4),
    Case("shape_arithmetic", shape_arithmetic, x4),
    Case("size_and_dims", size_and_dims, lambda: (torch.randn(3, 5),)),
    Case("returns_python_values", returns_python_values, x4),
    Case("returns_input", returns_input, x2),
    Case("returns_dict", returns_dict, x4),
    Case("nested_helpers", nested_helpers, x4),
    Case("recursive_sum", recursive_sum, x4),
    Case("slicing_lists", slicing_lists, x4),
    Case("swap_and_copy", swap_and_copy, x2),
    Case("chained_compare", chained_compare, x4),
    Case("string_methods", string_methods, x4),
    Case("getattr_hasattr", getattr_hasattr, x4),
    Case("divmod_and_power", divmod_and_power, x4),
    Case("unpack_shape_tuple", unpack_shape_tuple, lambda: (torch.randn(2, 3, 4),)),
    Case("nested_function_default", nested_function_default, x4),
]
