"""The updates of PyTorch's stock optimizers (SGD, Adam, AdamW), written for capture.

The frontend (src/frontend/analyzer_optim.cpp) reads an optimizer's parameters, gradients,
state and hyperparameters from the object, under guards, and inlines these functions in their
place. Each follows `torch.optim`'s single-tensor path (what eager PyTorch runs on the CPU) op
for op, with one difference: the step count stays a tensor, so one graph serves every step.
Eager reads it as a Python float (`step_t.item()`) and computes the bias corrections in double
precision; here they are computed in float64 tensors from the float32 count, which holds exact
integers far beyond any run's length, and rounded to the parameter's dtype where eager's
scalar would be. A float learning rate comes in the same way, as a 0-d float64 tensor read at
run time, so that a scheduler's new rate does not make a new graph.
"""

from __future__ import annotations

import types
import weakref
from typing import Any


def _scalar(value: Any, like: Any) -> Any:
    """A hyperparameter as an operand of `like`: a Python number as it is; a 0-d float64 tensor
    (a learning rate read at run time) rounded to like's dtype, as PyTorch rounds a Python
    scalar argument of an op on `like`."""
    if isinstance(value, (int, float)):
        return value
    return value.to(like.dtype)


def adam(
    params: list[Any],
    grads: list[Any],
    exp_avgs: list[Any],
    exp_avg_sqs: list[Any],
    max_exp_avg_sqs: list[Any],
    state_steps: list[Any],
    *,
    amsgrad: bool,
    beta1: float,
    beta2: float,
    lr: float,
    weight_decay: float,
    eps: float,
    maximize: bool,
    decoupled_weight_decay: bool,
) -> None:
    """torch.optim.adam._single_tensor_adam (capturable=False, differentiable=False)."""
    for i, param in enumerate(params):
        grad = grads[i] if not maximize else -grads[i]
        exp_avg = exp_avgs[i]
        exp_avg_sq = exp_avg_sqs[i]
        step_t = state_steps[i]
        step_t += 1
        if weight_decay != 0:
            if decoupled_weight_decay:
                param.mul_(_scalar(1 - lr * weight_decay, param))
            else:
                grad = grad.add(param, alpha=weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = step_t.double()
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2.sqrt().to(param.dtype)
        if amsgrad:
            max_exp_avg_sqs[i].copy_(max_exp_avg_sqs[i].maximum(exp_avg_sq))
            denom = (max_exp_avg_sqs[i].sqrt() / bias_correction2_sqrt).add_(eps)
        else:
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        # addcdiv_(exp_avg, denom, value=-step_size): ATen computes value * exp_avg / denom.
        param.add_((-step_size).to(param.dtype) * exp_avg / denom)


def sgd(
    params: list[Any],
    grads: list[Any],
    momentum_buffers: list[Any],
    *,
    weight_decay: float,
    momentum: float,
    lr: float,
    dampening: float,
    nesterov: bool,
    maximize: bool,
) -> None:
    """torch.optim.sgd._single_tensor_sgd with every momentum buffer made (after the first
    step) and a float learning rate."""
    for i, param in enumerate(params):
        grad = grads[i] if not maximize else -grads[i]
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        if momentum != 0:
            buf = momentum_buffers[i]
            buf.mul_(momentum).add_(grad, alpha=1 - dampening)
            if nesterov:
                grad = grad.add(buf, alpha=momentum)
            else:
                grad = buf
        # add_(grad, alpha=-lr): ATen computes param + alpha * grad.
        param.add_(_scalar(-lr, param) * grad)


def step(step_fn: Any, optimizer: Any) -> Any:
    """``optimizer.step()`` of a stock SGD, Adam or AdamW called from Python while xjit's hook is
    on: the hook runs this frame instead of torch.optim's step wrapper (library code, never
    compiled itself), and its capture is the stock update, as for ``xjit.jit(lambda:
    opt.step())`` (src/frontend/eval_frame.cpp ``runOptimizerStep``)."""
    return step_fn(optimizer)


_step_frames: weakref.WeakKeyDictionary[Any, types.FunctionType] = weakref.WeakKeyDictionary()


def step_of(optimizer: Any) -> types.FunctionType:
    """``step`` with a code object of its own for each optimizer (made at its first step, gone
    with it): a frame's compiled entries and recompile limit are per code object, so a program
    with many optimizers compiles each one's step once instead of passing the limit of one
    shared frame."""
    fn = _step_frames.get(optimizer)
    if fn is None:
        fn = types.FunctionType(step.__code__.replace(), step.__globals__, step.__name__)
        _step_frames[optimizer] = fn
    return fn
