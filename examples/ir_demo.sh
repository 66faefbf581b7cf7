#!/usr/bin/env bash
# `make demo`: runs a small IR program through xjit-run on .npy inputs and checks the result
# against PyTorch eager. (Once the frontend lands, the demo runs a PyTorch script through
# `python -m xjit`.)
set -euo pipefail
build_dir=${1:-build/py}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== the program (examples/ir/mlp.xir)"
cat "$here/ir/mlp.xir"
echo "== verified and printed by xjit-opt"
"$build_dir/tools/xjit-opt" "$here/ir/mlp.xir"

python3 - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
shapes = {"x": (8, 16), "w1": (32, 16), "b1": (32,), "w2": (4, 32), "b2": (4,)}
for i, (name, shape) in enumerate(shapes.items()):
    np.save(f"{sys.argv[1]}/in{i}.npy", rng.standard_normal(shape).astype(np.float32))
PY
echo "== xjit-run on a batch of 8"
"$build_dir/tools/xjit-run" "$here/ir/mlp.xir" "$work"/in{0,1,2,3,4}.npy -o "$work"

python3 - "$work" <<'PY'
import sys, numpy as np, torch
import torch.nn.functional as F
d = sys.argv[1]
x, w1, b1, w2, b2 = (torch.from_numpy(np.load(f"{d}/in{i}.npy")) for i in range(5))
expected = torch.softmax(F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2), -1)
got = torch.from_numpy(np.load(f"{d}/out0.npy"))
print(got)
err = (got - expected).abs().max().item()
print(f"max abs difference vs PyTorch eager: {err:.2e}")
sys.exit(0 if err < 1e-5 else 1)
PY
