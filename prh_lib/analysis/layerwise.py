"""Section 3.1: where does alignment emerge? Every layer pair of each model pair, against chance and controls.

:func:`compare_pairs` scores each comparison with :func:`~prh_lib.analysis.core.score_pair`.
Over a study's datasets and draws, :func:`run_study` scores every draw and writes every score to the
results table (:func:`pair_rows`, quantities :data:`QUANTITIES`), :func:`clip_variants` adds the peaks under
other clipping choices; from the table, :func:`aggregate_peaks` gives mean ± std over draws,
:func:`headline_table`, :func:`peak_locations` and :func:`clip_effect_table` the page's tables,
:func:`findings` the rows of "The paper and this build" and :func:`describe_findings` the prose, generated
from the numbers. :func:`summary_table` / :func:`describe_peaks` remain for one draw.

References
----------
Herbst et al., Section 3.1 and Figure 1; Huh et al. (2024), App. A (mutual k-NN); Groeger et al. (2026),
Sec. 5 (calibration).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

import numpy as np
import pandas as pd

from ..extract import torch_threads
from ..features import LayerFeatures
from .core import (AlignmentMatrix, PairResult, check_comparisons, layerwise_alignment, prepare_features,
                   preprocessing_label, score_pair)

__all__ = ["compare_pairs", "peak_table", "summary_table", "describe_peaks", "to_record", "regime_of",
           "pair_rows", "run_study", "clip_variants", "aggregate_peaks", "headline_table", "peak_locations",
           "clip_effect_table", "describe_clip_effect", "findings", "describe_findings", "QUANTITIES", "draws_table",
           "other_peaks", "in_paper_setting"]


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


def _depths(n: int) -> np.ndarray:
    return np.arange(n) / max(n - 1, 1)


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
        ``n_x * n_y`` rows ``"layer_pair"``, then ``"peak"``, ``"final"`` and the shuffled controls. Columns:
        model_x/y, layer_x/y, depth_x/y, score, calibrated, tau, p, quantity, regime (and ci_low/ci_high on
        the peak row).
    """
    m = result.matrix
    dx, dy = _depths(len(m.x_labels)), _depths(len(m.y_labels))
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
              num_threads: int | None = None, root=None) -> dict:
    """Score every comparison on every draw (:func:`compare_pairs`) and write the rows to the results table.

    Parameters
    ----------
    draws : sequence of prh_lib.data.study.Draw
        From :func:`prh_lib.data.study.study_draws`.
    comparisons : sequence of (str, str)
    chapter, params : str, dict
        As in :func:`prh_lib.results.write` (``params`` from :func:`prh_lib.report.page_parameters`).
    k, n_permutations, alpha, n_boot
        As in :func:`compare_pairs` (``n_boot`` = 0 skips the per-draw bootstrap: the spread over draws
        replaces it).
    clip_q, clip
        Outlier clipping (:func:`prh_lib.analysis.clip_features`); stored as ``preprocessing``.
    device, dtype, batch_size
        Feature extraction (:func:`prepare_features`); scoring runs on ``device`` unless it is ``"cpu"``.
    write : bool
        Write the rows (:func:`prh_lib.results.write`); False only for tests.
    num_threads : int, optional
        Torch intra-op threads while scoring (:func:`prh_lib.extract.torch_threads`; on a busy shared CPU one
        thread is many times faster than two); None: unchanged.
    root : path, optional
        Results table folder (tests).

    Returns
    -------
    dict
        ``(dataset, draw) -> list of PairResult``, in draw order.
    """
    from .. import results as results_table

    out = {}
    label = preprocessing_label(clip_q, clip)
    score_device = None if device == "cpu" else device
    for d in draws:
        feats = prepare_features(comparisons, d.pairs, clip_q=clip_q, clip=clip, device=device, dtype=dtype,
                                 batch_size=batch_size)
        with torch_threads(num_threads):
            res = compare_pairs(feats, comparisons, k=k, n_permutations=n_permutations, alpha=alpha, n_boot=n_boot,
                                seed=d.seed, device=score_device)
        out[(d.dataset, d.draw)] = res
        if write:
            rows = [row for (x, y), r in zip(comparisons, res)
                    for row in pair_rows(r, x_modality=feats[x].meta.get("modality", ""),
                                         y_modality=feats[y].meta.get("modality", ""))]
            results_table.write(rows, chapter=chapter, params=params, dataset=d.dataset, draw=d.draw, seed=d.seed,
                                n=len(d.pairs), k=k, metric="mutual_knn", preprocessing=label, root=root)
    return out


