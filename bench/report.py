"""The benchmark report: what every scenario returns, and how it becomes Markdown, JSON and PNG.

A scenario (``bench/scenarios/<name>.py``) exposes ``SCENARIO = Scenario(...)`` whose ``run``
takes a :class:`Context` and returns a :class:`Result`: tables (rows of plain values), plots
(series of numbers) and findings (one sentence each: where we win or lose, and why). This module
renders them; scenarios never write files into the report directory themselves except through
``Context.artifact``.
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

Cell = str | int | float | None


@dataclass
class Table:
    """One table: ``columns`` names, ``rows`` of cells (numbers are formatted by :func:`fmt`).

    ``note`` is printed under the table (units, what the ratio is against)."""

    title: str
    columns: list[str]
    rows: list[list[Cell]]
    note: str = ""


@dataclass
class Plot:
    """One PNG: ``kind`` "bar" (``bars``: label -> value, one bar each, optional ``errors``) or
    "line" (``series``: name -> [(x, y), ...]). ``log_y`` for values spanning decades."""

    filename: str
    title: str
    ylabel: str
    kind: Literal["bar", "line"] = "bar"
    xlabel: str = ""
    bars: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    log_y: bool = False


@dataclass
class Result:
    """What a scenario measured. ``raw`` is kept in results.json for later comparison."""

    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    """What a scenario gets: ``out_dir`` (the report directory), ``work_dir`` (scratch space,
    removed afterwards), ``quick`` (a smoke-sized run: fewer jobs, same code paths),
    ``peers_python`` (the interpreter of the separate environment with the peer libraries),
    ``log`` (progress lines to stderr)."""

    out_dir: Path
    work_dir: Path
    quick: bool
    peers_python: Path
    log: Callable[[str], None]

    def artifact(self, name: str) -> Path:
        """A path inside the report directory for an extra file (e.g. a raw log)."""
        return self.out_dir / name


@dataclass
class Scenario:
    """A named benchmark: ``key`` is what ``--only`` selects (e.g. "worker");
    ``needs_cluster``: it runs the local control plane or node and installs the chart, so the
    Kubernetes binaries and helm are built (or found cached) before the run (``bench.__main__``)."""

    key: str
    number: int
    title: str
    run: Callable[[Context], Result]
    needs_cluster: bool = False


def fmt(value: Cell) -> str:
    """A cell as text: ints with thousands separators, floats with 3 significant digits
    (at least), None as "-"."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}"
    return str(value)


def table_markdown(table: Table) -> str:
    """A GitHub-flavoured Markdown table with its title and note."""
    lines = [f"**{table.title}**", "", "| " + " | ".join(table.columns) + " |"]
    lines.append("|" + "|".join("---" for _ in table.columns) + "|")
    for row in table.rows:
        lines.append("| " + " | ".join(fmt(c) for c in row) + " |")
    if table.note:
        lines += ["", table.note]
    return "\n".join(lines) + "\n"


def draw(plot: Plot, out_dir: Path) -> Path:
    """Render one plot to ``out_dir/plot.filename`` with matplotlib (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    if plot.kind == "bar":
        labels = list(plot.bars)
        ax.bar(labels, [plot.bars[k] for k in labels], color="#4c72b0")
        ax.tick_params(axis="x", labelrotation=30)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    else:
        for name, points in plot.series.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        ax.legend()
        ax.set_xlabel(plot.xlabel)
    if plot.log_y:
        ax.set_yscale("log")
    ax.set_title(plot.title)
    ax.set_ylabel(plot.ylabel)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out_dir / plot.filename
    fig.savefig(path)
    plt.close(fig)
    return path


def machine_summary() -> dict[str, Any]:
    """CPU model, cores, memory, kernel, Python and redis-server versions: the context of the
    absolute figures."""
    info: dict[str, Any] = {"python": platform.python_version(), "kernel": platform.release()}
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        models = [
            ln.split(":", 1)[1].strip()
            for ln in cpuinfo.splitlines()
            if ln.startswith("model name")
        ]
        info["cpu"] = models[0] if models else "?"
        info["cores"] = len(models)
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        info["memory_gib"] = round(int(mem) / 1024 / 1024, 1)
        info["loadavg_at_start"] = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        pass
    try:
        info["redis_server"] = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, check=True
        ).stdout.split()[2]
    except (OSError, subprocess.CalledProcessError, IndexError):
        info["redis_server"] = "?"
    info["started"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    root = Path(__file__).resolve().parent.parent
    try:  # the code measured: its commit, and whether the tree had changes beyond it
        git = ["git", "-C", str(root)]
        head = subprocess.run(
            [*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        info["commit"] = head + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        info["commit"] = "?"
    return info


def write_report(
    out_dir: Path,
    results: Sequence[tuple[Scenario, Result | None, str | None, float]],
    machine: dict[str, Any],
) -> Path:
    """Write ``report.md``, ``results.json`` and the PNGs into ``out_dir``.

    ``results``: (scenario, result or None when it failed, error text or None, seconds taken).
    Returns the report's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    md = [
        "# sendgroup-operator benchmarks",
        "",
        f"Started {machine.get('started', '?')}, report written {now}; commit "
        f"{machine.get('commit', '?')}; load average at start "
        f"{' '.join(machine.get('loadavg_at_start', ['?']))}.",
        f"Machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
        f"{machine.get('memory_gib', '?')} GiB, kernel {machine.get('kernel', '?')}, Python "
        f"{machine.get('python', '?')}, redis-server {machine.get('redis_server', '?')}.",
        "Every peer ran in the same run on the same machine; ratios are the figures to trust, "
        "absolute numbers are context.",
        "",
    ]
    dump: dict[str, Any] = {"machine": machine, "run_at": now, "scenarios": {}}
    for scenario, result, error, seconds in results:
        md.append(f"## {scenario.number}. {scenario.title}")
        md.append("")
        md.append(f"_Took {seconds:.0f} s._")
        md.append("")
        entry: dict[str, Any] = {"title": scenario.title, "seconds": round(seconds, 1)}
        if result is None:
            md += [f"**FAILED**: {error}", ""]
            entry["error"] = error
        else:
            for table in result.tables:
                md.append(table_markdown(table))
            for plot in result.plots:
                path = draw(plot, out_dir)
                md += [f"![{plot.title}]({path.name})", ""]
            if result.findings:
                md += ["Findings:", ""] + [f"- {f}" for f in result.findings] + [""]
            entry.update(
                tables=[asdict(t) for t in result.tables],
                findings=result.findings,
                raw=result.raw,
            )
        dump["scenarios"][scenario.key] = entry
    report = out_dir / "report.md"
    report.write_text("\n".join(md))
    (out_dir / "results.json").write_text(json.dumps(dump, indent=2, default=str) + "\n")
    return report
