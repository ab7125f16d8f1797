"""Run the benchmark scenarios side by side with their peers and write the report.

Run through ``bench/run`` (it prepares the separate peers environment and the tools), or
directly: ``python -m bench [--only worker,smtp] [--quick] [--out DIR]``. Scenarios that run the
local control plane or node (``Scenario.needs_cluster``) get its binaries and helm built first.

Each scenario runs in turn; one that fails is reported as FAILED with its error and the run goes
on; the exit status is 1 when any failed. The Markdown tables are printed at the end.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench.report import Context, Result, Scenario, machine_summary, table_markdown, write_report
from bench.scenarios import SCENARIOS


def _logger(key: str) -> Callable[[str], None]:
    def log(line: str) -> None:
        print(f"[{key}] {line}", file=sys.stderr, flush=True)

    return log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    keys = [s.key for s in SCENARIOS]
    parser.add_argument("--only", help=f"comma-separated scenario keys: {','.join(keys)}")
    parser.add_argument("--quick", action="store_true", help="smoke-sized runs (same code paths)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="report directory (default bench/results/<UTC date-time>)",
    )
    parser.add_argument(
        "--peers-python",
        type=Path,
        default=Path(sys.executable),
        help="interpreter with the peer libraries (bench/run passes .venv-bench's)",
    )
    args = parser.parse_args(argv)
    selected: list[Scenario] = list(SCENARIOS)
    if args.only:
        wanted = [k.strip() for k in args.only.split(",") if k.strip()]
        unknown = sorted(set(wanted) - set(keys))
        if unknown:
            parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(keys)}")
        selected = [s for s in SCENARIOS if s.key in wanted]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%MZ")
    out_dir: Path = args.out or Path(__file__).resolve().parent / "results" / stamp
    out_dir.mkdir(parents=True, exist_ok=True)
    if any(s.needs_cluster for s in selected):
        # cached builds (cold, Kubernetes is the longest build of all): only for the scenarios
        # that run the control plane or node, before any is timed
        root = Path(__file__).resolve().parent.parent
        for argv in (["hack/cluster/cluster", "build"], ["hack/helm/build"]):
            subprocess.run(argv, cwd=root, check=True, stdout=subprocess.DEVNULL)
    machine = machine_summary()
    outcomes: list[tuple[Scenario, Result | None, str | None, float]] = []
    for scenario in selected:
        print(f"== {scenario.number}. {scenario.title}", file=sys.stderr, flush=True)
        work = Path(tempfile.mkdtemp(prefix=f"sg-bench-{scenario.key}-"))
        ctx = Context(
            out_dir=out_dir,
            work_dir=work,
            quick=args.quick,
            peers_python=args.peers_python,
            log=lambda line, key=scenario.key: print(
                f"[{key}] {line}", file=sys.stderr, flush=True
            ),
        )
        start = time.monotonic()
        try:
            outcomes.append((scenario, scenario.run(ctx), None, time.monotonic() - start))
        except Exception as exc:  # a failed scenario is reported, the others still run
            traceback.print_exc()
            outcomes.append(
                (scenario, None, f"{type(exc).__name__}: {exc}", time.monotonic() - start)
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    report = write_report(out_dir, outcomes, machine)
    for scenario, result, error, _ in outcomes:
        print(f"\n## {scenario.number}. {scenario.title}\n")
        if result is None:
            print(f"FAILED: {error}")
            continue
        for table in result.tables:
            print(table_markdown(table))
    print(f"\nreport: {report}")
    return 1 if any(r is None for _, r, _, _ in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
