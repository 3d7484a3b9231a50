"""Layer-wise features of one model on one set of pairs (:class:`LayerFeatures`), saved and loaded with their provenance.

Saved features record their layer labels, sample ids in row order and how they were made (safetensors
metadata). :func:`check_aligned` raises unless two feature sets hold the same samples in the same row order;
:func:`load_features` checks the rows against the requested pairs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from . import paths

__all__ = ["FeatureMismatchError", "LayerFeatures", "check_aligned", "save_features", "load_features"]


class FeatureMismatchError(ValueError):
    """Two feature sets do not describe the same samples in the same order."""


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
    """Write features atomically as safetensors with their labels, sample ids and provenance as metadata."""
    path = Path(path)
    metadata = {k: str(v) for k, v in features.meta.items()}
    metadata["layer_labels"] = json.dumps(list(features.layer_labels))
    metadata["sample_ids"] = json.dumps(list(features.sample_ids))
    metadata["layer_dims"] = json.dumps(list(features.layer_dims))
    with paths.atomic_path(path) as tmp:
        save_file({"values": features.values.contiguous()}, str(tmp), metadata=metadata)
    return path


def load_features(path: str | Path, *, expected_sample_ids: Sequence[str] | None = None) -> LayerFeatures:
    """Read features written by :func:`save_features`.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    FeatureMismatchError
        If ``expected_sample_ids`` is given and the file's rows are other samples or in another order.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no feature file at {path}")
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
        values = f.get_tensor("values")
    labels = tuple(json.loads(meta.pop("layer_labels")))
    ids = tuple(json.loads(meta.pop("sample_ids")))
    dims = tuple(json.loads(meta.pop("layer_dims"))) if "layer_dims" in meta else None
    feats = LayerFeatures(values, labels, ids, meta, dims)
    if expected_sample_ids is not None and tuple(expected_sample_ids) != ids:
        raise FeatureMismatchError(f"cached features at {path} hold other rows than the requested pairs")
    return feats
