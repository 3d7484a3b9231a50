"""The cores this process's work may use. The threads that run pure computations as a serial loop would
(:func:`map_threads`, :func:`recording`, :func:`ignoring`, :func:`reissue`) live in :mod:`prh_lib.metrics._parallel`,
where the metric kernels can use them."""

from __future__ import annotations

import os


def available_cores() -> int:
    """Cores this process's work may use: ``PRH_CORES`` (a lane's share, which ``prh-run`` sets for each
    kernel) when set, else the cores it may run on (``os.sched_getaffinity``; ``os.cpu_count`` elsewhere)."""
    env = os.environ.get("PRH_CORES", "")
    if env.strip().isdigit() and int(env) >= 1:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)

