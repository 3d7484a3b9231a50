"""Layer-wise features of one model on one set of pairs (:class:`LayerFeatures`), saved and loaded with their provenance.

Saved features record their layer labels, sample ids in row order and how they were made (safetensors
metadata). :func:`check_aligned` raises unless two feature sets hold the same samples in the same row order;
:func:`load_features` checks the rows against the requested pairs.

Every read is validated: the safetensors header, the metadata (layer labels, sample ids, layer widths), the
shape against the metadata, the SHA-256 of the tensor bytes recorded at writing (``values_sha256``), and
finite values. A file that fails is a :class:`CorruptFeatureFileError` naming the file and what is wrong;
:func:`check_feature_file` does the cheap part (header and metadata, no tensor read) for planning, and
:func:`quarantine` moves a bad file aside so that it is recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from prh_lib import paths

#: Metadata every feature file must carry (``layer_dims`` and ``values_sha256`` are checked when present:
#: files written before they were recorded stay readable).
REQUIRED_METADATA = ("layer_labels", "sample_ids")

#: When set, names a file to which :func:`save_features` appends each path it writes (``prh-run`` reports from it the
#: files its notebooks extracted themselves, :func:`prh_lib.run.extraction.report_misses`).
EXTRACTION_LOG = "PRH_EXTRACTION_LOG"


class FeatureMismatchError(ValueError):
    """Two feature sets do not describe the same samples in the same order."""


class CorruptFeatureFileError(ValueError):
    """A feature file is unreadable, incomplete or damaged; ``path`` and ``problem`` say which and how."""

    def __init__(self, path, problem: str):
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"feature file {self.path} is corrupt: {problem}")


class CorruptCacheWarning(UserWarning):
    """A cached feature file was corrupt; it was moved aside and the features are recomputed."""


#: id(tensor) -> (weak reference, version counter, digest): a tensor is hashed once while it is alive and
#: unmodified (torch bumps ``_version`` on every in-place write through torch, views included). A stack
#: loaded from a feature file is hashed there to check it, so the score cache's keys of it cost nothing
#: afterwards. Inference-mode tensors (no version counter) are hashed every time; writes that bypass
#: torch's counter (through a NumPy array sharing the memory, or ``.data``) are not seen.
_DIGEST_MEMO: dict[int, tuple[weakref.ref, int, str]] = {}

#: Feature files whose tensor this process read, hashed to the SHA-256 recorded in the file and found finite:
#: file identity (absolute path, inode, size, mtime and ctime in ns) -> that digest. A chapter reads the same file
#: once per draw; only the first read of an unchanged file pays for the check (a rewrite, a replacement or
#: a ``touch`` changes the identity, and the file is checked again). Identities taken before and after the
#: read must agree, so a file replaced while it was read is not recorded. File times tick coarsely (a few ms on
#: Linux), so an in-place edit right after a write can keep all three; as git does with "racy" index entries,
#: a file changed less than :data:`_SETTLED_NS` ago is checked on every read and never recorded.
_VERIFIED: dict[tuple, str] = {}
_SETTLED_NS = 2_000_000_000


def _file_identity(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.path.abspath(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def values_digest(values: torch.Tensor) -> str:
    """SHA-256 (hex) of the bytes of a float32 tensor as safetensors stores them (C order, little endian).

    Memoised per tensor object and version (:data:`_DIGEST_MEMO`); an in-place edit is hashed anew.
    """
    memo = isinstance(values, torch.Tensor) and not values.is_inference()
    if memo:
        hit = _DIGEST_MEMO.get(id(values))
        if hit is not None and hit[0]() is values and hit[1] == values._version:
            return hit[2]
    array = values.detach().to("cpu", torch.float32).contiguous().numpy()
    # the buffer itself, not a copy of it (tobytes): C-contiguous, so hashed in the same order
    data = memoryview(array.astype("<f4", copy=False)).cast("B") if array.size else b""  # no cast of a 0-size view
    digest = hashlib.sha256(data).hexdigest()
    if memo:
        _remember_digest(values, digest)
    return digest


def _remember_digest(values: torch.Tensor, digest: str) -> None:
    """Record ``digest`` as the SHA-256 of ``values`` at its current version (:data:`_DIGEST_MEMO`)."""
    if values.is_inference():
        return
    if len(_DIGEST_MEMO) > 256:  # a snapshot, and pop: other threads may add or drop entries meanwhile
        for key in [key for key, (ref, _, _) in list(_DIGEST_MEMO.items()) if ref() is None]:
            _DIGEST_MEMO.pop(key, None)
    _DIGEST_MEMO[id(values)] = (weakref.ref(values), values._version, digest)


@dataclass(frozen=True)
class LayerFeatures:
    """Pooled features of every layer of one model on one set of pairs.

    Attributes
    ----------
    values : torch.Tensor of shape (n_layers, n_samples, dim), float32, on CPU
        Layers narrower than ``dim`` (CNN stages) are zero-padded on the right; see ``layer_dims``.
        Zero padding leaves every inner product, norm and distance unchanged, so metrics that work on
        Gram matrices or distances (mutual k-NN, CKA) give exactly the same scores on the padded stack.
    layer_labels : tuple of str, length n_layers
        ``"embed"``, ``"layer.1"``, ... for transformers; the model's own stage names for CNNs.
    sample_ids : tuple of str, length n_samples
        The sample of each row.
    meta : dict of str to str
        How the features were made: model, revision, pooling, dtype, dataset, library version, ...
    layer_dims : tuple of int, length n_layers, optional
        True width of each layer (default: ``dim`` for every layer).
    """

    values: torch.Tensor
    layer_labels: tuple[str, ...]
    sample_ids: tuple[str, ...]
    meta: dict = field(default_factory=dict)
    layer_dims: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.values.ndim != 3:
            raise ValueError(f"values must have shape (n_layers, n_samples, dim), got {tuple(self.values.shape)}")
        L, N, d = self.values.shape
        if len(self.layer_labels) != L or len(self.sample_ids) != N:
            raise ValueError(
                f"values of shape {tuple(self.values.shape)} do not match {len(self.layer_labels)} layer labels "
                f"and {len(self.sample_ids)} sample ids"
            )
        if self.layer_dims is None:
            object.__setattr__(self, "layer_dims", (d,) * L)
        elif len(self.layer_dims) != L or max(self.layer_dims) > d or min(self.layer_dims) < 1:
            raise ValueError(f"layer_dims {self.layer_dims} do not fit values of shape {tuple(self.values.shape)}")

    @property
    def n_layers(self) -> int:
        return self.values.shape[0]

    @property
    def name(self) -> str:
        return self.meta.get("model", "?")

    def layer(self, label: str | int) -> torch.Tensor:
        """Features of one layer without padding, by label or index (negative counts from the last).

        Returns
        -------
        torch.Tensor of shape (n_samples, layer_dims[layer])
        """
        if isinstance(label, str):
            if label not in self.layer_labels:
                raise KeyError(f"no layer {label!r}; layers are {list(self.layer_labels)}")
            label = self.layer_labels.index(label)
        return self.values[label, :, : self.layer_dims[label]]

    def rows(self, indices: Sequence[int]) -> "LayerFeatures":
        """The same layers restricted to the given rows (in the given order)."""
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        return LayerFeatures(self.values[:, idx], self.layer_labels, tuple(self.sample_ids[i] for i in idx.tolist()),
                             dict(self.meta), self.layer_dims)

    def replace(self, values: torch.Tensor, **meta) -> "LayerFeatures":
        """Same labels and rows, other values of the same shape (e.g. a transformed copy); ``meta`` is added."""
        return LayerFeatures(values, self.layer_labels, self.sample_ids, {**self.meta, **meta}, self.layer_dims)


def check_aligned(a: LayerFeatures, b: LayerFeatures) -> None:
    """Raise :class:`FeatureMismatchError` unless ``a`` and ``b`` hold the same samples in the same row order."""
    if a.sample_ids != b.sample_ids:
        if set(a.sample_ids) == set(b.sample_ids):
            problem = "the same samples in a different row order"
        else:
            problem = f"different samples ({len(set(a.sample_ids) ^ set(b.sample_ids))} not shared)"
        raise FeatureMismatchError(
            f"features of {a.name!r} ({len(a.sample_ids)} rows) and {b.name!r} ({len(b.sample_ids)} rows) hold {problem}"
        )


def save_features(features: LayerFeatures, path: str | Path) -> Path:
    """Write features atomically as safetensors with their labels, sample ids and provenance as metadata.

    The SHA-256 of the tensor bytes is recorded (``values_sha256``) so that damaged bytes are detected on reading. The
    path is then appended to the file :data:`EXTRACTION_LOG` names, when set.

    Raises
    ------
    ValueError
        If the values are not all finite (the message names the layers); such features are not cached.
    """
    path = Path(path)
    values = features.values.detach().to("cpu", torch.float32).contiguous()
    finite = torch.isfinite(values).flatten(1).all(dim=1)
    if not bool(finite.all()):
        bad = [features.layer_labels[i] for i in torch.nonzero(~finite).flatten().tolist()]
        raise ValueError(f"features of {features.name!r} hold non-finite values in layers {bad[:10]}; "
                         f"not writing {path}")
    metadata = {k: str(v) for k, v in features.meta.items()}
    metadata["layer_labels"] = json.dumps(list(features.layer_labels))
    metadata["sample_ids"] = json.dumps(list(features.sample_ids))
    metadata["layer_dims"] = json.dumps(list(features.layer_dims))
    metadata["values_sha256"] = values_digest(values)
    with paths.atomic_path(path) as tmp:
        save_file({"values": values}, str(tmp), metadata=metadata)
    if os.environ.get(EXTRACTION_LOG):
        with open(os.environ[EXTRACTION_LOG], "a") as log:  # one short line per write: appends do not interleave
            log.write(f"{path}\n")
    return path


def _header(path: Path):
    """Metadata, labels, ids, dims and the shape of ``values`` of a feature file, without reading the tensor.

    Raises
    ------
    CorruptFeatureFileError
        If the header cannot be read, metadata is missing or malformed, or the shape does not match it.
    """
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = dict(f.metadata() or {})
            keys = list(f.keys())
            if "values" not in keys:
                raise CorruptFeatureFileError(path, f"no tensor 'values' (tensors: {keys})")
            sl = f.get_slice("values")
            shape, dtype = tuple(sl.get_shape()), sl.get_dtype()
    except CorruptFeatureFileError:
        raise
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise CorruptFeatureFileError(path, f"unreadable safetensors file ({type(err).__name__}: {err})") from err
    missing = [k for k in REQUIRED_METADATA if k not in meta]
    if missing:
        raise CorruptFeatureFileError(path, f"metadata lacks {missing} (has {sorted(meta)})")
    try:
        labels = tuple(json.loads(meta.pop("layer_labels")))
        ids = tuple(json.loads(meta.pop("sample_ids")))
        dims = tuple(json.loads(meta.pop("layer_dims"))) if "layer_dims" in meta else None
    except (ValueError, TypeError) as err:
        raise CorruptFeatureFileError(path, f"malformed metadata ({err})") from err
    if not all(isinstance(x, str) for x in labels + ids) or (dims is not None and not all(
            isinstance(d, int) for d in dims)):
        raise CorruptFeatureFileError(path, "malformed metadata (labels and ids must be strings, dims ints)")
    if dtype not in ("F32", "float32"):
        raise CorruptFeatureFileError(path, f"values are {dtype}, not float32")
    if len(shape) != 3 or shape[0] != len(labels) or shape[1] != len(ids):
        raise CorruptFeatureFileError(path, f"values of shape {shape} do not match {len(labels)} layer labels "
                                            f"and {len(ids)} sample ids")
    if dims is not None and (len(dims) != shape[0] or min(dims, default=1) < 1 or max(dims, default=0) > shape[2]):
        raise CorruptFeatureFileError(path, f"layer_dims {list(dims)} do not fit values of shape {shape}")
    return meta, labels, ids, dims, shape


def check_feature_file(path: str | Path, *, expected_sample_ids: Sequence[str] | None = None) -> dict:
    """Cheap validation of a feature file (header, metadata, shape, sample ids; the tensor is not read).

    Returns
    -------
    dict
        The file's provenance metadata.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    CorruptFeatureFileError
        If the header or metadata is unreadable, incomplete or inconsistent with the shape.
    FeatureMismatchError
        If ``expected_sample_ids`` is given and the file's rows are other samples or in another order.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no feature file at {path}")
    meta, _, ids, _, _ = _header(path)
    if expected_sample_ids is not None and tuple(expected_sample_ids) != ids:
        raise FeatureMismatchError(f"cached features at {path} hold other rows than the requested pairs")
    return meta


