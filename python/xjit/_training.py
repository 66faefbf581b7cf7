"""Compiled training steps: a captured graph's forward and backward (the autodiff pass) run as
one torch.autograd.Function, so loss.backward() and optimizers work unchanged (docs/frontend.md
"Autograd"). The driver (src/frontend/training.cpp) calls run() with the graph inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import _frontend

# (saved_inputs, grad_outputs, wrt, num_outputs, shape_inputs, reach): which graph inputs the
# backward reads, which outputs have a gradient, which inputs get one, how many of the forward's
# results are outputs, the inputs whose shapes alone the backward needs (their symbols bind its
# sizes), and for each output the inputs autograd connects it to in eager: read on the graph
# before passes, so an input whose gradient they folded to zero gets zeros, not None.
Info = tuple[
    tuple[int, ...], tuple[int, ...], tuple[int, ...], int, tuple[int, ...],
    tuple[tuple[int, ...], ...],
]


class CompiledStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, step: object, info: Info, *inputs: Any) -> tuple[Any, ...]:
        saved_inputs, grad_outputs, wrt, num_outputs, shape_inputs, reach = info
        results = _frontend.training_forward(step, list(inputs))
        outputs, saved = results[:num_outputs], results[num_outputs:]
        ctx.step, ctx.info, ctx.num_inputs = step, info, len(inputs)
        # Outputs the loss does not use get None, not zeros: an input that only they reach gets
        # None too, as in eager (an optimizer skips a parameter whose grad is None).
        ctx.set_materialize_grads(False)
        ctx.grad_output_meta = [(outputs[i].shape, outputs[i].dtype) for i in grad_outputs]
        # Inputs through save_for_backward: an in-place change before backward raises, as in
        # eager. Intermediates stay private to this node.
        ctx.save_for_backward(*(inputs[i] for i in saved_inputs))
        ctx.intermediates = saved
        # A shape's carrier: one zero seen through stride 0, not the input (which the caller may
        # then write in place without making backward raise).
        ctx.shape_carriers = [
            torch.zeros((), dtype=inputs[i].dtype, device=inputs[i].device).expand(inputs[i].shape)
            for i in shape_inputs
        ]
        # Inputs whose gradient passes folded to zero: their zeros are made in backward.
        folded = {i for r in reach for i in r} - set(wrt)
        ctx.folded_meta = {i: (inputs[i].shape, inputs[i].dtype, inputs[i].device) for i in folded}
        with_grad = set(grad_outputs)
        ctx.mark_non_differentiable(
            *(
                o
                for i, o in enumerate(outputs)
                if i not in with_grad and not reach[i] and isinstance(o, torch.Tensor)
            )
        )
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        _saved_inputs, grad_outputs, wrt, _n, _shape_inputs, reach = ctx.info
        if torch.is_grad_enabled():  # create_graph=True: the gradients would need a backward
            raise RuntimeError(
                "xjit: double backward (create_graph=True) through a compiled training step is "
                "not supported; call the model without xjit.jit for higher-order gradients"
            )
        # saved_tensors raises after the graph was freed (a second backward without
        # retain_graph=True), as eager does.
        # Inputs no output given a gradient reaches get None, as in eager; the others get the
        # backward's gradient (zero from the outputs given none).
        reached = {i for g, r in zip(grads, reach) if g is not None for i in r}
        output_grads = []
        for k, i in enumerate(grad_outputs):
            g = grads[i]
            if g is None:
                shape, dtype = ctx.grad_output_meta[k]
                g = torch.zeros(shape, dtype=dtype)
            output_grads.append(g)
        if ctx.intermediates is None:  # as eager's saved_tensors after the graph was freed
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Specify retain_graph=True if you "
                "need to backward through the graph a second time."
            )
        values = [*ctx.intermediates, *ctx.saved_tensors, *ctx.shape_carriers, *output_grads]
        if not torch._C._autograd._get_current_graph_task_keep_graph():
            # This node runs once: its saved values are given to the compiled backward, which
            # drops each after its last use (and empties `values`), as eager frees a node's
            # saved tensors once it ran; held here, they would all live to the end.
            ctx.intermediates = None
            ctx.maybe_clear_saved_tensors()
        input_grads = _frontend.training_backward(ctx.step, values)
        result: list[torch.Tensor | None] = [None] * (2 + ctx.num_inputs)
        for j, i in enumerate(wrt):
            if i in reached:
                result[2 + i] = input_grads[j]
        for i, (shape, dtype, device) in ctx.folded_meta.items():
            if i in reached:
                result[2 + i] = torch.zeros(shape, dtype=dtype, device=device)
        return tuple(result)


def run(step: object, info: Info, inputs: list[Any]) -> tuple[Any, ...]:
    return CompiledStep.apply(step, info, *inputs)


def _slice(x: torch.Tensor, a: dict[str, Any]) -> torch.Tensor:
    dim = a.get("dim", 0) % x.dim()
    end = a.get("end")
    key = (slice(None),) * dim + (
        slice(a.get("start", 0), None if end is None or end >= 2**62 else end, a.get("step", 1)),
    )
    return x[key]


# The view ops of the graph (attributes as the IR names them) as eager calls: a view rebuilt
# by them is eager's view (strides, `_base`, version counter, autograd's view backward).
_VIEW_STEPS: dict[str, Callable[[torch.Tensor, dict[str, Any]], torch.Tensor]] = {
    "select": lambda x, a: x.select(a["dim"], a["index"]),
    "slice": _slice,
    "narrow": lambda x, a: x.narrow(a["dim"], a["start"], a["length"]),
    "transpose": lambda x, a: x.transpose(a["dim0"], a["dim1"]),
    "permute": lambda x, a: x.permute(a["dims"]),
    "t": lambda x, a: x.t(),
    "movedim": lambda x, a: x.movedim(a["source"], a["destination"]),
    "expand": lambda x, a: x.expand(a["shape"]),
    "squeeze": lambda x, a: x.squeeze(tuple(a["dim"])) if "dim" in a else x.squeeze(),
    "unsqueeze": lambda x, a: x.unsqueeze(a["dim"]),
    "diagonal": lambda x, a: x.diagonal(a.get("offset", 0), a.get("dim1", 0), a.get("dim2", 1)),
    "alias": lambda x, a: x.view_as(x),
    "detach": lambda x, a: x.detach(),
    "contiguous": lambda x, a: x.contiguous(),
    "reshape": lambda x, a: x.reshape(a["shape"]),
}


def output_view(base: torch.Tensor, steps: list[tuple[str, dict[str, Any]]]) -> torch.Tensor:
    """A graph output that is a view of output `base` (training.h OutputView), made from it as
    eager made it, after the Function: autograd then carries its gradient through `base`."""
    x = base
    for name, attrs in steps:
        x = _VIEW_STEPS[name](x, attrs)
    return x
