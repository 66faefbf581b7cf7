"""Seeded random PyTorch programs, as Python source text, for differential testing of xjit.

A program is a `make_inputs(B)` function (its tensors depend only on the seed and the batch
size B, so a failing program reproduces from its text alone) and a function `fn(a0, a1, ...)`
made of statements drawn from the op catalog below. The generator runs every candidate
statement in eager PyTorch on the sample inputs as it goes and keeps only those that run without
an error or a warning, so it needs no shape inference of its own: each op looks at the live
values (shapes, dtypes) to choose its operands and arguments.
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

FLOAT = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
DTYPE_NAMES = {
    torch.float32: "torch.float32",
    torch.float64: "torch.float64",
    torch.float16: "torch.float16",
    torch.bfloat16: "torch.bfloat16",
    torch.int64: "torch.int64",
    torch.int32: "torch.int32",
    torch.bool: "torch.bool",
}


@dataclass
class Program:
    seed: int
    batch: int  # the B the program was generated with
    inputs_src: str  # def make_inputs(B): ...
    n_inputs: int
    body: list[str]  # statements of fn, each one or more lines (4-space indented inside)
    returns: list[str]  # candidate names returned (only those defined are returned)
    extra_batches: list[int] = field(default_factory=list)  # other B values for dynamic calls

    def defined_names(self, body: list[str] | None = None) -> set[str]:
        names = set()
        for stmt in self.body if body is None else body:
            for line in stmt.splitlines():
                head = line.strip()
                if head.startswith("v") and " = " in head:
                    target = head.split(" = ", 1)[0]
                    if target.isidentifier():
                        names.add(target)
        return names

    def source(self, body: list[str] | None = None) -> str:
        body = self.body if body is None else body
        defined = self.defined_names(body)
        rets = [r for r in self.returns if r in defined or r.startswith("a")]
        args = ", ".join(f"a{i}" for i in range(self.n_inputs))
        lines = ["import torch", "import torch.nn.functional as F", "", self.inputs_src, ""]
        lines.append(f"def fn({args}):")
        for stmt in body:
            for line in stmt.splitlines():
                lines.append("    " + line)
        lines.append(f"    return ({', '.join(rets)}{',' if rets else ''})")
        return "\n".join(lines) + "\n"


def load(src: str, name: str = "<fuzz>") -> dict[str, Any]:
    ns: dict[str, Any] = {}
    exec(compile(src, name, "exec"), ns)
    return ns


# ---------------------------------------------------------------------------------------------
# Inputs


def _input_src(rng: random.Random, seed: int) -> tuple[str, int]:
    """make_inputs(B): 1-4 tensors, the first dim of most of them B; some non-contiguous, some
    aliasing another input, some of other dtypes, some 0-d or with size-1 / 0-size dims."""
    lines = ["def make_inputs(B):", f"    g = torch.Generator().manual_seed({seed})"]
    names: list[str] = []
    ranks: list[int] = []
    n = rng.randint(1, 4)
    for i in range(n):
        kind = rng.choices(
            ["float", "double", "int", "bool", "half", "noncontig", "alias", "scalar"],
            weights=[10, 1, 2, 1, 1, 3, 3 if names else 0, 1],
        )[0]
        rank = rng.randint(1, 3)
        dims = ["B"] + [str(rng.choice([1, 2, 3, 4, 5, 6, 8])) for _ in range(rank - 1)]
        if rng.random() < 0.03:
            dims[-1] = "0"
        shape = ", ".join(dims)
        if kind == "float":
            expr = f"torch.randn({shape}, generator=g)"
        elif kind == "double":
            expr = f"torch.randn({shape}, generator=g, dtype=torch.float64)"
        elif kind == "half":
            dt = rng.choice(["torch.float16", "torch.bfloat16"])
            expr = f"torch.randn({shape}, generator=g).to({dt})"
        elif kind == "int":
            expr = f"torch.randint(-5, 6, ({shape},), generator=g)"
        elif kind == "bool":
            expr = f"torch.randn({shape}, generator=g) > 0"
        elif kind == "scalar":
            expr = "torch.randn((), generator=g)"
            rank = 0
        elif kind == "noncontig":
            if rank >= 2:
                # a transposed tensor whose first dim is still B
                other = dims[1]
                expr = f"torch.randn({other}, B, generator=g).t()" if rank == 2 else (
                    f"torch.randn({dims[2]}, B, {dims[1]}, generator=g).permute(1, 2, 0)"
                )
            else:
                expr = "torch.randn(2 * B, generator=g)[::2]"
        else:  # alias: a view of an earlier input (or that input itself)
            j = rng.randrange(len(names))
            src = names[j]
            choices = [src] if ranks[j] == 0 else [
                src, f"{src}[1:]", f"{src}[:, :1]" if ranks[j] >= 2 else f"{src}[:1]"]
            if ranks[j] == 2:
                choices.append(f"{src}.t()")
            expr = rng.choice(choices)
            rank = ranks[j]
        lines.append(f"    x{i} = {expr}")
        names.append(f"x{i}")
        ranks.append(rank)
    lines.append(f"    return [{', '.join(names)}]")
    return "\n".join(lines), n


# ---------------------------------------------------------------------------------------------
# The op catalog. Each op gets the generator and returns a statement (or None when nothing in
# scope fits). `gen.pick(pred)` chooses a live value; `gen.new()` names a fresh one.

Op = Callable[["Generator"], "str | None"]


def _is_float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in FLOAT


def _is_tensor(t: Any) -> bool:
    return isinstance(t, torch.Tensor)


UNARY_FLOAT = [
    "torch.relu({x})", "torch.sigmoid({x})", "torch.tanh({x})", "torch.exp({x}.clamp(-5, 5))",
    "-{x}", "{x}.abs()", "torch.sin({x})", "torch.cos({x})", "torch.log1p({x}.abs())",
    "torch.sqrt({x}.abs())", "torch.rsqrt({x}.abs() + 1)", "F.gelu({x})",
    "F.gelu({x}, approximate='tanh')", "F.silu({x})", "torch.floor({x})", "torch.ceil({x})",
    "({x}.abs() + 1).reciprocal()", "{x} * {x}", "{x}.clamp(-0.5, 0.5)", "torch.erf({x})",
    "F.softplus({x})", "torch.sign({x})", "F.leaky_relu({x}, 0.1)", "F.hardtanh({x})",
    "torch.nan_to_num({x})", "{x}.pow(2)", "({x}.abs() + 0.5).pow(0.5)",
]
UNARY_ANY = ["{x}.float()", "{x}.double()", "{x}.nan_to_num(0.0).long()", "{x}.to(torch.float16)",
             "{x}.to(torch.bfloat16)", "{x} != 0", "{x}.clone()", "{x}.contiguous()"]
UNARY_INT = ["-{x}", "{x}.abs()", "{x} * 3", "{x} // 2", "{x} % 3", "{x}.clamp(min=0)"]
UNARY_BOOL = ["~{x}", "torch.logical_not({x})", "{x}.long()", "{x}.float()"]
BINARY = ["{a} + {b}", "{a} - {b}", "{a} * {b}", "torch.maximum({a}, {b})",
          "torch.minimum({a}, {b})", "{a} > {b}", "{a} <= {b}", "{a} == {b}"]
BINARY_FLOAT = ["{a} / ({b}.abs() + 1)", "torch.atan2({a}, {b}.abs() + 1)", "{a} * 0.5 + {b} * 2"]
BINARY_INTBOOL = ["{a} & {b}", "{a} | {b}", "{a} ^ {b}"]
SCALARS = ["2", "-1", "0.5", "1.5", "True", "3"]


def op_unary(g: "Generator") -> str | None:
    x = g.pick(_is_tensor)
    if x is None:
        return None
    t = g.env[x]
    if t.dtype == torch.bool:
        form = g.rng.choice(UNARY_BOOL + UNARY_ANY)
    elif t.dtype in FLOAT:
        form = g.rng.choice(UNARY_FLOAT * 2 + UNARY_ANY)
    else:
        form = g.rng.choice(UNARY_INT + UNARY_ANY)
    return f"{g.new()} = {form.format(x=x)}"


def op_binary(g: "Generator") -> str | None:
    a = g.pick(_is_tensor)
    if a is None:
        return None
    ta = g.env[a]

    def fits(t: Any) -> bool:
        if not _is_tensor(t):
            return False
        try:
            torch.broadcast_shapes(ta.shape, t.shape)
            return True
        except RuntimeError:
            return False

    if g.rng.random() < 0.25:
        b = g.rng.choice(SCALARS)
    else:
        b = g.pick(fits)
        if b is None:
            return None
        if g.rng.random() < 0.3 and g.env[b].dim() >= 1 and g.env[b].shape[-1] > 1:
            b = f"{b}[..., :1]"  # broadcast along the last dim
    forms = list(BINARY)
    kinds = {ta.dtype} | ({g.env[b].dtype} if b in g.env else set())
    if kinds & set(FLOAT) and b not in SCALARS[4:5]:
        forms += BINARY_FLOAT
    if kinds <= {torch.bool, torch.int64} and (b in g.env or b in ("True", "3")):
        forms += BINARY_INTBOOL
    form = g.rng.choice(forms)
    if g.rng.random() < 0.2 and "{a} " in form:
        form = form.replace("{a}", "@@").replace("{b}", "{a}").replace("@@", "{b}")
    return f"{g.new()} = {form.format(a=a, b=b)}"


def op_reduce(g: "Generator") -> str | None:
    x = g.pick(lambda t: _is_tensor(t) and t.dim() >= 1)
    if x is None:
        return None
    t = g.env[x]
    d = g.rng.randrange(-t.dim(), t.dim())
    kd = g.rng.choice(["", ", keepdim=True"])
    r = g.rng
    if t.dtype in FLOAT:
        form = r.choice([
            f"{x}.sum({d}{kd})", f"{x}.mean({d}{kd})", f"{x}.amax({d}{kd})",
            f"{x}.amin({d}{kd})", f"{x}.argmax({d}{kd})", f"{x}.var({d}{kd})",
            f"{x}.var({d}, unbiased=False{kd})", f"{x}.std({d}{kd})", f"{x}.sum()",
            f"{x}.mean()", f"{x}.max({d}{kd}).values", f"{x}.max({d}{kd}).indices",
            f"torch.cumsum({x}, {d})", f"{x}.sum(({d}, {(d + 1) % t.dim()}){kd})",
            f"{x}.norm(dim={d}{kd})", f"{x}.logsumexp({d}{kd})", f"{x}.amax()",
        ])
    elif t.dtype == torch.bool:
        form = r.choice([f"{x}.any({d}{kd})", f"{x}.all({d}{kd})", f"{x}.sum({d}{kd})",
                         f"{x}.sum()"])
    else:
        form = r.choice([f"{x}.sum({d}{kd})", f"{x}.amax({d}{kd})", f"{x}.argmin({d}{kd})",
                         f"{x}.sum()", f"torch.cumsum({x}, {d})"])
    return f"{g.new()} = {form}"


def op_view(g: "Generator") -> str | None:
    x = g.pick(_is_tensor)
    if x is None:
        return None
    t = g.env[x]
    n = t.dim()
    r = g.rng
    forms = ["{x}.unsqueeze(0)", "{x}.reshape(-1)", "{x}.unsqueeze(-1)"]
    if n >= 1:
        d = r.randrange(n)
        size = t.shape[d]
        forms += [
            f"{{x}}.transpose(0, {n - 1})", f"{{x}}[1:]", f"{{x}}.narrow({d}, 0, {{x}}.shape[{d}] // 2)",
            f"{{x}}.flatten()", f"{{x}}.reshape({{x}}.shape[0], -1)" if n >= 1 else "{x}",
            f"{{x}}.unsqueeze({d}).expand(*{{x}}.shape[:{d}], 3, *{{x}}.shape[{d}:])",
            f"{{x}}.movedim(0, -1)", "{x}[::2]", f"{{x}}.chunk(2, {d})[0]",
            f"{{x}}.split(2, {d})[-1]", f"{{x}}.select({d}, 0)" if size > 0 else "{x}",
            f"{{x}}.unbind({d})[-1]" if size > 0 else "{x}",
            f"{{x}}.view({{x}}.shape)" if t.is_contiguous() else "{x}.contiguous()",
            f"{{x}}.view(-1)" if t.is_contiguous() else "{x}.reshape(-1)",
            "{x}.squeeze()", f"{{x}}.squeeze({d})",
        ]
        if size == 1:
            forms.append(f"{{x}}.expand(*{{x}}.shape[:{d}], 4, *{{x}}.shape[{d} + 1:])")
    if n >= 2:
        perm = list(range(n))
        r.shuffle(perm)
        d = r.randrange(n)
        forms += [
            f"{{x}}.permute({', '.join(map(str, perm))})", "{x}.transpose(-1, -2)",
            "{x}[:, 1:]", "{x}[..., ::2]", "{x}[:, 0]", "{x}.flatten(1)", "{x}.mT",
            "{x}[0]", "{x}[-1, ..., None]",
        ]
        if t.shape[-1] % 2 == 0 and t.shape[-1] > 0:
            forms.append("{x}.unflatten(-1, (2, -1))")
    if n == 2:
        forms += ["{x}.t()"]
    if t.is_contiguous() and t.numel() >= 4:
        forms.append(f"{{x}}.as_strided(({t.numel() // 2},), (2,))")
        forms.append(f"{{x}}.as_strided((2, {t.numel() // 4}), (1, 2), 1)" if t.numel() >= 5 else "{x}")
    return f"{g.new()} = {r.choice(forms).format(x=x)}"


def op_create(g: "Generator") -> str | None:
    """Creation ops sized by a live value's shape (dynamic sizes under dynamic=True)."""
    x = g.pick(lambda t: _is_tensor(t) and t.dim() >= 1)
    if x is None:
        return None
    forms = [
        "torch.zeros({x}.shape[0], 3)", "torch.arange({x}.shape[0])", "torch.ones_like({x})",
        "torch.full_like({x}, 2)", "{x}.new_zeros({x}.shape)", "torch.zeros_like({x}) + {x}",
        "torch.arange({x}.numel()).reshape({x}.shape).to({x}.dtype) * {x}",
        "torch.empty_like({x}).fill_(1.5)", "{x} + torch.ones({x}.shape[-1], dtype={x}.dtype)",
        "torch.eye({x}.shape[-1])", "torch.tril({x}) if {x}.dim() >= 2 else {x}",
    ]
    return f"{g.new()} = {g.rng.choice(forms).format(x=x)}"


