"""Imports a PyTorch model into xjit IR text, so that the graph passes see real models before
the bytecode frontend produces them.

The model is captured with torch.export (ATen ops, functional, parameters and buffers lifted to
graph inputs). ATen op names are xjit's op names (docs/CONTRIBUTING-ops.md), and each ATen
argument maps by name onto the xjit op's operand or attribute of the same name (read from the
registry with xjit.ir.op_info), with a few renames (`size` -> `shape`, a reduction's `dim` ->
`dims`). Arguments xjit has no slot for are accepted only when they do not change the result
(device, layout, memory_format, cudnn_enable ...). Result types come from export's fake
tensors, so the verifier checks the mapping against xjit's type inference. Each op carries the
source location of the innermost frame of its stack trace outside torch.

Parameters and buffers are graph inputs (params="inputs", the default; their values come back
in order in Imported.param_values) or dense constants in the text (params="constants", for
small models: freezing then sees them).

    python tests/models/fx_import.py mlp|cnn|bert [--params constants] [-o out.xir]
"""

from __future__ import annotations

import argparse
import glob
import math
import operator
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]


def _import_xjit() -> Any:
    """xjit.ir from an installed package or a development build (the newest build*/python)."""
    try:
        import xjit.ir as ir

        ir.ops()
        return ir
    except ImportError:
        pass
    env = os.environ.get("XJIT_BUILD_DIR")
    dirs = [Path(env)] if env else []
    sos = glob.glob(str(REPO / "build*/python/xjit/_xjit*.so"))
    dirs += sorted((Path(s).parents[2] for s in sos), key=lambda d: -d.stat().st_mtime)
    for d in dirs:
        if (d / "python").is_dir():
            sys.path.insert(0, str(d / "python"))
            sys.modules.pop("xjit", None)
            try:
                import xjit.ir as ir

                ir.ops()
                return ir
            except ImportError:
                sys.path.pop(0)
    raise ImportError("xjit is not importable: build it with -DXJIT_BUILD_PYTHON=ON")


DTYPES = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
}

# ATen ops whose xjit name differs (by overload where the overload matters).
OP_NAMES = {
    "max.dim": "max_dim",
    "min.dim": "min_dim",
    "_to_copy.default": "to_copy",
}
# ATen argument names that xjit spells differently, per xjit attribute.
ARG_RENAMES = {"size": "shape", "dim": "dims"}
# Arguments with no xjit slot that do not change what an op computes (on the host).
IGNORED_ARGS = {
    "device",
    "layout",
    "pin_memory",
    "memory_format",
    "non_blocking",
    "cudnn_enable",
    "cudnn_enabled",
    "sparse",
    "sparse_grad",
    "scale_grad_by_freq",
    "implicit",
}


def _type_str(val: Any) -> str:
    if isinstance(val, torch.Tensor):
        dims = ",".join(str(int(s)) for s in val.shape)
        return f"{DTYPES[val.dtype]}[{dims}]"
    if isinstance(val, bool):
        return "bool"
    if isinstance(val, int):
        return "int"
    if isinstance(val, float):
        return "float"
    raise NotImplementedError(f"values of type {type(val).__name__} are not imported")


