"""Pure computations on several threads, with what a serial loop gives: results, warnings and errors (here, in
``metrics``, because the metric kernels, which run in the threads, use it).

NumPy and torch release the GIL inside their kernels, so threads use several cores for most of the work
(:func:`map_threads`). Python's warning machinery is process-wide
(:class:`warnings.catch_warnings` swaps module globals and is safe in one thread only), so code that may run
in a worker records and silences warnings through this module instead:

- :func:`recording` runs a computation and returns the warnings it issued (the score cache stores them);
- :func:`ignoring` silences one category inside a block;
- :func:`reissue` issues recorded warnings again, through the caller's filters.

Outside :func:`map_threads` each of them is the ordinary :mod:`warnings` call.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, TypeVar

__all__ = ["map_threads", "recording", "ignoring", "reissue", "in_worker"]

T = TypeVar("T")

#: per thread, inside a :func:`map_threads` worker only: ``logs`` (the open warning logs, innermost last)
#: and ``ignored`` (the categories an enclosing :func:`ignoring` silences)
_LOCAL = threading.local()


def in_worker() -> bool:
    """True in a thread that :func:`map_threads` is running a call on."""
    return getattr(_LOCAL, "logs", None) is not None


def recording(compute: Callable[[], T]) -> tuple[T, list]:
    """``compute()`` and the warnings it issued, as ``(category, message, filename, lineno)`` tuples.

    Every warning is recorded (the ``"always"`` action), whatever the filters, an enclosing
    :func:`ignoring` included. In a worker of :func:`map_threads` only this thread's warnings are;
    elsewhere :class:`warnings.catch_warnings` records them. An exception of ``compute`` propagates and
    its warnings are dropped.
    """
    if not in_worker():
        with warnings.catch_warnings(record=True) as recorded:
            warnings.simplefilter("always")
            value = compute()
        return value, [(w.category, str(w.message), w.filename, w.lineno) for w in recorded]
    log: list = []
    _LOCAL.logs.append(log)
    outer, _LOCAL.ignored = _LOCAL.ignored, []  # as "always" above: what encloses the block does not apply
    try:
        value = compute()
    finally:
        _LOCAL.logs.pop()
        _LOCAL.ignored = outer
    return value, log


@contextlib.contextmanager
def ignoring(category: type[Warning]) -> Iterator[None]:
    """Silence warnings of ``category`` (and its subclasses) issued in the block by this thread."""
    if not in_worker():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category)
            yield
        return
    _LOCAL.ignored.append(category)
    try:
        yield
    finally:
        _LOCAL.ignored.pop()


def reissue(caught) -> None:
    """Warn again what :func:`recording` recorded, in order, through the caller's filters."""
    for category, message, filename, lineno in caught:
        warnings.warn_explicit(message, category, filename, lineno)


def map_threads(fn: Callable, items, *, workers: int | None) -> list:
    """``[fn(item) for item in items]`` on up to ``workers`` threads, with the same results, warnings and errors.

    For computations that are pure functions of their item (a draw's scores, say). The caller sees what
    the serial loop gives: the results in item order; the warnings each call issued (recorded per thread,
    :func:`ignoring` applied) issued again in this thread, in item order, after every call has run, through
    the caller's filters; and if calls raise, the warnings of the items before the first failing one (in
    item order) and those that item issued before it failed, then its exception, once the calls already
    started have ended (items not yet started are not run).

    Warnings come back as a served score's do (:func:`reissue`): by category, message, file and line. So
    a filter on ``module`` matches the module's file path, the ``"default"`` action shows a warning
    repeated by several items once per item, and the ``"error"`` action raises in the caller after the
    calls, not inside ``fn``. While the pool runs, warnings of threads outside it are shown unfiltered;
    calls of :func:`map_threads` from several threads run one at a time.

    Parameters
    ----------
    fn : callable
        Called once per item. Torch's thread count is process-wide: set it around this call. Code that
        runs in ``fn`` records or silences warnings with :func:`recording` and :func:`ignoring`, never
        :class:`warnings.catch_warnings`.
    items : iterable
    workers : int or None
        Threads. None, 0, 1 or a single item run the plain loop in this thread, as does a call from a
        worker (no nested pools).
    """
    items = list(items)
    if not workers or int(workers) <= 1 or len(items) <= 1 or in_worker():
        return [fn(item) for item in items]
    with _POOLS:  # one pool at a time: each swaps the process-wide warning hooks
        return _map_threads(fn, items, int(workers))


_POOLS = threading.Lock()


def _map_threads(fn: Callable, items: list, workers: int) -> list:
    def task(item):
        _LOCAL.logs, _LOCAL.ignored = [[]], []
        try:
            return True, fn(item), _LOCAL.logs[0]
        except BaseException as err:  # noqa: BLE001 (raised in the caller, after the warnings before it)
            return False, err, _LOCAL.logs[0]
        finally:
            del _LOCAL.logs, _LOCAL.ignored

    shown = warnings.showwarning

    def route(message, category, filename, lineno, file=None, line=None):
        if not in_worker():  # a thread outside the pool
            shown(message, category, filename, lineno, file, line)
        elif not any(issubclass(category, c) for c in _LOCAL.ignored):
            _LOCAL.logs[-1].append((category, str(message), filename, lineno))

    done = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # every warning reaches route; the caller's filters apply on reissue
        warnings.showwarning = route
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(task, item) for item in items]
            try:
                for f in futures:
                    done.append(f.result())
                    if not done[-1][0]:  # the first failure in item order: nothing after it starts
                        break
            finally:
                for f in futures:
                    f.cancel()
    for _, _, log in done:
        reissue(log)
    if not done[-1][0]:
        raise done[-1][1]
    return [value for _, value, _ in done]