def op_matmul(g: "Generator") -> str | None:
    x = g.pick(lambda t: _is_float(t) and t.dim() >= 1 and t.dtype in (torch.float32, torch.float64))
    if x is None:
        return None
    t = g.env[x]
    r = g.rng
    k = t.shape[-1]
    dt = "" if t.dtype == torch.float32 else ", dtype=torch.float64"
    n_out = r.choice([1, 3, 4, 7])
    w = f"torch.linspace(-1, 1, {n_out * k}{dt}).reshape({n_out}, {k})"
    forms = [f"F.linear({x}, {w})", f"F.linear({x}, {w}, torch.arange({n_out}, dtype={x}.dtype))",
             f"{x} @ {w}.t()"]
    if t.dim() >= 2:
        forms += [f"{x} @ {x}.transpose(-1, -2)", f"torch.matmul({x}.transpose(-1, -2), {x})"]
    if t.dim() == 3:
        forms += [f"torch.bmm({x}, {x}.transpose(1, 2))"]
    other = g.pick(lambda u: _is_float(u) and u.dim() == 2 and u.dtype == t.dtype
                   and u.shape[0] == k)
    if other is not None:
        forms.append(f"{x} @ {other}")
    return f"{g.new()} = {r.choice(forms)}"


def op_nn(g: "Generator") -> str | None:
    x = g.pick(lambda t: _is_float(t) and t.dim() >= 1)
    if x is None:
        return None
    t = g.env[x]
    d = g.rng.randrange(-t.dim(), t.dim())
    forms = [
        f"torch.softmax({x}, {d})", f"F.log_softmax({x}, dim={d})",
        f"F.layer_norm({x}, {x}.shape[-1:])",
        f"F.layer_norm({x}, {x}.shape[-1:], torch.linspace(0.5, 1.5, {x}.shape[-1], dtype={x}.dtype))",
        f"F.normalize({x}, dim={d})", f"F.dropout({x}, 0.5, training=False)",
        f"F.relu6({x} * 4)", f"F.elu({x})",
    ]
    return f"{g.new()} = {g.rng.choice(forms)}"


