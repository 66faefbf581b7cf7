#!/usr/bin/env python3
"""Writes src/python/steady_symbols.txt: the functions of libxjit_native.so and _frontend that a
steady-state call of the benchmark models runs.

    python scripts/steady_symbols.py [--cases mlp/b1,mlp/b64,...]   (the installed xjit; gdb)

lld places them first in both libraries (--symbol-ordering-file, src/python/CMakeLists.txt; the
objects are built with -ffunction-sections). The release after a compile drops the libraries'
code pages (release_memory.cpp), and a steady call maps back those it runs; the kernel maps
code in whole page-cache folios around each fault, so ~90 scattered pages came back as ~1.9 MB
of RSS (docs/perf.md, session 12). Per case, in a fresh process after two calls:
  1. pages: each code page of the two libraries made a mapping of its own (neighbouring pages
     get different protections), so a fault maps only its page; the code dropped, three calls
     run, and the resident pages are the ones the calls ran (/proc/self/smaps);
  2. functions: the functions on those pages (nm) are the candidates; in a second process gdb
     puts a one-shot breakpoint on each, three calls run, and the ones hit are kept.
Rerun when a steady call's code changes much (bench/memory_breakdown.py shows the libraries'
resident code); names no longer in a library are ignored by lld, a stale list costs memory only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("libxjit_native.so", "_frontend.cpython")
DEFAULT_CASES = "mlp/b1,mlp/b64,resnet18/b1,lstm/b1,bert/b1,gpt2/b1,vit/b1"
_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) ([0-9a-f]+) \S+ \S+\s*(.*)$")
PROT_RWX = 7
MADV_DONTNEED = 4


def library_mappings(pid: str = "self") -> tuple[dict[str, int], list[tuple[int, int, str, str]]]:
    """Load address of each of xjit's libraries, and their mappings (start, end, perms, path)."""
    bases: dict[str, int] = {}
    found = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        m = _MAPPING.match(line)
        if not m or not any(lib in m.group(5) for lib in LIBRARIES):
            continue
        start, end, path = int(m.group(1), 16), int(m.group(2), 16), m.group(5)
        if int(m.group(4), 16) == 0:
            bases.setdefault(path, start)
        found.append((start, end, m.group(3), path))
    return bases, found


def run_case(case: str) -> tuple[object, tuple[object, ...]]:
    """A compiled model after its first calls (compile and release done), and its inputs."""
    sys.path.insert(0, str(ROOT))
    import torch

    from bench.common import make_backend, setup_threads
    from bench.models import CASES

    setup_threads()
    model, inputs = CASES[case].build()
    torch.set_grad_enabled(False)
    fn = make_backend("xjit", model)
    fn(*inputs)
    fn(*inputs)
    return fn, inputs


def child_pages(case: str, out: Path) -> None:
    """Step 1, in the child: the code pages (offsets from each library's base) three calls run."""
    import ctypes

    fn, inputs = run_case(case)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = os.sysconf("SC_PAGESIZE")
    bases, mappings = library_mappings()
    for start, end, perms, _ in mappings:
        if perms != "r-xp":
            continue
        # Every other page writable (never written: a private mapping keeps sharing the file's
        # page), so that no two neighbours merge into one mapping.
        for p in range(start, end, 2 * page):
            if libc.mprotect(p, page, PROT_RWX) != 0:
                raise OSError(ctypes.get_errno(), "mprotect")
        libc.madvise(start, end - start, MADV_DONTNEED)
    for _ in range(3):
        fn(*inputs)
    touched: dict[str, list[int]] = {}
    current = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if m := _MAPPING.match(line):
            path = m.group(5)
            code = m.group(3) in ("r-xp", "rwxp") and any(lib in path for lib in LIBRARIES)
            current = (int(m.group(1), 16), int(m.group(2), 16), path) if code else None
        elif current and line.startswith("Rss:") and int(line.split()[1]) > 0:
            start, end, path = current
            touched.setdefault(path, []).extend(p - bases[path] for p in range(start, end, page))
    out.write_text(json.dumps(touched))


