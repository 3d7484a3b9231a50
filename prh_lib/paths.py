"""Every path the project reads or writes is derived here, and only here.

The roots (repository, notebooks, book, data, cache), atomic writes (:func:`atomic_path`) and the one
function that names cache files (:func:`cache_file`): features, bits per byte and summaries are all keyed
by it, so a key that covers an option covers it the same way everywhere.

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

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

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


@contextmanager
def atomic_path(final: Path, *, is_dir: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling path; on success rename it onto ``final`` in one step.

    If the body raises, the temporary file or folder is removed and ``final`` is untouched, so an
    interrupted run never leaves a cache entry that looks complete.
    """
    import shutil

    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
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
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
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
