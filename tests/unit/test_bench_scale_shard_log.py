"""bench/scale's reading of a replica's shard membership from its log (``shard_log``): a fence
counts only after the replica had owned groups (the first join wait is not one), with the
lines the aborted 20,000-group run showed."""

from __future__ import annotations

from bench.scale import shard_log

S = "INFO kopf.activities.startup shard: members"
FENCED = "acts on nothing yet (joining, stopping, or its Lease not renewed):"
LOG = "\n".join(
    [
        f"10:39:09 {S} r1; this replica (r1) {FENCED} 0 of 0 groups",
        f"10:39:14 {S} r0,r1; this replica (r1) {FENCED} 0 of 0 groups",
        f"10:39:24 {S} r0,r1; this replica (r1) owns 158 of 319 groups",
        f"10:39:31 {S} r0,r1; this replica (r1) {FENCED} 0 of 606 groups",
        "10:39:32 WARNING kopf.activities.startup shard: cannot renew Lease apf-r1 or list the "
        "set: HTTP 429: too many requests (this replica stops acting 12 s after its last renewal)",
        f"10:39:49 {S} r0,r1; this replica (r1) owns 576 of 1151 groups",
        "10:40:00 WARNING kopf.objects Patching failed with inconsistencies: APITooManyRequests",
        "10:44:04 INFO kopf.activities.startup shard: deleted the stale Lease of r0",
        f"10:44:05 {S} r1; this replica (r1) owns 1200 of 1200 groups",
        f"10:44:11 {S} r1; this replica (r1) {FENCED} 0 of 1278 groups",
    ]
)


def test_fences_after_owning_are_counted_not_the_join_wait() -> None:
    assert shard_log(LOG) == {
        "fenced": 2,
        "fenced_lines": 4,
        "cannot_renew": 1,
        "stale_deleted": 1,
        "too_many": 1,
    }
    assert shard_log("")["fenced"] == 0
