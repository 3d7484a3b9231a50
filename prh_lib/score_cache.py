"""Scores cached by the content they were computed from, so that a warm rerun recomputes nothing.

A score (a layer-pair matrix, a permutation null, a bootstrap interval) is a pure function of the
features it reads and of its options. :func:`cached` keys it by exactly those:

- the bytes of every feature stack (float32 values, as :func:`prh_lib.features.values_digest` hashes them),
  its layer labels, sample ids and name (rows, not only values: a re-ordered stack is another input);
- the options, written as JSON with sorted keys (``k``, ``n_permutations``, ``seed``, the device, ...);
- the function's name, :data:`SCORE_FORMAT` and the SHA-256 of the source files of the code that computes
  scores (``prh_lib/metrics/*.py`` and ``prh_lib/analysis/core.py``): an edit of the metric code names other
  files, so no score computed by older code is served.

Entries are pickles under ``PRH_CACHE_DIR/scores/<key[:2]>/<key>.pkl``, written atomically
(:func:`prh_lib.paths.atomic_path`): an interrupted write leaves no entry. An entry that cannot be read
(truncated, or pickled by a class that has changed) is recomputed and replaced, never raised.
``PRH_SCORE_CACHE=0`` turns the cache off (every score recomputed, nothing written).

The score cache is an optimisation, never a source of results: the results table is written from the
returned values on every run, exactly as without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import weakref
from functools import lru_cache
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np
import torch

from . import paths

__all__ = ["SCORE_FORMAT", "cached", "features_key", "enabled", "score_code_digest"]

#: Version of the entries' layout; bump it when what a cached function returns changes shape.
SCORE_FORMAT = 1

T = TypeVar("T")


def enabled() -> bool:
    """False when ``PRH_SCORE_CACHE`` is ``0`` (read at call time)."""
    return os.environ.get("PRH_SCORE_CACHE", "1") != "0"


@lru_cache(maxsize=1)
def score_code_digest() -> str:
    """SHA-256 (hex) of the source of the code that computes scores: ``metrics/*.py`` and ``analysis/core.py``."""
    root = Path(__file__).resolve().parent
    files = sorted((root / "metrics").glob("*.py")) + [root / "analysis" / "core.py"]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\x00" + f.read_bytes() + b"\x00")
    return h.hexdigest()


def features_key(features) -> dict:
    """What identifies one feature stack as an input: values digest, layer labels, sample ids and name.

    ``features`` is a :class:`prh_lib.features.LayerFeatures` (or anything with ``values``,
    ``layer_labels``, ``sample_ids`` and ``name``); the values are hashed as contiguous little-endian float32.
    """
    return {"values": _values_digest(features.values), "layers": list(features.layer_labels),
            "samples": paths.digest_texts(map(str, features.sample_ids), length=32),
            "name": str(getattr(features, "name", ""))}


#: id(tensor) -> (weak reference, version counter, digest): a stack scored against many partners is hashed
#: once while it is alive and unmodified (torch bumps ``_version`` on every in-place write, views included).
_DIGEST_MEMO: dict[int, tuple[weakref.ref, int, str]] = {}


def _values_digest(values) -> str:
    if isinstance(values, torch.Tensor):
        hit = _DIGEST_MEMO.get(id(values))
        if hit is not None and hit[0]() is values and hit[1] == values._version:
            return hit[2]
        array = values.detach().to("cpu", torch.float32).numpy()
    else:
        array = np.asarray(values)
    h = hashlib.sha256(np.ascontiguousarray(array, dtype="<f4").tobytes())
    h.update(repr(tuple(array.shape)).encode())
    digest = h.hexdigest()
    if isinstance(values, torch.Tensor):
        if len(_DIGEST_MEMO) > 256:
            for key in [key for key, (ref, _, _) in _DIGEST_MEMO.items() if ref() is None]:
                del _DIGEST_MEMO[key]
        _DIGEST_MEMO[id(values)] = (weakref.ref(values), values._version, digest)
    return digest


def _entry(kind: str, key: dict) -> Path:
    full = {"format": SCORE_FORMAT, "code": score_code_digest(), "kind": kind, **key}
    hexkey = hashlib.sha256(json.dumps(full, sort_keys=True, default=str).encode()).hexdigest()
    return paths.cache_dir("scores") / hexkey[:2] / f"{hexkey}.pkl"


def cached(kind: str, key: dict, compute: Callable[[], T]) -> T:
    """``compute()``, or the value it returned before for the same ``kind`` and ``key``.

    Parameters
    ----------
    kind : str
        What is computed (``"score_pair"``, ``"layerwise_alignment"``); part of the key.
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
                return pickle.load(fh)
        except Exception:  # truncated, or written by a class that changed: recompute and replace below
            pass
    value = compute()
    try:
        with paths.atomic_path(entry) as tmp:
            with open(tmp, "wb") as fh:
                pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:  # a full or read-only disk costs the cache, never the result
        pass
    return value
