"""Inlining of Python code around tensor work: user functions and methods, recursion (and the
inlining depth limit), *args/**kwargs and defaults, closures and cells, lambdas,
functools.partial, comprehensions and generator expressions over Python containers, builtins on
Python values, f-strings and string methods on constants. Everything here folds away at capture
time, so each case is one graph unless it says otherwise."""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import operator

import torch

from corpus import Case

ACTS = {"relu": torch.relu, "tanh": torch.tanh}
WEIGHTS = [0.5, 1.5, -2.0]


def x34():
    return (torch.randn(3, 4),)


def x2():
    return (torch.randn(3, 4), torch.randn(3, 4))


# --- user functions, recursion --------------------------------------------------------------


def _double(t):
    return t * 2


def _apply_twice(f, t):
    return f(f(t))


def higher_order(x):
    return _apply_twice(_double, x) + _apply_twice(torch.sin, x)


def _fact(n):
    return 1 if n <= 1 else n * _fact(n - 1)


def recursive_python_value(x):
    return x * _fact(5)  # recursion on Python ints only: a constant 120


def _tree_sum(t, depth):
    if depth == 0:
        return t
    return _tree_sum(t * 0.5, depth - 1) + _tree_sum(t.tanh(), depth - 1)


def recursion_tree(x):
    return _tree_sum(x, 3)  # 8 leaves, all inlined


def _deep(t, n):
    if n == 0:
        return t
    return _deep(t + 1, n - 1)


def recursion_over_depth_limit(x):
    # 18 nested calls exceed the inlining limit (16). The call that would go past the limit is
    # a graph break at the root's call site; each _deep frame then runs as a root of its own
    # (n=18 and n=17 break the same way, compiling their `t + 1`; n=16 inlines the rest), and
    # the root's resume function compiles the `* 2`.
    return _deep(x, 18) * 2


def _mutual_even(t, n):
    return t if n == 0 else _mutual_odd(t + 1, n - 1)


def _mutual_odd(t, n):
    return -t if n == 0 else _mutual_even(t * 2, n - 1)


def mutual_recursion(x):
    return _mutual_even(x, 5)


# --- arguments ----------------------------------------------------------------------------------


def _kw_only(x, *, scale, shift=0.0):
    return x * scale + shift


def kwonly_arguments(x):
    return _kw_only(x, scale=2.0) + _kw_only(x, shift=1.0, scale=-1.0)


def _collect(*args, **kwargs):
    out = args[0]
    for a in args[1:]:
        out = out + a
    for k in kwargs:
        out = out * kwargs[k]
    return out, len(args), tuple(kwargs)


def varargs_and_kwargs(x, y):
    return _collect(x, y, x * y, a=2.0, b=0.5)


def _forward_all(*args, **kwargs):
    return _kw_only(*args, **kwargs)


def forward_star_star(x):
    return _forward_all(x, scale=3.0, shift=-1.0)


def _mutable_default(t, acc=None):
    acc = [] if acc is None else acc
    acc.append(t)
    return acc


def none_default_list(x):
    a = _mutable_default(x)
    b = _mutable_default(x + 1, [x * 3])
    return len(a) + len(b), a[0] + b[0] + b[1]


def _positional_defaults(t, a=1.0, b=2.0, c=3.0):
    return t * a + b * c


def mixed_positional_keyword(x):
    return (_positional_defaults(x, 2.0) + _positional_defaults(x, c=0.0)
            + _positional_defaults(x, *[1.0, 1.0], **{"c": 1.0}))


def kwargs_at_root(x, scale=1.0, **opts):
    out = x * scale
    if opts.get("negate"):
        out = -out
    return out + len(opts)


# --- closures, cells, lambdas, partial ----------------------------------------------------------


def _make_scaler(k):
    def scale(t):
        return t * k

    return scale


def closure_factory(x):
    s2, s3 = _make_scaler(2.0), _make_scaler(3.0)
    return s2(x) + s3(x)


