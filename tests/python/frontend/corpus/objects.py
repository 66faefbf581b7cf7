"""Instances of user-defined Python classes constructed inside the captured code: __init__ and
methods inlined, attribute reads and writes, inheritance and super(), properties, class
attributes, lists of objects, isinstance, objects that escape (returned, stored on an input) and
are rebuilt after the graph runs, and classes whose instances cannot be modeled (a graph break,
never a wrong answer)."""

from __future__ import annotations

import torch

from corpus import Case


def x34():
    return (torch.randn(3, 4),)


class Accumulator:
    """Running sum with a scale (a helper object a model might build per call)."""

    def __init__(self, scale):
        super().__init__()  # object.__init__
        self.scale = scale
        self.total = None
        self.count = 0

    def add(self, t):
        self.total = t if self.total is None else self.total + t * self.scale
        self.count += 1
        return self

    def mean(self):
        return self.total / self.count


def object_made_in_frame(x):
    acc = Accumulator(2.0)
    acc.add(x).add(x.sin())
    acc.add(x.cos())
    return acc.mean(), acc.count


def object_returned(x):
    acc = Accumulator(0.5)
    acc.add(x * 3)
    acc.add(x.exp())
    return acc  # rebuilt after the graph: object.__new__ and its attributes


class _Layer:
    kind = "base"

    def __init__(self):
        self.keys = None
        self.initialized = False

    def lazy_init(self, t):
        self.dtype = t.dtype
        self.keys = torch.tensor([], dtype=self.dtype)
        self.initialized = True

    def update(self, t):
        if not self.initialized:
            self.lazy_init(t)
        self.keys = torch.cat([self.keys, t], dim=-2)
        return self.keys

    def length(self):
        if not self.initialized or self.keys.numel() == 0:
            return 0
        return self.keys.shape[-2]


class _ScaledLayer(_Layer):
    kind = "scaled"

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def update(self, t):
        return super().update(t * self.factor)


class KVStore:
    """Like transformers' DynamicCache: layers made lazily from a class, updated by index."""

    def __init__(self, layer_class=_Layer):
        self.layers = []
        self.layer_class = layer_class

    def update(self, t, idx):
        while len(self.layers) <= idx:
            self.layers.append(self.layer_class())
        return self.layers[idx].update(t)

    def __len__(self):
        return len(self.layers)

    def __iter__(self):
        for layer in self.layers:
            yield layer.keys

    @property
    def seq_length(self):
        return self.layers[0].length() if self.layers else 0


def kv_store_returned(x):
    store = KVStore()
    assert store.seq_length == 0 and not store
    a = store.update(x[:2], 0)
    b = store.update(x[2:] * 2, 1)
    store.update(x[:1] + 1, 0)
    return a.sum() + b.sum(), store, len(store), store.seq_length


def kv_store_iter_and_isinstance(x):
    store = KVStore()
    store.layers.append(_ScaledLayer(3.0))
    store.update(x, 0)
    store.update(x.relu(), 1)
    kinds = [type(layer).kind for layer in store.layers]
    scaled = sum(1 for layer in store.layers if isinstance(layer, _ScaledLayer))
    base = sum(1 for layer in store.layers if isinstance(layer, _Layer))
    return torch.cat(list(store), dim=0), kinds, scaled, base


class _Temperature:
    unit = 1.0

    def __init__(self, value):
        self._value = value

    @property
    def value(self):
        return self._value * self.unit

    @value.setter
    def value(self, v):
        self._value = v

    @staticmethod
    def clip(t):
        return t.clamp(-1, 1)

    @classmethod
    def default(cls):
        return cls(2.0)

    def __call__(self, t):
        return self.clip(t / self.value)

    def __eq__(self, other):
        return isinstance(other, _Temperature) and self._value == other._value


def object_property_classmethod_call(x):
    t = _Temperature.default()
    first = t(x)
    t.value = 4.0
    same = t == _Temperature(4.0)
    return first + t(x), same, hasattr(t, "_value"), getattr(t, "missing", None)


class _Plain:
    pass


def object_identity_and_setattr(x):
    a, b = _Plain(), _Plain()
    setattr(a, "w", x * 2)
    b.w = x * 2
    return a.w + b.w, a == b, a != b, a is a, a.__class__ is _Plain


class Holder:
    def __init__(self):
        self.cache = None


def holder_input():
    return (torch.randn(3, 4), Holder())


class _Pair:
    def __init__(self, first, second):
        self.first = first
        self.second = second


def object_stored_on_input(x, holder):
    holder.cache = _Pair(x + 1, [x * 2, 3])  # escapes through the input: rebuilt and stored
    return x - 1


class _WithNew:
    def __new__(cls, v):
        obj = object.__new__(cls)
        obj.made_by_new = True
        return obj

    def __init__(self, v):
        self.v = v


class _Slotted:
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v


class _DictBased(dict):
    def __init__(self, v):
        super().__init__(v=v)


def _unmodeled(cls):
    def f(x):
        y = x + 1
        o = cls(y)
        return o["v"] * 2 if isinstance(o, dict) else o.v * 2

    f.__name__ = f"unmodeled_{cls.__name__.strip('_').lower()}"
    return f


def object_returned_twice(x):
    acc = Accumulator(1.0)
    acc.add(x * 2)
    return acc, acc  # one object in Python: rebuilt once (identity: test_objects.py)


def object_stored_and_returned(x, holder):
    pair = _Pair(x + 1, None)
    holder.cache = pair  # stored where the caller sees it, then changed and returned
    pair.second = [pair.first * 2, 3]
    return pair.first.sum(), holder.cache.second[0]


def object_stored_then_returned_after_break(x, holder):
    acc = Accumulator(2.0)
    acc.add(x * 3)
    holder.cache = acc
    print("between")  # a graph break with acc stored and live: one object on both sides
    acc.add(x.cos())
    return acc, holder.cache.total


CASES = [
    Case("object_made_in_frame", object_made_in_frame, x34, ops=("sin", "cos")),
    Case("object_returned", object_returned, x34, ops=("exp",)),
    Case("kv_store_returned", kv_store_returned, lambda: (torch.randn(4, 3),), ops=("cat",)),
    Case("kv_store_iter_and_isinstance", kv_store_iter_and_isinstance, x34),
    Case("object_property_classmethod_call", object_property_classmethod_call, x34),
    Case("object_identity_and_setattr", object_identity_and_setattr, x34),
    Case("object_stored_on_input", object_stored_on_input, holder_input),
    # Classes whose instances the analyzer does not model: the construction is a graph break
    # (the graph before it runs, the rest resumes in Python).
    # (+1 break: the hook then sees _WithNew.__new__ run, whose object.__new__ is a break too)
    Case("unmodeled_custom_new", _unmodeled(_WithNew), x34, graphs=2, breaks=2,
         reason="a custom __new__"),
    Case("unmodeled_slots", _unmodeled(_Slotted), x34, graphs=2, breaks=1, reason="__slots__"),
    # (+2: dict.__init__ in _DictBased.__init__, and o["v"] on the real object in the resume)
    Case("unmodeled_dict_subclass", _unmodeled(_DictBased), x34, graphs=2, breaks=3,
         reason="built-in type dict"),
    Case("object_returned_twice", object_returned_twice, x34),
    Case("object_stored_and_returned", object_stored_and_returned, holder_input),
    Case("object_stored_then_returned_after_break", object_stored_then_returned_after_break,
         holder_input, graphs=2, breaks=1, reason="print"),
]