def _float_str(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    s = repr(float(v))
    return s if any(c in s for c in ".en") else s + ".0"


def _str_literal(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dense(t: torch.Tensor) -> str:
    """dense<f32[2,2]: [[1.0, 2.0], [3.0, 4.0]]> (exact: floats print as the stored value)."""
    t = t.detach().cpu()
    if t.dtype in (torch.float16, torch.bfloat16):
        vals = t.to(torch.float64)
    else:
        vals = t

    def fmt(x: Any) -> str:
        if t.dtype == torch.bool:
            return "true" if x else "false"
        if t.is_floating_point():
            return _float_str(x)
        return str(int(x))

    def nest(v: Any) -> str:
        if isinstance(v, list):
            return "[" + ", ".join(nest(e) for e in v) + "]"
        return fmt(v)

    return f"dense<{_type_str(t)}: {nest(vals.tolist())}>"


def _loc(node: torch.fx.Node) -> str:
    """loc("file":line "function") of the innermost frame outside torch, or ""."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', trace)
    torch_dir = os.path.dirname(torch.__file__)
    for file, line, fn in reversed(frames):
        if not file.startswith(torch_dir):
            if file.startswith(str(REPO) + os.sep):
                file = os.path.relpath(file, REPO)
            return f" loc({_str_literal(file)}:{line} {_str_literal(fn)})"
    return ""


@dataclass
class Imported:
    """What import_model produced: the IR text, and the values of parameter inputs."""

    text: str
    param_names: list[str] = field(default_factory=list)  # graph inputs that are parameters
    param_values: list[torch.Tensor] = field(default_factory=list)
    user_input_names: list[str] = field(default_factory=list)
    num_ops: int = 0

    def inputs(self, *user_inputs: Any) -> list[Any]:
        """The graph inputs in order: parameter values, then the user's inputs."""
        return [*self.param_values, *user_inputs]


class _Emitter:
    def __init__(self, ir: Any, params: str, large_constant_limit: int):
        self.ir = ir
        self.params = params
        self.large_constant_limit = large_constant_limit
        self.lines: list[str] = []
        self.names: dict[torch.fx.Node, str] = {}
        self.used: set[str] = set()
        self.counter = 0
        self.infos: dict[str, Any] = {}

    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.]", "_", hint) or "v"
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return "%" + name

    def constant(self, value: Any) -> str:
        """A value for a Python scalar, None or tensor appearing as an operand."""
        if value is None:
            name = self.fresh("none")
            self.lines.append(f"  {name} = constant() : none")
            return name
        if isinstance(value, torch.Tensor):
            return self.tensor_constant(value, "const")
        name = self.fresh("c")
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        elif isinstance(value, float):
            text = _float_str(value)
        else:
            raise NotImplementedError(f"constant operand {value!r}")
        self.lines.append(f"  {name} = constant() {{value = {text}}} : {_type_str(value)}")
        return name

    def tensor_constant(self, t: torch.Tensor, hint: str) -> str:
        if t.numel() > self.large_constant_limit:
            raise ValueError(
                f"{hint}: a {tuple(t.shape)} constant is too large for the text; import with "
                "params='inputs'"
            )
        name = self.fresh(hint)
        self.lines.append(f"  {name} = constant() {{value = {dense(t)}}} : {_type_str(t)}")
        return name

    def info(self, op: str) -> Any:
        if op not in self.infos:
            if op not in self.ir.ops():
                raise NotImplementedError(f"xjit has no op '{op}'")
            self.infos[op] = self.ir.op_info(op)
        return self.infos[op]

    def attr_text(self, kind: str, value: Any, what: str) -> str:
        if kind == "dtype":
            return DTYPES[value]
        if kind == "bool":
            return "true" if value else "false"
        if kind == "int":
            return str(int(value))
        if kind == "float":
            return _float_str(value) if isinstance(value, float) else str(int(value))
        if kind == "str":
            return _str_literal(str(value))
        if kind in ("ints", "floats"):
            items = list(value) if isinstance(value, (list, tuple)) else [value]
            if kind == "ints":
                return "[" + ", ".join(str(int(v)) for v in items) + "]"
            return "[" + ", ".join(_float_str(float(v)) for v in items) + "]"
        raise NotImplementedError(f"{what}: attribute kind {kind}")

    def operand(self, value: Any) -> str | list[str]:
        if isinstance(value, torch.fx.Node):
            return self.names[value]
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.fx.Node) for v in value):
            return [self.operand(v) for v in value]  # type: ignore[misc]
        return self.constant(value)

    def call(self, node: torch.fx.Node) -> None:
        target = node.target
        if target is operator.getitem:
            src, index = node.args
            self.names[node] = f"{self.names[src].split('#')[0]}#{index}"
            return
        if not isinstance(target, torch._ops.OpOverload):
            raise NotImplementedError(f"{node.name}: call of {target}")
        packet = target.overloadpacket.__name__
        key = f"{packet}.{target._overloadname}"
        op = OP_NAMES.get(key, OP_NAMES.get(packet, packet))
        info = self.info(op)
        operand_names = {o["name"] for o in info["operands"]}
        attr_kinds = {a["name"]: a["kind"] for a in info["attrs"]}

        schema = target._schema
        bound: dict[str, Any] = {}
        for i, arg in enumerate(schema.arguments):
            if i < len(node.args):
                bound[arg.name] = node.args[i]
            elif arg.name in node.kwargs:
                bound[arg.name] = node.kwargs[arg.name]
        operands: dict[str, Any] = {}
        attrs: dict[str, str] = {}
        for arg in schema.arguments:
            if arg.name not in bound:
                continue
            value = bound[arg.name]
            name = arg.name
            if name not in operand_names and name not in attr_kinds:
                # The first argument is the first operand whatever its name (self / input).
                first = info["operands"][0]["name"] if info["operands"] else None
                if arg is schema.arguments[0] and first and first not in bound:
                    name = first
                else:
                    name = ARG_RENAMES.get(name, name)
            if name in operand_names:
                operands[name] = value
            elif name in attr_kinds:
                if value is None:
                    continue
                if name == "device":
                    value = str(value)
                attrs[name] = self.attr_text(attr_kinds[name], value, f"{op}.{name}")
            elif arg.name in IGNORED_ARGS or (
                arg.has_default_value() and value == arg.default_value
            ):
                continue
            else:
                raise NotImplementedError(
                    f"{node.name}: {key} argument {arg.name}={value!r} has no xjit equivalent"
                )

        # Operands in the xjit order; a missing optional one before a present one is `none`.
        specs = info["operands"]
        last = max((i for i, o in enumerate(specs) if o["name"] in operands), default=-1)
        args: list[str] = []
        for i, spec in enumerate(specs[: last + 1]):
            if spec["name"] not in operands or operands[spec["name"]] is None:
                if not spec["optional"]:
                    raise NotImplementedError(f"{node.name}: {op} needs operand {spec['name']}")
                args.append(self.constant(None))
                continue
            v = self.operand(operands[spec["name"]])
            args.extend(v if isinstance(v, list) else [v])
        for spec in specs[last + 1 :]:
            if not spec["optional"] and not spec["variadic"]:
                raise NotImplementedError(f"{node.name}: {op} needs operand {spec['name']}")

        val = node.meta.get("val")
        vals = list(val) if isinstance(val, (list, tuple)) else [val]
        name = self.fresh(node.name)
        self.names[node] = name
        result = name if len(vals) == 1 else f"{name}:{len(vals)}"
        attr_part = ""
        if attrs:
            attr_part = " {" + ", ".join(f"{k} = {v}" for k, v in sorted(attrs.items())) + "}"
        types = ", ".join(_type_str(v) for v in vals)
        self.lines.append(f"  {result} = {op}({', '.join(args)}){attr_part} : {types}{_loc(node)}")