def child_wait(case: str, go: Path) -> None:
    """Step 2, in the child: waits for gdb's breakpoints, then runs three calls."""
    import time

    fn, inputs = run_case(case)
    print(os.getpid(), flush=True)
    while not go.exists():
        time.sleep(0.05)
    for _ in range(3):
        fn(*inputs)


def functions(path: str) -> list[tuple[int, int, str]]:
    """(offset, size, mangled name) of the library's functions."""
    listing = subprocess.run(["nm", "-S", "--defined-only", path], check=True, capture_output=True, text=True)
    result = []
    for line in listing.stdout.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "tTWw":
            result.append((int(f[0], 16), int(f[1], 16), f[3]))
    return result


# Runs inside gdb: one-shot breakpoints on the candidates, then the calls; writes the hits.
_GDB_SCRIPT = """
import gdb, json, os
cands = json.load(open(os.environ["XJIT_CANDIDATES"]))
gdb.execute("set pagination off")
for address in cands:
    gdb.execute("tbreak *%d" % address, to_string=True)
open(os.environ["XJIT_GO"], "w").write("go")
hits = set()
while True:
    try:
        gdb.execute("continue", to_string=True)
        hits.add(int(gdb.parse_and_eval("$pc")))
    except gdb.error:
        break
json.dump(sorted(hits), open(os.environ["XJIT_HITS"], "w"))
"""


def trace(case: str, tmp: Path) -> set[str]:
    """The functions of xjit's libraries that three steady calls of the case run."""
    pages_json = tmp / "pages.json"
    subprocess.run([sys.executable, __file__, "--child-pages", case, str(pages_json)], check=True)
    pages = {path: set(p) for path, p in json.loads(pages_json.read_text()).items()}
    page = os.sysconf("SC_PAGESIZE")
    candidates: dict[str, dict[int, str]] = {}  # path -> offset -> name
    for path, touched in pages.items():
        for offset, size, name in functions(path):
            first, last = offset // page * page, (offset + max(size, 1) - 1) // page * page
            if any(p in touched for p in range(first, last + 1, page)):
                candidates.setdefault(path, {})[offset] = name
    go, hits_json, script = tmp / "go", tmp / "hits.json", tmp / "hits.py"
    go.unlink(missing_ok=True)
    script.write_text(_GDB_SCRIPT)
    child = subprocess.Popen(
        [sys.executable, __file__, "--child-wait", case, str(go)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    pid = child.stdout.readline().strip()
    bases, _ = library_mappings(pid)
    addresses = {bases[path] + offset: name for path, c in candidates.items() for offset, name in c.items()}
    (tmp / "candidates.json").write_text(json.dumps(sorted(addresses)))
    env = dict(os.environ, XJIT_CANDIDATES=str(tmp / "candidates.json"), XJIT_GO=str(go), XJIT_HITS=str(hits_json))
    subprocess.run(["gdb", "-p", pid, "-batch", "-nx", "-x", str(script)], env=env, check=True, capture_output=True)
    child.wait()
    hit = {addresses[a] for a in json.loads(hits_json.read_text()) if a in addresses}
    print(f"{case}: {sum(map(len, pages.values()))} code pages, {len(addresses)} functions on them, {len(hit)} run")
    return hit


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] in ("--child-pages", "--child-wait"):
        (child_pages if sys.argv[1] == "--child-pages" else child_wait)(sys.argv[2], Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("-o", "--out", type=Path, default=ROOT / "src/python/steady_symbols.txt")
    args = parser.parse_args()
    names: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            names |= trace(case, Path(tmp))
    args.out.write_text("".join(f"{n}\n" for n in sorted(names)))
    print(f"{args.out}: {len(names)} functions")


if __name__ == "__main__":
    main()
