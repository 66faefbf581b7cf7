"""Shared pytest setup for the Python tests: locating the build (xjit package, xjit-run) and the
op-table summary printed at the end of a run."""

from __future__ import annotations

import glob
import os
import shutil
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTS_DIR = Path(__file__).resolve().parent
# The op table (optable/*.py) imports as the package `optable`.
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))


def _build_dirs() -> list[Path]:
    """XJIT_BUILD_DIR if set, else the repo's build dirs (build-x/, build/x/) with a built
    xjit-run, most recently built first."""
    env = os.environ.get("XJIT_BUILD_DIR")
    if env:
        return [Path(env)]
    tools = [
        Path(p)
        for pat in ("build*/tools/xjit-run", "build/*/tools/xjit-run")
        for p in glob.glob(str(REPO / pat))
    ]
    tools.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return [t.parent.parent for t in tools]


def _ensure_xjit_importable() -> None:
    """Prefers an installed xjit (pip install [-e] .); else a development build's python dir."""
    try:
        import xjit._xjit  # noqa: F401
    except ImportError:
        for d in _build_dirs():
            if glob.glob(str(d / "python" / "xjit" / "_xjit*.so")):
                sys.path.insert(0, str(d / "python"))
                return


_ensure_xjit_importable()

# Compiled kernels go to a cache of the test session, not the user's ~/.cache/xjit (subprocesses
# inherit it). A test that needs a cold or shared cache sets XJIT_CACHE_DIR itself.
if "XJIT_CACHE_DIR" not in os.environ:
    import atexit
    import tempfile

    os.environ["XJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="xjit-test-cache-")
    atexit.register(shutil.rmtree, os.environ["XJIT_CACHE_DIR"], ignore_errors=True)


def run_cached_program(
    source: str, tmp_path: Path, *args: str, **env_extra: str
) -> dict[str, Any]:
    """Runs `source` as a fresh Python process with the compile cache in tmp_path/cache (and no
    other XJIT_ variable but env_extra), importing xjit as this process did; returns the JSON
    object its last line of output prints."""
    import json
    import subprocess

    import xjit

    script = tmp_path / "prog.py"
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XJIT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(xjit.__file__).parent.parent), *sys.path])
    env["XJIT_CACHE_DIR"] = str(tmp_path / "cache")
    env.update(env_extra)
    # The child imports xjit as this process did (-S: without site's .pth import hooks).
    flags = ["-S"] if sys.flags.no_site else []
    proc = subprocess.run(
        [sys.executable, *flags, str(script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def find_tool(name: str) -> str | None:
    """A built tool: $XJIT_<NAME> (xjit-run -> XJIT_RUN), the build dir, or PATH."""
    env = os.environ.get("XJIT_" + name.removeprefix("xjit-").upper().replace("-", "_"))
    if env:
        return env
    for d in _build_dirs():
        p = d / "tools" / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which(name)


@pytest.fixture
def fresh_frontend() -> Any:
    """A frontend without compiled entries before and after the test: cases that compile one
    lambda many times stay clear of the recompile limit (use with pytest.mark.usefixtures)."""
    import xjit._frontend as fe

    fe.reset()
    yield
    fe.reset()


@pytest.fixture(scope="session")
def xjit_run() -> str:
    tool = find_tool("xjit-run")
    if tool is None:
        pytest.skip("xjit-run not built (set XJIT_BUILD_DIR or XJIT_RUN)")
    return tool


@pytest.fixture
def run_profiled() -> Any:
    """run_profiled(fn, *args) -> (xjit.jit(fn)(*args), the XJIT_PROFILE report of that call):
    which instructions ran native, reference or external. Compiled entries are forgotten first,
    so a function object reused across parametrized cases compiles afresh."""
    import xjit
    import xjit._frontend as fe

    def run(fn: Any, *args: Any) -> tuple[Any, str]:
        fe.reset()
        xjit.ir.profile(1)
        try:
            out = xjit.jit(fn)(*args)
            return out, xjit.ir.profile_report()
        finally:
            xjit.ir.profile(0)

    return run


# ---- op-table summary --------------------------------------------------------------------------

LOW_PRECISION = {"f16", "bf16"}
INTEGER = {"i64", "i32", "i16", "i8", "u8"}


def _category(dtype: str) -> str | None:
    if dtype == "f32":
        return "f32"
    if dtype in LOW_PRECISION:
        return "low"
    if dtype in INTEGER:
        return "int"
    return None


class OpTableStats:
    """Outcomes of test_ops.py tests, by op and dtype (from the user_properties the test sets)."""

    def __init__(self) -> None:
        # op -> category -> list of outcomes ("passed", "failed")
        self.outcomes: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        self.unregistered: set[str] = set()
        self.counts: dict[str, int] = defaultdict(int)

    def record(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        op = props.get("xjit_op")
        if op is None:
            return
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.outcome == "skipped" else "xpassed"
            elif report.failed and str(report.longrepr).startswith("[XPASS(strict)]"):
                outcome = "xpassed"
            else:
                outcome = report.outcome
            self.counts[outcome] += 1
            if props.get("xjit_unregistered"):
                self.unregistered.add(str(op))
                return
            if outcome == "skipped":
                return
            bucket = "passed" if outcome in ("passed", "xpassed") else "failed"
            self.outcomes[str(op)]["all"].append(bucket)
            cat = _category(str(props.get("xjit_dtype")))
            if cat:
                self.outcomes[str(op)][cat].append(bucket)

    def meets_bar(self, op: str) -> bool:
        """Passes in f32, a low-precision and an integer dtype, where the op's rows cover them
        (an integer-only op counts on its integer tests): every test of those categories passes
        and each covered category has a pass."""
        cats = self.outcomes[op]
        covered = [c for c in ("f32", "low", "int") if c in cats]
        return bool(covered) and all(
            "failed" not in cats[c] and "passed" in cats[c] for c in covered
        )

    def lines(self) -> list[str]:
        ops = sorted(self.outcomes)
        fully = [o for o in ops if "failed" not in self.outcomes[o]["all"]]
        per_cat = {
            c: sum(
                1 for o in ops if self.outcomes[o].get(c) and "failed" not in self.outcomes[o][c]
            )
            for c in ("f32", "low", "int")
        }
        bar = [o for o in ops if self.meets_bar(o)]
        c = self.counts
        out = [
            f"tests: {c['passed']} passed, {c['failed']} failed, {c['xfailed']} known failures, "
            f"{c['xpassed']} known failures now passing, {c['skipped']} skipped",
            f"ops tested: {len(ops)}; passing every test: {len(fully)}; "
            f"passing in f32: {per_cat['f32']}, "
            f"low precision (f16/bf16): {per_cat['low']}, integer: {per_cat['int']}",
            "ops passing in f32 + low precision + integer (where the op supports them): "
            f"{len(bar)} "
            f"(issue target: >= 120)",
        ]
        if self.unregistered:
            names = ", ".join(sorted(self.unregistered))
            out.append(f"skipped rows of {len(self.unregistered)} unregistered ops: {names}")
        return out


_STATS = OpTableStats()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _STATS.record(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _STATS.counts:
        return
    terminalreporter.section("xjit op table")
    for line in _STATS.lines():
        terminalreporter.write_line(line)
