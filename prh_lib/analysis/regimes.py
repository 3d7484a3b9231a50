"""The four regimes of cross-representation alignment (Herbst et al., Section 3.3, Figure 5, Appendix E).

Mutual k-NN alignment of two models is compared across four regimes:

- ``"random-init"``: vision x language pairs with both models re-initialised with seeded random weights
  (same architectures; names ``"<model>@random-init:<seed>"``, see :func:`prh_lib.models.load_model`);
- ``"unimodal"``: trained vision x trained language models, the paper's main subject;
- ``"aligned"``: the two towers of an explicitly aligned image-text model (CLIP, SigLIP), compared on
  image-caption pairs (names ``"<model>:vision"``, ``"<model>:text"``); their last layer is the joint
  embedding space (``"projection"``);
- ``"same-modality"``: vision x vision and language x language pairs.

Every comparison is scored as in Section 3.1 (:func:`prh_lib.analysis.layerwise.compare_pairs`): the maximum of
mutual k-NN over all layer pairs, the final-layer score, the selection-aware permutation-calibrated
maximum (Groeger et al. 2026) and a bootstrap interval at the peak layer pair. Features are expected to
be preprocessed by the caller (e.g. :func:`prh_lib.analysis.clip_features`).

Functions here take features and comparison specs and return tables; they never load models or plot.

References
----------
Herbst, Roschmann, Bouniot, Akata. "Where Does Alignment Emerge and What Does It Mean? A Closer Look at
the Platonic Representation Hypothesis", Section 3.3, Figure 5, Appendix E.
Huh, Cheung, Wang, Isola (2024). "The Platonic Representation Hypothesis", ICML (mutual k-NN).
Groeger, Wen, Brbic (2026), arXiv:2602.14486, Sec. 5 (calibration).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import pandas as pd

from ..features import LayerFeatures
from ..validation import check_model_pairs, check_seeds
from .layerwise import compare_pairs

__all__ = ["REGIMES", "REGIME_LABELS", "Comparison", "regime_comparisons", "regime_table", "regime_summary",
           "regime_groups", "projection_table", "describe_regimes", "comparison_table", "to_record"]

#: Regime keys in the order of the paper's Figure 5.
REGIMES = ("random-init", "unimodal", "aligned", "same-modality")

#: How the regimes are named in tables and figures.
REGIME_LABELS = {
    "random-init": "random init",
    "unimodal": "unimodal (vision × language)",
    "aligned": "aligned vision-language",
    "same-modality": "same modality",
}

PROJECTION = "projection"


class Comparison(NamedTuple):
    """One model pair of a regime.

    Attributes
    ----------
    x, y : str
        Model names as :func:`prh_lib.models.load_model` understands them (features are keyed by them).
    regime : str
        One of :data:`REGIMES`.
    label : str
        Display label (e.g. ``"dinov2-small × smollm2-135m (seed 0)"``).
    seed : int or None
        Initialisation seed of the random-init regime, else None.
    """

    x: str
    y: str
    regime: str
    label: str
    seed: int | None = None


def regime_comparisons(
    *,
    unimodal: Sequence[Sequence[str]],
    same_modality: Sequence[Sequence[str]] = (),
    random_init: Sequence[Sequence[str]] | None = None,
    seeds: Sequence[int] = (0,),
    aligned: Sequence[str] = (),
) -> list[Comparison]:
    """The comparisons of the four regimes, in the order of :data:`REGIMES`.

    Parameters
    ----------
    unimodal : sequence of (str, str)
        Vision x language pairs of trained models.
    same_modality : sequence of (str, str), optional
        Vision x vision and language x language pairs.
    random_init : sequence of (str, str), optional
        Pairs whose models are compared with random weights; default: the ``unimodal`` pairs.
    seeds : sequence of int, default (0,)
        One random-init comparison per pair and seed; both models of a pair use the same seed.
    aligned : sequence of str, optional
        Two-tower image-text models (Hub ids or folders); each gives ``"<m>:vision"`` x ``"<m>:text"``.

    Returns
    -------
    list of Comparison

    Raises
    ------
    ValueError
        If a pair is not two distinct model names, ``unimodal`` is empty, seeds are not distinct
        non-negative ints, or ``aligned`` names carry a tower suffix already.
    """
    unimodal = check_model_pairs(unimodal, "unimodal", distinct=True)
    if not unimodal:
        raise ValueError("unimodal needs at least one (vision, language) pair")
    same_modality = check_model_pairs(same_modality, "same_modality", distinct=True)
    random_init = unimodal if random_init is None else check_model_pairs(random_init, "random_init", distinct=True)
    seeds = check_seeds(seeds) if random_init else list(seeds)
    for m in aligned:
        if not isinstance(m, str) or not m or m.endswith((":vision", ":text")):
            raise ValueError(f"aligned takes model names without a tower suffix; got {m!r}")
    out = [Comparison(f"{x}@random-init:{s}", f"{y}@random-init:{s}", "random-init", f"{x} × {y} (seed {s})", s)
           for x, y in random_init for s in seeds]
    out += [Comparison(x, y, "unimodal", f"{x} × {y}") for x, y in unimodal]
    out += [Comparison(f"{m}:vision", f"{m}:text", "aligned", f"{m} (vision × text)") for m in aligned]
    out += [Comparison(x, y, "same-modality", f"{x} × {y}") for x, y in same_modality]
    return out


def _calibrate_value(value: float, threshold: float) -> float:
    """The calibration map of :func:`prh_lib.metrics.calibrate` at a fixed threshold ``tau``."""
    if not np.isfinite(value) or not np.isfinite(threshold):
        return float("nan")
    if threshold >= 1.0:
        return 0.0
    return float(np.clip((value - threshold) / (1.0 - threshold), 0.0, 1.0))


def regime_table(
    features: dict[str, LayerFeatures],
    comparisons: Sequence[Comparison],
    *,
    k: int = 10,
    n_permutations: int = 200,
    alpha: float = 0.05,
    n_boot: int = 200,
    seed: int = 0,
    device=None,
) -> pd.DataFrame:
    """Alignment of every comparison: maximum over layer pairs, final layers, calibrated maximum, intervals.

    Parameters
    ----------
    features : dict of str to LayerFeatures
        Features of every model named in ``comparisons`` (preprocessed as the caller wants), all on the
        same pairs in the same row order.
    comparisons : sequence of Comparison
        From :func:`regime_comparisons`.
    k : int, default 10
        Neighbours of mutual k-NN (the paper: 10).
    n_permutations, alpha : int, float
        Selection-aware permutation null of the maximum over layer pairs
        (:func:`prh_lib.metrics.permutation_test_layerwise`).
    n_boot : int
        Bootstrap replicates of the interval at the peak layer pair (:func:`prh_lib.metrics.bootstrap_ci`).
    seed : int
        Seeds the permutations, the bootstrap and the shuffled-pairs control.
    device : str or torch.device, optional

    Returns
    -------
    pandas.DataFrame
        One row per comparison, indexed by its label, with columns ``regime`` (a key of :data:`REGIMES`),
        ``x``, ``y``, ``seed``, ``max`` (mutual k-NN maximised over layer pairs, in [0, 1]),
        ``max layer x``, ``max layer y``, ``max low`` and ``max high`` (bootstrap interval at that layer
        pair), ``final`` (last layer x last layer), ``projection`` (joint-space x joint-space, for
        comparisons whose two models both end in a ``"projection"`` layer, else NaN), ``shuffled (max)``
        (maximum with the pairing shuffled), ``calibrated`` (selection-aware calibrated maximum, in
        [0, 1]), ``calibrated low`` and ``calibrated high`` (the bootstrap interval mapped through the
        same calibration, the null threshold held fixed), ``threshold`` (the null's 1 - alpha quantile of
        the maximum) and ``p`` (its permutation p-value).

    Raises
    ------
    ValueError
        If ``comparisons`` is empty or holds an unknown regime.
    KeyError
        If features of a model are missing.

    References
    ----------
    Herbst et al., Section 3.3 and Figure 5; Groeger et al. (2026), Sec. 5.
    """
    comparisons = list(comparisons)
    if not comparisons:
        raise ValueError("no comparisons to score")
    unknown = sorted({c.regime for c in comparisons} - set(REGIMES))
    if unknown:
        raise ValueError(f"unknown regimes {unknown}; valid regimes: {list(REGIMES)}")
    results = compare_pairs(features, [(c.x, c.y) for c in comparisons], k=k, n_permutations=n_permutations,
                            alpha=alpha, n_boot=n_boot, seed=seed, device=device)
    rows = []
    for c, r in zip(comparisons, results):
        m = r.matrix
        i, j, best = m.peak
        has_projection = m.x_labels[-1] == PROJECTION and m.y_labels[-1] == PROJECTION
        tau = r.calibration.threshold_max
        rows.append({
            "comparison": c.label, "regime": c.regime, "x": c.x, "y": c.y, "seed": c.seed,
            "max": best, "max layer x": m.x_labels[i], "max layer y": m.y_labels[j],
            "max low": r.peak_ci.low, "max high": r.peak_ci.high,
            "final": m.final, "projection": m.final if has_projection else np.nan,
            "shuffled (max)": float(np.nanmax(r.control.scores)),
            "calibrated": r.calibration.calibrated_max,
            "calibrated low": _calibrate_value(r.peak_ci.low, tau),
            "calibrated high": _calibrate_value(r.peak_ci.high, tau),
            "threshold": tau, "p": r.calibration.p_max,
        })
    return pd.DataFrame(rows).set_index("comparison")


def regime_summary(table: pd.DataFrame, *, regimes: Sequence[str] = REGIMES) -> pd.DataFrame:
    """Per regime: number of comparisons and the mean, minimum and maximum of the raw and calibrated maxima.

    Parameters
    ----------
    table : DataFrame
        From :func:`regime_table`.
    regimes : sequence of str
        Regimes to list, in this order; a regime without comparisons gets ``n = 0`` and NaN scores.

    Returns
    -------
    pandas.DataFrame
        Indexed by regime key; columns ``regime`` (label), ``n``, ``max (mean)``, ``max (min)``,
        ``max (max)``, ``final (mean)``, ``calibrated (mean)``, ``calibrated (min)``, ``calibrated (max)``.
    """
    rows = []
    for key in regimes:
        part = table[table["regime"] == key]
        row = {"regime key": key, "regime": REGIME_LABELS.get(key, key), "n": len(part)}
        for col, name in (("max", "max"), ("calibrated", "calibrated")):
            vals = part[col].to_numpy(dtype=float)
            row[f"{name} (mean)"] = float(np.mean(vals)) if len(vals) else np.nan
            row[f"{name} (min)"] = float(np.min(vals)) if len(vals) else np.nan
            row[f"{name} (max)"] = float(np.max(vals)) if len(vals) else np.nan
        row["final (mean)"] = float(part["final"].mean()) if len(part) else np.nan
        rows.append(row)
    cols = ["regime", "n", "max (mean)", "max (min)", "max (max)", "final (mean)", "calibrated (mean)",
            "calibrated (min)", "calibrated (max)"]
    return pd.DataFrame(rows).set_index("regime key")[cols]


def regime_groups(table: pd.DataFrame, *, regimes: Sequence[str] = REGIMES) -> tuple[dict, dict]:
    """The points of the regime figure: raw and calibrated maxima with their intervals, grouped by regime.

    Returns
    -------
    raw, calibrated : dict of str to dict of str to (float, float, float)
        Regime label -> comparison label -> ``(value, low, high)``; every regime in ``regimes`` is a key,
        with an empty dict when it has no comparisons (drawn as an empty slot).
    """
    raw, cal = {}, {}
    for key in regimes:
        part = table[table["regime"] == key]
        label = REGIME_LABELS.get(key, key)
        raw[label] = {name: (row["max"], row["max low"], row["max high"]) for name, row in part.iterrows()}
        cal[label] = {name: (row["calibrated"], row["calibrated low"], row["calibrated high"])
                      for name, row in part.iterrows()}
    return raw, cal


def projection_table(table: pd.DataFrame) -> pd.DataFrame:
    """Appendix E: the joint-space (projection x projection) score against the maximum over layer pairs.

    Returns
    -------
    pandas.DataFrame
        The comparisons that have a projection score, with ``projection``, ``max``, ``max layer x``,
        ``max layer y`` and ``projection / max`` (1 when the joint space is where alignment peaks).
    """
    part = table[table["projection"].notna()]
    out = part[["regime", "projection", "max", "max layer x", "max layer y"]].copy()
    out["projection / max"] = out["projection"] / out["max"]
    return out


def describe_regimes(summary: pd.DataFrame, *, chance: float | None = None,
                     missing_note: str = "not run with these parameters") -> str:
    """Markdown stating what was measured, in figures: one line per regime, then how the regimes compare.

    Parameters
    ----------
    summary : DataFrame
        From :func:`regime_summary`.
    chance : float, optional
        Analytic chance level, to express the means as multiples of it.
    missing_note : str
        Said of a regime without comparisons.

    Returns
    -------
    str
        A list item per regime, then the order of the regimes' mean maxima and the comparisons the paper
        makes (unimodal against same-modality, random init and aligned models), each only when measured.
    """
    lines = []
    for key, row in summary.iterrows():
        if row["n"] == 0:
            lines.append(f"- **{row['regime']}**: {missing_note}.")
            continue
        spread = (f" (range {row['max (min)']:.3f}-{row['max (max)']:.3f} over {row['n']} comparisons)"
                  if row["n"] > 1 else "")
        text = (f"- **{row['regime']}**: mean maximum over layer pairs {row['max (mean)']:.3f}{spread}; "
                f"final layers {row['final (mean)']:.3f}; calibrated {row['calibrated (mean)']:.3f}")
        if chance:
            text += f"; {row['max (mean)'] / chance:.1f}× chance ({chance:.3f})"
        lines.append(text + ".")
    measured = summary[summary["n"] > 0].sort_values("max (mean)")
    if len(measured) > 1:
        order = " < ".join(f"{row['regime']} ({row['max (mean)']:.3f})" for _, row in measured.iterrows())
        lines.append(f"\nOrder of the mean maxima: {order}.")
    if {"unimodal", "same-modality"} <= set(measured.index):
        ratio = measured.loc["unimodal", "max (mean)"] / measured.loc["same-modality", "max (mean)"]
        lines.append(f"Unimodal vision-language pairs reach {ratio:.0%} of the same-modality mean.")
    if {"unimodal", "aligned"} <= set(measured.index):
        a, u = measured.loc["aligned", "max (mean)"], measured.loc["unimodal", "max (mean)"]
        lines.append(f"Aligned vision-language models score {'above' if a > u else 'below'} the unimodal mean "
                     f"({a:.3f} against {u:.3f}).")
    if {"unimodal", "random-init"} <= set(measured.index):
        above = (measured.loc["unimodal", "max (min)"] > measured.loc["random-init", "max (max)"])
        lines.append("Every unimodal pair scores above every random-init comparison." if above else
                     "Some random-init comparison scores as high as a unimodal pair.")
    return "\n".join(lines)


def comparison_table(comparisons: Sequence[Comparison]) -> pd.DataFrame:
    """The comparisons as a table indexed by label: ``regime``, ``x``, ``y``."""
    return pd.DataFrame(list(comparisons), columns=list(Comparison._fields)).set_index("label")[["regime", "x", "y"]]


def to_record(table: pd.DataFrame, summary: pd.DataFrame, *, n_pairs: int, k: int, chance: float,
              clip_q: float | None, random_init_seeds: Sequence[int], aligned_models: Sequence[str]) -> dict:
    """What the Section 3.3 page records for the book and the tests (:func:`prh_lib.report.record`)."""
    return {"n_pairs": n_pairs, "k": k, "chance": chance, "clip_q": clip_q,
            "random_init_seeds": list(random_init_seeds), "aligned_models": list(aligned_models),
            "table": table, "summary": summary}
