"""Scores cached by the content they were computed from, so that a warm rerun recomputes nothing.

A score (a layer-pair matrix, a permutation null, a bootstrap interval) is a pure function of the
features it reads and of its options. :func:`cached` keys it by exactly those:

- the bytes of every feature stack (float32 values, as :func:`prh_lib.extract.features.values_digest` hashes them),
  its layer labels, sample ids and name (rows, not only values: a re-ordered stack is another input);
- the options, written as JSON with sorted keys (``k``, ``n_permutations``, ``seed``, the device, ...);
- the function's name, :data:`SCORE_FORMAT` and the SHA-256 of the source files of the code that computes scores
  (:data:`SCORE_CODE`: ``metrics/``, ``stats/`` and ``analysis/`` with their subfolders, ``extract/features.py`` and
  ``validation.py``): an edit of that code names other entries, so no score computed by older code is served. Page code
  (``pages/``), the runner and the notebooks are not in it: editing a page's prose recomputes nothing.

Entries are pickles under ``PRH_CACHE_DIR/scores/<key[:2]>/<key>.pkl``, written atomically
(:func:`prh_lib.paths.atomic_path`). The warnings the computation issued are stored with its value and issued again on
every hit. An entry that cannot be read (truncated, or pickled by a changed class) is recomputed and replaced, never
raised. ``PRH_SCORE_CACHE=0`` turns the cache off (every score recomputed, nothing written).

The score cache is an optimisation, never a source of results: the results table is written from the
returned values on every run, exactly as without it."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import pickle
import sys
from functools import lru_cache
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np
import torch

from prh_lib import paths
from prh_lib.extract.features import values_digest
from prh_lib.metrics._parallel import recording, reissue as _reissue

#: Version of the entries' layout; bump it when what a cached function returns changes shape.
SCORE_FORMAT = 2

T = TypeVar("T")


def _source_digest(named_files) -> str:
    """SHA-256 (hex) of ``(name, path)`` pairs: each name, then the file's bytes."""
    h = hashlib.sha256()
    for name, path in named_files:
        h.update(name.encode() + b"\x00" + Path(path).read_bytes() + b"\x00")
    return h.hexdigest()


def enabled() -> bool:
    """False when ``PRH_SCORE_CACHE`` is ``0`` (read at call time)."""
    return os.environ.get("PRH_SCORE_CACHE", "1") != "0"


#: The code that computes scores, relative to the package: folders (every ``.py`` below them) and files. The
#: verdict rule (``stats/decision.py``) only reads scores, so editing it recomputes none.
SCORE_CODE = ("metrics", "stats", "analysis", "extract/features.py", "validation.py")
_NOT_SCORE_CODE = ("stats/decision.py",)


def score_code_files(root: Path | None = None) -> list[Path]:
    """The source files :func:`score_code_digest` hashes (sorted; folders recursively)."""
    root = Path(__file__).resolve().parent.parent if root is None else Path(root)
    files = []
    for part in SCORE_CODE:
        path = root / part
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return [f for f in files if f.relative_to(root).as_posix() not in _NOT_SCORE_CODE]


@lru_cache(maxsize=4)
def score_code_digest(root: Path | None = None) -> str:
    """SHA-256 (hex) of the source of the code that computes scores (:func:`score_code_files` under ``root``,
    default this package)."""
    root = Path(__file__).resolve().parent.parent if root is None else Path(root)
    return _source_digest((f.relative_to(root).as_posix(), f) for f in score_code_files(root))


def features_key(features) -> dict:
    """What identifies one feature stack as an input: values digest, layer labels and widths, sample ids and name.

    ``features`` is a :class:`prh_lib.extract.features.LayerFeatures` (or anything with ``values``,
    ``layer_labels``, ``sample_ids`` and ``name``); the values are hashed as contiguous little-endian float32."""
    dims = getattr(features, "layer_dims", None)  # the true widths: padding is not part of a layer
    return {"values": _values_digest(features.values), "layers": list(features.layer_labels),
            "dims": None if dims is None else [int(d) for d in dims],
            "samples": paths.digest_texts(map(str, features.sample_ids), length=32),
            "name": str(getattr(features, "name", ""))}


