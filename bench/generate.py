"""Hugging Face `model.generate()` with a KV cache: eager vs torch.compile vs xjit.

GPT-2 small and the LLaMA-style decoder of bench/models.py (random weights, `use_cache=True`:
transformers' DynamicCache), greedy decoding of a fixed prompt. Each backend has its own copy of
the model (same weights) and runs the same `generate()` call:

  eager     `model.generate(ids, ...)`
  inductor  `model.forward = torch.compile(model.forward)` (how users usually compile a model
            for generation), then `model.generate(...)`
  xjit      `xjit.jit(run)(model, ids)` where `run` calls `model.generate(...)` (the same as
            `python -m xjit script.py` for a script doing that call)
  xjit_weight_cache  the same with `weight_cache=True` (weights kept in oneDNN's layout)

Calls are interleaved across backends in one process (order alternated per repeat); the figure
is the median wall time per generate() after the first (compiling) call, as tokens/s, and the
ratio of the calling thread's CPU time (time.thread_time; with 1 thread every backend computes
on the calling thread, so this is what a loaded machine still measures fairly). The first
call's extra time over eager's median is reported as compile time. Tokens must equal eager's
(the script says so and exits 1 otherwise). For xjit it also prints what `xjit.explain` saw
on the first call (graphs, graph breaks with reasons, recompiles) and, from a separate run with
forward hooks, the median time of one decoding step's forward (sequence length 1) per backend
and the time per new token spent outside the model's forwards (the generation loop in Python).

    python bench/generate.py [--models gpt2,llama] [--new-tokens 32] [--prompt 16]
                             [--repeats 5] [--threads 1] [--backends eager,inductor,xjit]

On the shared development machine (2 cores, other jobs running) expect noise of 10-30 %.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import load_xjit  # noqa: E402 - after sys.path
from bench.models import llama  # noqa: E402


def build(name: str) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    if name == "gpt2":  # GPT-2 small, 124M parameters
        model = GPT2LMHeadModel(GPT2Config())
    elif name == "llama":  # bench/models.py's LLaMA-style decoder, ~106M parameters
        model = llama(use_cache=True)
    else:
        raise ValueError(f"unknown model {name!r}")
    model.generation_config.pad_token_id = model.generation_config.eos_token_id
    return model.eval()


def run_generate(model: Any, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False
        )
        return out


# The forward hooks are compiled from a "<...>" file name, which xjit's frame hook skips: written
# here they would be user frames, captured (and recompiled as their lists grow) under xjit.jit.
_HOOKS_NS: dict[str, Any] = {}
exec(
    compile(
        "def make_hooks(starts, times, clock):\n"
        "    def pre(_m, args, kwargs):\n"
        "        starts.append(clock())\n"
        "    def post(_m, args, kwargs, out):\n"
        "        ids = kwargs.get('input_ids', args[0] if args else None)\n"
        "        times.append((ids is not None and ids.shape[-1] == 1, clock() - starts[-1]))\n"
        "    return pre, post\n",
        "<generate hooks>",
        "exec",
    ),
    _HOOKS_NS,
)


def step_forward_ms(call: Any, model: Any, new_tokens: int) -> tuple[float, float]:
    """From hooks on the model (Module.__call__ runs in Python for every backend while
    generate() is not captured), over one generate() call: the median wall time of a decoding
    step's forward (input length 1), and the time per new token outside the forwards (the
    generation loop's Python: logits processors, stopping criteria, cache and mask updates)."""
    starts: list[float] = []
    times: list[tuple[bool, float]] = []
    pre, post = _HOOKS_NS["make_hooks"](starts, times, time.perf_counter)
    h1 = model.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = model.register_forward_hook(post, with_kwargs=True)
    try:
        start = time.perf_counter()
        call()
        total = time.perf_counter() - start
    finally:
        h1.remove()
        h2.remove()
    steps = [t for step, t in times if step]
    outside = (total - sum(t for _, t in times)) / new_tokens
    return (statistics.median(steps) * 1e3 if steps else float("nan")), outside * 1e3


