"""App. F with an interval over images: does shortening the captions keep the language models' order?

The order claim of App. F ("less detail lowers alignment but keeps the order of models") compares the language
models' alignment at the full text and at each shorter level. Here each model's alignment on one draw is its
*held-out* peak (:func:`prh_lib.stats.selection.crossfit_peak`: layer pair chosen on one half of the images,
scored on the other), and every (model, level) is scored on the *same* half-samples of the images: the variants
of a draw hold the same images in the same rows, and every fit has the same ``n``, ``n_splits``, ``n_boot`` and
``seed``, hence the same splits and replicates (:func:`~prh_lib.stats.selection.resampled_halves`). Replicate
``r`` of one model and replicate ``r`` of another are the same images: comparisons between models are paired.

- **Three or more language models**: Kendall's τ between their held-out peaks at the full text and at each
  shorter level; each half-sample gives one τ per level, and the centred interval of those τ (their spread placed
  on the estimate), clipped to [-1, 1], is the interval over images.
- **Two language models** (A, B): τ is ±1 in the estimate and in every half-sample, so its interval has no
  width and says nothing. The order is read as a paired margin instead: ``d_full = peak_A(full) − peak_B(full)``
  and ``d_level = peak_A(level) − peak_B(level)``, their replicates the differences of the two models' replicates
  on the same half-samples. The order exists at the full text when the 95 % centred interval of ``d_full``
  excludes 0; it is kept at a shorter level when, with ``s = sign(d_full)``, the interval of the full-text
  leader's margin ``s · d_level`` lies above 0.

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

from prh_lib.stats.intervals import bootstrap_interval
from prh_lib.analysis.captions.study import variant_features
from prh_lib.analysis.core import clip_features

COLUMNS = ["dataset", "draw", "vision model", "control", "level", "tau", "low", "high", "lm_a", "lm_b",
           "full_margin", "full_low", "full_high", "margin", "margin_low", "margin_high", "n_lms", "n", "n_boot"]


def _tau(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    with np.errstate(invalid="ignore"):
        return float(kendalltau(a, b).statistic)


def _margin(a: np.ndarray, b: np.ndarray, a_reps: np.ndarray, b_reps: np.ndarray, *,
            sign: float = 1.0) -> tuple[float, float, float]:
    """``sign · (a − b)`` of two models' held-out peaks and its 95 % centred interval over the paired replicates.

    ``a_reps``, ``b_reps`` of shape (n_boot,) are the two models' replicates on the *same* half-samples, so their
    difference is taken replicate by replicate (a NaN in either leaves that replicate out). Scores in [0, 1]
    give a difference in [-1, 1], the interval's bounds. Returns ``(estimate, low, high)``.
    """
    est = sign * (float(a) - float(b))
    reps = sign * (np.asarray(a_reps, dtype=float) - np.asarray(b_reps, dtype=float))
    lo, hi = bootstrap_interval(est, reps, bounds=(-1.0, 1.0))  # centred (as the held-out peaks')
    return est, lo, hi


def order_intervals(vision: dict, variants: dict, language_models: Sequence[str], *, control: str, dataset: str,
                    draw: int, k: int = 10, clip_q: float | None = 0.95, n_splits: int = 4, n_boot: int = 50,
                    seed: int = 0, num_threads: int | None = None, **feature_options) -> pd.DataFrame:
    """Whether the language models' order of held-out peaks at the full text is kept at each shorter level.

    Kendall τ over three or more language models; for two, the full-text difference and the full-text leader's
    margin at each shorter level, paired over the same image half-samples (module docstring).

    Parameters
    ----------
    vision : dict of str to LayerFeatures
        Vision features on a superset of the draw's images (as for
        :func:`prh_lib.pages.appf_caption_detail.study_alignment`).
    variants : dict of str to dict
        :func:`prh_lib.pages.appf_caption_detail.study_variants` of ``dataset`` (the unscored all-image variants included:
        the draw's variants take their rows, so nothing is extracted twice).
    language_models : sequence of str
    control : str
        ``"summary"`` or ``"truncation"``: the shortening read (the one the verdict uses).
    dataset, draw
        The draw whose variants are resampled.
    k, clip_q, n_splits, n_boot, seed
        Neighbours, clipping (one threshold per model's stack) and the cross-fitting and image bootstrap of
        :func:`~prh_lib.stats.selection.crossfit_peak` (cached).
    num_threads, **feature_options
        As in :func:`prh_lib.analysis.captions.study.variant_features` (cached features).

    Returns
    -------
    DataFrame
        One row per (vision model, shorter level) with :data:`COLUMNS`. With three or more language models: ``tau`` of
        the held-out peaks over the language models, ``low``, ``high`` (95 % centred interval over image half-samples,
        clipped to [-1, 1]); the margin columns are NaN and ``lm_a``, ``lm_b`` empty. With two (``lm_a``, ``lm_b``, in
        the order given): ``full_margin`` = ``d_full``, the held-out peak of ``lm_a`` minus that of ``lm_b`` at the full
        text, with ``full_low``, ``full_high``; ``margin`` = ``s · d_level`` (``s = sign(d_full)``; NaN when ``d_full``
        is 0), the full-text leader's lead at this level, with ``margin_low``, ``margin_high``; all in units of the
        score (mutual k-NN, in [-1, 1]), intervals 95 % centred over the paired image half-samples (NaN without
        replicates); ``tau``, ``low``, ``high`` NaN. Empty with fewer than two language models or no such variants.
    """
    from prh_lib.analysis.heldout import _crossfit_cached

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
        # every fit has the same n, n_splits, n_boot and seed, so replicate r is the same images for every model and
        # level (crossfit_peak): column r of A and of B is one half-sample
        a = np.array([fits[(m, full_name)].heldout for m in language_models])
        A = np.stack([fits[(m, full_name)].heldout_reps for m in language_models])
        two = len(language_models) == 2
        if two:
            d_full, f_lo, f_hi = _margin(a[0], a[1], A[0], A[1])
            s = float(np.sign(d_full))
        for name, level in sorted(levels.items(), key=lambda kv: kv[1]):
            if level == full:
                continue
            b = np.array([fits[(m, name)].heldout for m in language_models])
            B = np.stack([fits[(m, name)].heldout_reps for m in language_models])
            row = {"dataset": dataset, "draw": draw, "vision model": vname, "control": control, "level": level,
                   "tau": np.nan, "low": np.nan, "high": np.nan, "lm_a": "", "lm_b": "", "full_margin": np.nan,
                   "full_low": np.nan, "full_high": np.nan, "margin": np.nan, "margin_low": np.nan,
                   "margin_high": np.nan, "n_lms": len(language_models), "n": len(chosen[name]["pairs"]),
                   "n_boot": int(n_boot)}
            if two:  # τ of two models is ±1 in every replicate: read the paired margin instead
                row.update(lm_a=language_models[0], lm_b=language_models[1], full_margin=d_full, full_low=f_lo,
                           full_high=f_hi)
                if s != 0:
                    m, lo, hi = _margin(b[0], b[1], B[0], B[1], sign=s)
                    row.update(margin=m, margin_low=lo, margin_high=hi)
            else:
                tau = _tau(a, b)
                reps = np.array([_tau(A[:, r], B[:, r]) for r in range(A.shape[1])])
                lo, hi = bootstrap_interval(tau, reps, bounds=(-1.0, 1.0))  # centred (as the held-out peaks')
                row.update(tau=tau, low=lo, high=hi)
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def _margin_cell(r: pd.Series) -> str:
    """``"minilm-l6 over smollm2-135m: +0.012 [+0.001, +0.026]"``; "not read" while the full-text order itself
    is unresolved (its interval holds 0: there is no leader whose margin could be kept); "–" for τ rows."""
    from prh_lib.formatting import format_interval

    if not (isinstance(r["lm_a"], str) and r["lm_a"]) or not np.isfinite(r["full_margin"]):
        return "–"
    lead, trail = (r["lm_a"], r["lm_b"]) if r["full_margin"] > 0 else (r["lm_b"], r["lm_a"])
    if not (r["full_low"] > 0 or r["full_high"] < 0):
        return f"not read: no leader at the full text ({lead} ahead by {abs(r['full_margin']):.3f}, interval holds 0)"
    return f"{lead} over {trail}: {format_interval(r['margin'], r['margin_low'], r['margin_high'], 3, sign=True)}"


def order_display(intervals: pd.DataFrame) -> pd.DataFrame:
    """The page's table of :func:`order_intervals`, one row per (dataset, draw, vision model, control, level).

    Rows of three or more language models show Kendall τ (full text vs the level) of the held-out peaks; rows of
    two show the difference of their held-out peaks at the full text (``lm_a − lm_b``) and the full-text
    leader's margin at the level (named, and "not read" while the full-text difference's interval holds 0), each
    with its 95 % interval over images (paired half-samples). A column that no row fills is left out.
    """
    from prh_lib.formatting import format_interval

    if intervals.empty:
        return pd.DataFrame()
    iv = intervals.reindex(columns=COLUMNS)
    tau_col, full_col, margin_col = ("Kendall τ [95 % CI over images]",
                                     "difference at the full text [95 % CI over images]",
                                     "full-text leader's margin [95 % CI over images]")
    out = iv.assign(**{
        tau_col: [format_interval(t, lo, hi, 2) for t, lo, hi in zip(iv["tau"], iv["low"], iv["high"])],
        full_col: [f"{a} − {b}: {format_interval(d, lo, hi, 3, sign=True)}" if isinstance(a, str) and a else "–"
                   for a, b, d, lo, hi in zip(iv["lm_a"], iv["lm_b"], iv["full_margin"], iv["full_low"],
                                              iv["full_high"])],
        margin_col: [_margin_cell(r) for _, r in iv.iterrows()]})
    shown = ([tau_col] if (iv["n_lms"] >= 3).any() else []) + ([full_col, margin_col] if (iv["n_lms"] == 2).any()
                                                               else [])
    return out.rename(columns={"n_lms": "language models", "n": "images", "n_boot": "image half-samples"}).set_index(
        ["dataset", "draw", "vision model", "control", "level"])[
        shown + ["language models", "images", "image half-samples"]]
