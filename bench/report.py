"""Render run.py's results as results.json, results.md and PNG charts in one directory.

    python bench/report.py DIR     re-renders DIR/results.md and the charts from DIR/results.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import BACKENDS, COMPILERS

Results = dict[str, Any]


def num(value: Any) -> float | None:
    """The value if it is a measurement, None if it is missing or an error text."""
    return value if isinstance(value, (int, float)) else None


def get(row: Results, backend: str, phase: str, key: str) -> float | None:
    return num(row.get("backends", {}).get(backend, {}).get(phase, {}).get(key))


def ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def fmt(value: float | None, spec: str | None = None, suffix: str = "") -> str:
    """`spec` formatting; by default 3 significant digits, but never an exponent above 100."""
    if value is None:
        return "n/a"
    if spec is None:
        spec = ".0f" if abs(value) >= 100 else ".3g"
    return f"{value:{spec}}{suffix}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def speed_rows(rows: list[Results]) -> list[list[str]]:
    out = []
    for row in rows:
        ms = {b: get(row, b, "steady", "median_s") for b in BACKENDS}
        ms = {b: v * 1e3 if v is not None else None for b, v in ms.items()}
        out.append(
            [row["case"], *(fmt(ms[b]) for b in ms)]
            + [fmt(ratio(ms["eager"], ms[b]), ".2f", "×") for b in COMPILERS]
            + [fmt(ratio(ms["inductor"], ms["xjit"]), ".2f", "×")]
        )
    return out


def compile_rows(rows: list[Results]) -> list[list[str]]:
    return [
        [row["case"], fmt(get(row, "eager", "cold", "first_call_s"))]
        + [fmt(get(row, b, phase, "first_call_s")) for b in COMPILERS for phase in ("cold", "warm")]
        for row in rows
    ]


WARM_KEYS = ("first_call_s", "later_call_s", "first_call_overhead_s", "first_call_cpu_overhead_s")


def warm_rows(rows: list[Results]) -> list[list[str]]:
    """The raw warm first call next to its overhead over a later call of the same process."""

    def ms(row: Results, b: str, phase: str, key: str) -> str:
        value = get(row, b, phase, key)
        return fmt(value * 1e3 if value is not None else None)

    return [
        [row["case"]]
        + [ms(row, "eager", "cold", key) for key in ("first_call_s", "first_call_overhead_s", "first_call_cpu_overhead_s")]
        + [ms(row, b, "warm", key) for b in COMPILERS for key in WARM_KEYS]
        for row in rows
    ]


def memory_rows(rows: list[Results]) -> list[list[str]]:
    def cell(row: Results, b: str) -> str:
        steady = get(row, b, "cold", "peak_rss_steady_mb")
        first = get(row, b, "cold", "peak_rss_first_call_mb")
        return "n/a" if steady is None else f"{steady:.0f} ({fmt(first, '.0f')})"

    return [[row["case"], *(cell(row, b) for b in BACKENDS)] for row in rows]


def resident_rows(rows: list[Results]) -> list[list[str]]:
    def cell(row: Results, b: str) -> str:
        anon, file = get(row, b, "cold", "rss_anon_mb"), get(row, b, "cold", "rss_file_mb")
        return "n/a" if anon is None else f"{anon:.0f} / {fmt(file, '.0f')}"

    return [[row["case"], *(cell(row, b) for b in BACKENDS)] for row in rows]


def graph_rows(rows: list[Results]) -> list[list[str]]:
    def graphs(row: Results, b: str) -> str:
        g, br = get(row, b, "cold", "graphs"), get(row, b, "cold", "graph_breaks")
        return "n/a" if g is None else f"{g} / {fmt(br, 'd')}"

    def err(row: Results, b: str) -> str:
        a, r = get(row, b, "steady", "max_abs_err"), get(row, b, "steady", "max_rel_err")
        return "n/a" if a is None else f"{a:.1e} / {fmt(r, '.1e')}"

    return [[row["case"], *(graphs(row, b) for b in COMPILERS), *(err(row, b) for b in COMPILERS)] for row in rows]


def errors(results: Results) -> list[str]:
    lines = []
    for row in results["cases"]:
        if "error" in row:
            lines.append(f"- {row['case']}: {first_line(row['error'])}")
        for b, phases in row.get("backends", {}).items():
            for phase, r in phases.items():
                for key in ("error", "explain_error"):
                    if isinstance(r, dict) and key in r:
                        lines.append(f"- {row['case']} {b} {phase}: {first_line(r[key])}")
    for b, text in results.get("micro", {}).get("overhead_errors", {}).items():
        lines.append(f"- micro {b}: {first_line(text)}")
    return lines


def first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else "(no message)"


def micro_lines(micro: Results) -> list[str]:
    if "error" in micro:
        return [f"Micro-benchmarks failed: {first_line(micro['error'])}"]
    us = micro.get("overhead_us", {})
    lines = ["Per-call overhead of `x + 1` on a 1-element tensor (median µs per call):", ""]
    lines += table(list(BACKENDS), [[fmt(us.get(b)) for b in BACKENDS]])
    lines += ["", "Compile time (first call, s) against graph size N:", ""]
    rows = [
        [kind, n, *(fmt(num(by_n.get(b))) for b in COMPILERS)]
        for kind, sizes in micro.get("compile_s", {}).items()
        for n, by_n in sizes.items()
    ]
    return lines + table(["chain", "N", *COMPILERS], rows)


def training_rows(training: Results) -> list[list[str]]:
    rows = []
    for case in training.get("cases", []):
        by = case["backends"]

        def ms(b: str) -> str:
            seconds = num(by.get(b, {}).get("median_s"))
            return fmt(None if seconds is None else seconds * 1e3)

        def first(b: str) -> str:
            steps = [num(by.get(b, {}).get(k)) for k in ("first_step_s", "second_step_s")]
            known = [s for s in steps if s is not None]
            return fmt(sum(known) if known else None)

        xj = by.get("xjit", {})
        rows.append([
            case["case"],
            *(ms(b) for b in BACKENDS),
            fmt(num(by.get("inductor", {}).get("speedup_vs_eager")), ".2f"),
            fmt(num(xj.get("speedup_vs_eager")), ".2f"),
            fmt(num(xj.get("ratio_vs_inductor")), ".2f"),
            *(first(b) for b in BACKENDS),
            fmt(num(xj.get("max_loss_rel_diff")), ".1e"),
        ])
    return rows


def training_lines(training: Results) -> list[str]:
    if not training:
        return ["Not run (`--training`)."]
    if "error" in training:
        return [f"Training steps failed: {first_line(training['error'])}"]
    return table(
        ["case", *(f"{b} ms" for b in BACKENDS), "inductor vs eager", "xjit vs eager", "xjit vs inductor",
         *(f"{b} first two steps s" for b in BACKENDS), "xjit max loss rel diff"],
        training_rows(training),
    )


def training_summary(training: Results) -> str:
    """One line for the console."""
    if "error" in training:
        return f"training: failed: {first_line(training['error'])}"
    parts = []
    for case in training.get("cases", []):
        xj = case["backends"].get("xjit", {})
        parts.append(f"{case['case']} xjit {fmt(num(xj.get('speedup_vs_eager')), '.2f')}x eager, "
                     f"{fmt(num(xj.get('ratio_vs_inductor')), '.2f')}x inductor")
        parts += [f"{b}: {first_line(row['error'])}" for b, row in case["backends"].items() if "error" in row]
    return "training: " + "; ".join(parts)


def markdown(results: Results) -> str:
    m = results["machine"]
    xjit = results["xjit"]
    xjit_line = (
        f"xjit version {xjit.get('version')}."
        if xjit.get("available")
        else f"xjit: not available, its columns read n/a ({first_line(xjit.get('reason', ''))})"
    )
    rows = results["cases"]
    lines = [
        "# Benchmark results",
        "",
        f"Machine: {m['cpu']} ({', '.join(m['isa'])}), {m['cores']} cores, {m['memory_gib']} GiB, "
        f"torch {m['torch']} ({m['torch_threads']} threads), transformers {m['transformers']}, "
        f"Python {m['python']}; load average {m['loadavg_1m_at_start']:.2f} at start, "
        f"{results['loadavg_1m_at_end']:.2f} at end.",
        "",
        f"Command: `{results['command']}`. Medians of {results['settings']['repeats']} interleaved repeats. "
        + xjit_line,
        "",
        "## Run time (median ms per call; speedups are eager time / backend time)",
        "",
        *table(
            ["case", "eager ms", "inductor ms", "xjit ms", "inductor vs eager", "xjit vs eager", "xjit vs inductor"],
            speed_rows(rows),
        ),
        "",
        "## Compile: first call in a fresh process (s); cold = empty cache, warm = cache filled by the cold run",
        "",
        *table(
            ["case", "eager first call", "inductor cold", "inductor warm", "xjit cold", "xjit warm"],
            compile_rows(rows),
        ),
        "",
        "## Warm start (ms): the first call in a fresh process (warm: cache filled), a later call of that "
        "process (median of 3) and the overhead = first - later, the part a compiler controls; "
        "overhead CPU: the same in CPU time of all threads, steadier on a loaded machine",
        "",
        *table(
            ["case", "eager first", "eager overhead", "eager overhead CPU"]
            + [f"{b} warm {k}" for b in COMPILERS for k in ("first", "later", "overhead", "overhead CPU")],
            warm_rows(rows),
        ),
        "",
        "## Peak RSS (MB): steady-state calls (in parentheses: including the first call and its compile)",
        "",
        *table(["case", "eager", "inductor", "xjit"], memory_rows(rows)),
        "",
        "Resident after the steady calls (MB): anonymous (heap, tensors, generated code) / file-backed "
        "(shared libraries' pages, shared with other processes and reclaimable)",
        "",
        *table(["case", "eager", "inductor", "xjit"], resident_rows(rows)),
        "",
        "## Graphs / graph breaks, and max abs / rel error against eager",
        "",
        *table(["case", "inductor graphs", "xjit graphs", "inductor error", "xjit error"], graph_rows(rows)),
        "",
        "## Training steps (forward + backward + optimizer step; median ms per step, interleaved in one "
        "process; first two steps = capture and compile of forward, backward and the optimizer step, "
        "caches empty)",
        "",
        *training_lines(results.get("training", {})),
        "",
        "## Micro-benchmarks",
        "",
        *micro_lines(results.get("micro", {})),
    ]
    if errs := errors(results):
        lines += ["", "## Errors (full text in results.json)", "", *errs]
    return "\n".join(lines) + "\n"


def bar_chart(
    path: Path,
    title: str,
    ylabel: str,
    cases: list[str],
    series: dict[str, list[float | None]],
    log: bool = False,
    ref_line: float | None = None,
) -> None:
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(cases)), 4))
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        xs = [j + i * width for j in range(len(cases))]
        ax.bar(xs, [v if v is not None else math.nan for v in values], width, label=label)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))], cases, rotation=30, ha="right")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    if log and any(v is not None and v > 0 for vs in series.values() for v in vs):
        ax.set_yscale("log")
    if ref_line is not None:
        ax.axhline(ref_line, color="black", linewidth=0.8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def micro_chart(path: Path, micro: Results) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for kind, sizes in micro.get("compile_s", {}).items():
        for b in COMPILERS:
            points = [(int(n), v[b]) for n, v in sizes.items() if num(v.get(b)) is not None]
            if points:
                axes[0].plot(*zip(*points, strict=True), marker="o", label=f"{b} {kind}")
    axes[0].set(xscale="log", yscale="log", xlabel="ops in chain (N)", ylabel="compile s")
    axes[0].set_title("Compile time vs graph size")
    if axes[0].lines:
        axes[0].legend()
    us = micro.get("overhead_us", {})
    axes[1].bar(list(us), list(us.values()))
    axes[1].set(ylabel="µs per call", title="Per-call overhead, x + 1")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(results: Results, out: Path) -> None:
    """Write results.json, results.md and the charts (speedup, compile, memory, micro) to `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(markdown(results))
    rows = results["cases"]
    cases = [r["case"] for r in rows]

    def series(phase: str, key: str, backends: tuple[str, ...]) -> dict[str, list[float | None]]:
        return {b: [get(r, b, phase, key) for r in rows] for b in backends}

    speed = {
        b: [ratio(get(r, "eager", "steady", "median_s"), get(r, b, "steady", "median_s")) for r in rows]
        for b in COMPILERS
    }
    bar_chart(out / "speedup.png", "Speedup over eager (higher is better)", "×", cases, speed, log=True, ref_line=1.0)
    compile_series = {
        f"{b} {phase}": series(phase, "first_call_s", (b,))[b] for b in COMPILERS for phase in ("cold", "warm")
    }
    bar_chart(out / "compile.png", "First call in a fresh process", "seconds", cases, compile_series, log=True)
    memory = series("cold", "peak_rss_steady_mb", BACKENDS)
    bar_chart(out / "memory.png", "Peak RSS, steady state", "MB", cases, memory)
    micro_chart(out / "micro.png", results.get("micro", {}))


if __name__ == "__main__":
    directory = Path(sys.argv[1])
    write(json.loads((directory / "results.json").read_text()), directory)