def _values_digest(values) -> str:
    # the feature files' own digest of the float32 bytes (memoised per tensor there), and the shape (the
    # bytes alone do not fix it)
    tensor = values if isinstance(values, torch.Tensor) else torch.as_tensor(np.asarray(values))
    return f"{values_digest(tensor)}:{tuple(tensor.shape)}"


def _entry(kind: str, key: dict) -> Path:
    full = {"format": SCORE_FORMAT, "code": score_code_digest(), "kind": kind, **key}
    hexkey = hashlib.sha256(json.dumps(full, sort_keys=True, default=str).encode()).hexdigest()
    return paths.cache_dir("scores") / hexkey[:2] / f"{hexkey}.pkl"


def has(kind: str, key: dict) -> bool:
    """Whether :func:`cached` would read ``kind`` / ``key`` from the cache (an entry exists; its reading may
    still fail, and :func:`cached` then recomputes). False when the cache is off."""
    return enabled() and _entry(kind, key).is_file()


def cached(kind: str, key: dict, compute: Callable[[], T]) -> T:
    """``compute()``, or the value it returned before for the same ``kind`` and ``key``.

    Parameters
    ----------
    kind : str
        What is computed (``"layerwise_alignment"``, ``"permutation_null_layerwise"``); part of the key.
    key : dict
        JSON-serialisable description of every input (feature stacks through :func:`features_key`) and
        option that changes the result.
    compute : callable
        Computes the value; it must be picklable.

    Returns
    -------
    The value (a fresh unpickled copy when it was cached).
    """
    if not enabled():
        return compute()
    entry = _entry(kind, key)
    if entry.is_file():
        try:
            with open(entry, "rb") as fh:
                value, caught = pickle.load(fh)
            _reissue(caught)
            return value
        except Exception:  # truncated, or written by a class that changed: recompute and replace below
            pass
    value, caught = recording(compute)
    try:
        with paths.atomic_path(entry) as tmp:
            with open(tmp, "wb") as fh:
                pickle.dump((value, caught), fh, protocol=pickle.HIGHEST_PROTOCOL)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):  # costs the cache, never the result
        pass
    _reissue(caught)
    return value


def _argument_key(value):
    if hasattr(value, "layer_labels") and hasattr(value, "sample_ids"):
        return {"features": features_key(value)}
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return {"array": _values_digest(value)}
    if isinstance(value, dict):
        return {str(k): _argument_key(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_argument_key(v) for v in value]
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, torch.device):
        return str(value)
    pd = sys.modules.get("pandas")  # a DataFrame means pandas is loaded; nothing to import here
    if pd is not None and isinstance(value, pd.DataFrame):  # by content: values and index, columns, dtypes
        hashed = pd.util.hash_pandas_object(value, index=True).to_numpy()
        return {"frame": hashlib.sha256(hashed.tobytes()).hexdigest(), "columns": [str(c) for c in value.columns],
                "dtypes": [str(t) for t in value.dtypes], "index": [str(n) for n in value.index.names]}
    # anything else (a result object, a model) has no content key here: str() of it could collide
    raise TypeError(f"score_cache.memoize cannot key an argument of type {type(value).__name__}")


def memoize(kind: str, *, code: tuple = ()):
    """Decorator: the function's value cached by :func:`cached`, keyed by all its arguments.

    ``code``: modules outside :func:`score_code_digest`'s folders whose source the value also depends on;
    their files' digest joins the key, so an edit there recomputes as well.

    Feature stacks (anything with ``layer_labels`` and ``sample_ids``) are keyed by :func:`features_key`, tensors and
    arrays by their float32 bytes, DataFrames by their hashed values, index, columns and dtypes, numbers, strings, None,
    lists, tuples and dicts of those by value, a ``torch.device`` by its name; any other argument raises TypeError (its
    ``str()`` could name two objects alike). Defaults are filled in, so ``f(x, k=10)`` and ``f(x)`` share an entry when
    10 is the default. The function must be pure: its value may depend only on its arguments and the code."""
    def wrap(fn):
        signature = inspect.signature(fn)
        extra = {"code": _source_digest((m.__name__, m.__file__) for m in code)} if code else {}

        @functools.wraps(fn)
        def memoized(*args, **kwargs):
            if not enabled():
                return fn(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            key = {**{name: _argument_key(value) for name, value in bound.arguments.items()}, **extra}
            return cached(kind, key, lambda: fn(*args, **kwargs))

        return memoized

    return wrap
