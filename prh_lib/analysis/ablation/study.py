"""The computation of Appendix G: k and N sweeps of mutual k-NN, scored raw, chance-corrected and calibrated.

:func:`k_sweep` and :func:`n_sweep` (seeded subsets, :func:`subsample_rows`) on one pair; :func:`run_ablation`
on every comparison; :func:`run_study` on every draw, written to the results table (:func:`sweep_rows`), and
:func:`aggregate_sweeps` reading it back. Re-exported by :mod:`prh_lib.pages.appg_k_n_ablation`, which holds the
page (tables, prose, verdicts).

References
----------
Herbst, Roschmann, Bouniot, Akata. "Where Does Alignment Emerge and What Does It Mean? A Closer Look at
the Platonic Representation Hypothesis", Appendix G.
Gröger, Wen, Brbic (2026), arXiv:2602.14486 (the calibrated score).
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from prh_lib.results import score_cache
from prh_lib.extract.features import LayerFeatures, check_aligned
from prh_lib.metrics.knn import mutual_knn_chance, mutual_knn_layerwise
from prh_lib.stats.calibration import permutation_test
from prh_lib.analysis.core import check_comparisons, find_peak, preprocessing_label
from prh_lib.analysis.layerwise import regime_of
from prh_lib.analysis.study import run_draws

#: Default neighbourhood sizes of the k sweep (those above N - 1 are dropped by :func:`k_grid`).
DEFAULT_KS = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200)

#: Default subsample sizes of the N sweep as fractions of all pairs.
DEFAULT_N_FRACTIONS = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)

SCORES = ("fixed", "max", "final")


def chance_corrected(score, n: int, k: int):
    """Mutual k-NN rescaled so that chance is 0 and a perfect score 1: ``(score - c) / (1 - c)``, ``c = k/(n-1)``.

    Parameters
    ----------
    score : float or ndarray
        Mutual k-NN scores in [0, 1].
    n : int >= 2
        Number of samples the scores were computed on.
    k : int in [1, n - 2]
        Neighbours (``k = n - 1`` makes every score 1 and the correction undefined).

    Returns
    -------
    float or ndarray
        In ``[-c / (1 - c), 1]``; negative below chance.

    Raises
    ------
    ValueError
        If ``n`` or ``k`` are out of range.

    References
    ----------
    Herbst et al., Appendix G; chance level of mutual k-NN: :func:`prh_lib.metrics.mutual_knn_chance`.
    """
    c = mutual_knn_chance(n, k)
    if k >= n - 1:
        raise ValueError(f"k={k} with n={n}: every neighbourhood is all other samples; the correction is undefined")
    out = (np.asarray(score, dtype=np.float64) - c) / (1.0 - c)
    return float(out) if np.ndim(out) == 0 else out


def k_grid(n: int, ks: Sequence[int] | None = None) -> list[int]:
    """Neighbourhood sizes to sweep for ``n`` samples.

    ``ks=None``: :data:`DEFAULT_KS` below ``n - 1`` (the largest k that leaves the chance correction defined is
    ``n - 2``). Explicit ``ks`` are checked, never dropped silently.

    Raises
    ------
    ValueError
        If an explicit k is outside ``[1, n - 2]``.
    """
    if ks is None:
        return [k for k in DEFAULT_KS if k <= n - 2]
    ks = [int(k) for k in ks]
    bad = [k for k in ks if not 1 <= k <= n - 2]
    if bad:
        raise ValueError(f"k values {bad} out of range [1, n - 2] = [1, {n - 2}] for n = {n} pairs")
    return ks


def ratio_grid(ns: Sequence[int], k_over_n: float, n_total: int) -> list[int]:
    """Sizes for a fixed-k/N sweep at which the integer k realises the ratio (Appendix G, fixed k/N).

    k must be an integer, ``k = max(1, round(k_over_n * n))``, so at a size where ``k_over_n * n`` is not one
    the realised ratio moves (k = 2 at N = 150 gives 0.013 for a target of 0.010) and with it the chance
    level, which the sweep is meant to hold fixed. Each size ``n`` is replaced by ``round(k / k_over_n)`` for
    its k (clipped to ``[k + 2, n_total]``); repeats are dropped, the order kept.

    Returns
    -------
    list of int
        Increasing sizes; ``n_total`` stays when it is in ``ns``.
    """
    out = []
    for n in ns:
        kn = max(1, int(round(k_over_n * n)))
        m = n if int(n) == int(n_total) else min(int(n_total), max(kn + 2, int(round(kn / k_over_n))))
        if m not in out:
            out.append(m)
    return sorted(out)


def n_grid(n_total: int, ns: Sequence[int] | None = None, *, k: int = 10) -> list[int]:
    """Subsample sizes to sweep out of ``n_total`` pairs.

    ``ns=None``: :data:`DEFAULT_N_FRACTIONS` of ``n_total`` (rounded), keeping sizes above ``k + 1`` so that
    ``k`` stays below ``n - 1``; always ends with ``n_total``. Explicit sizes are checked, never dropped.

    Raises
    ------
    ValueError
        If an explicit size is outside ``[k + 2, n_total]``.
    """
    if ns is None:
        grid = sorted({int(round(f * n_total)) for f in DEFAULT_N_FRACTIONS} | {n_total})
        return [n for n in grid if n >= k + 2]
    ns = [int(n) for n in ns]
    bad = [n for n in ns if not k + 2 <= n <= n_total]
    if bad:
        raise ValueError(f"subsample sizes {bad} out of range [k + 2, N] = [{k + 2}, {n_total}]")
    return ns


def _scores(x, y, k: int, fixed: tuple[int, int], device) -> dict:
    return _scores_of(mutual_knn_layerwise(x, y, k=k, device=device), fixed)


def _grams(x, y, device):
    """The mutual k-NN engine, both stacks' similarity matrices with their valid rows, and ``n``."""
    from prh_lib.metrics import _validation as V
    from prh_lib.metrics._engines import get_engine

    engine, dev = get_engine("mutual_knn"), V.resolve_device(device, x, y)
    X = V.to_tensor(x, "X", ndim=3, device=dev, check_finite=False)
    Y = V.to_tensor(y, "Y", ndim=3, device=dev, check_finite=False)
    return engine, (engine.gram(X), engine.gram(Y)), V.check_same_samples(X, Y)