def clip_variants(draws, comparisons, *, chapter: str, params: dict, k: int = 10, clip_q: float | None = 0.95,
                  variants: Sequence = ("layer", None), device: str = "cpu", dtype: str = "float32",
                  batch_size: int = 32, num_threads: int | None = None, root=None) -> None:
    """Peak and final scores of ``comparisons`` under other clipping choices, written as rows (no permutations).

    For each draw and each ``clip`` in ``variants`` (``"stack"``, ``"layer"`` or None), the layer-wise matrix is
    recomputed and its ``"peak"`` and ``"final"`` rows written with that ``preprocessing`` label, so
    :func:`clip_effect_table` can compare them with the main run's.
    """
    from .. import results as results_table

    score_device = None if device == "cpu" else device
    for d in draws:
        rows_by_label = {}
        for clip in variants:
            feats = prepare_features(comparisons, d.pairs, clip_q=clip_q, clip=clip, device=device, dtype=dtype,
                                     batch_size=batch_size)
            for x, y in comparisons:
                with torch_threads(num_threads):
                    m = layerwise_alignment(feats[x], feats[y], metric="mutual_knn", k=k, device=score_device)
                r = PairResult(f"{x} × {y}", m, None, None, None)
                rows = [row for row in pair_rows(r, x_modality=feats[x].meta.get("modality", ""),
                                                 y_modality=feats[y].meta.get("modality", ""))
                        if row["quantity"] in ("peak", "final")]
                rows_by_label.setdefault(preprocessing_label(clip_q, clip), []).extend(rows)
        for label, rows in rows_by_label.items():
            results_table.write(rows, chapter=chapter, params=params, dataset=d.dataset, draw=d.draw, seed=d.seed,
                                n=len(d.pairs), k=k, metric="mutual_knn", preprocessing=label, root=root)