def _weight(t: Any, *shape: int) -> str:
    """A deterministic weight of `shape` in t's dtype (f32/f64), values in [-1, 1]."""
    n = 1
    for d in shape:
        n *= d
    dt = "" if t.dtype == torch.float32 else ", dtype=torch.float64"
    return f"torch.linspace(-1, 1, {n}{dt}).reshape({', '.join(map(str, shape))})"


def op_layers(g: "Generator") -> str | None:
    """Network layers: convolutions, pooling, batch/group/RMS norm, attention, losses."""
    x = g.pick(lambda t: _is_float(t) and t.dtype in (torch.float32, torch.float64)
               and 2 <= t.dim() <= 4 and t.numel() > 0)
    if x is None:
        return None
    t = g.env[x]
    n, r = t.dim(), g.rng
    forms = [f"F.rms_norm({x}, {x}.shape[-1:], eps=1e-6)", f"F.hardswish({x})", f"F.mish({x})"]
    if n in (2, 3):  # conv1d / pool1d: [(N,) C, L]
        c, length = t.shape[-2], t.shape[-1]
        k, co, pad = r.choice([1, 2, 3]), r.choice([1, 2, 4]), r.choice([0, 1])
        if k <= length + 2 * pad:
            forms += [f"F.conv1d({x}, {_weight(t, co, c, k)}, padding={pad})",
                      f"F.conv1d({x}, {_weight(t, co, c, k)}, {_weight(t, co)}, stride=2)"]
        if length >= 2:
            forms += [f"F.max_pool1d({x}, 2)", f"F.avg_pool1d({x}, 2, ceil_mode=True)"]
        forms.append(f"F.adaptive_avg_pool1d({x}, 1)")
    if n in (3, 4):  # conv2d / pool2d: [(N,) C, H, W]
        c, h, w = t.shape[-3], t.shape[-2], t.shape[-1]
        k, co = r.choice([1, 3]), r.choice([1, 2, 4])
        if k <= min(h, w) + 2:
            forms += [f"F.conv2d({x}, {_weight(t, co, c, k, k)}, padding=1)",
                      f"F.conv2d({x}, {_weight(t, co, c, k, k)}, {_weight(t, co)}, stride=2, padding=1)"]
        if min(h, w) >= 2:
            forms += [f"F.max_pool2d({x}, 2)", f"F.avg_pool2d({x}, 2)",
                      f"F.max_pool2d({x}, 3, stride=2, padding=1)" if min(h, w) >= 3 else f"F.max_pool2d({x}, 2)"]
        forms.append(f"F.adaptive_avg_pool2d({x}, 1)")
    if n >= 2:  # batch / group norm: [N, C, ...]
        c = t.shape[1]
        forms += [
            f"F.batch_norm({x}, {_weight(t, c)}.abs(), {_weight(t, c)}.abs() + 1, "
            f"{_weight(t, c)}, None, training=False)",
            f"F.batch_norm({x}, None, None, training=True)",
        ]
        if c > 0:
            groups = r.choice([d for d in (1, 2, 4) if c % d == 0])
            forms.append(f"F.group_norm({x}, {groups})")
    if n >= 3 or (n == 2 and r.random() < 0.5):  # attention: [..., L, E]
        forms += [f"F.scaled_dot_product_attention({x}, {x}, {x})",
                  f"F.scaled_dot_product_attention({x}, {x} * 0.5, {x}, is_causal=True)"]
    y = g.pick(lambda u: _is_float(u) and u.shape == t.shape and u.dtype == t.dtype)
    if y is not None:
        forms += [f"F.mse_loss({x}, {y})", f"F.l1_loss({x}, {y}, reduction='sum')",
                  f"F.smooth_l1_loss({x}, {y})",
                  f"F.binary_cross_entropy_with_logits({x}, torch.sigmoid({y}))"]
    if n == 2 and t.shape[1] > 0:
        forms += [f"F.cross_entropy({x}, {x}.argmin(-1))",
                  f"F.cross_entropy({x}, {x}.argmax(-1), label_smoothing=0.1)",
                  f"F.nll_loss(F.log_softmax({x}, -1), {x}.argmin(-1), reduction='sum')"]
    return f"{g.new()} = {r.choice(forms)}"


