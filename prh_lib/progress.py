"""Live progress of a notebook run: shown in the terminal of ``prh-run``, never on the page.

A notebook executed by papermill writes its stdout and stderr into the page, so progress bars there would
end up in the book. Instead, :func:`prh_lib.run.runner.run_notebook` gives the kernel a side channel: a file
named by the environment variable :data:`ENV`, which the runner follows while the notebook runs and copies
to its own stderr (see :func:`follow`). Library code reports what it is doing through :func:`note` (one
line: which model, which step) and :func:`bar` (a tqdm bar); with no channel (a notebook opened in Jupyter,
the tests, a script) both are silent unless asked to show on stderr.

Nothing here changes a result: progress goes to the channel only."""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

#: Environment variable naming the progress file of the running notebook (set by the runner).
ENV = "PRH_PROGRESS_FILE"

_channel: tuple[str, TextIO] | None = None


def channel() -> TextIO | None:
    """The open progress file named by :data:`ENV` (line-buffered, appending), or None without one."""
    global _channel
    path = os.environ.get(ENV)
    if not path:
        return None
    if _channel is None or _channel[0] != path:
        try:
            _channel = (path, open(path, "a", buffering=1, encoding="utf-8"))
        except OSError:  # progress is best effort: an unwritable channel never fails a computation
            return None
    return _channel[1]


def note(message: str) -> None:
    """Report one step (e.g. ``"extracting smollm2-135m on coco-mini (239 pairs)"``) on the channel, if any."""
    out = channel()
    if out is not None:
        out.write(f"  · {time.strftime('%H:%M:%S')} {message}\n")


def bar(*, total: int | None = None, desc: str | None = None, unit: str = "it", show: bool | None = False):
    """A tqdm progress bar on the channel; on stderr instead if ``show`` and there is no channel; else silent.

    Parameters
    ----------
    total : int, optional
        Number of steps.
    desc, unit : str
        As in :class:`tqdm.tqdm`.
    show : bool or None
        Show on stderr when there is no channel (e.g. a function's ``progress=True`` in a script); None:
        nowhere, not even on the channel (an inner step of a step that has its own bar).

    Returns
    -------
    tqdm.tqdm
        Use ``update`` and ``close`` (or as a context manager); disabled when there is nowhere to show it.
    """
    from tqdm import tqdm  # the text bar: tqdm.auto would want ipywidgets in a kernel (and warn without them)

    out = channel() if show is not None else None
    if out is not None:
        return tqdm(total=total, desc=f"  · {desc}" if desc else None, unit=unit, file=out, mininterval=1.0,
                    ncols=100, ascii=True)
    return tqdm(total=total, desc=desc, unit=unit, disable=not show)  # None: disabled


@contextmanager
def follow(path: Path, stream: TextIO | None = None, *, interval: float = 0.25, prefix: str = ""):
    """Copy what is written to the progress file ``path`` to ``stream`` (default stderr) while the body runs.

    On a terminal the text is copied as written, so tqdm bars redraw in place; elsewhere (a CI log), or
    with a ``prefix`` (notebooks run side by side, each line starting with its name), only whole lines are
    copied, a bar's carriage-return redraws collapsed to its last state. Whatever is left is copied when
    the body ends, also if it raises."""
    stream = sys.stderr if stream is None else stream
    path = Path(path)
    path.touch()
    tty = getattr(stream, "isatty", lambda: False)() and not prefix
    stop = threading.Event()
    pending = [""]

    def copy(final: bool = False) -> None:
        with open(path, encoding="utf-8", errors="replace", newline="") as fh:  # keep "\r"
            fh.seek(copy.offset)
            text = fh.read()
            copy.offset = fh.tell()
        if tty:
            if text:
                stream.write(text)
                stream.flush()
            return
        pending[0] += text
        *lines, pending[0] = pending[0].split("\n")
        if final and pending[0]:
            lines.append(pending[0])
            pending[0] = ""
        for line in lines:
            redraws = [s for s in line.split("\r") if s.strip()]  # a bar's states: keep the last
            if redraws:
                stream.write(prefix + redraws[-1] + "\n")
        if lines:
            stream.flush()

    copy.offset = 0

    def loop() -> None:
        while not stop.wait(interval):
            copy()

    thread = threading.Thread(target=loop, name="prh-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        time.sleep(0)  # let the kernel's last writes land (they are line-buffered)
        copy(final=True)
