"""The computation of Section 3.1: every layer pair of each model pair scored, over datasets x draws.

:func:`compare_pairs` scores one draw's comparisons (:func:`~prh_lib.analysis.core.score_pair`);
:func:`run_study` every draw, written to the results table (:func:`pair_rows`, quantities :data:`QUANTITIES`);
:func:`clip_variants` adds the peaks under other clipping choices; :func:`aggregate_peaks` reads the table back
as mean ± std over draws. Re-exported by :mod:`prh_lib.pages.sec3_1_layerwise`, which holds the page.

References
----------
Herbst et al., Section 3.1 and Figure 1; Huh et al. (2024), App. A (mutual k-NN); Groeger et al. (2026),
Sec. 5 (calibration).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import Sequence

import numpy as np
import pandas as pd

from prh_lib.extract.features import LayerFeatures
from prh_lib.parallel import available_cores
from prh_lib.results import expand_extra_columns
from prh_lib.analysis.core import (PairResult, check_comparisons, clip_features, layer_depths, layerwise_alignment,
    preprocessing_label, score_pair)
from prh_lib.analysis.study import run_draws


def compare_pairs(features: dict[str, LayerFeatures], comparisons, *, k: int = 10, n_permutations: int = 200,
                  alpha: float = 0.05, n_boot: int = 200, seed: int = 0, device=None) -> list[PairResult]:
    """Layer-wise mutual k-NN, shuffled control, calibration and peak interval for each ``(x, y)`` pair.

    Parameters
    ----------
    features : dict of str to LayerFeatures
        Features of every model named in ``comparisons``, all on the same pairs.
    comparisons : sequence of (str, str)
    k, n_permutations, alpha, n_boot, seed, device
        As in :func:`prh_lib.analysis.core.score_pair`.

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


def score_workers(device: str = "cpu", workers: int | None = None) -> int:
    """Threads that score draws side by side: ``workers`` if given, else 1 off the CPU (one GPU's work is
    queued in order anyway, and each thread would hold its draw's features on the device) and the cores this kernel may
    use (:func:`prh_lib.parallel.available_cores`, a ``prh-run`` lane's share), at least two where there are two.

    Raises
    ------
    ValueError
        If ``workers`` is not a positive integer.
    """
    if workers is not None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive integer or None; got {workers!r}")
        return workers
    if str(device) != "cpu":
        return 1
    return max(min(2, os.cpu_count() or 1), available_cores())


#: ``quantity`` values this chapter writes to the results table
QUANTITIES = {
    "layer_pair": "mutual k-NN at one layer pair (every pair of the heatmap)",
    "peak": "the maximum over layer pairs; calibrated/tau/p from the selection-aware null",
    "final": "the final-layer pair; calibrated/p against its own null",
    "control:shuffled-max": "maximum over layer pairs with captions paired to the wrong images",
    "control:shuffled-mean": "mean over layer pairs of that control",
}


def regime_of(x_modality: str, y_modality: str) -> str:
    """``"cross-modal"``, ``"vision-vision"`` or ``"language-language"`` from the two models' modalities."""
    if x_modality == y_modality:
        return f"{x_modality}-{x_modality}"
    return "cross-modal"


def pair_rows(result: PairResult, *, x_modality: str = "", y_modality: str = "") -> list[dict]:
    """The results-table rows of one scored model pair (:data:`QUANTITIES`).

    Parameters
    ----------
    result : PairResult
        From :func:`compare_pairs`; ``calibration`` and ``peak_ci`` may be None (skipped).
    x_modality, y_modality : str
        ``"vision"`` or ``"language"``; stored as ``regime`` (an extra column).

    Returns
    -------
    list of dict
        ``n_x * n_y`` rows ``"layer_pair"``, then ``"peak"``, ``"final"`` and the shuffled controls. Columns: model_x/y,
        layer_x/y, depth_x/y, score, calibrated, tau, p, quantity, regime (and ci_low/ci_high on the peak row).
    """
    m = result.matrix
    dx, dy = layer_depths(len(m.x_labels)), layer_depths(len(m.y_labels))
    base = {"model_x": m.x_name, "model_y": m.y_name, "regime": regime_of(x_modality, y_modality)}
    rows = [base | {"layer_x": m.x_labels[i], "layer_y": m.y_labels[j], "depth_x": float(dx[i]),
                    "depth_y": float(dy[j]), "score": float(m.scores[i, j]), "quantity": "layer_pair"}
            for i in range(len(m.x_labels)) for j in range(len(m.y_labels))]
    i, j, best = m.peak
    cal = result.calibration
    peak = base | {"layer_x": m.x_labels[i], "layer_y": m.y_labels[j], "depth_x": float(dx[i]),
                   "depth_y": float(dy[j]), "score": best, "quantity": "peak"}
    final = base | {"layer_x": m.x_labels[-1], "layer_y": m.y_labels[-1], "depth_x": 1.0, "depth_y": 1.0,
                    "score": m.final, "quantity": "final"}
    if cal is not None:
        peak |= {"calibrated": float(cal.calibrated_max), "tau": float(cal.threshold_max), "p": float(cal.p_max)}
        final |= {"calibrated": float(cal.calibrated[-1, -1]), "tau": float(cal.threshold[-1, -1]),
                  "p": float(cal.p_value[-1, -1])}
    if result.peak_ci is not None:
        peak |= {"ci_low": float(result.peak_ci.low), "ci_high": float(result.peak_ci.high)}
    rows += [peak, final]
    if result.control is not None:
        rows.append(base | {"score": float(np.nanmax(result.control.scores)), "quantity": "control:shuffled-max"})
        rows.append(base | {"score": float(np.nanmean(result.control.scores)), "quantity": "control:shuffled-mean"})
    return rows


