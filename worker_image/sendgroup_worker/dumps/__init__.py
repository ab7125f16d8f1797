"""Crash-safe dump, restore and purge of one queue (queue-protocol.md, "Dump and restore").

Modules: :mod:`format` (the ``sgdump`` v1 segment file), :mod:`dump`, :mod:`restore`,
:mod:`purge`, :mod:`lock` (per-queue lock), :mod:`paths` (segment locations),
:mod:`redisconn` (URL, cluster detection), :mod:`scripts` (Lua), :mod:`faults` (crash points
for tests) and :mod:`commands` (the console commands).
"""