def closure_over_tensor(x, y):
    def add_y(t):
        return t + y  # a cell holding an input tensor

    return add_y(x) * add_y(x * 2)


def _counter():
    count = 0

    def step():
        nonlocal count
        count += 1
        return count

    return step


def closure_with_state(x):
    step = _counter()
    step()
    step()
    return x * step()


def nested_closures(x):
    a = 2.0

    def outer(t):
        b = 3.0

        def inner(u):
            return u * a + b

        return inner(t) - a

    return outer(x)


def lambda_sort_key(x):
    keys = [3, 1, 2]
    vals = [x, x * 2, x + 1]
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    return vals[order[0]] - vals[order[-1]], order


def sorted_dict_items_by_key(x, y):
    d = {"b": x, "c": y, "a": x * y}
    items = sorted(d.items(), key=lambda kv: kv[0], reverse=True)  # tensors as values only
    return [k for k, _ in items], sum(v for _, v in items)


def minmax_key_ties(x):
    names = ["ab", "wxyz", "a", "abcd"]
    longest = max(names, key=len)  # the first of equal keys wins
    closest = min([3, -4, 4, -3], key=abs)
    stable = sorted([(1, "b"), (0, "z"), (1, "a")], key=lambda p: p[0], reverse=True)
    return x * len(longest) + closest, longest, stable


def sorted_tensor_values_break(x, y):
    # Ordering tensors needs their values: the comparison is a graph break.
    lo = sorted([x.sum(), y.sum()])[0]
    return lo * 2


def lambda_captures_tensor(x, y):
    f = lambda t: t * y + x  # noqa: E731
    return f(x), f(y)


# Partials made at import (partials made in the frame: partial_made_in_frame).
ADD3 = functools.partial(torch.add, other=3.0)
HALF = functools.partial(_kw_only, scale=0.5)
AXPB = functools.partial(lambda a, t, b: t * a - b, 2.0, b=1.0)


def partial_function(x):
    return ADD3(x) + HALF(x, shift=1.0) + HALF(x, scale=2.0)  # the call's keyword wins


def partial_of_lambda(x):
    return AXPB(x.t()) + AXPB(x.t(), b=0.5)  # stored positional arguments go first


def partial_argument(x, f):
    return f(x) * 2  # a partial passed in: its stored arguments are guarded


def partial_made_in_frame(x, mode="tanh"):
    act = functools.partial(torch.nn.functional.gelu, approximate=mode)
    shifted = functools.partial(HALF, shift=1.5)  # a partial of a partial
    return shifted(act(x)), act  # returned: made again per call (a new object, as in Python)


def partial_of_tensor(x):
    add_x = functools.partial(torch.add, x)  # a tensor argument: an abstract partial, called inline
    return add_x(1.0) * 2


def reduce_with_operator(x, y):
    return functools.reduce(operator.add, [x, y, x * y]), functools.reduce(
        lambda a, b: a * b, [1, 2, 3, 4])


# --- comprehensions and builtins on Python containers --------------------------------------------


def nested_comprehension(x):
    grid = [[x * i + j for j in range(2)] for i in range(3)]
    return torch.stack([torch.stack(row) for row in grid])


def comprehension_with_filter_and_zip(x):
    names = ["a", "bb", "ccc", "dddd"]
    parts = [x * w for n, w in zip(names, [1.0, 2.0, 3.0, 4.0]) if len(n) % 2 == 0]
    return sum(parts)


def generator_into_builtins(x):
    ws = WEIGHTS
    total = sum(w * w for w in ws)
    hi = max(abs(w) for w in ws)
    nonneg = all(w > -5 for w in ws)
    return x * total / hi if nonneg else x


def enumerate_start_reversed(x):
    out = torch.zeros_like(x)
    for i, w in enumerate(reversed(WEIGHTS), start=1):
        out = out + x * w * i
    return out


def zip_three_and_dict_from_zip(x, y):
    d = dict(zip(["x", "y", "xy"], [x, y, x * y]))
    return sum(v for k, v in d.items() if k != "y")


