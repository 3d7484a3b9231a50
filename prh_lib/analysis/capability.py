"""Language-model capability versus cross-modal alignment (Herbst et al., Section 3.2, Figures 3-4, App. D).

The paper's claim: alignment of a language model with a vision model grows with the language model's
capability when captions are informative. The language models (features and bits per byte) come from
:mod:`prh_lib.lm.ladder`, the benchmark scores from :mod:`prh_lib.data.benchmarks`. Here:

- :func:`alignment_table` scores each language model against each vision model (raw mutual k-NN at the
  best layer pair and at the final layers, plus permutation-calibrated scores), with
  :func:`~prh_lib.analysis.core.score_pair`;
- :func:`correlate` gives Pearson's r with its p-value and a bootstrap interval over models;
  :func:`correlation_table` applies it to every (vision model, alignment score, capability measure);
- :func:`bpb_table`, :func:`describe_ladder`: bits per byte along the interpolation ladder.

References
----------
Herbst, Roschmann, Bouniot, Akata. "Where Does Alignment Emerge and What Does It Mean? A Closer Look at
the Platonic Representation Hypothesis", Section 3.2, Figures 3 and 4, Appendix D.
Huh, Cheung, Wang, Isola (2024). "The Platonic Representation Hypothesis", ICML, Sec. 3 (alignment versus
language-model performance measured in bits per byte).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ..data.benchmarks import BENCHMARKS, missing_counts
from .core import score_pair

__all__ = ["join_capabilities", "capability_columns", "bpb_table", "ladder_is_monotone", "describe_ladder",
           "alignment_table", "CorrelationResult", "correlate", "correlation_table", "correlation_note",
           "describe_correlations", "to_record"]


def join_capabilities(table: pd.DataFrame, capabilities: pd.DataFrame, *, on: str = "language") -> pd.DataFrame:
    """``table`` with the benchmark columns of each row's model added (NaN for models not in ``capabilities``).

    Parameters
    ----------
    table : DataFrame
        E.g. :func:`alignment_table`; column ``on`` names the language model of each row.
    capabilities : DataFrame
        From :func:`load_capability_table`.
    on : str, default="language"

    Returns
    -------
    DataFrame
        A copy with the :data:`BENCHMARKS` columns appended (ladder models and other models outside the
        table get NaN, which :func:`correlate` leaves out).

    Raises
    ------
    ValueError
        If ``on`` is not a column of ``table``.
    """
    if on not in table.columns:
        raise ValueError(f"column {on!r} is not in the table; it has {list(table.columns)}")
    out = table.copy()
    for bench in BENCHMARKS:
        out[bench] = out[on].map(capabilities[bench]).astype(np.float64)
    return out


def capability_columns(table: pd.DataFrame, *, min_models: int = 3) -> list[str]:
    """``"bpb"`` and the benchmarks with at least ``min_models`` non-missing values in ``table``."""
    cols = ["bpb"] if "bpb" in table.columns else []
    return cols + [b for b in BENCHMARKS if b in table.columns and table[b].notna().sum() >= min_models]


def bpb_table(language) -> pd.DataFrame:
    """Bits per byte of each language model, indexed by ``label``: ``fraction``, ``bpb``, ``bits``, ``bytes``,
    ``tokens`` (scored) and ``context`` (see :class:`BitsPerByte`)."""
    df = pd.DataFrame([{"label": r.label, "fraction": r.fraction, "bpb": r.bpb.bpb, "bits": float(r.bpb.bits.sum()),
                        "bytes": int(r.bpb.n_bytes.sum()), "tokens": r.bpb.n_tokens, "context": r.bpb.context}
                       for r in language]).set_index("label")
    return df


def ladder_is_monotone(language) -> bool | None:
    """Whether bits per byte falls strictly with ``t`` along the ladder (None with fewer than two ladder points)."""
    pts = sorted((r.fraction, r.bpb.bpb) for r in language if r.fraction is not None)
    if len(pts) < 2:
        return None
    return bool(np.all(np.diff([b for _, b in pts]) < 0))


def describe_ladder(bpb: pd.DataFrame) -> str:
    """One Markdown sentence on bits per byte along the ladder (rows of :func:`bpb_table` with a fraction);
    empty when there are fewer than two ladder points."""
    pts = bpb[bpb["fraction"].notna()].sort_values("fraction")
    if len(pts) < 2:
        return ""
    steps = np.diff(pts["bpb"].to_numpy(float))
    trend = ("falls at every step of t" if np.all(steps < 0) else
             f"does not fall at every step of t ({int(np.sum(steps >= 0))} of {len(steps)} steps rise)")
    first, last = pts.iloc[0], pts.iloc[-1]
    return (f"Along the ladder, bits per byte {trend}: {first['bpb']:.3f} at t = {first['fraction']:g}, "
            f"{last['bpb']:.3f} at t = {last['fraction']:g}.")


# --------------------------------------------------------------------------------------------------------
# alignment and correlation


def alignment_table(vision: dict, language, *, k: int = 10,
                    n_permutations: int = 200, alpha: float = 0.05, seed: int = 0, device=None) -> pd.DataFrame:
    """Alignment of every language model with every vision model, with each LM's bits per byte.

    Parameters
    ----------
    vision : dict of str to LayerFeatures
        Vision features (clipped as the caller wishes), all on the same pairs as the language features.
    language : sequence of LanguageModelResult
        Language features (pre-processed the same way) and bits per byte.
    k, n_permutations, alpha, seed, device
        Mutual k-NN neighbours and the permutation null of
        :func:`prh_lib.metrics.permutation_test_layerwise` (selection-aware for the maximum).

    Returns
    -------
    DataFrame
        One row per (vision, language) pair with columns ``vision``, ``language``, ``fraction``,
        ``bpb``, ``peak`` (max over layer pairs), ``peak layer v``, ``peak layer l``, ``final`` (last
        layer pair), ``calibrated (max)``, ``p (max)`` (selection-aware), ``calibrated (final)``,
        ``p (final)`` (the final pair against its own null: the same as
        :func:`prh_lib.metrics.permutation_test` with the same permutations).

    Raises
    ------
    prh_lib.features.FeatureMismatchError
        If features hold other samples or another row order.

    References
    ----------
    Herbst et al., Section 3.2; Gröger et al. (2026), Sec. 5 (calibration).
    """
    rows = []
    for v_name, v in vision.items():
        for res in language:
            scored = score_pair(v, res.features, k=k, n_permutations=n_permutations, alpha=alpha, n_boot=0,
                                seed=seed, control=False, device=device)
            m, cal = scored.matrix, scored.calibration
            i, j, best = m.peak
            rows.append({
                "vision": v_name, "language": res.label, "fraction": res.fraction, "bpb": res.bpb.bpb,
                "peak": best, "peak layer v": m.x_labels[i], "peak layer l": m.y_labels[j], "final": m.final,
                "calibrated (max)": cal.calibrated_max, "p (max)": cal.p_max,
                "calibrated (final)": float(cal.calibrated[-1, -1]), "p (final)": float(cal.p_value[-1, -1]),
            })
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class CorrelationResult:
    """Pearson correlation across models with a p-value and a bootstrap interval.

    Attributes
    ----------
    r : float in [-1, 1]
        NaN when fewer than 2 pairs remain or an input is constant.
    p_value : float
        Two-sided, from :func:`scipy.stats.pearsonr` (exact under bivariate normality). NaN when
        ``n < 3`` (with 2 points r is always +-1) or an input is constant; never 1 by convention.
    ci_low, ci_high : float
        Percentile bootstrap interval at level ``ci`` (models resampled with replacement; resamples in
        which either variable is constant are dropped). NaN when ``n < 3`` or ``n_boot == 0``.
    n : int
        Number of (x, y) pairs used (pairs with a NaN are dropped).
    n_boot, n_boot_valid : int
        Replicates drawn and replicates with a defined r.
    ci : float
    seed : int
    """

    r: float
    p_value: float
    ci_low: float
    ci_high: float
    n: int
    n_boot: int
    n_boot_valid: int
    ci: float
    seed: int


def _pearson_rows(xb: np.ndarray, yb: np.ndarray) -> np.ndarray:
    """Pearson r of each row of two (B, n) arrays; NaN where either row is constant (to round-off)."""
    xc = xb - xb.mean(axis=1, keepdims=True)
    yc = yb - yb.mean(axis=1, keepdims=True)
    sx, sy = np.sqrt((xc**2).sum(axis=1)), np.sqrt((yc**2).sum(axis=1))
    tol = 1e-12 * np.sqrt(xb.shape[1])
    ok = (sx > tol * np.abs(xb).max(axis=1)) & (sy > tol * np.abs(yb).max(axis=1))
    r = np.full(len(xb), np.nan)
    r[ok] = np.clip((xc[ok] * yc[ok]).sum(axis=1) / (sx[ok] * sy[ok]), -1.0, 1.0)
    return r


def correlate(x, y, *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> CorrelationResult:
    """Pearson's r between two per-model quantities, its p-value and a bootstrap interval over models.

    Parameters
    ----------
    x, y : array_like of shape (n_models,)
        E.g. alignment scores and capability scores. Pairs where either is NaN are left out.
    n_boot : int, default=1000
        Bootstrap replicates (0: no interval).
    ci : float in (0, 1), default=0.95
    seed : int, default=0
        Seeds ``numpy.random.default_rng`` for the resamples.

    Returns
    -------
    CorrelationResult
        With fewer than 3 pairs no p-value or interval is reported (NaN). A constant input gives NaN for
        r, p and the interval, with a :class:`scipy.stats.ConstantInputWarning`; the p-value is never
        reported as 1 for a degenerate input.

    Raises
    ------
    ValueError
        If ``x`` and ``y`` are not 1-D of the same length, hold infinite values, or ``n_boot`` / ``ci`` are
        out of range.

    References
    ----------
    Herbst et al., Section 3.2 and Figure 3 (Pearson r of alignment against capability);
    Efron & Tibshirani (1993), Ch. 13 (percentile interval).
    """
    from scipy import stats

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"x and y must be 1-D of the same length; got shapes {x.shape} and {y.shape}")
    if np.isinf(x).any() or np.isinf(y).any():
        raise ValueError("x and y must not hold infinite values")
    if not isinstance(n_boot, (int, np.integer)) or isinstance(n_boot, bool) or n_boot < 0:
        raise ValueError(f"n_boot must be an int >= 0, got {n_boot!r}")
    if not 0.0 < float(ci) < 1.0:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    n = int(x.size)
    nan = float("nan")

    def result(r, p, lo=nan, hi=nan, valid=0):
        return CorrelationResult(float(r), float(p), float(lo), float(hi), n, int(n_boot), int(valid), float(ci),
                                 int(seed))

    if n < 2:
        return result(nan, nan)
    const = [name for name, v in (("x", x), ("y", y)) if np.all(v == v[0])]
    if const:
        warnings.warn(f"correlate: {' and '.join(const)} is constant over the {n} models; Pearson r is "
                      "undefined (reported as NaN, no p-value)", stats.ConstantInputWarning, stacklevel=2)
        return result(nan, nan)
    if n < 3:
        return result(float(_pearson_rows(x[None], y[None])[0]), nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.NearConstantInputWarning)
        res = stats.pearsonr(x, y)
    r, p = float(res.statistic), float(res.pvalue)
    if n_boot == 0:
        return result(r, p)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(int(n_boot), n))
    reps = _pearson_rows(x[idx], y[idx])
    valid = reps[~np.isnan(reps)]
    if valid.size == 0:
        return result(r, p)
    a = (1.0 - float(ci)) / 2.0
    lo, hi = np.quantile(valid, [a, 1.0 - a])
    return result(r, p, lo, hi, valid.size)


def correlation_table(table: pd.DataFrame, *, alignment: Sequence[str], capability: Sequence[str],
                      by: str = "vision", n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """:func:`correlate` of each alignment column with each capability column, per group of rows.

    Parameters
    ----------
    table : DataFrame
        One row per (vision, language) model pair, e.g. :func:`alignment_table` joined with capability
        scores.
    alignment, capability : sequence of str
        Column names.
    by : str, default="vision"
        Rows are grouped by this column (one correlation per vision model).
    n_boot, ci, seed
        As in :func:`correlate`.

    Returns
    -------
    DataFrame
        Columns ``by``, ``alignment``, ``capability``, ``r``, ``p``, ``ci low``, ``ci high``, ``n``.

    Raises
    ------
    ValueError
        If a named column is not in ``table``.
    """
    missing = [c for c in [by, *alignment, *capability] if c not in table.columns]
    if missing:
        raise ValueError(f"columns {missing} are not in the table; it has {list(table.columns)}")
    rows = []
    for group, sub in table.groupby(by, sort=False):
        for a in alignment:
            for c in capability:
                res = correlate(sub[a].to_numpy(float), sub[c].to_numpy(float), n_boot=n_boot, ci=ci, seed=seed)
                rows.append({by: group, "alignment": a, "capability": c, "r": res.r, "p": res.p_value,
                             "ci low": res.ci_low, "ci high": res.ci_high, "n": res.n})
    return pd.DataFrame(rows)


def correlation_note(res) -> str:
    """``"r = 0.81 [0.42, 0.97], p = 0.02, n = 7"`` for a :class:`CorrelationResult` or a row of
    :func:`correlation_table` (undefined parts are written "n/a")."""
    if isinstance(res, CorrelationResult):
        res = {"r": res.r, "p": res.p_value, "ci low": res.ci_low, "ci high": res.ci_high, "n": res.n}

    def fmt(v, spec):
        return "n/a" if v is None or not np.isfinite(v) else format(v, spec)

    return (f"r = {fmt(res['r'], '.2f')} [{fmt(res['ci low'], '.2f')}, {fmt(res['ci high'], '.2f')}], "
            f"p = {fmt(res['p'], '.2g')}, n = {int(res['n'])}")


def describe_correlations(correlations: pd.DataFrame, *, by: str = "vision") -> str:
    """A Markdown line per row of :func:`correlation_table`, stating r, its interval, p and n.

    Bits per byte falls as capability rises, so a negative r against ``bpb`` means alignment grows with
    capability; against the benchmarks a positive r does.
    """
    lines = []
    for _, row in correlations.iterrows():
        sign = ""
        if np.isfinite(row["r"]) and row["r"] != 0:
            grows = (row["r"] < 0) if row["capability"] == "bpb" else (row["r"] > 0)
            sign = " (alignment grows with capability)" if grows else " (alignment falls as capability grows)"
        lines.append(f"- **{row[by]}**, {row['alignment']} vs {row['capability']}: {correlation_note(row)}{sign}.")
    return "\n".join(lines)


def to_record(*, n_pairs: int, k: int, chance: float, clip_q: float | None, n_heldout: int, bpb_texts: str,
              vision_models: Sequence[str], language, bpb: pd.DataFrame, monotone: bool | None,
              table: pd.DataFrame, correlations: pd.DataFrame, capabilities: pd.DataFrame) -> dict:
    """What the Section 3.2 page records for the book and the tests (:func:`prh_lib.report.record`)."""
    return {
        "n_pairs": n_pairs, "k": k, "chance": chance, "clip_q": clip_q, "n_heldout": n_heldout, "bpb_texts": bpb_texts,
        "vision_models": list(vision_models), "language": [r.label for r in language],
        "fractions": [r.fraction for r in language], "bpb": bpb, "ladder_monotone": monotone,
        "alignment": table.to_dict(orient="records"), "correlations": correlations.to_dict(orient="records"),
        "capability_missing": missing_counts(capabilities), "n_capability_models": len(capabilities),
    }
