"""Print the figures of bench/scale reports side by side (this note's table): one row per
report, ``python bench/results/2026-12-04-restart/table.py LABEL=PATH.json ...``. Restart:
seconds from the new operator process' spawn until every group was passed again, the
operator's CPU seconds over it, the time of the first group passed (the start-up before the
first pass) and the SendGroups written."""

import json
import sys

print(
    "| run | tree | restart s | operator CPU s | first group passed at s | SendGroups written "
    "| cold start s | RSS at rest MiB | wake-up p50 / p99 s |"
)
print("|---|---|---|---|---|---|---|---|---|")
for arg in sys.argv[1:]:
    label, _, path = arg.partition("=")
    with open(path) as file:
        d = json.load(file)
    again, rest, wake = d["restart"], d["rest"], d["wakeup"]
    first = next((t for t, n in again["progress"] if n > 0), float("nan"))
    tree = (d.get("operator_tree") or "").split(" ")[0]
    print(
        f"| {label} | {tree} | {again['seconds']:.2f} | {again['operator_cpu_s']:.2f} "
        f"| {first:.2f} | {again['group_writes']} | {d['cold_start_s']:.1f} "
        f"| {rest['rss_mib']:.0f} | {wake['p50_s']:.2f} / {wake['p99_s']:.2f} |"
    )