def load_features(path: str | Path, *, expected_sample_ids: Sequence[str] | None = None) -> LayerFeatures:
    """Read features written by :func:`save_features`, validating every part of the file.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    CorruptFeatureFileError
        If the file is unreadable or truncated, lacks metadata, its shape contradicts the metadata, its
        bytes differ from the recorded ``values_sha256``, or it holds non-finite values.
    FeatureMismatchError
        If ``expected_sample_ids`` is given and the file's rows are other samples or in another order.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no feature file at {path}")
    identity = _file_identity(path)  # before anything is read (see _VERIFIED)
    meta, labels, ids, dims, _ = _header(path)
    if expected_sample_ids is not None and tuple(expected_sample_ids) != ids:
        raise FeatureMismatchError(f"cached features at {path} hold other rows than the requested pairs")
    try:
        with safe_open(str(path), framework="pt") as f:
            values = f.get_tensor("values")
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise CorruptFeatureFileError(path, f"unreadable tensor ({type(err).__name__}: {err})") from err
    recorded = meta.pop("values_sha256", None)
    if (recorded is not None and identity is not None and _VERIFIED.get(identity) == recorded
            and identity == _file_identity(path)):
        _remember_digest(values, recorded)  # these bytes were checked in this process and the file is unchanged
    else:
        if recorded is not None and values_digest(values) != recorded:
            raise CorruptFeatureFileError(path, "the tensor bytes do not match the SHA-256 recorded when it was written")
        if not bool(torch.isfinite(values).all()):
            raise CorruptFeatureFileError(path, f"{int((~torch.isfinite(values)).sum())} non-finite values")
        if (recorded is not None and identity is not None and identity == _file_identity(path)
                and time.time_ns() - max(identity[-2:]) > _SETTLED_NS):
            _VERIFIED[identity] = recorded
    try:
        return LayerFeatures(values, labels, ids, meta, dims)
    except ValueError as err:
        raise CorruptFeatureFileError(path, str(err)) from err


def quarantine(path: str | Path, problem: str = "") -> Path:
    """Move a bad cache file aside to ``<name>.corrupt-<UTC time>-<pid>`` (never read as a result) and warn.

    Returns the new path (the file is gone from ``path`` either way; if it cannot be renamed it is deleted).
    """
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.corrupt-{stamp}-{os.getpid()}")
    try:
        os.replace(path, aside)
        where = f"moved aside to {aside.name}"
    except FileNotFoundError:
        where = "already gone"
    except OSError:
        path.unlink(missing_ok=True)
        where = "deleted"
    warnings.warn(f"{problem or f'feature file {path} is corrupt'}; {where}; the features are recomputed",
                  CorruptCacheWarning, stacklevel=2)
    return aside
