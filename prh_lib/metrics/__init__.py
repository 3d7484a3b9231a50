"""Alignment metrics between two representations of the same samples.

One module per metric family, pure functions on arrays (NumPy or torch):

- :mod:`~prh_lib.metrics.knn`: ``mutual_knn``, ``jaccard_knn``, ``cycle_knn``, ``cknna`` (with the
  family's tie semantics: ties straddling the k-th place are averaged over, or broken by lowest index)
- :mod:`~prh_lib.metrics.kernel`: ``cka_linear``, ``cka_linear_unbiased``, ``cka_rbf``
- :mod:`~prh_lib.metrics.preprocess`: ``l2_normalize``, ``clip_outliers``, ``center`` (applied by the caller)
- :mod:`~prh_lib.metrics.displacement`: the displacement-geometry measures (arXiv 2609.24209)
- :mod:`~prh_lib.metrics.reference`: the textbook mutual k-NN that the engine is tested against

Calibration, permutation nulls and intervals are statistics of these scores: :mod:`prh_lib.stats`.

Pairwise metrics take ``X (n_samples, d_x)``, ``Y (n_samples, d_y)`` and return a float; layer-wise
forms take ``(n_layers_x, n_samples, d_x)``, ``(n_layers_y, n_samples, d_y)`` and return an
``(n_layers_x, n_layers_y)`` array. The registries below are explicit dicts keyed by metric name.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from prh_lib.metrics.kernel import (cka_linear, cka_linear_layerwise, cka_linear_unbiased,
    cka_linear_unbiased_layerwise, cka_rbf, cka_rbf_layerwise)
from prh_lib.metrics.knn import (cknna, cknna_layerwise, cycle_knn, cycle_knn_layerwise, jaccard_knn,
    jaccard_knn_chance, jaccard_knn_layerwise, knn_indices, mutual_knn, mutual_knn_chance, mutual_knn_layerwise)
from prh_lib.metrics.preprocess import center, clip_outliers, l2_normalize

# The displacement-geometry family (prh_lib.metrics.displacement) is wired in here by its owner.
METRICS: dict[str, Callable[..., float]] = {
    "mutual_knn": mutual_knn,
    "jaccard_knn": jaccard_knn,
    "cycle_knn": cycle_knn,
    "cknna": cknna,
    "cka_linear": cka_linear,
    "cka_linear_unbiased": cka_linear_unbiased,
    "cka_rbf": cka_rbf,
}

LAYERWISE_METRICS: dict[str, Callable[..., np.ndarray]] = {
    "mutual_knn": mutual_knn_layerwise,
    "jaccard_knn": jaccard_knn_layerwise,
    "cycle_knn": cycle_knn_layerwise,
    "cknna": cknna_layerwise,
    "cka_linear": cka_linear_layerwise,
    "cka_linear_unbiased": cka_linear_unbiased_layerwise,
    "cka_rbf": cka_rbf_layerwise,
}

#: Metrics with a neighbour count ``k`` option.
KNN_METRICS = ("mutual_knn", "jaccard_knn", "cycle_knn", "cknna")


def get_layerwise_metric(name: str) -> Callable:
    """The layer-wise metric ``name`` from :data:`LAYERWISE_METRICS`; ValueError otherwise."""
    if not isinstance(name, str) or name not in LAYERWISE_METRICS:
        raise ValueError(f"unknown layer-wise metric {name!r}; valid names: {', '.join(sorted(LAYERWISE_METRICS))}")
    return LAYERWISE_METRICS[name]


__all__ = ["METRICS", "LAYERWISE_METRICS", "KNN_METRICS", "get_layerwise_metric", "l2_normalize",
           "clip_outliers", "center", "knn_indices", "mutual_knn", "mutual_knn_layerwise", "mutual_knn_chance",
           "jaccard_knn", "jaccard_knn_layerwise", "jaccard_knn_chance", "cycle_knn", "cycle_knn_layerwise", "cknna",
           "cknna_layerwise", "cka_linear", "cka_linear_layerwise", "cka_linear_unbiased",
           "cka_linear_unbiased_layerwise", "cka_rbf", "cka_rbf_layerwise"]