def _matrices_at_ks(x, y, ks, device) -> dict[int, np.ndarray]:
    """The layer-pair mutual k-NN matrix at every k of ``ks``, each stack's similarity matrices formed and
    each row sorted once (:func:`prh_lib.metrics._neighbours.hoods_at_ks`).

    The same bits as :func:`prh_lib.metrics.mutual_knn_layerwise` at each k (the same per-layer similarity,
    then the neighbourhoods of each k selected from it); checked in ``tests/test_ablation.py``.
    """
    from prh_lib.metrics import _validation as V
    from prh_lib.metrics._bits import Backend
    from prh_lib.metrics._neighbours import hoods_at_ks

    engine, grams, n = _grams(x, y, device)
    ks = [V.check_informative_k(V.check_k(k, n), n, "mutual_knn") for k in dict.fromkeys(ks)]
    hx, hy = (hoods_at_ks(G, np.asarray(v), ks, bk=Backend(G.device)) for G, v in grams)
    return {k: engine.score(hx[k], hy[k]) for k in ks}


def _subset_matrices(x, y, subsets, device) -> list[np.ndarray]:
    """The layer-pair mutual k-NN matrix on each subset ``(rows, k)`` of the samples (``rows`` sorted, distinct),
    read off both stacks' similarities and candidates on all samples (``_neighbours.hoods_of_subsample``): equal to
    :func:`prh_lib.metrics.mutual_knn_layerwise` of the subset up to the float32 round-off of its similarities (a
    GEMM of another shape); checked in ``tests/test_ablation.py``."""
    from prh_lib.metrics._neighbours import candidates

    engine, grams, n = _grams(x, y, device)
    T = max(candidates(k, n, len(rows)) for rows, k in subsets)
    sides = [(G, valid, engine.subsample_candidates(G, T)) for G, valid in grams]
    out = []
    for rows, k in subsets:
        it = torch.from_numpy(np.asarray(rows, dtype=np.int64)).to(sides[0][0].device)
        out.append(engine.score(*(engine.subsample_state(G, valid, c, it, k=k) for G, valid, c in sides)))
    return out