def _small_ints(x: str, t: Any, k: int) -> str:
    """Integers in [0, k) from x's values: a NaN or infinity made 0 first (their conversion to
    an integer is undefined behaviour, which eager and xjit need not agree on)."""
    if t.dtype in FLOAT:
        return f"({x}.nan_to_num(0.0, 0.0, 0.0).clamp(-99, 99).long().abs() % {k})"
    return f"({x}.long().abs() % {k})"


def op_misc(g: "Generator") -> str | None:
    """Tensor ops models use that the other families do not draw: shifts, tiling, sorting,
    scans, padding, scatters, fused arithmetic, clamps with tensor bounds."""
    x = g.pick(lambda t: _is_tensor(t) and t.dim() >= 1 and t.dtype != torch.bool)
    if x is None:
        return None
    t = g.env[x]
    n, r = t.dim(), g.rng
    d = r.randrange(n)
    forms = [f"torch.roll({x}, 1, {d})", f"{x}.repeat({', '.join(['2'] + ['1'] * (n - 1))})",
             f"{x}.tile(2)", f"{x}.sort({d}).values", f"{x}.sort(dim={d}, descending=True, stable=True).indices",
             f"torch.diff({x}, dim={d})", f"F.pad({x}, (1, 2))", f"F.pad({x}, (0, 1), value=-1.5)",
             f"{x}.flip({d})", f"{x}.prod({d})", f"F.one_hot({_small_ints(x, t, 4)}, 4)"]
    if n >= 2:
        forms += [f"torch.triu({x})", f"torch.tril({x}, -1)"]
    if t.dtype in FLOAT:
        forms += [f"torch.cumprod({x}.clamp(-2, 2), {d})", f"torch.std_mean({x}, {d})[0]",
                  f"torch.lerp({x}, {x}.flip({d}), 0.3)", f"torch.addcmul({x}, {x}, {x}, value=0.5)",
                  f"{x}.pow({x}.abs().clamp(max=2))", f"torch.logaddexp({x}, {x} * 2)"]
        if n >= 2 and t.shape[-1] >= 2:
            forms.append(f"F.pad({x}, (1, 1), mode='reflect')")
    y = g.pick(lambda u: _is_tensor(u) and u.dtype == t.dtype and u is not t and u.dim() <= n)
    if y is not None:
        try:
            if torch.broadcast_shapes(g.env[y].shape, t.shape) == t.shape:
                forms += [f"{y}.expand_as({x})", f"torch.clamp({x}, min={y})",
                          f"torch.clamp({x}, {y}, {y} + 1)"]
        except RuntimeError:
            pass
    if t.shape[d] > 0:
        # scatter: distinct indices along d (eager leaves which duplicate wins undefined)
        perm = f"torch.arange({t.shape[d]}).flip(0).reshape({tuple(t.shape[d] if i == d else 1 for i in range(n))})"
        forms += [f"torch.zeros_like({x}).scatter_add({d}, {_small_ints(x, t, t.shape[d])}, {x})",
                  f"{x}.scatter({d}, {perm}, {x} * 2)"]
    if n == 1 and t.dtype in (torch.float32, torch.float64):
        forms.append(f"torch.outer({x}, {x}.flip(0))")
    if n == 2 and t.dtype in (torch.float32, torch.float64):
        k = t.shape[1]
        forms += [f"torch.addmm({_weight(t, k)}, {x}.t(), {x})",
                  f"torch.einsum('ij,kj->ik', {x}, {x})"]
    if n == 3 and t.dtype in (torch.float32, torch.float64):
        forms.append(f"torch.baddbmm({x}, {x}, {x}.transpose(1, 2)[..., :{t.shape[2]}], alpha=0.5)"
                     if t.shape[1] == t.shape[2] else f"torch.bmm({x}, {x}.transpose(1, 2))")
    return f"{g.new()} = {r.choice(forms)}"


