#!/usr/bin/env python3
"""Writes src/python/startup_symbols.txt: the functions libxjit_native.so and libxjit_llvm.so
(the LLVM engine, loaded for each compile burst) run while they load.

    python3 scripts/startup_symbols.py <build>/python/xjit/libxjit_native.so \
        <build>/python/xjit/libxjit_llvm.so

Those are the static constructors (`_GLOBAL__sub_I_*`: LLVM's command-line options, xjit's op
and pass tables) and every function they call directly, found in the disassembly (objdump).
lld places them first in the library (--symbol-ordering-file, src/python/CMakeLists.txt): spread
over the 30 MB of code they made the kernel map about 15 MB of it at import (each page fault
maps its 64 KB neighbourhood); packed together they are about 0.7 MB. Rerun after an LLVM
upgrade or when the library's load-time RSS grows (bench/memory_breakdown.py); names no longer
in the library are ignored by the linker, so a stale list costs memory, never correctness.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import defaultdict
from pathlib import Path

FUNCTION = re.compile(r"^([0-9a-f]+) <(.+)>:$")
DIRECT_CALL = re.compile(r"\b(?:call|jmp)\s+[0-9a-f]+ <([^>+]+)(?:\+0x[0-9a-f]+)?>")


def startup_functions(library: Path) -> list[str]:
    """Static constructors, then what they reach by direct calls, in address order."""
    disassembly = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(library)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    address: dict[str, int] = {}
    callees: dict[str, set[str]] = defaultdict(set)
    current = None
    for line in disassembly.splitlines():
        if m := FUNCTION.match(line):
            current = m.group(2)
            address[current] = int(m.group(1), 16)
        elif current and (m := DIRECT_CALL.search(line)):
            callees[current].add(m.group(1).removesuffix("@plt"))
    roots = [f for f in address if f.startswith(("_GLOBAL__sub_I", "_GLOBAL__I"))]
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        f = stack.pop()
        if f in seen:
            continue
        seen.add(f)
        stack.extend(g for g in callees.get(f, ()) if g in address and g not in seen)
    body = sorted((f for f in seen if f not in roots), key=lambda f: address[f])
    return roots + body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("libraries", type=Path, nargs="+")
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "src/python/startup_symbols.txt",
    )
    args = parser.parse_args()
    names = list(dict.fromkeys(n for lib in args.libraries for n in startup_functions(lib)))
    args.out.write_text("\n".join(names) + "\n")
    print(f"{args.out}: {len(names)} functions")


if __name__ == "__main__":
    main()
