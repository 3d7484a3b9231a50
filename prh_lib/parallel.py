"""Pure computations on several threads, with what a serial loop gives: results, warnings and errors.

The public face of :mod:`prh_lib.metrics._parallel` (which documents :func:`map_threads`, :func:`recording`,
:func:`ignoring`, :func:`reissue`; it lives there so that the metric kernels can use it), plus the core count."""

from __future__ import annotations

import os

from prh_lib.metrics._parallel import ignoring, in_worker, map_threads, recording, reissue  # noqa: F401


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