def _sanitized_graph_name(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name) else _str_literal(name)


def import_exported(
    ep: torch.export.ExportedProgram,
    *,
    params: str = "inputs",
    graph_name: str = "forward",
    large_constant_limit: int = 1 << 16,
) -> Imported:
    """IR text for an ExportedProgram (see the module docstring)."""
    if params not in ("inputs", "constants"):
        raise ValueError("params must be 'inputs' or 'constants'")
    ir = _import_xjit()
    em = _Emitter(ir, params, large_constant_limit)
    sig = ep.graph_signature
    kinds = {spec.arg.name: spec for spec in sig.input_specs if hasattr(spec.arg, "name")}
    header: list[str] = []
    result = Imported(text="")
    for node in ep.graph.nodes:
        if node.op != "placeholder":
            continue
        spec = kinds[node.name]
        kind = spec.kind.name
        if kind == "USER_INPUT":
            name = em.fresh(node.name)
            em.names[node] = name
            header.append(f"{name}: {_type_str(node.meta['val'])}")
            result.user_input_names.append(name[1:])
            continue
        value = ep.state_dict.get(spec.target)
        if value is None:
            value = ep.constants[spec.target]
        value = value.detach()
        if params == "constants":
            em.names[node] = em.tensor_constant(value, spec.target)
        else:
            name = em.fresh(spec.target)
            em.names[node] = name
            header.append(f"{name}: {_type_str(value)}")
            result.param_names.append(name[1:])
            result.param_values.append(value)
    # Parameter inputs first, then the user's, as Imported.inputs() orders them.
    user = [h for h in header if h.split(":")[0][1:] in result.user_input_names]
    header = [h for h in header if h not in user] + user
    outputs: list[str] = []
    out_types: list[str] = []
    for node in ep.graph.nodes:
        if node.op == "call_function":
            em.call(node)
            result.num_ops += 1
        elif node.op == "output":
            for out in node.args[0]:
                if not isinstance(out, torch.fx.Node):
                    raise NotImplementedError(f"graph output {out!r}")
                outputs.append(em.names[out])
                out_types.append(_type_str(out.meta["val"]))
    body = "\n".join(em.lines)
    result.text = (
        f"graph @{_sanitized_graph_name(graph_name)}({', '.join(header)}) -> "
        f"({', '.join(out_types)}) {{\n{body}\n  return({', '.join(outputs)})\n}}\n"
    )
    return result


