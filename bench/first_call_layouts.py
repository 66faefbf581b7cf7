"""First calls that used to need PyTorch's meta walk to lay out their outputs (docs/frontend.md
*Output layouts*): a slice `x[:, :n]` of a batch of one as input, a sum over a permuted view
(session 25), upsampling and pooling of channels-last or transposed values (session 27),
outputs that are strided views of computed tensors, `h[:, -1]` (session 28).
Each runs in a fresh process (empty compile cache, 2 threads) with the static layout rules
(now) and with XJIT_LAYOUT_META_WALK=1 (what these programs got before session 25: the walk,
whose first meta op imports torch._dynamo); the variants alternate `--rounds` times; prints the
median first-call wall time and whether the walk ran.

    python bench/first_call_layouts.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CASES = {
    "linear over x[:, :8] (batch of one)": """
lin = torch.nn.Linear(64, 64)
fn = lambda x: torch.relu(lin(x)) * 2
args = (torch.randn(1, 128, 64)[:, :8],)
""",
    "sum over a permuted view": """
def fn(x):
    y = (x * 2).transpose(1, 2)
    return y.reshape(-1, 8).sum(0), y.contiguous().view(-1)
args = (torch.randn(1, 8, 64),)
""",
    "bilinear upsampling of channels-last features": """
conv = torch.nn.Conv2d(16, 16, 3, padding=1).to(memory_format=torch.channels_last)
fn = lambda x: torch.nn.functional.interpolate(conv(x), scale_factor=2, mode="bilinear").relu()
args = (torch.randn(2, 16, 32, 32).to(memory_format=torch.channels_last),)
""",
    "adaptive_avg_pool1d over a transposed sequence": """
lin = torch.nn.Linear(64, 64)
fn = lambda x: torch.nn.functional.adaptive_avg_pool1d(lin(x).transpose(1, 2), 1).flatten(1)
args = (torch.randn(2, 49, 64),)
""",
    "the last step of an RNN-style output, h[:, -1]": """
lin = torch.nn.Linear(64, 64)
fn = lambda x: torch.tanh(lin(x))[:, -1]
args = (torch.randn(2, 49, 64),)
""",
    "a class token and the sequence, (h, h[:, 0])": """
lin = torch.nn.Linear(64, 64)
fn = lambda x: (lambda h: (h, h[:, 0]))(torch.nn.functional.layer_norm(lin(x), (64,)))
args = (torch.randn(2, 49, 64),)
""",
    "GPT-2 small over ids[:, :64] (batch of one)": """
sys.path.insert(0, {repo!r})
from bench.models import CASES
model, inputs = CASES["gpt2/b1"].build()
fn = model
args = (inputs[0][:, :64],)
""",
}

CHILD = r"""
import json, sys, time
import torch, xjit
torch.set_num_threads(2)
{setup}
with torch.no_grad():
    f = xjit.jit(fn)
    t = time.perf_counter()
    f(*args)
    first = time.perf_counter() - t
print(json.dumps({{"first_ms": first * 1e3, "walks": xjit._frontend.events()["counters"]["layout_meta_walks"],
                  "dynamo": "torch._dynamo" in sys.modules}}))
"""


def run(setup: str, meta_walk: bool) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("XJIT_LAYOUT_META_WALK", None)
    if meta_walk:
        env["XJIT_LAYOUT_META_WALK"] = "1"
    with tempfile.TemporaryDirectory() as cache:
        env["XJIT_CACHE_DIR"] = cache
        code = CHILD.format(setup=setup.format(repo=str(REPO)))
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print("| program | rules: first call ms (walks) | meta walk: first call ms (walks) |")
    print("|---|---|---|")
    for name, setup in CASES.items():
        rules, walk = [], []
        for _ in range(args.rounds):
            rules.append(run(setup, False))
            walk.append(run(setup, True))

        def cell(rs: list[dict[str, float]]) -> str:
            return f"{statistics.median(r['first_ms'] for r in rs):.0f} ({rs[0]['walks']})"

        print(f"| {name} | {cell(rules)} | {cell(walk)} |", flush=True)


if __name__ == "__main__":
    main()
