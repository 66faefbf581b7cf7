"""A GraphSAGE-style training step (mean and max neighbour aggregation with scatter_reduce,
include_self=False; 5000 nodes, 20000 edges, 64 features; SGD), eager vs xjit, one thread,
interleaved, median CPU time of the calling thread over 9 steps; prints the loss difference.

    XJIT_NUM_THREADS=1 python bench/gnn_step.py
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

import xjit

torch.set_num_threads(1)
N, E, F = 5000, 20000, 64
class SAGE(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(2 * F, F), torch.nn.Linear(2 * F, 16)
    def agg(self, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, reduce: str) -> torch.Tensor:
        msg = h[src]
        idx = dst.unsqueeze(1).expand(-1, h.shape[1])
        out = torch.zeros_like(h).scatter_reduce(0, idx, msg, reduce=reduce, include_self=False)
        return out
    def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.l1(torch.cat([x, self.agg(x, src, dst, "mean")], 1)))
        return self.l2(torch.cat([h, self.agg(h, src, dst, "amax")], 1))
torch.manual_seed(0)
x = torch.randn(N, F); src = torch.randint(0, N, (E,)); dst = torch.randint(0, N, (E,)); y = torch.randint(0, 16, (N,))
def make(compiled: bool) -> Callable[[], torch.Tensor]:
    torch.manual_seed(1); m = SAGE(); opt = torch.optim.SGD(m.parameters(), lr=0.01)
    f = xjit.jit(m) if compiled else m
    def step() -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(f(x, src, dst), y); loss.backward(); opt.step(); opt.zero_grad()
        return loss
    return step
se, sx = make(False), make(True)
for _ in range(3): le = se(); lx = sx()
print("loss diff", abs(le.item() - lx.item()))
te, tx = [], []
for _ in range(9):
    t = time.thread_time(); se(); te.append(time.thread_time() - t)
    t = time.thread_time(); sx(); tx.append(time.thread_time() - t)
print(f"eager {statistics.median(te)*1e3:.1f} ms  xjit {statistics.median(tx)*1e3:.1f} ms")
