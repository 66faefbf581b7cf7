"""Unchanged training scripts under `python script.py` and `python -m xjit script.py`, runs
alternating, one thread: CPU time of the whole loop (compiles included) and the losses.

    python bench/cli_training.py [--runs 5] [--steps 2000] [--bert-steps 10]

Scripts (written to a temporary folder): `loop` (the MLP + AdamW loop in a function: the loop
frame runs in Python, the model and the step compile as frames of their own), `step` (the same
as a step function called in a loop: forward and loss compile as one training graph) and `bert`
(a 4-layer Hugging Face BERT classifier fine-tuned with AdamW in a plain loop: steady ms per
step after two warm-up steps). docs/perf.md "Session 16".
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HEAD = """\
import sys, time, torch, torch.nn as nn
torch.set_num_threads(1)
torch.manual_seed(0)
"""
MLP = """\
m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x = torch.randn(32, 64); y = torch.randint(0, 10, (32,))
"""
TIMED = """\
steps = int(sys.argv[1])
c0 = time.process_time()
loss = run(steps)
print("cpu", time.process_time() - c0, "loss", repr(loss))
"""
SCRIPTS = {
    "loop": HEAD + MLP + """\
def run(steps):
    for i in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    return loss.item()
""" + TIMED,
    "step": HEAD + MLP + """\
def train_step():
    opt.zero_grad()
    loss = nn.functional.cross_entropy(m(x), y)
    loss.backward()
    opt.step()
    return loss
def run(steps):
    for i in range(steps):
        loss = train_step()
    return loss.item()
""" + TIMED,
    "bert": HEAD + """\
from transformers import BertConfig, BertForSequenceClassification
config = BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                    intermediate_size=1024, num_labels=3)
model = BertForSequenceClassification(config).train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
ids = torch.randint(0, config.vocab_size, (8, 128))
mask = torch.ones(8, 128, dtype=torch.long)
labels = torch.randint(0, 3, (8,))
def train(steps):
    for i in range(steps):
        opt.zero_grad()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
    return loss.item()
steps = int(sys.argv[1])
c0 = time.process_time()
train(2)
c1 = time.process_time()
loss = train(steps)
print("cpu", (time.process_time() - c1) / steps, "loss", repr(loss), "first2", c1 - c0)
""",
}


def run(folder: Path, name: str, steps: int, xjit: bool) -> tuple[float, float]:
    cmd = [sys.executable, *(["-m", "xjit"] if xjit else []), f"{name}.py", str(steps)]
    env = dict(os.environ, XJIT_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, check=True)
    words = out.stdout.split()
    return float(words[words.index("cpu") + 1]), float(words[words.index("loss") + 1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--bert-steps", type=int, default=10)
    ap.add_argument("--scripts", default="loop,step,bert")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, text in SCRIPTS.items():
            (folder / f"{name}.py").write_text(text)
        for name in args.scripts.split(","):
            steps = args.bert_steps if name == "bert" else args.steps
            times: dict[bool, list[float]] = {False: [], True: []}
            losses: dict[bool, float] = {}
            for _ in range(args.runs):
                for xjit in (False, True):
                    t, losses[xjit] = run(folder, name, steps, xjit)
                    times[xjit].append(t)
            unit = "s/step" if name == "bert" else "s"
            py, jx = statistics.median(times[False]), statistics.median(times[True])
            print(
                f"{name}: python {py:.4g} {unit} ({min(times[False]):.4g}-{max(times[False]):.4g}), "
                f"xjit {jx:.4g} ({min(times[True]):.4g}-{max(times[True]):.4g}), {py / jx:.2f}x; "
                f"final loss relative difference {abs(losses[True] - losses[False]) / abs(losses[False]):.2g}"
            )


if __name__ == "__main__":
    main()
