"""Image-level intervals of the capability correlations (Section 3.2): how much the images, not the models, move r.

A correlation across language models has two sources of uncertainty: which models (three or four here, so the
exact permutation p over models cannot reach 0.05) and which images the alignment was measured on. The draws of
this chapter are seeded subsets of one image set, and their spread mixes both with caption choice. This module
measures the image part directly:

1. each language model's alignment with a vision model is its *held-out* peak on all images of the headline
   dataset (:func:`prh_lib.stats.selection.crossfit_peak`: the layer pair chosen on one half of the images,
   scored on the other), and its replicates come from the half-samples of the images there. Every model
   is scored on the *same* half-samples (same ``n``, ``n_splits``, ``n_boot``, ``seed``), so replicate
   ``b`` is one image subset seen by every model;
2. replicate ``b``'s correlation is the correlation, across the models, of their replicate-``b`` alignments
   with their (fixed) capability; the 95 % interval is the percentile interval of those correlations. A
   correlation is bounded in [-1, 1]: the interval is the centred one of the held-out peaks (the replicates'
   spread placed on the estimate; a percentile interval of half-sample correlations can exclude the estimate),
   clipped to [-1, 1] ([-2, 2] for a difference of two correlations).

The verdict of ``3.2/capability-trend`` reads this interval (:func:`prh_lib.pages.sec3_2_capability.findings`):
the trend holds over images only when the interval of r (signed so that > 0 means "alignment grows with
capability") lies above 0.

References
----------
Herbst et al. (arXiv 2611.12869), Sec. 3.2; Efron & Tibshirani (1993), Sec. 8.4 and 13.3.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from prh_lib.stats.intervals import bootstrap_interval
from prh_lib.analysis.core import clip_features

COLUMNS = ["dataset", "vision", "capability", "method", "r", "ci low", "ci high", "r draws mean", "r draws std",
           "n draws", "n", "images", "n_boot", "direction", "r (capability)", "low (capability)", "high (capability)",
           "r final", "final ci low", "final ci high", "peak − final (capability)", "peak − final low",
           "peak − final high"]


def replicate_correlations(alignment: np.ndarray, capability: np.ndarray, *, method: str = "pearson") -> np.ndarray:
    """Correlation of each column of ``alignment`` with ``capability`` (vectorised over replicates).

    Parameters
    ----------
    alignment : ndarray of shape (n_models, n_boot)
    capability : ndarray of shape (n_models,)
    method : {"pearson", "spearman"}

    Returns
    -------
    ndarray of shape (n_boot,)
        NaN for a replicate with a non-finite value or a constant column.

    Raises
    ------
    ValueError
        For an unknown method or mismatched shapes.
    """
    A = np.asarray(alignment, dtype=np.float64)
    c = np.asarray(capability, dtype=np.float64)
    if A.ndim != 2 or c.shape != (A.shape[0],):
        raise ValueError(f"alignment must be (n_models, n_boot) and capability (n_models,); got {A.shape}, {c.shape}")
    if method not in ("pearson", "spearman"):
        raise ValueError(f"method must be 'pearson' or 'spearman'; got {method!r}")
    if method == "spearman":
        A = np.apply_along_axis(rankdata, 0, A)
        c = rankdata(c)
    Ac = A - A.mean(0)
    cc = c - c.mean()
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (Ac * cc[:, None]).sum(0) / np.sqrt((Ac ** 2).sum(0) * (cc ** 2).sum())
    r[~np.isfinite(A).all(0)] = np.nan
    return r


def draw_spread(table: pd.DataFrame, capability: Mapping[str, float], *, dataset: str, vision: str,
                method: str = "pearson") -> tuple[float, float, int]:
    """Mean and std over draws of the per-draw correlation of the (in-sample) peak with capability.

    ``table``: the chapter's results rows (``quantity == "peak"``, ``family == "independent"``). Returns
    ``(mean, std, n_draws)``; NaN where fewer than 3 models or 2 draws.
    """
    sel = table[(table["quantity"] == "peak") & (table["dataset"] == dataset) & (table["model_x"] == vision)]
    if "family" in sel:
        sel = sel[sel["family"] == "independent"]
    rs = []
    for _, g in sel.groupby("draw"):
        g = g[g["model_y"].isin(list(capability))]
        if len(g) < 3:
            continue
        a = g["score"].to_numpy(float)[:, None]
        rs.append(float(replicate_correlations(a, np.array([capability[m] for m in g["model_y"]]), method=method)[0]))
    rs = np.array([r for r in rs if np.isfinite(r)])
    return (float(rs.mean()) if len(rs) else np.nan, float(rs.std(ddof=1)) if len(rs) > 1 else np.nan, len(rs))


def image_correlations(sets, vision: dict, independent: Sequence, capability: Mapping[str, float], *, dataset: str,
                       direction: int = -1, k: int = 10, clip_q: float | None = 0.95, n_splits: int = 4,
                       n_boot: int = 50, seed: int = 0, table: pd.DataFrame | None = None,
                       capability_name: str = "bpb") -> pd.DataFrame:
    """Correlation of held-out alignment with capability across models, with a 95 % interval over images.

    Parameters
    ----------
    sets : StudySets
        :func:`prh_lib.pages.sec3_2_capability.study_sets`; the parent of ``dataset``'s first draw is scored.
    vision : dict of str to tuple of LayerFeatures
        :func:`prh_lib.pages.sec3_2_capability.vision_features` (one per parent).
    independent : sequence of LanguageModelResult
        The independently trained models (``features`` a tuple over ``sets.parents``).
    capability : mapping of str to float
        Model label -> capability value (e.g. bits per byte).
    dataset : str
    direction : {-1, +1}
        +1 when a higher capability value is more capable, -1 for bits per byte.
    k, clip_q, n_splits, n_boot, seed
        Mutual k-NN neighbours, clipping (one threshold per model's stack, as the chapter), and the
        cross-fitting and bootstrap of :func:`~prh_lib.stats.selection.crossfit_peak` (cached).
    table : DataFrame, optional
        The chapter's results rows, for the spread over draws beside the interval (:func:`draw_spread`).
    capability_name : str

    Returns
    -------
    DataFrame
        One row per (vision, method) with :data:`COLUMNS`: ``r`` of the held-out peaks on all images, ``ci low``,
        ``ci high`` (images), the draws' mean and std of r, ``n`` models, and the same signed by ``direction``
        (``r (capability)`` > 0: alignment grows with capability). ``r final`` and its interval: the same for the
        final-layer pair's scores (no selection) on the same image resamples; ``peak − final (capability)`` and its
        paired interval: the held-out peak's signed correlation minus the final layers', replicate by replicate
        (> 0: the peak predicts capability better, Sec. 3.2). Empty when fewer than 3 models.

    Raises
    ------
    ValueError
        If ``dataset`` has no draw in ``sets``.
    """
    from prh_lib.analysis.heldout import _crossfit_cached

    models = [r for r in independent if r.label in capability and np.isfinite(capability[r.label])]
    if len(models) < 3:
        return pd.DataFrame(columns=COLUMNS)
    pids = sets.parent_ids([dataset])
    if not pids:
        raise ValueError(f"no draw of dataset {dataset!r} in the study sets")
    pid = pids[0]
    c = np.array([capability[r.label] for r in models], dtype=np.float64)
    rows = []
    for v_name, feats in vision.items():
        X = clip_features(feats[pid], q=clip_q)
        fits = [_crossfit_cached([X], [clip_features(r.features[pid], q=clip_q)], k=k, n_splits=n_splits,
                                 n_boot=n_boot, seed=seed, label=f"{v_name} × {r.label}") for r in models]
        point = np.array([f.heldout for f in fits])[:, None]
        reps = np.stack([f.heldout_reps for f in fits])
        final_point = np.array([f.final for f in fits])[:, None]
        final_reps = np.stack([f.final_reps for f in fits])
        for method in ("pearson", "spearman"):
            r_hat = float(replicate_correlations(point, c, method=method)[0])
            r_reps = replicate_correlations(reps, c, method=method)
            lo, hi = bootstrap_interval(r_hat, r_reps, bounds=(-1.0, 1.0))
            f_hat = float(replicate_correlations(final_point, c, method=method)[0])
            f_reps = replicate_correlations(final_reps, c, method=method)
            f_lo, f_hi = bootstrap_interval(f_hat, f_reps, bounds=(-1.0, 1.0))
            # paired: replicate b's peak and final correlations come from the same half-samples of the images
            d_lo, d_hi = bootstrap_interval(direction * (r_hat - f_hat), direction * (r_reps - f_reps),
                                            bounds=(-2.0, 2.0))
            mean, std, nd = (draw_spread(table, capability, dataset=dataset, vision=v_name, method=method)
                             if table is not None else (np.nan, np.nan, 0))
            s_lo, s_hi = sorted((direction * lo, direction * hi))
            rows.append({"dataset": dataset, "vision": v_name, "capability": capability_name, "method": method,
                         "r": r_hat, "ci low": lo, "ci high": hi, "r draws mean": mean, "r draws std": std,
                         "n draws": nd, "n": len(models), "images": len(X.sample_ids), "n_boot": int(n_boot),
                         "direction": direction,
                         "r (capability)": direction * r_hat, "low (capability)": s_lo, "high (capability)": s_hi,
                         "r final": f_hat, "final ci low": f_lo, "final ci high": f_hi,
                         "peak − final (capability)": direction * (r_hat - f_hat), "peak − final low": d_lo,
                         "peak − final high": d_hi})
    return pd.DataFrame(rows, columns=COLUMNS)


def image_display(image_corr: pd.DataFrame) -> pd.DataFrame:
    """The page's table: r of the held-out peaks with its interval over images beside the spread over draws."""
    from prh_lib.formatting import format_interval

    if image_corr.empty:
        return pd.DataFrame()
    out = pd.DataFrame({
        "dataset": image_corr["dataset"], "vision": image_corr["vision"], "method": image_corr["method"],
        "r, held-out peaks [95 % CI over images]": [format_interval(r, lo, hi, 2) for r, lo, hi in
                                                    zip(image_corr["r"], image_corr["ci low"], image_corr["ci high"])],
        "r over draws (in-sample peaks), mean ± std": [
            "–" if not np.isfinite(m) else f"{m:.2f} ± {s:.2f} ({int(n)} draws)" if np.isfinite(s) else f"{m:.2f}"
            for m, s, n in zip(image_corr["r draws mean"], image_corr["r draws std"], image_corr["n draws"])],
        "models": image_corr["n"], "image half-samples": image_corr["n_boot"]})
    if "r final" in image_corr:
        out.insert(4, "r, final layers [95 % CI over images]",
                   [format_interval(r, lo, hi, 2) for r, lo, hi in
                    zip(image_corr["r final"], image_corr["final ci low"], image_corr["final ci high"])])
        out.insert(5, "peak − final, signed (> 0: the peak predicts capability better) [95 % CI, paired]",
                   [format_interval(r, lo, hi, 2) for r, lo, hi in
                    zip(image_corr["peak − final (capability)"], image_corr["peak − final low"],
                        image_corr["peak − final high"])])
    return out.set_index(["dataset", "vision", "method"])


def verdict_correlations(sets, vision: dict, independent: Sequence, summary: pd.DataFrame, datasets: Sequence[str], *,
                         n_boot: int = 50, **kw) -> tuple[str, pd.DataFrame]:
    """:func:`image_correlations` (``kw`` passed on) on the verdicts' capability axis, and that axis.

    The axis is MMLU where ``summary`` has it for at least 3 models (the paper profile, read on DOCCI when it is
    among ``datasets``), else bits per byte on held-out captions (lower = more capable) on the first dataset. The
    frame is empty when ``n_boot`` is 0.
    """
    axis, sign = ("mmlu_5shot", +1) if summary["mmlu_5shot"].notna().sum() >= 3 else ("bpb", -1)
    dataset = "docci" if axis == "mmlu_5shot" and "docci" in datasets else datasets[0]
    if not n_boot:
        return axis, pd.DataFrame()
    return axis, image_correlations(sets, vision, independent, dict(zip(summary["language"], summary[axis])),
                                    dataset=dataset, direction=sign, n_boot=n_boot, capability_name=axis, **kw)
