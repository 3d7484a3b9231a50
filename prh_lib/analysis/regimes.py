"""The computation of Section 3.3: the comparisons of the four regimes, scored on one draw and over draws.

:func:`regime_comparisons` lists the comparisons (:class:`Comparison`, in the order of :data:`REGIMES`);
:func:`regime_table` and :func:`comparison_table` tabulate one draw;
:func:`run_study` scores every comparison and its control floors (:mod:`prh_lib.analysis.controls`) on every
draw and writes them to the results table (:func:`regime_rows`). Re-exported by
:mod:`prh_lib.pages.sec3_3_regimes`, which documents the regimes and holds the page.

References
----------
Herbst, Roschmann, Bouniot, Akata. "Where Does Alignment Emerge and What Does It Mean? A Closer Look at
the Platonic Representation Hypothesis", Section 3.3, Figure 5, Appendix E.
Groeger, Wen, Brbic (2026), arXiv:2602.14486, Sec. 5 (calibration).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import pandas as pd

from prh_lib.extract.features import LayerFeatures
from prh_lib.validation import check_model_pairs, check_seeds
from prh_lib.analysis.controls import control_floors, random_init_name
from prh_lib.analysis.core import prefetch_features
from prh_lib.analysis.layerwise import compare_pairs
from prh_lib.analysis.study import run_draws

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
    out = [Comparison(random_init_name(x, s), random_init_name(y, s), "random-init", f"{x} × {y} (seed {s})", s)
           for x, y in random_init for s in seeds]
    out += [Comparison(x, y, "unimodal", f"{x} × {y}") for x, y in unimodal]
    out += [Comparison(f"{m}:vision", f"{m}:text", "aligned", f"{m} (vision × text)") for m in aligned]
    out += [Comparison(x, y, "same-modality", f"{x} × {y}") for x, y in same_modality]
    return out


def _calibrate_value(value: float, threshold: float) -> float:
    """The calibration map of :func:`prh_lib.stats.calibrate` at a fixed threshold ``tau``."""
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
    k, n_permutations, alpha, n_boot, seed, device
        As in :func:`prh_lib.analysis.core.score_pair` (each comparison is scored by it).

    Returns
    -------
    pandas.DataFrame
        One row per comparison, indexed by its label, with columns ``regime`` (a key of :data:`REGIMES`), ``x``, ``y``,
        ``seed``, ``max`` (mutual k-NN maximised over layer pairs, in [0, 1]), ``max layer x``, ``max layer y``,
        ``max depth x``, ``max depth y`` (relative depth in [0, 1]), ``max low`` and ``max high`` (bootstrap interval at
        that layer pair), ``final`` (last layer x last layer), ``projection`` (joint-space x joint-space, for
        comparisons whose two models both end in a ``"projection"`` layer, else NaN), ``shuffled (max)`` (maximum with
        the pairing shuffled), ``calibrated`` (selection-aware calibrated maximum, in [0, 1]), ``calibrated low`` and
        ``calibrated high`` (the bootstrap interval mapped through the same calibration, the null threshold held fixed),
        ``threshold`` (the null's 1 - alpha quantile of the maximum) and ``p`` (its permutation p-value).

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
        dx, dy = m.relative_depth()
        has_projection = m.x_labels[-1] == PROJECTION and m.y_labels[-1] == PROJECTION
        tau = r.calibration.threshold_max
        rows.append({
            "comparison": c.label, "regime": c.regime, "x": c.x, "y": c.y, "seed": c.seed,
            "max": best, "max layer x": m.x_labels[i], "max layer y": m.y_labels[j],
            "max depth x": dx, "max depth y": dy,
            "max low": r.peak_ci.low, "max high": r.peak_ci.high,
            "final": m.final, "projection": m.final if has_projection else np.nan,
            "shuffled (max)": float(np.nanmax(r.control.scores)),
            "calibrated": r.calibration.calibrated_max,
            "calibrated low": _calibrate_value(r.peak_ci.low, tau),
            "calibrated high": _calibrate_value(r.peak_ci.high, tau),
            "threshold": tau, "p": r.calibration.p_max,
        })
    return pd.DataFrame(rows).set_index("comparison")


def comparison_table(comparisons: Sequence[Comparison]) -> pd.DataFrame:
    """The comparisons as a table indexed by label: ``regime``, ``x``, ``y``."""
    return pd.DataFrame(list(comparisons), columns=list(Comparison._fields)).set_index("label")[["regime", "x", "y"]]


# --------------------------------------------------------------------------------------------- datasets × draws

#: Quantities of the regime rows in the results table (controls: ``"control:<kind>"``, see ``controls``).
PEAK, FINAL, SHUFFLED = "peak", "final", "control:shuffled"


def regime_rows(table: pd.DataFrame, *, k: int, n: int, clip_q: float | None) -> pd.DataFrame:
    """The rows of one draw's :func:`regime_table` in the results-table schema.

    Parameters
    ----------
    table : DataFrame
        From :func:`regime_table` (one draw).
    k, n : int
        Neighbours and number of pairs of the draw.
    clip_q : float or None
        Outlier clipping applied to the features (recorded as ``preprocessing``).

    Returns
    -------
    pandas.DataFrame
        Per comparison a ``"peak"`` row (maximum over layer pairs, its layers and relative depths,
        calibrated maximum, tau, p, and the extra columns ``ci_low``/``ci_high`` and
        ``calibrated_low``/``calibrated_high``), a ``"final"`` row (last layers), a ``"projection"`` row
        (joint space, aligned models only) and a ``"control:shuffled"`` row (maximum with the pairing
        shuffled). Every row carries the extra columns ``regime``, ``comparison`` and ``init_seed``.
    """
    prep = f"clip_outliers(q={clip_q})" if clip_q not in (None, 1) else "none"
    rows = []
    for label, r in table.iterrows():
        common = {"model_x": r["x"], "model_y": r["y"], "metric": "mutual_knn", "k": k, "n": n,
                  "preprocessing": prep, "regime": r["regime"], "comparison": label,
                  "init_seed": None if pd.isna(r["seed"]) else int(r["seed"])}
        rows.append(common | {"quantity": PEAK, "score": r["max"], "layer_x": r["max layer x"],
                              "layer_y": r["max layer y"], "depth_x": r["max depth x"], "depth_y": r["max depth y"],
                              "calibrated": r["calibrated"], "tau": r["threshold"], "p": r["p"],
                              "ci_low": r["max low"], "ci_high": r["max high"],
                              "calibrated_low": r["calibrated low"], "calibrated_high": r["calibrated high"]})
        rows.append(common | {"quantity": FINAL, "score": r["final"], "depth_x": 1.0, "depth_y": 1.0})
        if np.isfinite(r["projection"]):
            rows.append(common | {"quantity": PROJECTION, "score": r["projection"], "layer_x": PROJECTION,
                                  "layer_y": PROJECTION, "depth_x": 1.0, "depth_y": 1.0})
        rows.append(common | {"quantity": SHUFFLED, "score": r["shuffled (max)"]})
    return pd.DataFrame(rows)


def control_pairs(comparisons: Sequence[Comparison]) -> list[tuple[str, str]]:
    """The trained pairs whose control floors are measured: the unimodal and same-modality comparisons."""
    return [(c.x, c.y) for c in comparisons if c.regime in ("unimodal", "same-modality")]


def language_only(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """The comparisons whose two models are language models (read from each model's identity, no weights
    loaded): what a text-only dataset (captions without images, e.g. the COCO val2017 captions) can score."""
    from prh_lib.extract import model_identity

    modality = {}

    def lang(name):
        if name not in modality:
            modality[name] = model_identity(name)["modality"]
        return modality[name] == "language"

    return [c for c in comparisons if lang(c.x) and lang(c.y)]


def run_study(draws, comparisons: Sequence[Comparison], *, chapter: str, params: dict, k: int = 10,
              clip_q: float | None = 0.95, n_permutations: int = 200, alpha: float = 0.05, n_boot: int = 200,
              control_seed: int = 0, svd_components: int | None = 100, device: str = "cpu",
              dtype: str = "float32", batch_size: int = 32, root=None) -> dict[str, str]:
    """Score every regime and its control floors on every draw, writing each draw's rows to the results table.

    Parameters
    ----------
    draws, chapter, params, device, dtype, batch_size, root
        As in :func:`prh_lib.analysis.study.run_draws`. A text-only dataset (captions without images,
        :func:`prh_lib.data.is_text_only`) scores only the language × language comparisons and their floors.
    comparisons : sequence of Comparison
        From :func:`regime_comparisons`.
    k, clip_q, n_permutations, alpha, n_boot
        As in :func:`regime_table` and :func:`prh_lib.analysis.prepare_features`; the draw's seed seeds
        the permutations, the bootstrap and the shuffled control.
    control_seed, svd_components
        Initialisation seed of the random-init controls and size of the SVD bag of words
        (:func:`prh_lib.analysis.controls.control_floors`).

    Returns
    -------
    dict of str to str
        Modality (``"vision"`` / ``"language"``) of every trained model named by the comparisons.
    """
    from prh_lib.data.text_only import is_text_only

    image_draws = [d for d in draws if not is_text_only(d.pairs)]
    text_draws = [d for d in draws if is_text_only(d.pairs)]
    text_comparisons = language_only(comparisons) if text_draws else []
    if text_draws and not text_comparisons:
        raise ValueError(f"text-only dataset(s) {sorted({d.dataset for d in text_draws})} need a language × language "
                         "comparison (same_modality_pairs); none of the comparisons has two language models")
    for group, comps in ((image_draws, list(comparisons)), (text_draws, text_comparisons)):
        # every model and every control's random-init twin, on every draw, before the loop: each loaded once
        twins = sorted({random_init_name(m, control_seed) for pair in control_pairs(comps) for m in pair})
        if group:
            prefetch_features(comps, group, models=twins, device=device, dtype=dtype, batch_size=batch_size)

    def comparisons_of(d):
        return text_comparisons if is_text_only(d.pairs) else list(comparisons)

    def score(d, feats):
        table = regime_table(feats, comparisons_of(d), k=k, n_permutations=n_permutations, alpha=alpha,
                             n_boot=n_boot, seed=d.seed, device=device)
        return None, regime_rows(table, k=k, n=len(d.pairs), clip_q=clip_q)

    def floors(d, feats):  # after the draw's rows: the control floors write their own
        if trained := control_pairs(comparisons_of(d)):
            control_floors(feats, trained, d.pairs, chapter=chapter, params=params,
                           dataset=d.dataset, draw=d.draw, draw_seed=d.seed, k=k, n_permutations=n_permutations,
                           alpha=alpha, seed=control_seed, svd_components=svd_components, clip_q=clip_q,
                           device=device, dtype=dtype, batch_size=batch_size, root=root)
        modality.update({m: f.meta.get("modality") for m, f in feats.items() if "@random-init:" not in m})

    modality = {}
    run_draws(draws, comparisons_of, score, chapter=chapter, params=params, clip_q=clip_q, device=device, dtype=dtype,
              batch_size=batch_size, prefetch=False, then=floors, n_from_draw=False, root=root)
    return modality
