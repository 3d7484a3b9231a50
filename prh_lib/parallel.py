"""Pure computations on several threads, with what a serial loop gives: results, warnings and errors.

:func:`map_threads` runs ``fn`` over items on a few threads (NumPy and torch release the GIL in their
kernels) and returns what ``[fn(item) for item in items]`` returns, warning and raising as that loop would.
Code that may run in a worker records and silences warnings with :func:`recording` and :func:`ignoring`
(Python's :class:`warnings.catch_warnings` swaps module globals and is safe in one thread only);
:func:`reissue` warns recorded warnings again. The implementation is :mod:`prh_lib.metrics._parallel`, so
that the metric kernels, which import nothing else from the package, can use it.
"""

from __future__ import annotations

import os

from prh_lib.metrics._parallel import ignoring, in_worker, map_threads, recording, reissue

__all__ = ["available_cores", "map_threads", "recording", "ignoring", "reissue", "in_worker"]


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

