"""Is an executed chapter up to date? The inputs a notebook's output depends on, fingerprinted.

``prh-run`` executes a notebook only when something its page depends on has changed since the executed
notebook in ``book/`` was written, as ``make`` or Jupyter Book's own execution cache (``jupyter-cache``) do.
:func:`input_digests` fingerprints, each as one short digest so that a rerun can say *what* changed:

- ``notebook``: the notebook's source (``notebooks/<name>.py``);
- ``parameters``: the parameters it receives (the profile's and the ``-p`` overrides it declares);
- ``library``: every file of ``prh_lib`` (code and ``resources/``: the paper's values, the bf16 table);
- ``packages``: the name and version of every installed distribution (torch, transformers, the zoo's weights);
- ``data``: the local data: the data root and its sibling folders (``flickr8k-1k``, ``coco-val2017-captions``),
  each file's path, size and modification time, as ``make`` reads them;
- ``environment``: ``PRH_DATA_ROOT`` as set, and the system files a page reads (:data:`SYSTEM_FILES`: WordNet,
  installed or not); the cache folder is checked through the results-table run below; thread counts are left
  out (the kernels' results do not depend on them).

The digests are stored in the executed notebook's metadata (:data:`METADATA_KEY`) with the results-table run
that wrote it; the notebook is up to date (:func:`up_to_date`) when every digest is equal and that run is still
complete in the current cache's results table (a wiped cache executes every chapter again).

What is not seen: a model or dataset on the Hugging Face Hub is named, not hashed, so a new revision there would go
unnoticed. Skipping is therefore only offered (:func:`skipping_allowed`) when every input is local: the ``offline`` and
``smoke`` profiles, or any profile with ``HF_HUB_OFFLINE=1``. ``prh-run --force`` executes regardless."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Mapping

from prh_lib import paths

#: Key of the executed notebook's metadata holding ``{"digests": {...}, "run_id": ...}``.
METADATA_KEY = "prh_inputs"
#: Profiles whose models are all zoo models (installed weights) and whose data are local folders.
LOCAL_PROFILES = ("offline", "smoke")
#: Beyond this many files beside the data root, the data are not fingerprinted (a large shared data folder
#: would take longer to list than it saves) and the notebook always executes.
MAX_DATA_FILES = 50_000


def _digest(items) -> str:
    return paths.digest_texts(repr(item) for item in items)


def _tree(folder: Path, *, suffixes=None, budget: list[int] | None = None):
    """(relative path, size, mtime_ns) of every file under ``folder``, sorted; None when over ``budget``."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for f in filenames:
            if suffixes is not None and not f.endswith(suffixes):
                continue
            p = Path(dirpath) / f
            try:
                st = p.stat()
            except OSError:
                continue
            out.append((str(p.relative_to(folder)), st.st_size, st.st_mtime_ns))
            if budget is not None:
                budget[0] -= 1
                if budget[0] < 0:
                    return None
    return sorted(out)


def _library_digest(root: Path | None = None) -> str:
    """Digest of every file's path and bytes under ``root`` (default: this package)."""
    root = Path(__file__).resolve().parent.parent if root is None else Path(root)
    h = hashlib.sha256()
    for rel, _, _ in _tree(root):
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _data_digest() -> str | None:
    try:
        root = paths.data_root()
    except FileNotFoundError as err:
        return _digest(["no data root", str(err)])
    budget = [MAX_DATA_FILES]
    listing = []
    folders = [root] + sorted(p for p in root.parent.iterdir() if p.is_dir() and p != root and not p.name.startswith("."))
    for folder in folders:
        tree = _tree(folder, budget=budget)
        if tree is None:
            return None
        listing.append((str(folder), tree))
    return _digest(listing)


#: Files outside the project that a page reads when they exist (the concepts chapter's WordNet hierarchy).
SYSTEM_FILES = ("/usr/share/wordnet/data.noun",)


def _system_files() -> list:
    out = []
    for f in SYSTEM_FILES:
        try:
            st = os.stat(f)
            out.append((f, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((f, None))
    return out


def input_digests(name: str, params: Mapping[str, object]) -> dict[str, str] | None:
    """The digests of notebook ``name``'s inputs with ``params`` (the parameters it receives).

    Returns
    -------
    dict of str -> str or None
        ``{"notebook", "parameters", "library", "packages", "data", "environment"}`` -> 16 hex digits; None
        when the data cannot be fingerprinted (more than :data:`MAX_DATA_FILES` files beside the data root).

    Raises
    ------
    FileNotFoundError
        If ``notebooks/<name>.py`` does not exist.
    """
    from importlib import metadata

    src = paths.notebooks_dir() / f"{name}.py"
    data = _data_digest()
    if data is None:
        return None
    return {
        "notebook": hashlib.sha256(src.read_bytes()).hexdigest()[:16],
        "parameters": _digest([json.dumps(dict(params), sort_keys=True, default=repr)]),
        "library": _library_digest(),
        "packages": _digest(sorted({(d.metadata["Name"] or "").lower(): d.version
                                    for d in metadata.distributions()}.items())),
        "data": data,
        "environment": _digest([os.environ.get("PRH_DATA_ROOT", ""), _system_files()]),
    }


def recorded_inputs(ipynb: str | Path) -> dict | None:
    """``{"digests": ..., "run_id": ...}`` recorded in an executed notebook; None when absent or unreadable."""
    import nbformat

    try:
        meta = nbformat.read(str(ipynb), as_version=4).metadata.get(METADATA_KEY)
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    return dict(meta) if isinstance(meta, Mapping) else None


def up_to_date(ipynb: str | Path, digests: Mapping[str, str] | None) -> tuple[bool, str]:
    """Whether the executed notebook ``ipynb`` was written from inputs with these ``digests``, and why not.

    Returns
    -------
    (bool, str)
        True and ``""``; or False and the reason (``"not executed yet"``, ``"its library changed"``, ``"its
        results-table run is gone"``, ...).
    """
    from prh_lib import results

    if digests is None:
        return False, f"the data beside the data root hold more than {MAX_DATA_FILES:,} files (not fingerprinted)"
    if not Path(ipynb).is_file():
        return False, "not executed yet"
    recorded = recorded_inputs(ipynb)
    if not recorded or not isinstance(recorded.get("digests"), Mapping):
        return False, "its page records no inputs (a placeholder, or written by an older prh-run)"
    changed = [k for k in digests if recorded["digests"].get(k) != digests[k]]
    if changed:
        return False, "its " + ", ".join(changed) + " changed"
    run_id = recorded.get("run_id")
    try:
        complete = bool(run_id) and results._marker(str(run_id), "complete", None).is_file()
    except ValueError:
        complete = False
    if not complete:
        return False, "the results-table run that wrote it is not in this cache"
    return True, ""


def skipping_allowed(profile: str) -> bool:
    """Whether up-to-date notebooks may be skipped: every input is local (see the module docstring)."""
    return profile in LOCAL_PROFILES or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes")
