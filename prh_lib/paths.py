"""Every path the project reads or writes is derived here, and only here.

The roots (repository, notebooks, book, data, cache), atomic writes (:func:`atomic_path`) and the one function that
names cache files (:func:`cache_file`), so a cache key covers an option the same way everywhere.

Settings (environment variables, read at call time so tests can override them):

``PRH_DATA_ROOT``
    Folder holding image-caption data in COCO caption format (``captions.json`` + ``images/``).
    Default: ``<repo>/../shared/data/coco-mini`` when that folder exists.
``PRH_CACHE_DIR``
    Where converted models, extracted features and other derived artefacts are cached.
    Default: ``<repo>/.cache``. The results table lives in its ``results/`` sub-folder.
``PRH_RUNS_DIR``
    Where ``prh-run --sweep`` writes executed notebooks (``<runs>/<notebook>/<parameter-slug>.ipynb``).
    Default: ``<repo>/runs`` (git-ignored).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Sequence


REPO_ROOT = Path(__file__).resolve().parent.parent


def repo_root() -> Path:
    """Root of the source checkout (the folder holding ``prh_lib/``, ``notebooks/`` and ``book/``)."""
    return REPO_ROOT


def notebooks_dir() -> Path:
    """Folder of the jupytext percent-format notebook sources."""
    return REPO_ROOT / "notebooks"


def book_dir() -> Path:
    """Jupyter Book source folder; executed notebooks are written here by the runner."""
    return REPO_ROOT / "book"


def runs_dir() -> Path:
    """Folder of the executed notebooks of parameter sweeps (``PRH_RUNS_DIR``, default ``<repo>/runs``)."""
    return Path(os.environ.get("PRH_RUNS_DIR", REPO_ROOT / "runs")).expanduser().resolve()


def data_root() -> Path:
    """Root of the local image-caption data (``PRH_DATA_ROOT``).

    Raises
    ------
    FileNotFoundError
        If ``PRH_DATA_ROOT`` is unset and the default ``../shared/data/coco-mini`` does not exist, or
        if ``PRH_DATA_ROOT`` points to a missing folder.
    """
    env = os.environ.get("PRH_DATA_ROOT")
    if env:
        root = Path(env).expanduser()
        if not root.is_dir():
            raise FileNotFoundError(
                f"PRH_DATA_ROOT={env!r} is not a folder. Point it to a folder in COCO caption format "
                "(captions.json + images/), e.g. export PRH_DATA_ROOT=../shared/data/coco-mini"
            )
        return root.resolve()
    default = (REPO_ROOT.parent / "shared" / "data" / "coco-mini").resolve()
    if default.is_dir():
        return default
    raise FileNotFoundError(
        "No image-caption data found: PRH_DATA_ROOT is unset and the default "
        f"{default} does not exist. Set PRH_DATA_ROOT to a folder in COCO caption format "
        "(captions.json + images/)."
    )


def sibling_location(name: str) -> Path:
    """Where a dataset folder ``name`` next to the data root is (``<data root>/../name``), existing or not, for
    messages; with no data root, next to where it was looked for (``PRH_DATA_ROOT``'s parent, else ``../shared/data``).
    """
    try:
        return data_root().parent / name
    except FileNotFoundError:
        env = os.environ.get("PRH_DATA_ROOT")
        parent = Path(env).expanduser().resolve().parent if env else (REPO_ROOT.parent / "shared" / "data").resolve()
        return parent / name


def sibling_dataset(name: str) -> Path | None:
    """A dataset folder named ``name`` next to the data root (e.g. ``flickr8k-1k`` beside ``coco-mini``).

    ``name`` must be a bare folder name; offline ``sibling_dataset("flickr8k-1k")`` is ``../shared/data/flickr8k-1k``.

    Returns
    -------
    Path or None
        The resolved folder, or None when ``name`` is not a bare name or no such folder exists beside a found data root.
    """
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        return None
    try:
        folder = data_root().parent / name
    except FileNotFoundError:
        return None
    return folder.resolve() if folder.is_dir() else None


def cache_root() -> Path:
    """Root of all cached artefacts (``PRH_CACHE_DIR``, default ``<repo>/.cache``); created on demand."""
    root = Path(os.environ.get("PRH_CACHE_DIR", REPO_ROOT / ".cache")).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def cache_dir(kind: str) -> Path:
    """Sub-folder of the cache for one kind of artefact (``"models"``, ``"features"``, ...); created on demand."""
    path = cache_root() / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


#: A temporary folder of :func:`atomic_path` untouched for this long is left over from a killed write.
STALE_TEMP_SECONDS = 30 * 60

#: Suffix of every temporary folder of :func:`atomic_path` (its name also starts with ``.``).
TEMP_SUFFIX = ".tmp"


def is_temporary(path: str | Path) -> bool:
    """Whether ``path`` is, or lies inside, a temporary folder of :func:`atomic_path` (never a result)."""
    return any(part.startswith(".") and part.endswith(TEMP_SUFFIX) for part in Path(path).parts)


def _last_touched(folder: Path) -> float:
    """Latest modification time of ``folder`` and of anything directly in it (a file being written counts)."""
    latest = folder.lstat().st_mtime
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    latest = max(latest, entry.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    pass
    except OSError:
        pass
    return latest


def remove_stale_temporaries(folder: str | Path, *, older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
    """Remove the temporary folders of :func:`atomic_path` in ``folder`` untouched for ``older_than`` seconds; return
    those removed.

    A write killed before its rename (SIGKILL, out of memory, a SLURM time limit) leaves its temporary folder behind;
    the next write into the folder calls this. Live writes touch their files, so only folders untouched for
    ``older_than`` seconds (default 30 minutes) are removed.
    """
    folder = Path(folder)
    removed = []
    now = time.time()
    try:
        candidates = [p for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(TEMP_SUFFIX)]
    except OSError:
        return removed
    for tmp in candidates:
        try:
            if tmp.is_dir() and not tmp.is_symlink() and now - _last_touched(tmp) > older_than:
                shutil.rmtree(tmp, ignore_errors=True)
                removed.append(tmp)
        except OSError:
            pass
    return removed


@contextmanager
def atomic_path(final: Path, *, is_dir: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling path; on success rename it onto ``final`` in one step.

    If the body raises, the temporary is removed and ``final`` is untouched, so an interrupted run never leaves a cache
    entry that looks complete. Temporaries are named ``.<name>.<random>.tmp`` (:func:`is_temporary`); those of killed
    writes are removed by the next write into the same folder (:func:`remove_stale_temporaries`).

    Raises
    ------
    prh_lib.paths.CacheWriteError
        If the disk is full, a quota is exceeded or the location is read-only (the message names ``final``; the
        temporary is removed first). Other errors pass through unchanged.
    """
    final = Path(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(final.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=TEMP_SUFFIX, dir=final.parent))
    except OSError as err:
        raise (disk_error(err, final) or err) from err
    target = tmp if is_dir else tmp / final.name
    try:
        yield target
        if is_dir:
            os.chmod(tmp, 0o755)  # mkdtemp makes it private
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        else:
            os.replace(target, final)
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        clear = disk_error(err, final) if isinstance(err, Exception) else None
        if clear is not None and clear is not err:
            raise clear from err
        raise


def safe_name(name: str, *, max_length: int = 80) -> str:
    """``name`` as one folder name: characters other than letters, digits, ``-``, ``_`` and ``.`` become
    ``_``; the last ``max_length`` characters are kept (``"openai/clip:text"`` -> ``"openai_clip_text"``)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[-max_length:]


def digest(key, *, length: int = 16) -> str:
    """First ``length`` hex digits of the SHA-256 of ``key`` written as JSON (dict keys sorted)."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:length]


def digest_texts(texts: Iterable[str], *, separator: bytes = b"\x00", length: int = 16) -> str:
    """First ``length`` hex digits of the SHA-256 of ``texts`` in order, each followed by ``separator``."""
    h = hashlib.sha256()
    for text in texts:
        h.update(text.encode() + separator)
    return h.hexdigest()[:length]


def cache_file(kind: str, owner: str, key, *, prefix: str, suffix: str) -> Path:
    """The cache file of one artefact: ``cache_dir(kind) / safe_name(owner) / f"{prefix}-{digest(key)}{suffix}"``.

    Parameters
    ----------
    kind : str
        Kind of artefact, a sub-folder of the cache (``"features"``, ``"bpb"``, ``"summaries"``).
    owner : str
        What produced it, usually a model name; one folder per owner (:func:`safe_name`).
    key : JSON-serialisable
        Every option that changes the artefact (model revision, data fingerprint, format version, ...); its
        :func:`digest` is part of the file name, so a change of any option names another file.
    prefix, suffix : str
        Human-readable start of the file name (e.g. ``"coco-mini-n239-vision"``) and its extension.

    Returns
    -------
    Path
        Under :func:`cache_root`; nothing is created but ``cache_dir(kind)`` (writers use :func:`atomic_path`).
    """
    folder = cache_dir(kind) / safe_name(owner)
    return folder / f"{prefix}-{digest(key)}{suffix}"


# --------------------------------------------------------------------------------------------------------
# content digests of files, remembered by (path, size, mtime, ctime)

#: In-process memo: absolute path -> (size, mtime_ns, ctime_ns, sha256 hex).
_DIGESTS: dict[str, tuple[int, int, int, str]] = {}
_DIGESTS_LOCK = threading.Lock()


def sha256_file(path: str | Path, *, chunk: int = 1 << 20) -> str:
    """SHA-256 (hex) of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_digests(files: Sequence[str | Path]) -> list[str]:
    """SHA-256 (hex) of the content of each file, each file read at most once while it is unchanged.

    A digest is remembered with the file's absolute path, size, mtime and ctime (``st_ctime_ns``, which no tool can set
    back, so a same-size replacement keeping the old mtime, as ``cp -p`` or ``touch -r`` do, is still seen), in this
    process and in a JSON index (``PRH_CACHE_DIR/index/file-digests.json``, replaced atomically; concurrent writers at
    worst lose an entry, hashed again). A file whose identity changed is hashed again.

    Raises
    ------
    FileNotFoundError
        If a file does not exist (the message names it).
    """
    names = [os.path.abspath(os.fspath(f)) for f in files]
    stats = []
    for name in names:
        try:
            st = os.stat(name)
            stats.append((st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except FileNotFoundError:
            raise FileNotFoundError(f"cannot hash {name}: no such file") from None
    with _DIGESTS_LOCK:
        missing = [i for i, (n, s) in enumerate(zip(names, stats)) if _DIGESTS.get(n, ())[:3] != s]
        if missing:
            index = cache_dir("index") / "file-digests.json"
            try:
                stored = json.loads(index.read_text(encoding="utf-8"))
                stored = stored if isinstance(stored, dict) else {}
            except (OSError, ValueError):
                stored = {}
            for name, entry in stored.items():
                if isinstance(entry, list) and len(entry) == 4 and name not in _DIGESTS:
                    _DIGESTS[name] = tuple(entry)
            fresh = False
            for i in missing:
                if _DIGESTS.get(names[i], ())[:3] != stats[i]:
                    _DIGESTS[names[i]] = (*stats[i], sha256_file(names[i]))
                    fresh = True
            if fresh:
                _write_digest_index(index, stored)
        return [_DIGESTS[n][3] for n in names]


def _write_digest_index(index: Path, stored: dict) -> None:
    merged = {**stored, **{n: list(v) for n, v in _DIGESTS.items()}}
    fd, tmp = tempfile.mkstemp(prefix=f".{index.name}.", suffix=".part", dir=index.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(merged, f, separators=(",", ":"))
        os.replace(tmp, index)
    except OSError:  # a read-only or full cache: digests are still correct, only not remembered
        Path(tmp).unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------------------
# locations as pages show them


def display_path(path: str | Path) -> str:
    """``path`` as a page may show it, without machine-specific absolute parts.

    Inside ``PRH_DATA_ROOT``: ``"PRH_DATA_ROOT/<relative>"`` (the root itself: ``"PRH_DATA_ROOT (<name>)"``); inside
    ``PRH_CACHE_DIR``: ``"PRH_CACHE_DIR/<relative>"``; inside the repository: the relative path; inside the home folder:
    ``"~/<relative>"``; anything else: ``".../<name>"``. Hub ids and other non-paths (no leading ``/``, ``~`` or ``.``)
    are returned unchanged. Error messages keep full paths; this is for ``describe``-style summaries, reprs and pages.

    Examples
    --------
    >>> display_path(repo_root() / "notebooks" / "sec3_1_layerwise.py")
    'notebooks/sec3_1_layerwise.py'
    """
    text = os.fspath(path)
    if not text.startswith(("/", "~", ".")) and not os.path.isabs(text):
        return text
    p = Path(text).expanduser().absolute()
    roots = []
    env = os.environ.get("PRH_DATA_ROOT")
    try:
        roots.append(("PRH_DATA_ROOT", data_root()))
    except FileNotFoundError:
        if env:
            roots.append(("PRH_DATA_ROOT", Path(env).expanduser().absolute()))
    cache = Path(os.environ.get("PRH_CACHE_DIR", REPO_ROOT / ".cache")).expanduser().absolute()
    roots += [("PRH_CACHE_DIR", cache), ("", REPO_ROOT), ("~", Path.home())]
    for label, root in roots:
        for candidate in dict.fromkeys((p, p.resolve())):
            for r in dict.fromkeys((root, root.resolve())):
                try:
                    rel = candidate.relative_to(r)
                except ValueError:
                    continue
                if label == "PRH_DATA_ROOT" and rel == Path("."):
                    return f"PRH_DATA_ROOT ({r.name})"
                if label == "":
                    return rel.as_posix() if rel != Path(".") else "."
                return f"{label}/{rel.as_posix()}" if rel != Path(".") else label
    return f".../{p.name}"


# ----------------------------------------------------------- disk-full and read-only errors of cache writes
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}
_FULL_TEXT = re.compile(r"No space left on device|Disk quota exceeded|StorageFull|code: (?:28|122)\b")
_READ_ONLY_TEXT = re.compile(r"Read-only file system|Permission denied|code: (?:30|13)\b")


class CacheWriteError(OSError):
    """A cache or results write failed because the disk is full or read-only (message names the path); nothing
    half-written is left."""


def _free(path: Path) -> str:
    for p in (path, *path.parents):
        try:
            return f"{shutil.disk_usage(p).free / 2**20:.1f} MiB free"
        except OSError:
            continue
    return "free space unknown"


def disk_error(err: BaseException, path: str | Path) -> CacheWriteError | None:
    """The :class:`CacheWriteError` for ``err`` raised while writing ``path``, or None (re-raise ``err`` unchanged) if
    it is not a full-disk, quota, read-only or permission failure.

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