def bench_model(name: str, args: argparse.Namespace, backends: list[str]) -> bool:
    base = build(name)
    torch.manual_seed(1)
    ids = torch.randint(1, 1000, (1, args.prompt))
    models = {b: copy.deepcopy(base) for b in backends}
    calls: dict[str, Any] = {}
    xjit = load_xjit() if any(b.startswith("xjit") for b in backends) else None
    for b in backends:
        m = models[b]
        if b == "inductor":
            m.forward = torch.compile(m.forward)
        if b.startswith("xjit"):
            assert xjit is not None
            fn = xjit.jit(run_generate, weight_cache=b == "xjit_weight_cache")
            calls[b] = lambda fn=fn, m=m: fn(m, ids, args.new_tokens)  # type: ignore[misc]
        else:
            calls[b] = lambda m=m: run_generate(m, ids, args.new_tokens)

    first: dict[str, float] = {}
    outputs: dict[str, torch.Tensor] = {}
    report = None
    for b in backends:
        start = time.perf_counter()
        if b.startswith("xjit"):
            assert xjit is not None
            report = xjit.explain(run_generate, weight_cache=b == "xjit_weight_cache")(
                models[b], ids, args.new_tokens
            )
            outputs[b] = report.output
        else:
            outputs[b] = calls[b]()
        first[b] = time.perf_counter() - start

    for b in backends:  # explain() forgets every compiled entry: recompile the others
        calls[b]()
    times: dict[str, list[float]] = {b: [] for b in backends}
    cpu: dict[str, list[float]] = {b: [] for b in backends}
    for r in range(args.repeats):
        for b in backends if r % 2 == 0 else backends[::-1]:
            start, start_cpu = time.perf_counter(), time.thread_time()
            outputs[b] = calls[b]()
            times[b].append(time.perf_counter() - start)
            cpu[b].append(time.thread_time() - start_cpu)
    steps = {b: step_forward_ms(calls[b], models[b], args.new_tokens) for b in backends}

    ok = True
    eager_med = statistics.median(times["eager"]) if "eager" in times else None
    eager_cpu = statistics.median(cpu["eager"]) if "eager" in cpu else None
    print(
        f"\n{name}: prompt {args.prompt}, {args.new_tokens} new tokens, greedy, KV cache, "
        f"{torch.get_num_threads()} thread(s), {args.repeats} repeats"
    )
    print(
        f"  {'backend':17} {'tokens/s':>9} {'generate ms':>12} {'vs eager':>9} "
        f"{'cpu vs eager':>12} {'step fwd ms':>12} {'loop ms/tok':>12} {'first call s':>13} "
        f"{'compile s':>10}  tokens"
    )
    for b in backends:
        med = statistics.median(times[b])
        same = "eager" not in outputs or torch.equal(outputs[b], outputs["eager"])
        ok &= same
        ratio = f"{eager_med / med:8.2f}x" if eager_med else "-"
        cpu_ratio = f"{eager_cpu / statistics.median(cpu[b]):11.2f}x" if eager_cpu else "-"
        compile_s = first[b] - eager_med if eager_med else float("nan")
        print(
            f"  {b:17} {args.new_tokens / med:9.1f} {med * 1e3:12.1f} {ratio:>9} {cpu_ratio:>12} "
            f"{steps[b][0]:12.2f} {steps[b][1]:12.2f} {first[b]:13.2f} {compile_s:10.2f}  "
            f"{'= eager' if same else 'DIFFER from eager'}"
        )
    if report is not None:
        print(
            f"  xjit first call: {len(report.graphs)} graph(s), {len(report.graph_breaks)} "
            f"graph break(s), {len(report.recompiles)} recompile(s) over {args.new_tokens} "
            f"steps ({len(report.recompiles) / args.new_tokens:.2f} per step); capture "
            f"{report.capture_ms:.0f} ms, compile {report.compile_ms:.0f} ms (compile cache: "
            f"{'off' if os.environ.get('XJIT_NO_CACHE') else 'on'})"
        )
        for b in report.graph_breaks:
            print(f"    break: {b.function} at {b.file}:{b.line}: {b.reason}")
        for rc in report.recompiles:
            print(f"    recompile: {rc.function} at {rc.file}:{rc.line}: {rc.guard}")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--backends", default="eager,inductor,xjit")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    # xjit's kernels use as many threads as torch (else its pool defaults to every core).
    os.environ.setdefault("XJIT_NUM_THREADS", str(args.threads))
    torch.set_num_threads(args.threads)
    backends = args.backends.split(",")
    ok = all([bench_model(m, args, backends) for m in args.models.split(",")])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