def range_arithmetic(x):
    r = range(2, 11, 3)
    return (x * len(r) + r[-1] + sum(r) + r[1:][0] + int(5 in r) - int(6 in r) + r.index(8)
            + r.count(2))


def sorted_and_minmax_key(x):
    vals = sorted([3, -1, 2], reverse=True)
    longest = max(["ab", "abcd", "a"])  # strings compare lexicographically
    return x * vals[0] + min(vals) + len(longest)


def isinstance_dispatch(x):
    out = x
    for v in [2, 0.5, (1, 2), "s", None]:
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            out = out * v
        elif isinstance(v, float):
            out = out + v
        elif isinstance(v, tuple):
            out = out - len(v)
        elif v is None:
            out = out.relu()
    return out


def getattr_default_and_dispatch(x):
    out = x
    for name in ["relu", "tanh"]:
        out = getattr(torch, name)(out) + getattr(x, "missing_attr", 1.0)
    return ACTS["relu"](out) + hasattr(out, "shape")


def math_module_on_constants(x):
    c = math.floor(2.7) + math.ceil(1.2) + math.log(math.e) + math.pi
    return x * c + math.cos(0.0) + math.isclose(0.1 + 0.2, 0.3)


def bool_int_float_conversions(x):
    n = int("12") + int(True) + float("1.5") + bool([]) + bool([0])
    return x * n + abs(-3.5) + pow(2, 5) + round(3.14159, 2)


def chained_ternary(x, mode="b"):
    k = 1.0 if mode == "a" else 2.0 if mode == "b" else 3.0
    return x * k


# --- strings ------------------------------------------------------------------------------------


def fstring_key_lookup(x):
    params = {f"w{i}": float(i + 1) for i in range(3)}
    out = x
    for i in range(3):
        out = out * params[f"w{i}"]
    return out


def string_method_chain(x, name="  Decoder.Block_03  "):
    s = name.strip().lower().replace("_", ".")
    parts = s.split(".")
    idx = int(parts[-1]) if parts[-1].isdigit() else 0
    tag = "-".join([p.upper() for p in parts[:2]])
    if tag.startswith("DECODER") and s.endswith("03") and s.count(".") == 2:
        return x * idx + len(tag)
    return x


def string_format_and_percent(x):
    a = "{}:{:.2f}".format("k", 1.5)
    b = "%s-%d" % ("id", 7)
    return x * len(a) + len(b) + ("k:1.50" == a)


def tuple_of_strings_out(x):
    return x * 2, "dev=" + str(x.device), f"{x.dtype}", repr(4)


# --- Python semantics that are easy to get wrong (evaluated at capture time) ------------------


def py_late_binding(x):
    fs = [lambda: i for i in range(3)]  # one cell shared by all three: each returns 2
    return x + 1, [f() for f in fs]


def py_neg_slices(x):
    v = list(range(10))
    return x + 1, v[::-2], v[-3:1:-1], v[8:2:-3], "abcdef"[::-1], (1, 2, 3)[-5:]


def py_dict_order(x):
    d = {"b": 1, "a": 2}
    d.update({"c": 3, "b": 4})  # "b" keeps its place
    d.pop("a")
    d["a"] = 5  # re-inserted last
    return x + 1, list(d), list(d.values()), d


def py_int_ops(x):
    n = 7
    # floor division and modulo round toward -inf, round() to even, int() toward 0
    return (x + 1, n // -2, -7 % 3, 7 ** -1, -n >> 1, n & 3 | 8 ^ 5, divmod(-7, 2), round(2.5),
            round(3.5), int(-2.5), math.trunc(-2.7))


def py_str_ops(x):
    s = "Hello, World"
    return (x + 1, s.title(), s.casefold(), s.partition(","), s.center(16, "*"), s.zfill(15),
            s[1:8:2], s.find("o"), s.rfind("o"), s.encode()[:3])


def py_chained_bool(x):
    a, b = 0, ""  # and/or return an operand, not a bool
    return x + 1, (a or b or "z"), (1 and [] and 3), not not [0], [] == [], None or 0


