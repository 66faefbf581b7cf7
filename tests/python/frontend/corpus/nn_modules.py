"""nn.Module code: parameters and buffers as graph inputs, submodules through the module table or
inlined forward methods, ModuleList / Sequential / ModuleDict iteration, module attributes."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus import Case


class MLP(nn.Module):
    def __init__(self, d=8, h=16, depth=2):
        super().__init__()
        self.inp = nn.Linear(d, h)
        self.hidden = nn.ModuleList([nn.Linear(h, h) for _ in range(depth)])
        self.out = nn.Linear(h, 3)
        self.act = nn.GELU()

    def forward(self, x):
        x = self.act(self.inp(x))
        for layer in self.hidden:
            x = x + self.act(layer(x))
        return self.out(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten())
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.features(x))


class WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor([2.0, 3.0, 4.0]))
        self.bias = nn.Parameter(torch.ones(3))
        self.eps = 1e-3
        self.mode = "affine"

    def forward(self, x):
        if self.mode == "affine":
            x = x * self.scale + self.bias
        return x / (x.abs().amax() + self.eps)


class TrainingFlag(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        y = self.drop(self.lin(x))
        if self.training:
            y = y * 2
        return y


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(6)
        self.gn = nn.GroupNorm(2, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):  # x: [N, 4, 6]
        return self.ln(x) + self.gn(x) + self.bn(x)


class EmbedModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6, padding_idx=0)
        self.proj = nn.Linear(6, 2, bias=False)

    def forward(self, ids):
        return self.proj(self.emb(ids)).mean(1)


class ModuleDictModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})

    def forward(self, x):
        outs = {}
        for name, head in self.heads.items():
            outs[name] = head(x)
        return outs["a"].sum(-1) + outs["b"].sum(-1), self.heads["b"](x)


class HelperMethods(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def project(self, x, scale=1.0):
        return x @ self.w * scale

    @property
    def dim(self):
        return self.w.shape[0]

    @staticmethod
    def squash(t):
        return t.tanh()

    def forward(self, x):
        return self.squash(self.project(x, scale=2.0)) * self.dim


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.acts = nn.ModuleList([nn.ReLU(), nn.SiLU(), nn.Tanh(), nn.Sigmoid(), nn.LeakyReLU(0.1),
                                   nn.ELU(), nn.Softplus(), nn.Hardtanh(), nn.Identity(),
                                   nn.Softmax(dim=-1), nn.LogSoftmax(dim=1), nn.Mish()])

    def forward(self, x):
        return [a(x) for a in self.acts]


class SequentialIndex(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))

    def forward(self, x):
        h = self.seq[0](x)
        h = self.seq[1](h)
        return self.seq[-1](h), len(self.seq)


class Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.mp = nn.MaxPool2d(3, stride=2, padding=1)
        self.ap = nn.AvgPool2d(2, ceil_mode=True)
        self.aap = nn.AdaptiveAvgPool2d(2)
        self.conv1 = nn.Conv1d(2, 3, 3, stride=2)

    def forward(self, x):
        return self.mp(x), self.ap(x), self.aap(x), self.conv1(x.flatten(2))


class SubclassCall(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block(4)

    def forward(self, x):
        return self.block(x) + self.block(x * 2)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, d * 2)
        self.fc2 = nn.Linear(d * 2, d)

    def forward(self, x):
        return x + self.fc2(F.relu(self.fc1(x)))


class SuperForward(Block):
    def forward(self, x):
        return super().forward(x) * 0.5


class LSTMCellLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(3, 5)

    def forward(self, xs):
        h = torch.zeros(xs.shape[1], 5)
        c = torch.zeros(xs.shape[1], 5)
        outs = []
        for t in range(xs.shape[0]):
            h, c = self.cell(xs[t], (h, c))
            outs.append(h)
        return torch.stack(outs)


class ManualLSTM(nn.Module):
    def __init__(self, d=3, h=4):
        super().__init__()
        self.ih = nn.Linear(d, 4 * h)
        self.hh = nn.Linear(h, 4 * h)
        self.h = h

    def forward(self, xs):
        h = xs.new_zeros(xs.shape[1], self.h)
        c = xs.new_zeros(xs.shape[1], self.h)
        for t in range(xs.shape[0]):
            gates = self.ih(xs[t]) + self.hh(h)
            i, f, g, o = gates.chunk(4, dim=1)
            c = f.sigmoid() * c + i.sigmoid() * g.tanh()
            h = o.sigmoid() * c.tanh()
        return h, c


def eval_mode(m):
    return m.eval()


CASES = [
    Case("mlp", MLP(), lambda: (torch.randn(5, 8),), ops=("linear", "gelu")),
    Case("cnn_eval", eval_mode(CNN()), lambda: (torch.randn(2, 3, 8, 8),),
         ops=("conv2d", "batch_norm", "max_pool2d", "mean", "flatten")),  # (a 1x1 adaptive pool)
    Case("cnn_train_batchnorm", CNN(), lambda: (torch.randn(2, 3, 8, 8),),
         ops=("batch_norm_with_update",)),
    Case("module_buffers", WithBuffers(), lambda: (torch.randn(2, 3),)),
    Case("training_flag_eval", eval_mode(TrainingFlag()), lambda: (torch.randn(2, 4),)),
    Case("training_flag_train_dropout", TrainingFlag(), lambda: (torch.randn(2, 4),), fallback=True),
    Case("norm_modules", eval_mode(Norms()), lambda: (torch.randn(3, 4, 6),)),
    Case("norm_modules_train", Norms(), lambda: (torch.randn(3, 4, 6),)),
    Case("embedding_module", EmbedModel(), lambda: (torch.tensor([[1, 2, 0], [3, 9, 4]]),)),
    Case("module_dict", ModuleDictModel(), lambda: (torch.randn(2, 4),)),
    Case("helper_methods", HelperMethods(), lambda: (torch.randn(3, 4),)),
    Case("activation_modules", Activations(), lambda: (torch.randn(3, 4),)),
    Case("sequential_index", SequentialIndex(), lambda: (torch.randn(3, 4),)),
    Case("pool_modules", Pools(), lambda: (torch.randn(1, 2, 6, 6),)),
    Case("submodule_twice", SubclassCall(), lambda: (torch.randn(2, 4),)),
    Case("super_forward", SuperForward(4), lambda: (torch.randn(2, 4),)),
    # nn.LSTMCell with a state is lowered to IR ops; without one its forward calls _VF.lstm_cell.
    Case("lstm_cell_loop", LSTMCellLoop(), lambda: (torch.randn(4, 2, 3),),
         ops=("linear", "chunk", "sigmoid", "tanh")),
    Case("lstm_cell_no_state", LSTMCellLoop().cell, lambda: (torch.randn(2, 3),), fallback=True),
    Case("manual_lstm", ManualLSTM(), lambda: (torch.randn(5, 2, 3),)),
]