def op_combine(g: "Generator") -> str | None:
    a = g.pick(lambda t: _is_tensor(t) and t.dim() >= 1)
    if a is None:
        return None
    ta = g.env[a]
    r = g.rng
    d = r.randrange(ta.dim())
    forms = [f"torch.stack([{a}, {a} * 2], {d})", f"torch.cat([{a}, {a}[:1]], 0)"]
    same_but_d = g.pick(lambda t: _is_tensor(t) and t.dim() == ta.dim() and t.dtype == ta.dtype
                        and all(t.shape[i] == ta.shape[i] for i in range(ta.dim()) if i != d))
    if same_but_d is not None:
        forms.append(f"torch.cat([{a}, {same_but_d}], {d})")
    same = g.pick(lambda t: _is_tensor(t) and t.shape == ta.shape and t.dtype == ta.dtype)
    if same is not None:
        forms.append(f"torch.stack([{a}, {same}])")
    cond = g.pick(lambda t: _is_tensor(t) and t.dtype == torch.bool)
    if cond is not None:
        try:
            torch.broadcast_shapes(g.env[cond].shape, ta.shape)
            forms += [f"torch.where({cond}, {a}, 0)", f"{a}.masked_fill({cond}, -1)",
                      f"torch.where({cond}, {a}, {a} * 2)"]
        except RuntimeError:
            pass
    forms.append(f"torch.where({a} > 0, {a}, {a} - 1)")
    size = ta.shape[d]
    if size > 0:
        idx = [r.randrange(size) for _ in range(r.randint(1, 4))]
        forms += [f"{a}.index_select({d}, torch.tensor({idx}))", f"{a}[{idx}]" if d == 0 else f"{a}[:, {idx}]" if d == 1 else f"{a}.flip({d})"]
        forms.append(f"torch.gather({a}, {d}, {a}.argsort({d})[..., :1]" if d == ta.dim() - 1 else
                     f"torch.gather({a}, {d}, torch.zeros_like({a}, dtype=torch.long))")
        if forms[-1].count("(") != forms[-1].count(")"):
            forms[-1] += ")"
    ints = g.pick(lambda t: _is_tensor(t) and t.dtype == torch.int64)
    table = g.pick(lambda t: _is_float(t) and t.dim() == 2 and t.shape[0] > 0)
    if ints is not None and table is not None:
        forms.append(f"F.embedding({ints}.abs() % {table}.shape[0], {table})")
    if ta.dim() >= 1 and ta.shape[-1] > 0 and ta.dtype in FLOAT:
        forms.append(f"{a}.topk(1, -1).values")
    return f"{g.new()} = {r.choice(forms)}"


