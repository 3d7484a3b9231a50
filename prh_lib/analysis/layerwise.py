"""Section 3.1: where does alignment emerge? Every layer pair of each model pair, against chance and controls.

:func:`compare_pairs` scores each comparison with :func:`~prh_lib.analysis.core.score_pair`;
:func:`summary_table` is the page's table (peak versus final layers, chance, shuffled control, calibrated
scores, bootstrap interval) and :func:`describe_peaks` states it in figures.

References
----------
Herbst et al., Section 3.1 and Figure 1; Huh et al. (2024), App. A (mutual k-NN); Groeger et al. (2026),
Sec. 5 (calibration).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..features import LayerFeatures
from .core import AlignmentMatrix, PairResult, check_comparisons, score_pair

__all__ = ["compare_pairs", "peak_table", "summary_table", "describe_peaks", "to_record"]


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

    Returns
    -------
    list of PairResult
        One per comparison, labelled ``"x × y"``.

    Raises
    ------
    KeyError
        If a model of ``comparisons`` has no features.
    """
    check_comparisons(features, comparisons)
    return [score_pair(features[x], features[y], k=k, n_permutations=n_permutations, alpha=alpha, n_boot=n_boot,
                       seed=seed, device=device, label=f"{x} × {y}") for x, y in comparisons]


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


def to_record(results: list[PairResult], table: pd.DataFrame, *, n_pairs: int, k: int, chance: float,
              clip_q: float | None) -> dict:
    """What the Section 3.1 page records for the book and the tests (:func:`prh_lib.report.record`)."""
    return {
        "n_pairs": n_pairs, "k": k, "chance": chance, "clip_q": clip_q, "summary": table,
        "matrices": {r.label: {"scores": r.matrix.scores, "x_labels": r.matrix.x_labels,
                               "y_labels": r.matrix.y_labels} for r in results},
    }
