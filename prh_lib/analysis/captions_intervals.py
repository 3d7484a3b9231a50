"""App. F with an interval over images: does shortening the captions keep the language models' order?

The order claim of App. F ("less detail lowers alignment but keeps the order of models") is read as Kendall's
τ between the language models' alignment at the full text and at each shorter level. The means over draws give
one τ per level; here each model's alignment on one draw is its *held-out* peak
(:func:`prh_lib.metrics.selection.crossfit_peak`: layer pair chosen on one half of the images, scored on the
other), every (model, level) is scored on the *same* half-samples of the images (the variants of a draw
share their images), and each half-sample gives one τ per level. The centred interval of those τ (their spread
placed on the estimate, as for the held-out peaks), clipped to [-1, 1], is the interval over images.

References
----------
Herbst et al. (arXiv 2611.12869), App. F; Kendall (1938), Biometrika 30 (τ); Efron & Tibshirani (1993),
Sec. 8.4 and 13.3.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from ..metrics.selection import bootstrap_interval
from .captions_study import variant_features
from .core import clip_features

__all__ = ["order_intervals", "order_display"]

COLUMNS = ["dataset", "draw", "vision model", "control", "level", "tau", "low", "high", "n_lms", "n", "n_boot"]


def _tau(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    with np.errstate(invalid="ignore"):
        return float(kendalltau(a, b).statistic)


def order_intervals(vision: dict, variants: dict, language_models: Sequence[str], *, control: str, dataset: str,
                    draw: int, k: int = 10, clip_q: float | None = 0.95, n_splits: int = 4, n_boot: int = 50,
                    seed: int = 0, num_threads: int | None = None, **feature_options) -> pd.DataFrame:
    """Kendall τ between the language models' held-out peaks at the full text and at each shorter level.

    Parameters
    ----------
    vision : dict of str to LayerFeatures
        Vision features on a superset of the draw's images (as for
        :func:`prh_lib.analysis.captions.study_alignment`).
    variants : dict of str to dict
        :func:`prh_lib.analysis.captions.study_variants` of ``dataset`` (the unscored all-image variants included:
        the draw's variants take their rows, so nothing is extracted twice).
    language_models : sequence of str
    control : str
        ``"summary"`` or ``"truncation"``: the shortening read (the one the verdict uses).
    dataset, draw
        The draw whose variants are resampled.
    k, clip_q, n_splits, n_boot, seed
        Neighbours, clipping (one threshold per model's stack) and the cross-fitting and image bootstrap of
        :func:`~prh_lib.metrics.selection.crossfit_peak` (cached).
    num_threads, **feature_options
        As in :func:`prh_lib.analysis.captions_study.variant_features` (cached features).

    Returns
    -------
    DataFrame
        One row per (vision model, shorter level) with :data:`COLUMNS`: ``tau`` of the held-out peaks over the
        language models, ``low``, ``high`` (95 % centred interval over image half-samples, clipped to [-1, 1]). Empty with fewer
        than two language models or no such variants.
    """
    from .heldout import _crossfit_cached

    chosen = {name: v for name, v in variants.items() if v["score"] and v["control"] == control
              and v["dataset"] == dataset and v["draw"] == draw}
    if len(language_models) < 2 or len(chosen) < 2:
        return pd.DataFrame(columns=COLUMNS)
    sources = {name: v for name, v in variants.items() if not v["score"] and v["dataset"] == dataset}
    levels = {name: float(v["level"]) for name, v in chosen.items()}
    full = max(levels.values())
    rows = []
    lang = {m: variant_features(m, {**sources, **chosen}, num_threads=num_threads, **feature_options)
            for m in language_models}
    for vname, vfeat in vision.items():
        row_of = {sid: i for i, sid in enumerate(vfeat.sample_ids)}
        fits = {}
        for name, v in chosen.items():
            vis = clip_features(vfeat.rows([row_of[s] for s in v["pairs"].sample_ids]), q=clip_q)
            for m in language_models:
                fits[(m, name)] = _crossfit_cached([vis], [clip_features(lang[m][name], q=clip_q)], k=k,
                                                   n_splits=n_splits, n_boot=n_boot, seed=seed,
                                                   label=f"{vname} × {m} ({name})")
        full_name = next(n for n, lv in levels.items() if lv == full)
        a = np.array([fits[(m, full_name)].heldout for m in language_models])
        A = np.stack([fits[(m, full_name)].heldout_reps for m in language_models])
        for name, level in sorted(levels.items(), key=lambda kv: kv[1]):
            if level == full:
                continue
            b = np.array([fits[(m, name)].heldout for m in language_models])
            B = np.stack([fits[(m, name)].heldout_reps for m in language_models])
            tau = _tau(a, b)
            reps = np.array([_tau(A[:, r], B[:, r]) for r in range(A.shape[1])])
            lo, hi = bootstrap_interval(tau, reps, bounds=(-1.0, 1.0))  # centred (as the held-out peaks')
            rows.append({"dataset": dataset, "draw": draw, "vision model": vname, "control": control, "level": level,
                         "tau": tau, "low": lo, "high": hi, "n_lms": len(language_models),
                         "n": len(chosen[name]["pairs"]), "n_boot": int(n_boot)})
    return pd.DataFrame(rows, columns=COLUMNS)


def order_display(intervals: pd.DataFrame) -> pd.DataFrame:
    """The page's table: Kendall τ (full text vs each shorter level) of the held-out peaks, [95 % CI over images]."""
    from .heldout import format_interval

    if intervals.empty:
        return pd.DataFrame()
    out = intervals.assign(**{"Kendall τ [95 % CI over images]": [
        format_interval(t, lo, hi, 2) for t, lo, hi in zip(intervals["tau"], intervals["low"], intervals["high"])]})
    return out.rename(columns={"n_lms": "language models", "n": "images", "n_boot": "image half-samples"}).set_index(
        ["dataset", "draw", "vision model", "control", "level"])[
        ["Kendall τ [95 % CI over images]", "language models", "images", "image half-samples"]]
