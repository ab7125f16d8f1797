"""Durations as written in a SendGroup (``90s``, ``30m``, ``1h30m``, ``2d``) -> seconds.

Defined once in :mod:`sendgroup_contract.durations` (the CRD's pattern and its one parser);
re-exported here for the operator's modules.
"""

from sendgroup_contract.durations import DURATION_PATTERN, InvalidDuration, parse_seconds

__all__ = ["DURATION_PATTERN", "InvalidDuration", "parse_seconds"]