def _scores_of(m: np.ndarray, fixed: tuple[int, int]) -> dict:
    i, j, best = find_peak(m)
    return {"fixed": float(m[fixed]), "max": best, "final": float(m[-1, -1]), "max layer x": int(i),
            "max layer y": int(j)}


def _calibrated(x, y, k, fixed, n_permutations, seed, device) -> dict:
    res = permutation_test(x[fixed[0]], y[fixed[1]], k=k, n_permutations=n_permutations, seed=seed, device=device)
    return {"calibrated fixed": res.calibrated, "null mean fixed": float(np.mean(res.null)), "p fixed": res.p_value}


def _row(n, k, scores, extra) -> dict:
    row = {"n": n, "k": k, "chance": mutual_knn_chance(n, k), **extra}
    for name in SCORES:
        row[f"raw {name}"] = scores[name]
        row[f"corrected {name}"] = chance_corrected(scores[name], n, k)
    row["max layer x"], row["max layer y"] = scores["max layer x"], scores["max layer y"]
    return row


def _check_pair(x: LayerFeatures, y: LayerFeatures, layer_pair):
    check_aligned(x, y)
    if layer_pair is None:
        return None
    i, j = (int(v) for v in layer_pair)
    if not (-x.n_layers <= i < x.n_layers and -y.n_layers <= j < y.n_layers):
        raise ValueError(f"layer_pair {layer_pair} out of range for {x.n_layers} x {y.n_layers} layers")
    return i % x.n_layers, j % y.n_layers


@score_cache.memoize("k_sweep")
def k_sweep(x: LayerFeatures, y: LayerFeatures, *, ks: Sequence[int] | None = None, layer_pair=None,
            reference_k: int = 10, n_permutations: int = 0, seed: int = 0, device=None) -> pd.DataFrame:
    """Mutual k-NN over a range of k on all pairs (Appendix G, the k ablation).

    Parameters
    ----------
    x, y : LayerFeatures
        Two models' features on the same pairs (checked), e.g. after :func:`prh_lib.analysis.clip_features`.
    ks : sequence of int, optional
        Neighbourhood sizes (default :func:`k_grid`).
    layer_pair : (int, int), optional
        The fixed layer pair; default the peak of mutual k-NN at ``reference_k``.
    reference_k : int
        k at which the fixed layer pair is chosen (the paper: 10).
    n_permutations : int
        Permutations for the calibrated score at the fixed pair; 0 (default) skips it.
    seed : int
        Seed of the permutations.
    device : str, optional

    Returns
    -------
    DataFrame
        One row per k: ``n``, ``k``, ``chance`` (``k/(N-1)``), ``raw``/``corrected`` ``fixed``/``max``/``final``,
        the layer pair of the maximum, and with permutations ``calibrated fixed``, ``null mean fixed``,
        ``p fixed``. ``attrs["layer_pair"]`` holds the fixed pair and its labels.

    Raises
    ------
    FeatureMismatchError
        If ``x`` and ``y`` hold different rows.
    ValueError
        If a k is out of range or ``layer_pair`` is not a layer pair of ``x`` and ``y``.

    References
    ----------
    Herbst et al., Appendix G (effect of k and N); Huh et al. (2024), App. A (mutual k-NN).
    """
    fixed = _check_pair(x, y, layer_pair)
    n = len(x.sample_ids)
    ks = k_grid(n, ks)
    k_ref = k_grid(n, [reference_k])[0]
    with warnings.catch_warnings():  # degenerate layers (a ViT's CLS at embed) are NaN by definition
        warnings.filterwarnings("ignore", message=".*degenerate.*", category=RuntimeWarning)
        mats = _matrices_at_ks(x.values, y.values, [k_ref, *ks], device)
    if fixed is None:
        s = _scores_of(mats[k_ref], (0, 0))
        fixed = (s["max layer x"], s["max layer y"])
    rows = []
    for k in ks:
        extra = (_calibrated(x.values, y.values, k, fixed, n_permutations, seed, device) if n_permutations else {})
        rows.append(_row(n, k, _scores_of(mats[k], fixed), extra))
    df = pd.DataFrame(rows)
    df.attrs["layer_pair"] = {"x": x.layer_labels[fixed[0]], "y": y.layer_labels[fixed[1]], "index": list(fixed)}
    return df