def op_inplace(g: "Generator") -> str | None:
    """In-place ops on fresh tensors, on inputs and on views of both."""
    x = g.pick(_is_tensor, include_inputs=True)
    if x is None:
        return None
    t = g.env[x]
    r = g.rng
    target = x
    if r.random() < 0.4 and t.dim() >= 1 and t.shape[0] > 1:
        target = r.choice([f"{x}[1:]", f"{x}[0]", f"{x}[::2]"] + ([f"{x}[:, :1]", f"{x}.t()" if t.dim() == 2 else f"{x}[:, 0]"] if t.dim() >= 2 else []))
    if r.random() < 0.25 and not x.startswith("a"):
        # a fresh tensor first
        fresh = g.new()
        pre = f"{fresh} = {x}.clone()\n"
        target = target.replace(x, fresh, 1)
    else:
        pre = ""
    src = g.pick(lambda u: _is_tensor(u) and u.dtype == t.dtype)
    if t.dtype == torch.bool:
        forms = [f"{target}.fill_(True)", f"{target}.logical_not_()"]
    else:
        forms = [f"{target}.add_(1)", f"{target}.mul_(2)", f"{target}.fill_(3)",
                 f"{target}.clamp_(min=0)", f"{target}[...] = 7", f"{target}.zero_()"]
        if t.dtype in FLOAT:
            forms += [f"{target}.sigmoid_()", f"{target}.div_(2)"]
        if src is not None:
            forms += [f"{target}.add_({src})", f"{target}.copy_({src})",
                      f"{target}.mul_({src})", f"{target} += {src}"]
        if t.dim() >= 1 and t.shape[0] > 0:
            forms += [f"{target}[0] = 5", f"{target}[torch.tensor([0])] = 2",
                      f"{target}.index_put_((torch.tensor([0]),), torch.tensor(4, dtype={DTYPE_NAMES.get(t.dtype, 'torch.float32')}))",
                      f"{target}[1:] = {target}[:-1].clone()"]
    return pre + r.choice(forms)


