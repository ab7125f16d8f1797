"""Status rules: what a measurement does to the status (counts, the reaper's clocks, the
failed-jobs condition), progress, and when a new status is worth a write."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from sendgroup_operator import conditions, durations, models
from sendgroup_operator.plan.decisions import Decisions
from sendgroup_operator.plan.types import QueueMeasure

#: Relative change of the queue's total that is worth a status write (besides zero-crossing).
SIGNIFICANT_FRACTION: Final = 0.10
#: Seconds the workers' counters must have stood still (since the measurement of the last
#: written status) before an empty queue counts as idle. Two passes can run milliseconds apart
#: (a change handler's pass, then the daemon's it woke): between them a steady trickle (one job
#: per second, drained in milliseconds) finishes nothing, and ``idleSince`` was set on a busy
#: group (seen in CI: set 2 s after a spec change, cleared again by the next pass).
QUIET_WINDOW: Final = 2.0


def _ts(value: float | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value, tz=UTC).replace(microsecond=0)


def _significant(old: int, new: int) -> bool:
    if old == new:
        return False
    if old == 0 or new == 0:
        return True
    return abs(new - old) >= max(1, int(old * SIGNIFICANT_FRACTION))


def meaningful_change(
    old: models.SendGroupStatus, new: models.SendGroupStatus, now: datetime, refresh: float
) -> bool:
    """Whether ``new`` is worth a status write: anything but the queue/progress counts
    changed, a count crossed zero or moved by >= 10%, or ``refresh`` seconds passed since the
    last write while counts differ."""
    skip = {"queue", "progress", "last_refresh"}
    if old.model_dump(exclude=skip) != new.model_dump(exclude=skip):
        return True
    oq, nq = old.queue, new.queue
    if new.progress.failed > old.progress.failed:
        return True  # a job failed: the event that says so is derived from the written count
    for a, b in (
        (oq.total, nq.total),
        (oq.failed, nq.failed),
        (old.progress.delivered, new.progress.delivered),
    ):
        if _significant(a, b):
            return True
    counts_differ = (
        oq.model_dump(exclude={"measured_at", "oldest_job_age_seconds"})
        != nq.model_dump(exclude={"measured_at", "oldest_job_age_seconds"})
        or old.progress != new.progress
    )
    if not counts_differ:
        return False
    last = old.last_refresh
    return last is None or (now - last).total_seconds() >= refresh


def progress_percent(st: models.SendGroupStatus) -> None:
    """``progress.percent = 100 * delivered / (delivered + failed + queue.total +
    dump.totalJobs)``, once this pass settled the queue and the dump (jobs dumped to the
    volume are still to be sent: without them a Dumped group read 100 %). Kept as it was
    while a dump or restore Job is in flight: the jobs are then moving between Redis and
    the volume, counted in neither (a dump read 100 %) or in both (a restore read low), and a
    paused or restoring group delivers nothing meanwhile."""
    if st.operation is not None and st.operation.kind in ("dump", "restore"):
        return
    p = st.progress
    denominator = p.delivered + p.failed + st.queue.total + st.dump.total_jobs
    p.percent = round(100.0 * p.delivered / denominator, 1) if denominator else 0.0


def record_measure(b: Decisions, m: QueueMeasure) -> None:
    st, now = b.status, b.now
    old_total = b.old.queue.total
    q = st.queue
    q.ready, q.delayed, q.reserved, q.failed, q.total = (
        m.ready,
        m.delayed,
        m.reserved,
        m.failed,
        m.total,
    )
    q.measured_at = now
    pushed = _ts(m.oldest_pushed_at)
    q.oldest_job_pushed_at = pushed
    q.oldest_job_age_seconds = (
        max(0, int((now - pushed).total_seconds())) if pushed is not None else None
    )
    # idleSince: the first pass that saw nothing queued and nothing delivered or failed since
    # the measurement of the last written status, at least QUIET_WINDOW seconds earlier (a
    # trickle drained in milliseconds always samples empty: the counters, read in the same
    # atomic call, tell that work went through). Cleared by any activity.
    # A window shorter than QUIET_WINDOW proves nothing either way when it saw no activity:
    # idleSince is left as it was. The first measurement compares with counters of zero: a
    # new group with nothing queued and nothing ever sent is idle from then on.
    activity = m.delivered != b.old.progress.delivered or m.failed_total != b.old.progress.failed
    since = b.old.queue.measured_at
    quiet_long_enough = since is None or (now - since).total_seconds() >= QUIET_WINDOW
    st.progress.delivered = m.delivered
    st.progress.failed = m.failed_total
    if m.total == 0 and not activity:
        if st.idle_since is None and quiet_long_enough:
            st.idle_since = now
    else:
        st.idle_since = None
    # unchangedSince: only while paused; reset by any change of the total.
    if b.spec.paused:
        if st.unchanged_since is None or m.total != old_total or b.old.queue.measured_at is None:
            st.unchanged_since = now
    else:
        st.unchanged_since = None


def failed_jobs(b: Decisions, m: QueueMeasure) -> None:
    """Condition ``FailedJobs`` (True while the failed list holds jobs) and a Warning event
    ``JobsFailed`` each time the workers' failed counter grew since the last written status
    (a status write follows: see :func:`meaningful_change`)."""
    grew = m.failed_total - b.old.progress.failed
    if grew > 0:
        b.event(
            "Warning",
            "JobsFailed",
            f"{grew} job(s) failed since the last check; {m.failed} in the failed list "
            "(sendgroup-worker failed list shows why)",
        )
    if m.failed > 0:
        b.cond(
            conditions.FAILED_JOBS,
            "True",
            "JobsFailed",
            f"{m.failed} job(s) in the failed list: retry or forget them with "
            "sendgroup-worker failed",
        )
    else:
        b.cond(conditions.FAILED_JOBS, "False", "NoFailedJobs", "the failed list is empty")


def elapsed(since: datetime | None, now: datetime, duration: str) -> bool:
    return since is not None and (now - since).total_seconds() >= durations.parse_seconds(duration)