def subsample_rows(n_total: int, n: int, *, seed: int) -> np.ndarray:
    """Rows of one subsample: ``n`` of ``n_total`` drawn without replacement with ``default_rng(seed)``, sorted.

    Raises
    ------
    ValueError
        If ``n`` is not in ``[1, n_total]``.
    """
    if not 1 <= n <= n_total:
        raise ValueError(f"cannot draw n={n} of {n_total} rows")
    return np.sort(np.random.default_rng(seed).choice(n_total, size=n, replace=False))


@score_cache.memoize("n_sweep")
def n_sweep(x: LayerFeatures, y: LayerFeatures, *, ns: Sequence[int] | None = None, k: int = 10,
            k_over_n: float | None = None, n_seeds: int = 5, seed: int = 0, layer_pair=None,
            n_permutations: int = 0, device=None) -> pd.DataFrame:
    """Mutual k-NN on random subsets of the pairs, several seeds per size (Appendix G, the N ablation).

    Parameters
    ----------
    x, y, n_permutations, device
        As in :func:`k_sweep`.
    ns : sequence of int, optional
        Subsample sizes (default :func:`n_grid`).
    k : int
        Neighbours at fixed k (and the k at which the fixed layer pair is chosen).
    k_over_n : float, optional
        If given, k scales with the subsample: ``k = max(1, round(k_over_n * n))`` (fixed k/N, so the chance
        level stays constant); otherwise k is fixed. With the default sizes, each size is moved to the one at
        which that integer k gives the ratio (:func:`ratio_grid`: 150 of 1,000 pairs at k/N = 0.01 would run
        k = 2, k/N = 0.013, so it becomes 200); explicit ``ns`` are kept as given (their rows say their k).
    n_seeds : int >= 1
        Subsamples per size, drawn with seeds ``seed, seed + 1, ...`` (:func:`subsample_rows`). At the full
        size every subsample is all rows, and the scores equal the plain scores exactly.
    seed : int
    layer_pair : (int, int), optional
        The fixed layer pair; default the peak of mutual k-NN on all pairs at ``k``.

    Returns
    -------
    DataFrame
        One row per (size, seed): ``n``, ``seed``, ``k``, ``chance``, ``raw``/``corrected``
        ``fixed``/``max``/``final``, the layer pair of the maximum, optionally the calibrated score.
        ``attrs`` hold the fixed layer pair and the regime (``"fixed k"`` or ``"fixed k/N"``).

    Raises
    ------
    FeatureMismatchError
        As in :func:`k_sweep`.
    ValueError
        If a size is out of range, ``n_seeds < 1``, ``k_over_n`` not in (0, 1), or ``k`` too large for the
        smallest subsample.

    References
    ----------
    Herbst et al., Appendix G (effect of k and N).
    """
    fixed = _check_pair(x, y, layer_pair)
    n_total = len(x.sample_ids)
    if int(n_seeds) < 1:
        raise ValueError(f"n_seeds must be >= 1; got {n_seeds}")
    if k_over_n is not None and not 0 < k_over_n < 1:
        raise ValueError(f"k_over_n must lie in (0, 1); got {k_over_n}")
    k_grid(n_total, [k])
    if fixed is None:
        s = _scores(x.values, y.values, k, (0, 0), device)
        fixed = (s["max layer x"], s["max layer y"])
    default_grid = ns is None
    ns = n_grid(n_total, ns, k=1 if k_over_n is not None else k)
    if k_over_n is not None and default_grid:
        ns = ratio_grid(ns, k_over_n, n_total)
    subsets = []
    for n in ns:
        kn = max(1, int(round(k_over_n * n))) if k_over_n is not None else k
        k_grid(n, [kn])
        subsets += [(n, kn, s, subsample_rows(n_total, n, seed=s)) for s in range(int(seed), int(seed) + int(n_seeds))]
    rows = []
    for (n, kn, s, idx), m in zip(subsets, _subset_matrices(x.values, y.values, [(i, kn) for _, kn, _, i in subsets],
                                                            device)):
        extra = {"seed": s}
        if n_permutations:
            extra.update(_calibrated(x.values[:, idx], y.values[:, idx], kn, fixed, n_permutations, s, device))
        rows.append(_row(n, kn, _scores_of(m, fixed), extra))
    df = pd.DataFrame(rows)
    df.attrs["layer_pair"] = {"x": x.layer_labels[fixed[0]], "y": y.layer_labels[fixed[1]], "index": list(fixed)}
    df.attrs["regime"] = "fixed k/N" if k_over_n is not None else "fixed k"
    return df