def import_model(
    model: torch.nn.Module, args: tuple[Any, ...], *, params: str = "inputs", **kw: Any
) -> Imported:
    """Exports model(*args) (call model.eval() first for inference) and imports it."""
    with torch.no_grad():
        ep = torch.export.export(model, args)
    return import_exported(ep, params=params, graph_name=type(model).__name__, **kw)


# ---- the models the passes are tried on ----


class MLP(torch.nn.Module):
    def __init__(self, sizes: tuple[int, ...] = (32, 64, 64, 10)) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.nn.functional.gelu(x)
        return torch.log_softmax(x, dim=-1)


class SmallCNN(torch.nn.Module):
    """conv-bn-relu blocks (with and without conv bias), pooling, dropout and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(16)
        self.conv3 = torch.nn.Conv2d(16, 16, 1, groups=4)
        self.bn3 = torch.nn.BatchNorm2d(16)
        self.drop = torch.nn.Dropout(0.25)
        self.fc = torch.nn.Linear(16, 10)
        self.bn_fc = torch.nn.BatchNorm1d(10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.nn.functional.max_pool2d(x, 2)
        x = torch.relu(self.bn2(self.conv2(x)))
        x = x + self.bn3(self.conv3(x))
        x = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.bn_fc(self.fc(self.drop(x)))


def randomize_batch_norm(model: torch.nn.Module, seed: int = 0) -> None:
    """Gives batch norms non-trivial running statistics and affine parameters."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.5)
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            if m.affine:
                m.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.data.copy_(torch.randn(n, generator=g) * 0.2)


def build(name: str, seed: int = 0) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """An eval-mode model and example inputs: mlp, cnn or bert (BERT-base, seq 128)."""
    torch.manual_seed(seed)
    if name == "mlp":
        return MLP().eval(), (torch.randn(8, 32),)
    if name == "cnn":
        m = SmallCNN()
        randomize_batch_norm(m, seed)
        return m.eval(), (torch.randn(2, 3, 16, 16),)
    if name == "bert":
        from transformers import BertConfig, BertModel

        m = BertModel(BertConfig())
        return m.eval(), (torch.randint(0, m.config.vocab_size, (1, 128)),)
    raise ValueError(f"unknown model {name!r} (mlp, cnn, bert)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", choices=["mlp", "cnn", "bert"])
    p.add_argument("--params", choices=["inputs", "constants"], default="inputs")
    p.add_argument("-o", "--output", default="-")
    args = p.parse_args(argv)
    model, example = build(args.model)
    imported = import_model(model, example, params=args.params)
    if args.output == "-":
        sys.stdout.write(imported.text)
    else:
        Path(args.output).write_text(imported.text)
        print(f"{args.output}: {imported.num_ops} ops", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