def _expand(df: pd.DataFrame) -> pd.DataFrame:
    import json

    if "regime" in df.columns or df.empty:
        return df
    extra = pd.DataFrame([json.loads(e) for e in df["extra"]], index=df.index)
    return pd.concat([df, extra[[c for c in extra.columns if c not in df.columns]]], axis=1)


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
        One row per (dataset, model_x, model_y), in order of first appearance, with columns ``regime``, ``n``,
        ``k``, ``chance`` (k/(n-1)), ``n_draws``, ``single_draw``; ``peak_mean``, ``peak_std``, ``final_mean``,
        ``final_std``, ``gap_mean`` (peak - final), ``shuffled_max_mean``, ``calibrated_mean``,
        ``calibrated_std``, ``p_largest`` (the largest p over draws), ``depth_x_mean``, ``depth_y_mean``,
        ``peak_layers`` (the most frequent peak layer pair), ``peak_layers_draws`` (in how many draws),
        ``final_is_peak`` (draws whose peak is the final-layer pair).

    Raises
    ------
    ValueError
        If ``df`` holds no peak rows for that preprocessing.
    """
    from .. import results as results_table

    df = _expand(df)
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
    rows = []
    for key in order:
        g = peaks.set_index(keys).loc[[key]]
        loc = Counter(f"{a} × {b}" for a, b in zip(g["layer_x"], g["layer_y"])).most_common(1)[0]
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
            "peak_layers": loc[0], "peak_layers_draws": int(loc[1]),
            "final_is_peak": int(((g["depth_x"] == 1.0) & (g["depth_y"] == 1.0)).sum()),
        })
    out = pd.DataFrame(rows)
    out["gap_mean"] = out["peak_mean"] - out["final_mean"]
    return out


def _ms(mean, std, n_draws, digits=3):
    if n_draws < 2 or not np.isfinite(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def headline_table(agg: pd.DataFrame, *, n_permutations: int | None = None) -> pd.DataFrame:
    """The page's summary table: one row per (dataset, pair), values as mean ± std over draws.

    Columns: draws, peak, peak layers (most frequent, in how many draws), final layers, chance
    k/(N-1), shuffled-pairs control (max over layer pairs), calibrated (max), p (the largest over draws,
    :func:`prh_lib.report.format_p`).
    """
    from ..report import format_p

    rows = []
    for _, r in agg.iterrows():
        rows.append({
            "dataset": r["dataset"], "pair": r["pair"],
            "draws": f"{r['n_draws']}" + (" (not repeatable)" if r["single_draw"] else ""),
            "peak": _ms(r["peak_mean"], r["peak_std"], r["n_draws"]),
            "peak layers": f"{r['peak_layers']} ({r['peak_layers_draws']}/{r['n_draws']})",
            "final": _ms(r["final_mean"], r["final_std"], r["n_draws"]),
            "chance": f"{r['chance']:.3f}",
            "shuffled (max)": f"{r['shuffled_max_mean']:.3f}",
            "calibrated": _ms(r["calibrated_mean"], r["calibrated_std"], r["n_draws"]),
            "p (largest)": format_p(r["p_largest"], n_permutations).replace("p ", "", 1).replace("= ", ""),
        })
    return pd.DataFrame(rows).set_index(["dataset", "pair"])


def peak_locations(df: pd.DataFrame, *, dataset: str, preprocessing: str | None = None) -> pd.DataFrame:
    """Peak layer pair and score of every draw of ``dataset``: rows model pairs, columns draws."""
    df = _expand(df)
    if preprocessing is None:
        preprocessing = df.loc[df["quantity"] == "layer_pair", "preprocessing"].iloc[0]
    p = df[(df["quantity"] == "peak") & (df["dataset"] == dataset) & (df["preprocessing"] == preprocessing)]
    cells = {}
    for _, r in p.iterrows():
        cells.setdefault(f"{r['model_x']} × {r['model_y']}", {})[f"draw {int(r['draw'])}"] = (
            f"{r['layer_x']} × {r['layer_y']}: {r['score']:.3f}")
    return pd.DataFrame.from_dict(cells, orient="index")


def _clip_name(label: str) -> str:
    return label.split("(")[1].split(",")[0] if label.startswith("clip(") else label


def clip_effect_table(df: pd.DataFrame, *, dataset: str) -> pd.DataFrame:
    """Peak scores (mean ± std over draws) and peak layers of ``dataset`` under each clipping choice.

    Returns
    -------
    DataFrame
        Rows model pairs; a column per clipping choice (``"stack"``, ``"layer"``, ``"none"``: the peak as
        mean ± std), ``"<choice> − <main>"`` (difference of the means to the main run's) and ``"peak layers"``
        (the most frequent peak layer pair under each choice, in the same order, joined by ``" | "``).
    """
    df = _expand(df)
    df = df[df["dataset"] == dataset]
    main = df.loc[df["quantity"] == "layer_pair", "preprocessing"].iloc[0]
    labels = [main] + [p for p in dict.fromkeys(df.loc[df["quantity"] == "peak", "preprocessing"]) if p != main]
    aggs = {lab: aggregate_peaks(df, preprocessing=lab).set_index("pair") for lab in labels}
    pairs = [p for p in aggs[main].index if all(p in a.index for a in aggs.values())]
    table = pd.DataFrame(index=pd.Index(pairs, name="pair"))
    for lab, a in aggs.items():
        a = a.loc[pairs]
        table[_clip_name(lab) + (" (reference)" if lab == main else "")] = [
            _ms(m, s, n) for m, s, n in zip(a["peak_mean"], a["peak_std"], a["n_draws"])]
    for lab, a in list(aggs.items())[1:]:
        table[f"{_clip_name(lab)} − {_clip_name(main)}"] = [
            f"{v:+.3f}" for v in (a.loc[pairs, "peak_mean"] - aggs[main].loc[pairs, "peak_mean"])]
    table[" | ".join(_clip_name(lab) for lab in labels) + ": peak layers"] = [
        " | ".join(aggs[lab].loc[p, "peak_layers"] for lab in labels) for p in pairs]
    return table


def _best(agg: pd.DataFrame, regime: str):
    sub = agg[agg["regime"] == regime]
    return None if sub.empty else sub.loc[sub["peak_mean"].idxmax()]


def findings(agg: pd.DataFrame, *, dataset: str, alpha: float = 0.05, paper_setting: bool = False) -> list[dict]:
    """The rows of "The paper and this build" for the claims ``3.1/*``, computed from :func:`aggregate_peaks`.

    Criteria (each ``holds`` is computed from the numbers of ``dataset``):

    - ``3.1/cross-modal-peak``: every cross-modal pair's mean peak exceeds its shuffled-pairs control and
      chance, its largest p over draws is ≤ ``alpha``, and the best cross-modal peak is below 0.5 ("small");
    - ``3.1/later-layers``: every cross-modal pair peaks at mean relative depth ≥ 0.5 on both sides;
    - ``3.1/final-not-max``: no draw of any cross-modal pair has its maximum at the final-layer pair;
    - ``3.1/vision-vision``: the best vision-vision peak exceeds every cross-modal peak and sits at depth
      ≥ 0.5 on both sides;
    - ``3.1/language-language``: the best language-language peak exceeds every cross-modal peak and sits at
      mean depth ≤ 0.6 on both sides (early-middle layers).

    ``paper_setting``: whether the run is in the paper's setting (its models, N = 1024), so values compare.
    """
    from .. import claims

    a = agg[agg["dataset"] == dataset]
    cross = a[a["regime"] == "cross-modal"]
    rows = []

    def fmt(r):
        return f"{_ms(r['peak_mean'], r['peak_std'], r['n_draws'])} ({r['pair']}, {r['peak_layers']})"

    if len(cross):
        best = cross.loc[cross["peak_mean"].idxmax()]
        above = bool(((cross["peak_mean"] > cross["shuffled_max_mean"]) & (cross["peak_mean"] > cross["chance"])
                      & (cross["p_largest"] <= alpha)).all())
        rows.append(claims.finding("3.1/cross-modal-peak", this_build=fmt(best), holds=above and best["peak_mean"] < 0.5,
                                   value=best["peak_mean"], std=best["peak_std"], comparable=paper_setting))
        deep = (cross["depth_x_mean"] >= 0.5) & (cross["depth_y_mean"] >= 0.5)
        rows.append(claims.finding(
            "3.1/later-layers", holds=bool(deep.all()),
            this_build=f"{int(deep.sum())} of {len(cross)} pairs at depth ≥ 0.5 on both sides; " + "; ".join(
                f"{r['pair']} {r['depth_x_mean']:.2f} × {r['depth_y_mean']:.2f}" for _, r in cross.iterrows())))
        n_final = int(cross["final_is_peak"].sum())
        rows.append(claims.finding(
            "3.1/final-not-max", holds=n_final == 0,
            this_build=f"final pair is the maximum in {n_final} of {int(cross['n_draws'].sum())} pair-draws; "
                       f"mean peak − final {cross['gap_mean'].min():.3f} to {cross['gap_mean'].max():.3f}"))
    top_cross = cross["peak_mean"].max() if len(cross) else -math.inf
    for cid, regime, shallow in (("3.1/vision-vision", "vision-vision", False),
                                 ("3.1/language-language", "language-language", True)):
        r = _best(a, regime)
        if r is None:
            continue
        where = (r["depth_x_mean"] <= 0.6 and r["depth_y_mean"] <= 0.6) if shallow else (
            r["depth_x_mean"] >= 0.5 and r["depth_y_mean"] >= 0.5)
        rows.append(claims.finding(
            cid, this_build=f"{fmt(r)}; depth {r['depth_x_mean']:.2f} × {r['depth_y_mean']:.2f}",
            holds=bool(r["peak_mean"] > top_cross and where), value=r["peak_mean"], std=r["peak_std"],
            comparable=paper_setting))
    return rows


def _layer_phrase(label: str, depth: float) -> str:
    if depth == 1.0:
        return f"its last layer ({label})"
    if depth == 0.0:
        return f"its input embedding ({label})"
    return f"{label} (depth {depth:.2f})"


def describe_findings(agg: pd.DataFrame, rows: list[dict], *, dataset: str, n_permutations: int | None = None) -> str:
    """Markdown generated from the numbers: where each pair peaks, and where this build agrees with the paper.

    Nothing here restates the paper: each sentence is computed from ``agg`` (:func:`aggregate_peaks`) and the
    verdicts of ``rows`` (:func:`findings`).
    """
    from ..report import format_p

    a = agg[agg["dataset"] == dataset]
    lines = [f"On **{dataset}** (N = {int(a['n'].iloc[0])}, k = {int(a['k'].iloc[0])}, chance "
             f"{a['chance'].iloc[0]:.3f}; means over {int(a['n_draws'].max())} draws):", ""]
    for _, r in a.iterrows():
        lx, ly = r["peak_layers"].split(" × ")
        dxm, dym = r["depth_x_mean"], r["depth_y_mean"]
        consistent = r["peak_layers_draws"] == r["n_draws"]
        lines.append(
            f"- **{r['pair']}** ({r['regime']}): peak {_ms(r['peak_mean'], r['peak_std'], r['n_draws'])}, "
            f"{r['peak_mean'] / r['chance']:.1f}× chance, calibrated {r['calibrated_mean']:.3f}, "
            f"{format_p(r['p_largest'], n_permutations)} (largest over draws). {r['model_y']} peaks at "
            f"{_layer_phrase(ly, dym) if consistent else f'{ly} in {r.peak_layers_draws} of {r.n_draws} draws (mean depth {dym:.2f})'}"
            f" with {r['model_x']} at {_layer_phrase(lx, dxm) if consistent else f'{lx} (mean depth {dxm:.2f})'}; "
            f"the final-layer pair scores {r['final_mean']:.3f}."
            + (" Its score is identical in every draw: what varies between the draws (here the captions) does not "
               "enter a pair without a language model." if r["n_draws"] > 1 and r["peak_std"] == 0
               and r["regime"] == "vision-vision" else ""))
    lines.append("")
    agree = [r["id"] for r in rows if r["verdict"].startswith("reproduces")]
    differ = [r["id"] for r in rows if r["verdict"] == "differs"]
    if agree:
        lines.append(f"This build agrees with the paper in kind on {', '.join(agree)}.")
    if differ:
        lines.append(f"It does **not** on {', '.join(differ)}: see the rows above for the numbers.")
    comparable = any(r["verdict"] == "reproduces" for r in rows)
    if not comparable:
        lines.append("None of the values is comparable with the paper's: the models, the data (COCO, not WIT) and "
                     "N differ, so only the qualitative pattern is tested.")
    return "\n".join(lines)


def draws_table(draws) -> pd.DataFrame:
    """One row per dataset of a study: its draws, N, whether they repeat, and what varies between them."""
    rows = {}
    for d in draws:
        r = rows.setdefault(d.dataset, {"draws": 0, "N": len(d.pairs), "repeatable": d.repeatable,
                                        "what varies": d.what_varies, "example caption": d.pairs.texts[0]})
        r["draws"] += 1
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("dataset")


def other_peaks(scored: dict, *, dataset: str, draw: int) -> dict:
    """Pair label -> (row, column) of the peak in every other draw of ``dataset`` (:func:`run_study` output)."""
    out = {}
    for (ds, dr), res in scored.items():
        if ds != dataset or dr == draw:
            continue
        for r in res:
            out.setdefault(r.label, []).append(r.matrix.peak[:2])
    return out


def in_paper_setting(agg: pd.DataFrame, paper_models: Sequence[str]) -> bool:
    """True when every score is on N = 1024 pairs between the paper's models (values then compare)."""
    models = set(agg["model_x"]) | set(agg["model_y"])
    return bool((agg["n"] == 1024).all() and models <= set(paper_models))


def describe_clip_effect(df: pd.DataFrame, *, dataset: str) -> str:
    """Markdown: how much the clipping choice moves each pair's peak (means over draws) and its location."""
    df = _expand(df)
    df = df[df["dataset"] == dataset]
    main = df.loc[df["quantity"] == "layer_pair", "preprocessing"].iloc[0]
    labels = [p for p in dict.fromkeys(df.loc[df["quantity"] == "peak", "preprocessing"]) if p != main]
    base = aggregate_peaks(df, preprocessing=main).set_index("pair")
    lines = []
    for lab in labels:
        other = aggregate_peaks(df, preprocessing=lab).set_index("pair").reindex(base.index)
        diff = other["peak_mean"] - base["peak_mean"]
        moved = [p for p in base.index if other.loc[p, "peak_layers"] != base.loc[p, "peak_layers"]]
        worst = diff.abs().idxmax()
        lines.append(
            f"- `{lab}` instead of `{main}`: peaks change by {diff.min():+.3f} to {diff.max():+.3f} "
            f"(largest for {worst}: {base.loc[worst, 'peak_mean']:.3f} → {other.loc[worst, 'peak_mean']:.3f}); "
            + (f"the most frequent peak layer pair moves for {', '.join(moved)}." if moved else
               "no pair's most frequent peak layer pair moves."))
    return "\n".join(lines)


def _records(obj):
    return obj.to_dict(orient="records") if isinstance(obj, pd.DataFrame) and isinstance(obj.index, pd.RangeIndex) else obj


def to_record(results: list[PairResult], table: pd.DataFrame, *, n_pairs: int, k: int, chance: float,
              clip_q: float | None, **more) -> dict:
    """What the Section 3.1 page records for the book and the tests (:func:`prh_lib.report.record`).

    ``results`` are the heatmap's draw; ``table`` the aggregated numbers (:func:`aggregate_peaks`); ``more``
    further JSON-ready entries (claims rows, the clipping comparison, ...).
    """
    return {
        "n_pairs": n_pairs, "k": k, "chance": chance, "clip_q": clip_q, "summary": _records(table),
        **{key: _records(v) for key, v in more.items()},
        "matrices": {r.label: {"scores": r.matrix.scores, "x_labels": r.matrix.x_labels,
                               "y_labels": r.matrix.y_labels} for r in results},
    }