def run_study(draws, comparisons, *, chapter: str, params: dict, k: int = 10, n_permutations: int = 200,
              alpha: float = 0.05, n_boot: int = 0, clip_q: float | None = 0.95, clip: str | None = "stack",
              device: str = "cpu", dtype: str = "float32", batch_size: int = 32, write: bool = True,
              num_threads: int | None = None, workers: int | None = None, root=None) -> dict:
    """Score every comparison on every draw (:func:`compare_pairs`) and write the rows to the results table.

    Parameters
    ----------
    draws, comparisons, chapter, params, dtype, batch_size, write, num_threads, root
        As in :func:`prh_lib.analysis.study.run_draws`.
    k, n_permutations, alpha, n_boot
        As in :func:`compare_pairs` (``n_boot`` = 0 skips the per-draw bootstrap: the spread over draws replaces it).
    clip_q, clip
        Outlier clipping (:func:`prh_lib.analysis.clip_features`); stored as ``preprocessing``.
    device : str
        Feature extraction, and scoring unless it is ``"cpu"``.
    workers : int, optional
        As in :func:`~prh_lib.analysis.study.run_draws` (a rerun serves a failed run's finished scores from the
        score cache); None: :func:`score_workers`.

    Returns
    -------
    dict
        ``(dataset, draw) -> list of PairResult``, in draw order.
    """
    def score(d, feats):  # one draw: every comparison scored
        res = compare_pairs(feats, comparisons, k=k, n_permutations=n_permutations, alpha=alpha, n_boot=n_boot,
                            seed=d.seed, device=None if device == "cpu" else device)
        return res, [row for (x, y), r in zip(comparisons, res) for row in pair_rows(
            r, x_modality=feats[x].meta.get("modality", ""), y_modality=feats[y].meta.get("modality", ""))]

    return run_draws(draws, comparisons, score, chapter=chapter, params=params, clip_q=clip_q, clip=clip,
                     device=device, dtype=dtype, batch_size=batch_size, workers=score_workers(device, workers),
                     num_threads=num_threads, write=write, root=root, k=k, metric="mutual_knn",
                     preprocessing=preprocessing_label(clip_q, clip))


def clip_variants(draws, comparisons, *, chapter: str, params: dict, k: int = 10, clip_q: float | None = 0.95,
                  variants: Sequence = ("layer", None), device: str = "cpu", dtype: str = "float32",
                  batch_size: int = 32, num_threads: int | None = None, workers: int | None = None,
                  root=None) -> None:
    """Peak and final scores of ``comparisons`` under other clipping choices, written as rows (no permutations).

    For each draw and each ``clip`` in ``variants`` (``"stack"``, ``"layer"`` or None), the layer-wise matrix is
    recomputed and its ``"peak"`` and ``"final"`` rows written with that ``preprocessing`` label, so
    :func:`clip_effect_table` can compare them with the main run's. ``workers``: draws scored side by side, as
    in :func:`run_study`, each draw's features read once and clipped for every variant.
    """
    score_device, variants = None if device == "cpu" else device, list(variants)

    def score(d, raw):  # one draw under every clipping choice: the peak and final rows of every comparison
        rows = []
        for clip in variants:
            feats = {m: clip_features(f, q=clip_q, clip=clip) for m, f in raw.items()}
            for x, y in comparisons:
                r = PairResult(f"{x} × {y}", layerwise_alignment(feats[x], feats[y], metric="mutual_knn", k=k,
                                                                  device=score_device), None, None, None)
                rows += [row | {"preprocessing": preprocessing_label(clip_q, clip)} for row in pair_rows(
                    r, x_modality=feats[x].meta.get("modality", ""), y_modality=feats[y].meta.get("modality", ""))
                    if row["quantity"] in ("peak", "final")]
        return None, rows

    run_draws(draws, comparisons, score, chapter=chapter, params=params, clip=None, device=device, dtype=dtype,
              batch_size=batch_size, workers=score_workers(device, workers), num_threads=num_threads, root=root,
              k=k, metric="mutual_knn")


def modal(values) -> tuple[list, int]:
    """The most frequent of ``values`` and how often each occurs: every value that ties for most frequent, in
    order of first appearance, so a tie is reported as a tie and never resolved by order.

    >>> modal(["layer.2", "layer.2", "layer.1", "layer.1", "layer.1"])
    (['layer.1'], 3)
    >>> modal(["a", "b", "b", "a", "c"])
    (['a', 'b'], 2)
    """
    counts = Counter(values)
    if not counts:
        return [], 0
    top = max(counts.values())
    return [v for v, c in counts.items() if c == top], int(top)