def op_control(g: "Generator") -> str | None:
    """Python control flow on shapes and on data (.item(), a graph break)."""
    x = g.pick(lambda t: _is_tensor(t) and t.dim() >= 1 and t.numel() > 0)
    if x is None:
        return None
    r = g.rng
    v = g.new()
    kind = r.randrange(4)
    if kind == 0:
        return (f"if {x}.shape[0] > 2:\n    {v} = {x} * 2\nelse:\n    {v} = {x} + 1")
    if kind == 1:
        return (f"if {x}.float().sum().item() > 0:\n    {v} = {x} - 1\nelse:\n    {v} = {x} * 3")
    if kind == 2:
        return f"{v} = {x} * {x}.float().abs().max().item()"
    return (f"{v} = {x}.clone()\nfor i in range({x}.shape[0] if {x}.shape[0] < 4 else 3):\n"
            f"    {v} = {v} + i")


OPS: list[tuple[Op, int]] = [
    (op_unary, 10), (op_binary, 10), (op_reduce, 5), (op_view, 10), (op_matmul, 3),
    (op_nn, 3), (op_combine, 5), (op_inplace, 8), (op_control, 2), (op_create, 2),
    (op_layers, 3), (op_misc, 5),
]


class Generator:
    def __init__(self, seed: int, n_stmts: int | None = None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.n_stmts = n_stmts if n_stmts is not None else self.rng.randint(3, 10)
        self.counter = 0
        self.env: dict[str, Any] = {}

    def new(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def pick(self, pred: Callable[[Any], bool], include_inputs: bool = True) -> str | None:
        names = [n for n, v in self.env.items() if pred(v) and (include_inputs or n[0] != "a")]
        if not names:
            return None
        # prefer recent values, so programs are chains rather than flat fans
        names.sort(key=lambda n: int(n[1:]) + (1000 if n[0] == "v" else 0))
        return names[min(len(names) - 1, int(len(names) * (1 - self.rng.random() ** 2)))]

    def _replay(self, inputs_src: str, n: int, body: list[str], batch: int) -> dict[str, Any] | None:
        ns = load(inputs_src + "\nimport torch\nimport torch.nn.functional as F\n")
        env: dict[str, Any] = {"torch": torch, "F": torch.nn.functional}
        for i, t in enumerate(ns["make_inputs"](batch)):
            env[f"a{i}"] = t
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                for stmt in body:
                    exec(stmt, env)
        except Exception:
            return None
        return {k: v for k, v in env.items() if k[0] in "av" and k[1:].isdigit()}

    def generate(self) -> Program:
        r = self.rng
        batch = r.choice([1, 2, 3, 4, 5])
        inputs_src, n = _input_src(r, self.seed)
        body: list[str] = []
        self.env = self._replay(inputs_src, n, body, batch) or {}
        ops, weights = zip(*OPS)
        attempts = 0
        while len(body) < self.n_stmts and attempts < self.n_stmts * 6:
            attempts += 1
            op = r.choices(ops, weights=weights)[0]
            saved = self.counter
            stmt = op(self)
            if stmt is None:
                continue
            env = self._replay(inputs_src, n, body + [stmt], batch)
            if env is None or any(
                isinstance(v, torch.Tensor) and v.numel() > 4096 for v in env.values()
            ):
                self.counter = saved
                continue
            body.append(stmt)
            self.env = env
        names = sorted(self.env, key=lambda s: (s[0], int(s[1:])))
        vs = [x for x in names if x[0] == "v"]
        returns = vs[-1:] + r.sample(vs[:-1], k=min(max(len(vs) - 1, 0), r.randint(0, 2)))
        extra = [b for b in (1, 2, 3, 5, 6) if b != batch]
        r.shuffle(extra)
        return Program(self.seed, batch, inputs_src, n, body, returns, extra[:2])


def generate(seed: int) -> Program:
    return Generator(seed).generate()
