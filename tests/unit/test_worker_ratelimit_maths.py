from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sendgroup_worker.ratelimit import RatePolicy

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_unlimited_without_rate_or_warmup() -> None:
    assert RatePolicy(per_minute=None).allowed_per_minute(T0) is None


def test_warmup_ramp_multiplies_per_day_and_is_capped() -> None:
    p = RatePolicy(
        per_minute=100, warmup_start_per_hour=600, warmup_growth_per_day=2.0, warmup_since=T0
    )
    # day 0: 600/h = 10/min; day 1: 20/min; day 2.5: 600 * 2**2.5 / 60 = 56.57/min; day 4: cap
    assert p.allowed_per_minute(T0) == 10
    assert p.allowed_per_minute(T0 + timedelta(days=1)) == 20
    assert round(p.allowed_per_minute(T0 + timedelta(days=2.5)) or 0, 2) == 56.57
    assert p.allowed_per_minute(T0 + timedelta(days=4)) == 100
    assert p.allowed_per_minute(T0 + timedelta(days=400)) == 100


def test_warmup_alone_limits_and_lowers_the_burst() -> None:
    p = RatePolicy(per_minute=None, warmup_start_per_hour=60, warmup_since=T0)
    assert p.allowed_per_minute(T0) == 1
    assert p.burst_at(1) == 1
    q = RatePolicy(per_minute=6000, burst=100, warmup_start_per_hour=36000, warmup_since=T0)
    assert q.allowed_per_minute(T0) == 600 and q.burst_at(600) == 10
    assert q.burst_at(6000) == 100


def test_backpressure_halves_the_rate_per_failure_in_a_run_at_most_eight_fold() -> None:
    p = RatePolicy(per_minute=800)
    assert [p.allowed_per_minute(T0, run) for run in (0, 1, 2, 3, 10)] == [800, 400, 200, 100, 100]
