"""Clear errors for writes that fail because the disk is full or the cache is read-only.

A full disk shows up in many forms: ``OSError(ENOSPC)`` from Python's own writes (often without a file
name), a ``pyarrow`` ``OSError`` whose message says "No space left on device", or a ``safetensors`` error
carrying ``Os { code: 28, kind: StorageFull }``. :func:`disk_error` recognises them (and quota, read-only
and permission failures) and returns a :class:`CacheWriteError` that says what happened, names the path
being written and the free space of its file system, and says what to do. The writers
(:func:`prh_lib.paths.atomic_path`, :func:`prh_lib.results.write`) raise it after removing their
temporary file, so nothing half-written is left to be trusted later.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

__all__ = ["CacheWriteError", "disk_error"]

_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}
_FULL_TEXT = re.compile(r"No space left on device|Disk quota exceeded|StorageFull|code: (?:28|122)\b")
_READ_ONLY_TEXT = re.compile(r"Read-only file system|Permission denied|code: (?:30|13)\b")


class CacheWriteError(OSError):
    """A cache or results write failed because the disk is full or the location is read-only; the
    message names the path. Nothing half-written is left behind."""


def _free(path: Path) -> str:
    for p in (path, *path.parents):
        try:
            return f"{shutil.disk_usage(p).free / 2**20:.1f} MiB free"
        except OSError:
            continue
    return "free space unknown"


def disk_error(err: BaseException, path: str | Path) -> CacheWriteError | None:
    """The :class:`CacheWriteError` for ``err`` raised while writing ``path``, or None if ``err`` is not a
    full-disk, quota, read-only or permission failure (re-raise it unchanged then).

    Parameters
    ----------
    err : BaseException
        What the write raised.
    path : str or Path
        The file or folder being written (its final name, not the temporary one).
    """
    if isinstance(err, CacheWriteError):
        return err
    path = Path(path)
    code = getattr(err, "errno", None)
    text = str(err)
    if code in _FULL or _FULL_TEXT.search(text):
        return CacheWriteError(
            errno.ENOSPC,
            f"the disk is full: cannot write {path} ({_free(path.parent)} on its file system; {text}). "
            "Nothing half-written was kept. Free space there or point PRH_CACHE_DIR at a larger disk, then "
            "run the same command again",
        )
    if code in _READ_ONLY or _READ_ONLY_TEXT.search(text):
        return CacheWriteError(
            errno.EROFS if code is None else code,
            f"cannot write {path}: the location is read-only or not writable by this user ({text}). "
            "Point PRH_CACHE_DIR (or the results folder) at a writable directory",
        )
    return None
