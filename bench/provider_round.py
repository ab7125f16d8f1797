"""CPU of the provider passes' membership at scale (issue 15), no cluster needed:
``python -m bench.provider_round [--groups 10000] [--providers 8] [--rounds 5]``.

N SendGroups over 100 namespaces, half gmail.com, half outlook.com, P ClusterSendProviders
(two of them matching). Prints CPU seconds (``time.process_time``) per round of
``provider_handlers.membership``, median and range over the rounds:

- at rest: every group's resolution kept (spec and providers unchanged);
- all re-resolved: what a round costs every ``RESOLUTION_KEEP`` seconds or after a provider's
  spec changes;
- before: what the P passes did every second before the shared round, each validating every
  group's spec and building its cache key (the resolutions, shared then too, not included).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time
from typing import Any

from sendgroup_operator import models, provider_handlers
from sendgroup_operator.provider_models import SendProvider


@dataclasses.dataclass
class _Runtime:
    groups: dict[tuple[str, str], dict[str, Any]]
    provider_round: Any = None
    provider_round_lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)


def _provider(name: str, domains: list[str]) -> SendProvider:
    return SendProvider.model_validate(
        {
            "kind": "ClusterSendProvider",
            "metadata": {"name": name, "uid": name, "generation": 1},
            "spec": {"match": {"domains": domains}, "rate": {"perMinute": 3000}},
        }
    )


def _runtime(n: int) -> _Runtime:
    hosts = ["gmail.com", "outlook.com"]
    groups = {}
    for i in range(n):
        key = (f"ns{i % 100}", f"g{i}")
        body = {
            "metadata": {"namespace": key[0], "name": key[1], "generation": 1},
            "spec": {"campaign": "c", "host": hosts[i % 2], "workers": 3},
            "status": {},
        }
        groups[key] = provider_handlers.group_entry(body)
    return _Runtime(groups)


def _span(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"{statistics.median(ms):.0f} ms ({min(ms):.0f}-{max(ms):.0f})"


async def _main(n: int, p: int, rounds: int) -> None:
    cluster = [_provider("google", ["gmail.com"]), _provider("microsoft", ["outlook.com"])]
    cluster += [_provider(f"other{i}", [f"other{i}.example"]) for i in range(p - 2)]
    rt = _runtime(n)
    provider_handlers._resolved.clear()
    await provider_handlers.membership(rt, {}, cluster)
    rest, fresh, before = [], [], []
    for _ in range(rounds):
        rt.provider_round = None
        t = time.process_time()
        await provider_handlers.membership(rt, {}, cluster)
        rest.append(time.process_time() - t)
        provider_handlers._resolved.clear()
        rt.provider_round = None
        t = time.process_time()
        await provider_handlers.membership(rt, {}, cluster)
        fresh.append(time.process_time() - t)
        t = time.process_time()
        for _pass in range(p):
            for (ns, name), entry in rt.groups.items():
                spec = models.SendGroupSpec.model_validate(entry["spec"])
                _ = (ns, name, spec.model_dump_json())
        before.append(time.process_time() - t)
    print(f"{n} groups, {p} providers, {rounds} rounds; CPU per round, median (range):")
    print(f"  shared round at rest (resolutions kept):   {_span(rest)}")
    print(f"  shared round, every group re-resolved:     {_span(fresh)}")
    print(f"  before: {p} passes' validation + key alone: {_span(before)} (every second)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--providers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    asyncio.run(_main(a.groups, a.providers, a.rounds))


if __name__ == "__main__":
    main()