def aggregate_peaks(df: pd.DataFrame, *, preprocessing: str | None = None) -> pd.DataFrame:
    """Peak, final and control scores of every (dataset, model pair), as mean ± std over draws.

    Parameters
    ----------
    df : DataFrame
        Rows of this chapter from :func:`prh_lib.results.load` (one params hash).
    preprocessing : str, optional
        Keep only rows with this ``preprocessing`` (default: the label of the rows with a ``"layer_pair"``
        quantity, i.e. the main run).

    Returns
    -------
    DataFrame
        One row per (dataset, model_x, model_y), in order of first appearance, with columns ``regime``, ``n``, ``k``,
        ``chance`` (k/(n-1)), ``n_draws``, ``single_draw``; ``peak_mean``, ``peak_std``, ``final_mean``, ``final_std``,
        ``gap_mean`` (peak - final), ``shuffled_max_mean``, ``calibrated_mean``, ``calibrated_std``, ``p_largest`` (the
        largest p over draws), ``depth_x_mean``, ``depth_y_mean``, ``peak_layers`` (the most frequent peak layer pair;
        when several tie, all of them joined by ``" and "``), ``peak_layers_draws`` (in how many draws, each),
        ``peak_layers_ties`` (how many tie), ``peak_layer_x``, ``peak_layer_x_draws``, ``peak_layer_x_ties`` and the
        same for ``y`` (each model's most frequent peak layer on its own, ties named the same way: :func:`modal`),
        ``final_is_peak`` (draws whose peak is the final-layer pair).

    Raises
    ------
    ValueError
        If ``df`` holds no peak rows for that preprocessing.
    """
    from prh_lib import results as results_table

    df = expand_extra_columns(df)
    if preprocessing is None:
        main = df.loc[df["quantity"] == "layer_pair", "preprocessing"].unique()
        preprocessing = main[0] if len(main) else None
    sub = df[df["preprocessing"] == preprocessing] if preprocessing is not None else df
    keys = ["dataset", "model_x", "model_y"]
    peaks = sub[sub["quantity"] == "peak"]
    if peaks.empty:
        raise ValueError(f"no peak rows with preprocessing {preprocessing!r}")
    order = list(dict.fromkeys(map(tuple, peaks[keys].to_numpy())))

    def agg(quantity, values=("score",)):
        part = sub[sub["quantity"] == quantity]
        if part.empty:
            return None
        return results_table.aggregate(part, by=keys, values=list(values)).set_index(keys)

    a_peak = agg("peak", ("score", "calibrated", "depth_x", "depth_y"))
    a_final = agg("final", ("score", "calibrated"))
    a_ctrl = agg("control:shuffled-max")
    by_key = {key: g for key, g in peaks.groupby(keys, sort=False)}  # one split, not a look-up per pair
    rows = []
    for key in order:
        g = by_key[key]
        pairs, n_pairs = modal(f"{a} × {b}" for a, b in zip(g["layer_x"], g["layer_y"]))
        lx, n_lx = modal(g["layer_x"])
        ly, n_ly = modal(g["layer_y"])
        n, kk = int(g["n"].iloc[0]), int(g["k"].iloc[0])
        fp = a_final.loc[key] if a_final is not None else None
        pk = a_peak.loc[key]
        rows.append({
            "dataset": key[0], "model_x": key[1], "model_y": key[2], "pair": f"{key[1]} × {key[2]}",
            "regime": g["regime"].iloc[0], "n": n, "k": kk, "chance": kk / (n - 1),
            "n_draws": int(pk["n_draws"]), "single_draw": bool(pk["single_draw"]),
            "peak_mean": float(pk["score_mean"]), "peak_std": float(pk["score_std"]),
            "final_mean": float(fp["score_mean"]) if fp is not None else math.nan,
            "final_std": float(fp["score_std"]) if fp is not None else math.nan,
            "shuffled_max_mean": float(a_ctrl.loc[key, "score_mean"]) if a_ctrl is not None else math.nan,
            "calibrated_mean": float(pk["calibrated_mean"]), "calibrated_std": float(pk["calibrated_std"]),
            "p_largest": float(g["p"].max()) if g["p"].notna().any() else math.nan,
            "depth_x_mean": float(pk["depth_x_mean"]), "depth_y_mean": float(pk["depth_y_mean"]),
            "peak_layers": " and ".join(pairs), "peak_layers_draws": n_pairs, "peak_layers_ties": len(pairs),
            "peak_layer_x": " and ".join(lx), "peak_layer_x_draws": n_lx, "peak_layer_x_ties": len(lx),
            "peak_layer_y": " and ".join(ly), "peak_layer_y_draws": n_ly, "peak_layer_y_ties": len(ly),
            "final_is_peak": int(((g["depth_x"] == 1.0) & (g["depth_y"] == 1.0)).sum()),
        })
    out = pd.DataFrame(rows)
    out["gap_mean"] = out["peak_mean"] - out["final_mean"]
    return out