def summarize(df: pd.DataFrame, *, by: str = "n") -> pd.DataFrame:
    """Mean and standard deviation over seeds of every score column of :func:`n_sweep`, per ``by`` value.

    Returns
    -------
    DataFrame
        Indexed by ``by``; columns ``(score, "mean")``, ``(score, "std")`` for each score, plus ``k`` and
        ``chance`` (constant within a size) and ``seeds`` (count).
    """
    score_cols = [c for c in df.columns if c.split(" ")[0] in ("raw", "corrected", "calibrated", "null")]
    g = df.groupby(by)
    out = g[score_cols].agg(["mean", "std"])
    out[("k", "")] = g["k"].first()
    out[("chance", "")] = g["chance"].first()
    out[("seeds", "")] = g.size()
    return out


def run_ablation(features: dict, comparisons, *, ks: Sequence[int] | None = None, ns: Sequence[int] | None = None,
                 k: int = 10, n_seeds: int = 5, seed: int = 0, n_permutations: int = 0, device=None) -> dict:
    """The k sweep and both N sweeps (fixed k, fixed k/N) for each ``(x, y)`` model pair.

    The fixed layer pair of every sweep is the peak of mutual k-NN at ``k`` on all pairs; the fixed-k/N sweep
    keeps ``k / N_total`` (e.g. 10/239) as the ratio.

    Parameters
    ----------
    features : dict of str to LayerFeatures
        Features of every model of ``comparisons`` on the same pairs (clip them first if wanted).
    comparisons : sequence of (str, str)
    ks, ns, k, n_seeds, seed, n_permutations, device
        As in :func:`k_sweep` and :func:`n_sweep`.

    Returns
    -------
    dict
        ``{"k": {label: DataFrame}, "n fixed k": {...}, "n fixed k/N": {...}}`` with labels ``"x × y"``.

    Raises
    ------
    KeyError
        If a model of ``comparisons`` has no features.
    """
    check_comparisons(features, comparisons)
    out: dict[str, dict] = {"k": {}, "n fixed k": {}, "n fixed k/N": {}}
    for x_name, y_name in comparisons:
        x, y = features[x_name], features[y_name]
        label = f"{x_name} × {y_name}"
        n_total = len(x.sample_ids)
        ksw = k_sweep(x, y, ks=ks, reference_k=k, n_permutations=n_permutations, seed=seed, device=device)
        fixed = tuple(ksw.attrs["layer_pair"]["index"])
        out["k"][label] = ksw
        out["n fixed k"][label] = n_sweep(x, y, ns=ns, k=k, n_seeds=n_seeds, seed=seed, layer_pair=fixed,
                                          n_permutations=n_permutations, device=device)
        out["n fixed k/N"][label] = n_sweep(x, y, ns=ns, k=k, k_over_n=k / n_total, n_seeds=n_seeds, seed=seed,
                                            layer_pair=fixed, n_permutations=n_permutations, device=device)
    return out


# ------------------------------------------------------------------------------------ datasets x draws

#: sweep key of :func:`run_ablation` -> ``quantity`` prefix in the results table
SWEEP_QUANTITY = {"k": "k-sweep", "n fixed k": "n-sweep:fixed-k", "n fixed k/N": "n-sweep:fixed-ratio"}