def py_unpack_ext(x):
    a, *b, c = range(5)
    (d, e), *f = [(1, 2), 3, 4]
    return x + 1, a, b, c, d, e, f


def py_star_in_display(x):
    a = [1, 2]
    b = (*a, 3, *range(2))
    c = {**{"x": 1}, "y": 2, **{"x": 3}}
    return x + 1, b, c, [*a, *b]


def py_minmax_mixed(x):
    # the first of equal items wins (1.0, not 1); float sums accumulate like Python's
    return (x + 1, max(1, 2.5, 2), min([3, 1.0, 1]), max("ab", "b"), sum([0.1] * 10),
            sum(range(4), 10))


def py_tensor_shape_ops(x):
    s = x.shape
    return (x + 1, s[::-1], s[1:], list(s), s + (5,), s == (3, 4), s.numel(), len(s),
            tuple(reversed(s)), max(s))


def py_enumerate_dict(x):
    d = {"a": 1, "b": 2}
    return x + 1, list(enumerate(d)), list(zip(d, d.values(), "xy")), dict(enumerate("ab"))


@dataclasses.dataclass
class _Cfg:
    scale: float = 2.0
    names: tuple = ("a", "b")
    KIND = "cfg"  # a class attribute, not a field

    def twice(self):
        return self.scale * 2

    @property
    def half(self):
        return self.scale / 2


class _Mode(enum.Enum):
    A = 1
    B = 2


def dataclass_config_members(x, cfg):
    ok = cfg.KIND == "cfg" and cfg.names == ("a", "b")
    return x * cfg.twice() + cfg.half if ok else x


def dataclass_made_in_frame(x):
    c = _Cfg(3.0)
    return x * c.twice() + c.half, c == _Cfg(3.0), c.names[1]


def enum_members(x, mode=_Mode.A):
    if mode is _Mode.A and mode == _Mode.A:
        return x * mode.value, mode.name
    return x, mode.name


# --- methods of plain Python objects ------------------------------------------------------------


class _Affine:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __eq__(self, other):
        return (self.a, self.b) == (other.a, other.b)

    def __call__(self, t):
        return t * self.a + self.b

    @property
    def slope(self):
        return self.a

    @staticmethod
    def clip(t):
        return t.clamp(-1, 1)



AFFINE = _Affine(2.0, 1.0)


def python_object_methods(x):
    # __call__, a property and a staticmethod of an object made at import (constructing one in
    # the frame is a graph break today)
    f = AFFINE
    return _Affine.clip(f(x)) * f.slope + f.__call__(x)


def object_argument(x, f):
    return f(x) + f.slope  # the object's attributes are guarded


