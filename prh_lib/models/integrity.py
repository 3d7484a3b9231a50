"""Integrity of converted model folders (zoo conversions and stand-ins): a manifest written at conversion,
checked on every use, and quarantine of a damaged folder.

A full disk or a killed copy can leave a converted folder whose ``model.safetensors`` is cut short; loading
it then fails deep inside ``safetensors`` with a message that names no file. So every folder built by
:func:`prh_lib.models.zoo.convert` or :func:`prh_lib.models.standins.ensure_standin` records, for each file,
its size in bytes, its modification time (ns) and its sha256 (:func:`manifest`); :func:`problems` compares
the folder with that record before the folder is used:

* a missing file or one of another size is damaged;
* a file whose modification time differs from the recorded one is re-hashed and damaged if its sha256
  differs (a file untouched since conversion is not re-read, so a check costs a few ``stat`` calls);
* every ``*.safetensors`` file must hold a complete header whose tensors lie inside the file
  (:func:`safetensors_problem`), which also catches damage in folders written before manifests existed.

A damaged folder is renamed aside by :func:`quarantine` (``.<name>.damaged-<UTC time>``, kept for
inspection, never read again) so that it can be rebuilt."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

from prh_lib import paths


class DamagedFolderWarning(UserWarning):
    """A converted model folder failed its integrity check and was quarantined and rebuilt."""


_MEMO: dict[tuple, str] = {}


def _sha256(path: Path) -> str:
    """:func:`prh_lib.paths.sha256_file`, memoised per (path, size, mtime) within the process."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _MEMO:
        _MEMO[key] = paths.sha256_file(path)
    return _MEMO[key]


def manifest(folder: str | Path, *, exclude: tuple[str, ...] = ()) -> dict[str, dict]:
    """Size, modification time and sha256 of every file under ``folder``.

    Parameters
    ----------
    folder : str or Path
        A converted model folder.
    exclude : tuple of str
        Relative paths (POSIX) left out, e.g. the provenance file that will hold the manifest.

    Returns
    -------
    dict
        ``{relative path: {"size": bytes, "mtime_ns": int, "sha256": hex}}``, paths sorted.
    """
    folder = Path(folder)
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel in exclude:
            continue
        st = path.stat()
        out[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": _sha256(path)}
    return out


def safetensors_problem(path: str | Path) -> str | None:
    """What is wrong with a ``.safetensors`` file's layout, or None if its header is complete and every
    tensor's byte range lies inside the file (the data themselves are not read).

    The format is an 8-byte little-endian header length, a JSON header of that many bytes mapping each
    tensor to ``data_offsets`` ``[begin, end)`` relative to the end of the header."""
    path = Path(path)
    size = path.stat().st_size
    if size < 8:
        return f"{path} has {size} bytes, fewer than the 8 of a safetensors header length"
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        if 8 + n > size:
            return f"{path} is cut short: its header announces {n} bytes but the file has {size}"
        try:
            header = json.loads(fh.read(n))
        except (UnicodeDecodeError, ValueError) as exc:
            return f"{path} has an unreadable safetensors header ({exc})"
    data = size - 8 - n
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    if end != data:
        return (f"{path} is cut short or padded: its tensors need {end} bytes of data after the header, "
                f"the file holds {data}")
    return None


def problems(folder: str | Path, recorded: dict[str, dict] | None) -> list[str]:
    """Everything wrong with ``folder`` against its recorded :func:`manifest` (None: no record; only the
    safetensors layouts are checked). An empty list means the folder is intact."""
    folder = Path(folder)
    found = []
    for rel, rec in (recorded or {}).items():
        path = folder / rel
        if not path.is_file():
            found.append(f"{path} is missing")
            continue
        st = path.stat()
        if st.st_size != rec["size"]:
            found.append(f"{path} has {st.st_size} bytes, {rec['size']} were written at conversion")
        elif st.st_mtime_ns != rec.get("mtime_ns") and _sha256(path) != rec["sha256"]:
            found.append(f"{path} has sha256 {_sha256(path)[:16]}..., not the {rec['sha256'][:16]}... "
                         "written at conversion")
    for path in sorted(folder.rglob("*.safetensors")):
        if (folder / path.relative_to(folder)).is_file() and not any(str(path) in p for p in found):
            problem = safetensors_problem(path)
            if problem:
                found.append(problem)
    return found


def quarantine(folder: str | Path) -> Path:
    """Rename a damaged ``folder`` aside to ``.<name>.damaged-<UTC time>`` in the same parent and return
    the new path (kept for inspection; nothing reads it)."""
    folder = Path(folder)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = folder.with_name(f".{folder.name}.damaged-{stamp}")
    i = 1
    while target.exists():
        target = folder.with_name(f".{folder.name}.damaged-{stamp}-{i}")
        i += 1
    folder.rename(target)
    return target
