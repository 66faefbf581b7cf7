"""One convolution layer at a time, xjit (a one-conv graph through `xjit.ir.compile`, weights
as run-time inputs as a module's are) against F.conv2d, in CPU time of the calling thread.

    python bench/conv_layers.py [--layout nhwc|nchw] [--shapes 1x128x128x28x3x1,...]

Each shape is batch x in-channels x out-channels x size x kernel x stride (square, padding
kernel // 2); the default list is ResNet-18's conv layers at batch 1 after its stem. The
weights rotate through ~64 MB of copies, so each call reads them cold from memory, as a
ResNet-18 call does (45 MB of weights against a 32 MB L3). For an A/B of a backend switch
read once per process (XJIT_CONV_WINOGRAD, XJIT_CONV_IM2COL) run it once per setting. The
last column is the oneDNN implementation that ran.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import xjit.ir as ir

RESNET18_B1 = "1x64x64x56x3x1,1x64x128x56x3x2,1x128x128x28x3x1,1x128x256x28x3x2,1x256x256x14x3x1,1x256x512x14x3x2,1x512x512x7x3x1,1x256x512x14x1x2"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layout", default="nhwc", choices=("nhwc", "nchw"))
    ap.add_argument("--shapes", default=RESNET18_B1)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for spec in args.shapes.split(","):
        n, c, o, h, k, s = (int(v) for v in spec.split("x"))
        p, oh = k // 2, (h + 2 * (k // 2) - k) // s + 1
        nhwc = args.layout == "nhwc"
        xt = f"f32[{n},{h},{h},{c}]" if nhwc else f"f32[{n},{c},{h},{h}]"
        yt = f"f32[{n},{oh},{oh},{o}]" if nhwc else f"f32[{n},{o},{oh},{oh}]"
        layout = ', layout = "nhwc"' if nhwc else ""
        compiled = ir.compile(
            ir.parse(
                f"graph @c(%x: {xt}, %k: f32[{o},{c},{k},{k}]) -> ({yt}) {{\n"
                f"  %y = conv2d(%x, %k) {{stride = [{s}, {s}], padding = [{p}, {p}]{layout}}} : {yt}\n"
                f"  %r = relu(%y) : {yt}\n  return(%r)\n}}"
            )
        )
        x = torch.randn(n, c, h, h)
        xin = x.permute(0, 2, 3, 1).contiguous() if nhwc else x
        copies = max(2, int(64e6 / (o * c * k * k * 4)))
        weights = [torch.randn(o, c, k, k) * 0.05 for _ in range(copies)]
        want = torch.relu(F.conv2d(x, weights[0], stride=s, padding=p))
        got = compiled(xin, weights[0])[0]
        got = got.permute(0, 3, 1, 2) if nhwc else got
        err = (got - want).abs().max().item() / want.abs().max().item()

        def per_call(fn) -> float:  # type: ignore[no-untyped-def]
            t0 = time.thread_time()
            for w in weights:
                fn(w)
            return (time.thread_time() - t0) / len(weights)

        samples: dict[str, list[float]] = {"xjit": [], "torch": []}
        fns = {
            "xjit": lambda w: compiled(xin, w),
            "torch": lambda w: F.conv2d(x, w, stride=s, padding=p).relu_(),
        }
        for fn in fns.values():
            per_call(fn)  # warm up
        for r in range(args.repeats):
            for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
                samples[name].append(per_call(fns[name]))
        impl = [t for name, t in compiled.dump_files() if name.endswith(".onednn")]
        impl = impl[0].strip().splitlines()[-1].split("]: ")[-1] if impl else "?"
        x_ms, t_ms = (statistics.median(samples[b]) * 1e3 for b in ("xjit", "torch"))
        print(
            f"{spec} {args.layout}: xjit {x_ms:.3f} ms, torch {t_ms:.3f} ms, "
            f"error {err:.1e} of max |torch| | {impl}",
            flush=True,
        )


if __name__ == "__main__":
    main()
