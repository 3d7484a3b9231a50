"""Pure computations on several threads, with what a serial loop gives: results, warnings and errors.

:func:`map_threads` runs ``fn`` over items on a few threads (NumPy and torch release the GIL in their
kernels) and returns what ``[fn(item) for item in items]`` returns, warning and raising as that loop would.
Code that may run in a worker records and silences warnings with :func:`recording` and :func:`ignoring`
(Python's :class:`warnings.catch_warnings` swaps module globals and is safe in one thread only);
:func:`reissue` warns recorded warnings again. The implementation is :mod:`prh_lib.metrics._parallel`, so
that the metric kernels, which import nothing else from the package, can use it.
"""

from __future__ import annotations

from .metrics._parallel import ignoring, in_worker, map_threads, recording, reissue

__all__ = ["map_threads", "recording", "ignoring", "reissue", "in_worker"]