def sweep_rows(results: dict, *, regimes: dict | None = None) -> list[dict]:
    """Results-table rows of one :func:`run_ablation` output: one per (sweep, pair, grid point, subset, score).

    ``quantity`` is ``"<sweep>:<score>"`` (e.g. ``"k-sweep:fixed"``, ``"n-sweep:fixed-ratio:max"``); ``k`` and
    ``n`` are the row's own; extra columns ``subset_seed`` (N sweeps), ``corrected`` and ``regime``. The
    calibrated score and p of the fixed layer pair go to ``calibrated`` and ``p``.
    """
    rows = []
    for sweep, frames in results.items():
        for label, df in frames.items():
            x, y = label.split(" × ")
            lp = df.attrs.get("layer_pair", {})
            for _, r in df.iterrows():
                for kind in SCORES:
                    row = {"model_x": x, "model_y": y, "quantity": f"{SWEEP_QUANTITY[sweep]}:{kind}",
                           "k": int(r["k"]), "n": int(r["n"]), "score": float(r[f"raw {kind}"]),
                           "corrected": float(r[f"corrected {kind}"]),
                           "regime": (regimes or {}).get(label, ""),
                           "subset_seed": int(r["seed"]) if "seed" in r and pd.notna(r.get("seed")) else None}
                    if kind == "fixed":
                        row |= {"layer_x": lp.get("x"), "layer_y": lp.get("y")}
                        if "calibrated fixed" in r:
                            row |= {"calibrated": float(r["calibrated fixed"]), "p": float(r["p fixed"])}
                    rows.append(row)
    return rows


def run_study(draws, comparisons, *, chapter: str, params: dict, ks=None, ns=None, k: int = 10, n_seeds: int = 5,
              n_permutations: int = 0, clip_q: float | None = 0.95, clip: str | None = "stack", device: str = "cpu",
              dtype: str = "float32", batch_size: int = 32, num_threads: int | None = None, root=None) -> dict:
    """:func:`run_ablation` on every draw; every score written to the results table (:func:`sweep_rows`).

    The N sweep's subsets are seeded from the draw's seed, so draws differ in their subsets too.

    Returns
    -------
    dict
        ``(dataset, draw) -> run_ablation output``.
    """
    def score(d, feats):
        regimes = {f"{x} × {y}": regime_of(feats[x].meta.get("modality", ""), feats[y].meta.get("modality", ""))
                   for x, y in comparisons}
        res = run_ablation(feats, comparisons, ks=ks, ns=ns, k=k, n_seeds=n_seeds, seed=100 * d.seed,
                           n_permutations=n_permutations, device=None if device == "cpu" else device)
        return res, sweep_rows(res, regimes=regimes)

    return run_draws(draws, comparisons, score, chapter=chapter, params=params, clip_q=clip_q, clip=clip,
                     device=device, dtype=dtype, batch_size=batch_size, num_threads=num_threads, n_from_draw=False,
                     root=root, metric="mutual_knn", preprocessing=preprocessing_label(clip_q, clip))


def aggregate_sweeps(df: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std over draws of every grid point, after averaging the N sweeps' subsets within each draw.

    Returns
    -------
    DataFrame
        Columns dataset, model_x, model_y, regime, quantity, k, n, ``score_mean``, ``score_std``, ``corrected_mean``,
        ``corrected_std``, ``calibrated_mean``, ``calibrated_std``, ``n_draws``, ``single_draw``, ``chance`` (k/(n-1)).
    """
    from prh_lib import results as results_table

    df = results_table.expand_extra_columns(df)
    keys = ["dataset", "model_x", "model_y", "regime", "quantity", "k", "n"]
    per_draw = df.groupby(keys + ["draw"], dropna=False)[["score", "corrected", "calibrated"]].mean().reset_index()
    agg = results_table.aggregate(per_draw, by=keys, values=["score", "corrected", "calibrated"])
    agg["chance"] = agg["k"].astype(float) / (agg["n"].astype(float) - 1)
    return agg