CASES = [
    Case("higher_order", higher_order, x34, ops=("sin",)),
    Case("recursive_python_value", recursive_python_value, x34),
    Case("recursion_tree", recursion_tree, x34, ops=("tanh",)),
    Case("recursion_over_depth_limit", recursion_over_depth_limit, x34, graphs=4, breaks=3,
         reason="inlining limit"),
    Case("mutual_recursion", mutual_recursion, x34),
    Case("kwonly_arguments", kwonly_arguments, x34),
    Case("varargs_and_kwargs", varargs_and_kwargs, x2),
    Case("forward_star_star", forward_star_star, x34),
    Case("none_default_list", none_default_list, x34),
    Case("mixed_positional_keyword", mixed_positional_keyword, x34),
    Case("kwargs_at_root", kwargs_at_root, x34, kwargs=lambda: {"scale": 2.0, "negate": True}),
    Case("closure_factory", closure_factory, x34),
    Case("closure_over_tensor", closure_over_tensor, x2),
    Case("closure_with_state", closure_with_state, x34),
    Case("nested_closures", nested_closures, x34),
    Case("lambda_sort_key", lambda_sort_key, x34),
    Case("sorted_dict_items_by_key", sorted_dict_items_by_key, x2),
    Case("minmax_key_ties", minmax_key_ties, x34),
    Case("sorted_tensor_values_break", sorted_tensor_values_break, x2, graphs=2, breaks=1,
         reason="data-dependent"),
    Case("lambda_captures_tensor", lambda_captures_tensor, x2),
    Case("partial_function", partial_function, x34),
    Case("partial_made_in_frame", partial_made_in_frame, x34, ops=("gelu",)),
    Case("partial_of_tensor", partial_of_tensor, x34, ops=("add",)),
    Case("partial_of_lambda", partial_of_lambda, x34),
    Case("partial_argument", partial_argument,
         lambda: (torch.randn(3, 4), functools.partial(_kw_only, scale=2.0)),
         second=lambda: (torch.randn(3, 4), functools.partial(_kw_only, scale=3.0))),
    Case("partial_argument_tensor", partial_argument,
         lambda: (torch.randn(3, 4), functools.partial(_kw_only, scale=torch.randn(4))),
         second=lambda: (torch.randn(3, 4), functools.partial(_kw_only, scale=torch.randn(4))),
         recompile=False),  # a tensor stored in the partial is a graph input
    Case("reduce_with_operator", reduce_with_operator, x2),
    Case("nested_comprehension", nested_comprehension, x34, ops=("stack",)),
    Case("comprehension_with_filter_and_zip", comprehension_with_filter_and_zip, x34),
    Case("generator_into_builtins", generator_into_builtins, x34),
    Case("enumerate_start_reversed", enumerate_start_reversed, x34),
    Case("zip_three_and_dict_from_zip", zip_three_and_dict_from_zip, x2),
    Case("range_arithmetic", range_arithmetic, x34),
    Case("sorted_and_minmax_key", sorted_and_minmax_key, x34),
    Case("isinstance_dispatch", isinstance_dispatch, x34, ops=("relu",)),
    Case("getattr_default_and_dispatch", getattr_default_and_dispatch, x34, ops=("tanh",)),
    Case("math_module_on_constants", math_module_on_constants, x34),
    Case("bool_int_float_conversions", bool_int_float_conversions, x34),
    Case("chained_ternary", chained_ternary, x34, second=x34, recompile=False),
    Case("chained_ternary_mode_change", chained_ternary, x34, kwargs=lambda: {"mode": "c"}),
    Case("fstring_key_lookup", fstring_key_lookup, x34),
    Case("string_method_chain", string_method_chain, x34),
    Case("string_format_and_percent", string_format_and_percent, x34),
    Case("tuple_of_strings_out", tuple_of_strings_out, x34),
    Case("py_late_binding", py_late_binding, x34),
    Case("py_neg_slices", py_neg_slices, x34),
    Case("py_dict_order", py_dict_order, x34),
    Case("py_int_ops", py_int_ops, x34),
    Case("py_str_ops", py_str_ops, x34),
    Case("py_chained_bool", py_chained_bool, x34),
    Case("py_unpack_ext", py_unpack_ext, x34),
    Case("py_star_in_display", py_star_in_display, x34),
    Case("py_minmax_mixed", py_minmax_mixed, x34),
    Case("py_tensor_shape_ops", py_tensor_shape_ops, x34),
    Case("py_enumerate_dict", py_enumerate_dict, x34),
    Case("dataclass_config_members", dataclass_config_members,
         lambda: (torch.randn(3, 4), _Cfg(5.0)), second=lambda: (torch.randn(3, 4), _Cfg(1.5))),
    Case("dataclass_made_in_frame", dataclass_made_in_frame, x34),
    Case("enum_members", enum_members, x34, second=x34, recompile=False),
    Case("enum_members_other", enum_members, x34, kwargs=lambda: {"mode": _Mode.B}, graphs=0),
    Case("python_object_methods", python_object_methods, x34, ops=("clamp",)),
    Case("object_argument", object_argument, lambda: (torch.randn(3, 4), _Affine(2.0, -1.0)),
         second=lambda: (torch.randn(3, 4), _Affine(3.0, -1.0))),
]
