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
        """(row, column, score) of the maximum, ignoring NaN (undefined layers); the first in row-major order if tied."""
        if np.isnan(self.scores).all():
            raise ValueError(f"all scores of {self.x_name} × {self.y_name} are NaN")
        i, j = np.unravel_index(int(np.nanargmax(self.scores)), self.scores.shape)
        return int(i), int(j), float(self.scores[i, j])

    @property
    def final(self) -> float:
        """Score of the last layer of x against the last layer of y."""
        return float(self.scores[-1, -1])

    def relative_depth(self) -> tuple[float, float]:
        """Depth of the peak as a fraction of each model's layers (0 = embedding output, 1 = last layer)."""
        i, j, _ = self.peak
        return i / max(len(self.x_labels) - 1, 1), j / max(len(self.y_labels) - 1, 1)


def clip_features(features: LayerFeatures, *, q: float | None = 0.95) -> LayerFeatures:
    """Clip outlying activations of every layer, as the PRH code does before scoring (Huh et al. 2024, App. A).

    Each layer is clipped to ``[-t, t]`` with ``t`` from :func:`prh_lib.metrics.clip_outliers` (``scope="prh"``:
    the mean over samples of each sample's ``q``-quantile of ``|x|``), computed on that layer's true width.
    The PRH code uses one threshold for all layers of a model; per layer is used here because the scale
    of a residual stream grows with depth, so one shared threshold would clip deep layers hardest (and
    zero padding of narrower CNN stages would bias it). ``q=None`` or ``q=1`` returns ``features`` unchanged.

    Parameters
    ----------
    features : LayerFeatures
    q : float in (0, 1] or None

    Returns
    -------
    LayerFeatures
        Same labels and rows; ``meta["clip_q"]`` records ``q``.
    """
    from .metrics import clip_outliers

    if q is None or q == 1:
        return features
    values = features.values.clone()
    for i, d in enumerate(features.layer_dims):
        values[i, :, :d] = clip_outliers(features.values[i, :, :d], q=q)
    return features.replace(values, clip_q=str(q))


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
    return y.replace(y.values[:, perm], control=f"shuffled:{seed}")


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
            row["shuffled (max)"] = float(np.nanmax(controls[label].scores))
            row["shuffled (mean)"] = float(np.nanmean(controls[label].scores))
        if chance is not None:
            row["chance"] = chance
            row["peak / chance"] = best / chance
        rows.append(row)
    return pd.DataFrame(rows).set_index("pair")


def check_comparisons(features: dict, comparisons) -> None:
    """Raise KeyError unless every model named in ``comparisons`` (pairs of names) has features."""
    missing = sorted({m for pair in comparisons for m in pair} - set(features))
    if missing:
        raise KeyError(f"no features for {missing}; have {sorted(features)}")


@dataclass(frozen=True)
class PairResult:
    """Everything Section 3.1 reports for one model pair.

    Attributes
    ----------
    label : str
        ``"x × y"``.
    matrix : AlignmentMatrix
        Mutual k-NN over all layer pairs.
    control : AlignmentMatrix
        The same with the pairing shuffled (seeded).
    calibration : prh_lib.metrics.LayerwiseCalibration
        Permutation null (Groeger et al. 2026), selection-aware for the maximum over layer pairs.
    peak_ci : prh_lib.metrics.BootstrapCI
        Bootstrap interval of the score at the peak layer pair.
    """

    label: str
    matrix: AlignmentMatrix
    control: AlignmentMatrix
    calibration: object
    peak_ci: object


def compare_pairs(features: dict[str, LayerFeatures], comparisons, *, k: int = 10, n_permutations: int = 200,
                  alpha: float = 0.05, n_boot: int = 200, seed: int = 0, device=None) -> list[PairResult]:
    """Layer-wise mutual k-NN, shuffled control, calibration and peak interval for each ``(x, y)`` pair.

    Parameters
    ----------
    features : dict of str to LayerFeatures
        Features of every model named in ``comparisons``, all on the same pairs.
    comparisons : sequence of (str, str)
    k : int
        Neighbours (the paper: 10).
    n_permutations, alpha : int, float
        Permutation null of :func:`prh_lib.metrics.permutation_test_layerwise` (selection-aware).
    n_boot : int
        Bootstrap replicates for the interval of the peak score.
    seed : int
        Seeds the shuffled control, the permutations and the bootstrap.
    """
    from .metrics import bootstrap_ci, permutation_test_layerwise

    check_comparisons(features, comparisons)
    results = []
    for x_name, y_name in comparisons:
        x, y = features[x_name], features[y_name]
        matrix = layerwise_alignment(x, y, metric="mutual_knn", k=k, device=device)
        control = layerwise_alignment(x, shuffled_pairing(y, seed=seed), metric="mutual_knn", k=k, device=device)
        cal = permutation_test_layerwise(x.values, y.values, metric="mutual_knn", k=k, n_permutations=n_permutations,
                                         alpha=alpha, seed=seed, selection_aware=True, device=device)
        i, j, _ = matrix.peak
        ci = bootstrap_ci(x.values[i], y.values[j], metric="mutual_knn", k=k, n_boot=n_boot, seed=seed, device=device)
        results.append(PairResult(f"{x_name} × {y_name}", matrix, control, cal, ci))
    return results


def summary_table(results: list[PairResult], *, chance: float | None = None) -> pd.DataFrame:
    """:func:`peak_table` of ``results`` plus the peak's bootstrap interval and calibrated scores.

    Columns added: ``peak 95% CI``, ``calibrated (max)`` and ``p (max)`` (selection-aware null over all layer
    pairs), ``calibrated (final)`` and ``p (final)`` (the final-layer pair against its own null).
    """
    table = peak_table({r.label: r.matrix for r in results}, {r.label: r.control for r in results}, chance=chance)
    ci, cal_max, p_max, cal_last, p_last = [], [], [], [], []
    for r in results:
        ci.append(f"[{r.peak_ci.low:.3f}, {r.peak_ci.high:.3f}]")
        cal_max.append(r.calibration.calibrated_max)
        p_max.append(r.calibration.p_max)
        cal_last.append(float(r.calibration.calibrated[-1, -1]))
        p_last.append(float(r.calibration.p_value[-1, -1]))
    table.insert(1, "peak 95% CI", ci)
    table["calibrated (max)"] = cal_max
    table["p (max)"] = p_max
    table["calibrated (final)"] = cal_last
    table["p (final)"] = p_last
    return table


def describe_peaks(table: pd.DataFrame) -> str:
    """A Markdown paragraph per model pair stating what :func:`summary_table` measured, in figures."""
    lines = []
    for pair, row in table.iterrows():
        where = ("at the final layers" if row["peak depth x"] == 1 and row["peak depth y"] == 1 else
                 f"at {row['peak layer x']} × {row['peak layer y']} (relative depth {row['peak depth x']:.2f} "
                 f"× {row['peak depth y']:.2f})")
        text = f"- **{pair}**: peak {row['peak']:.3f} {row['peak 95% CI']} {where}; final layers {row['final layers']:.3f}"
        if "chance" in row:
            text += f"; {row['peak / chance']:.1f}× chance ({row['chance']:.3f})"
        if "shuffled (max)" in row:
            text += f"; shuffled-pairs control at most {row['shuffled (max)']:.3f}"
        if "p (max)" in row:
            text += f"; calibrated {row['calibrated (max)']:.3f}, p = {row['p (max)']:.3g}"
        lines.append(text + ".")
    return "\n".join(lines)
