"""Every path the project reads or writes is derived here, and only here.

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

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

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
