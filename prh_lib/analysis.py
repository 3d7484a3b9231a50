"""Analyses that turn layer-wise features into the paper's numbers: alignment matrices, peaks, controls.

Functions here take :class:`~prh_lib.extract.LayerFeatures` (or arrays) and return small result objects
and tables; they never load models and never plot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .extract import LayerFeatures, check_aligned
from .metrics import get_layerwise_metric


@dataclass(frozen=True)
class AlignmentMatrix:
    """Scores of one metric over all layer pairs of two models.

    Attributes
    ----------
    scores : ndarray of shape (n_layers_x, n_layers_y)
    x_labels, y_labels : tuple of str
        Layer labels of the rows and columns.
    x_name, y_name : str
        Model names.
    metric : str
    options : dict
        Metric options (``k``, ...) and ``n`` (number of samples).
    """

    scores: np.ndarray
    x_labels: tuple[str, ...]
    y_labels: tuple[str, ...]
    x_name: str
    y_name: str
    metric: str
    options: dict = field(default_factory=dict)

    @property
    def peak(self) -> tuple[int, int, float]:
        """(row, column, score) of the maximum; the first in row-major order if tied."""
        i, j = np.unravel_index(int(np.argmax(self.scores)), self.scores.shape)
        return int(i), int(j), float(self.scores[i, j])

    @property
    def final(self) -> float:
        """Score of the last layer of x against the last layer of y."""
        return float(self.scores[-1, -1])

    def relative_depth(self) -> tuple[float, float]:
        """Depth of the peak as a fraction of each model's layers (0 = embedding output, 1 = last layer)."""
        i, j, _ = self.peak
        return i / max(len(self.x_labels) - 1, 1), j / max(len(self.y_labels) - 1, 1)


def layerwise_alignment(x: LayerFeatures, y: LayerFeatures, *, metric: str = "mutual_knn", **options) -> AlignmentMatrix:
    """Alignment of every layer of ``x`` with every layer of ``y``.

    Parameters
    ----------
    x, y : LayerFeatures
        Features of two models on the same samples in the same row order.
    metric : str
        Name in :data:`prh_lib.metrics.LAYERWISE_METRICS` (default ``"mutual_knn"``, Huh et al. 2024).
    **options
        Passed to the metric (e.g. ``k=10``).

    Raises
    ------
    FeatureMismatchError
        If the rows of ``x`` and ``y`` are not the same samples in the same order.
    """
    check_aligned(x, y)
    fn = get_layerwise_metric(metric)
    scores = np.asarray(fn(x.values, y.values, **options), dtype=np.float64)
    return AlignmentMatrix(scores, tuple(x.layer_labels), tuple(y.layer_labels), x.name, y.name, metric,
                           {**options, "n": len(x.sample_ids)})


def shuffled_pairing(y: LayerFeatures, *, seed: int = 0) -> LayerFeatures:
    """``y`` with its rows permuted (seeded) but its sample ids kept: the broken-pairing control.

    Comparing ``x`` with the result measures what the metric gives when images and captions are paired at
    random; it should sit at the chance level.
    """
    perm = np.random.default_rng(seed).permutation(len(y.sample_ids))
    return LayerFeatures(y.values[:, perm], y.layer_labels, y.sample_ids, {**y.meta, "control": f"shuffled:{seed}"})


def peak_table(matrices: dict[str, AlignmentMatrix], controls: dict[str, AlignmentMatrix] | None = None,
               chance: float | None = None) -> pd.DataFrame:
    """One row per model pair: peak score and its layers, the final-layer score, controls.

    Parameters
    ----------
    matrices : dict of str to AlignmentMatrix
        Pair label -> alignment matrix.
    controls : dict of str to AlignmentMatrix, optional
        Pair label -> the same metric with shuffled pairing; its maximum over layer pairs is reported.
    chance : float, optional
        Analytic chance level (e.g. k/(N-1) for mutual k-NN).
    """
    rows = []
    for label, m in matrices.items():
        i, j, best = m.peak
        dx, dy = m.relative_depth()
        row = {
            "pair": label,
            "peak": best,
            "peak layer x": m.x_labels[i],
            "peak layer y": m.y_labels[j],
            "peak depth x": dx,
            "peak depth y": dy,
            "final layers": m.final,
            "peak / final": best / m.final if m.final > 0 else np.nan,
        }
        if controls and label in controls:
            row["shuffled (max)"] = float(controls[label].scores.max())
            row["shuffled (mean)"] = float(controls[label].scores.mean())
        if chance is not None:
            row["chance"] = chance
            row["peak / chance"] = best / chance
        rows.append(row)
    return pd.DataFrame(rows).set_index("pair")
