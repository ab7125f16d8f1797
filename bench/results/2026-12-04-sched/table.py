"""Print the figures of bench/scale reports side by side (this note's table): one row per
report, ``python bench/results/2026-12-04-sched/table.py LABEL=PATH.json ...``."""

import json
import sys

print(
    "| run | tree | groups | RSS at rest MiB (peak) | CPU at rest % | cold start s | restart s "
    "(operator CPU s) | wake-up p50 / p99 s | asyncio tasks |"
)
print("|---|---|---|---|---|---|---|---|---|")
for arg in sys.argv[1:]:
    label, _, path = arg.partition("=")
    with open(path) as file:
        d = json.load(file)
    rest, wake, again = d["rest"], d["wakeup"], d.get("restart") or {}
    mt = d.get("memtrace") or {}
    tasks = mt.get("tasks_total") or (sum((mt.get("tasks") or {}).values()) or "-")
    tree = (d.get("operator_tree") or "").split(" ")[0]
    print(
        f"| {label} | {tree} | {d['groups']} | {rest['rss_mib']:.0f} ({rest['hwm_mib']:.0f}) "
        f"| {rest['cpu_pct']:.1f} | {d['cold_start_s']:.1f} "
        f"| {again.get('seconds', float('nan')):.1f} ({again.get('operator_cpu_s', '-')}) "
        f"| {wake['p50_s']:.2f} / {wake['p99_s']:.2f} | {tasks} |"
    )
