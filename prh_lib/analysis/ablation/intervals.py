"""App. G with intervals over images: chance-corrected scores along the k sweep, and the regimes' order tested.

The claim "larger k raises scores but keeps the order of the regimes" is read on chance-corrected scores
``(s − c)/(1 − c)``, ``c = k/(N − 1)`` (raw scores rise with chance). Here every point of the k sweep at a
pair's fixed layer pair gets an interval over images by half-sampling (:func:`prh_lib.stats.bootstrap_ci`
with ``method="subsample"``, ``fraction=0.5``: half of the images without replacement, the same k, each
replicate chance-corrected at its own size; the centred interval of
:func:`prh_lib.stats.intervals.bootstrap_interval`, as for the held-out peaks, whose module docstring says
why not the bootstrap with replacement). A k too large for half the images (``k > N/2 − 2``) gets no interval.
Every pair and every k is subsampled with the *same* images (same ``N``, ``n_boot`` and ``seed``), so a
difference between two regimes' mean corrected scores at one k has a paired interval: the order of two regimes
is resolved at that k when that interval excludes 0.

References
----------
Herbst et al. (arXiv 2611.12869), App. G; Politis, Romano & Wolf (1999), "Subsampling", Ch. 2.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from prh_lib.results import score_cache
from prh_lib.stats.bootstrap import bootstrap_ci
from prh_lib.stats.bootstrap import replicate_size
from prh_lib.stats.decision import Test
from prh_lib.stats.intervals import bootstrap_interval, paired_interval
from prh_lib.analysis.ablation.study import chance_corrected


def _half_size(n: int) -> int:
    """Images in one of ``bootstrap_ci``'s half-samples (``fraction=0.5``), whose chance level corrects them."""
    return replicate_size(n, "subsample", 0.5)


def _corrected_bootstrap(x, y, *, k: int, n_boot: int, seed: int):
    """Raw estimate on all images and half-sampling replicates (NaN when k is too large for half the images)."""
    def compute():
        if k > _half_size(len(x)) - 2:
            from prh_lib.metrics.knn import mutual_knn
            return float(mutual_knn(x, y, k=k)), np.full(n_boot, np.nan)
        b = bootstrap_ci(x, y, k=k, n_boot=n_boot, seed=seed, method="subsample", fraction=0.5,
                         warn_outside=False)  # only the replicates' spread is read (centred interval)
        return float(b.estimate), np.asarray(b.replicates, dtype=np.float64)

    key = {"x": score_cache._values_digest(x), "y": score_cache._values_digest(y), "k": int(k),
           "n_boot": int(n_boot), "seed": int(seed), "resampling": "subsample:0.5"}
    return score_cache.cached("k_sweep_bootstrap", key, compute)


def k_sweep_intervals(features: Mapping, fixed: Mapping[str, tuple[int, int]], regimes: Mapping[str, str], *,
                      ks: Sequence[int], n_boot: int = 100, seed: int = 0) -> pd.DataFrame:
    """Chance-corrected mutual k-NN at each pair's fixed layer pair for each k, with an interval over images.

    Parameters
    ----------
    features : mapping of str to LayerFeatures
        Features of every model on the same images (clipped as the sweep's).
    fixed : mapping of str to (int, int)
        ``"x × y"`` -> the fixed layer pair (indices) of its k sweep.
    regimes : mapping of str to str
        ``"x × y"`` -> regime.
    ks : sequence of int
        Values of k (each below ``N - 1``).
    n_boot, seed : int
        Bootstrap replicates and their seed (the same for every pair and k: paired).

    Returns
    -------
    DataFrame
        One row per (pair, k): ``pair``, ``regime``, ``k``, ``n``, ``chance``, ``raw``, ``corrected``, ``low``,
        ``high`` (centred 95 % interval of the corrected score, NaN for ``k > N/2 − 2``) and ``reps`` (corrected
        replicates, ndarray of shape (n_boot,)).

    Raises
    ------
    ValueError
        A k out of range (from :func:`prh_lib.stats.bootstrap_ci`); KeyError for a pair without features.
    """
    rows = []
    for label, (i, j) in fixed.items():
        xname, yname = label.split(" × ")
        fx, fy = features[xname], features[yname]
        n = len(fx.sample_ids)
        X, Y = fx.values[i], fy.values[j]
        for k in ks:
            est, reps = _corrected_bootstrap(X, Y, k=int(k), n_boot=n_boot, seed=seed)
            # each replicate is corrected at its own size (half the images, the same k: a higher chance level)
            c_est = chance_corrected(est, n, int(k))
            c_reps = (chance_corrected(reps, _half_size(n), int(k)) if int(k) <= _half_size(n) - 2
                      else np.full(len(reps), np.nan))
            lo, hi = bootstrap_interval(c_est, c_reps)
            rows.append({"pair": label, "regime": regimes.get(label, ""), "k": int(k), "n": n,
                         "chance": int(k) / (n - 1), "raw": est, "corrected": float(c_est), "low": lo, "high": hi,
                         "reps": np.asarray(c_reps, dtype=np.float64)})
    return pd.DataFrame(rows)


def draw_intervals(draw, comparisons, run: dict, *, n_boot: int = 100, seed: int = 0, clip_q: float | None = 0.95,
                   clip: str | None = "stack", device: str = "cpu", dtype: str = "float32",
                   batch_size: int = 32) -> pd.DataFrame:
    """:func:`k_sweep_intervals` on one draw of the study, at the fixed layer pairs and ks of its k sweep.

    Parameters
    ----------
    draw : prh_lib.data.study.Draw
    comparisons : sequence of (str, str)
    run : dict
        :func:`prh_lib.pages.appg_k_n_ablation.run_ablation` output of that draw (its ``"k"`` sweeps give the fixed
        layer pairs and the ks).
    n_boot, seed
        As in :func:`k_sweep_intervals`.
    clip_q, clip, device, dtype, batch_size
        Features as the study prepared them (:func:`prh_lib.analysis.prepare_features`; cached).
    """
    from prh_lib.analysis.core import prepare_features
    from prh_lib.analysis.layerwise import regime_of

    feats = prepare_features(comparisons, draw.pairs, clip_q=clip_q, clip=clip, device=device, dtype=dtype,
                             batch_size=batch_size)
    fixed, regimes, ks = {}, {}, set()
    for x, y in comparisons:
        label = f"{x} × {y}"
        sweep = run["k"][label]
        fixed[label] = tuple(int(v) for v in sweep.attrs["layer_pair"]["index"])
        regimes[label] = regime_of(feats[x].meta.get("modality", ""), feats[y].meta.get("modality", ""))
        ks |= set(int(v) for v in sweep["k"])
    return k_sweep_intervals(feats, fixed, regimes, ks=sorted(ks), n_boot=n_boot, seed=seed)


def regime_order_tests(intervals: pd.DataFrame):
    """The paired tests of "the regimes keep their order at every k".

    The order is that of the regimes' mean corrected scores at the smallest k; at every k, each regime is tested
    against the next one in that order: the difference of their mean corrected scores (mean over the regime's
    pairs, replicate by replicate) with its paired interval, against 0. A k without intervals (too large for
    half the images) is not tested.

    Returns
    -------
    (list of prh_lib.stats.decision.Test, tuple of str)
        The tests and the order tested (highest first); no tests with fewer than two regimes.
    """
    if intervals.empty:
        return [], ()
    means = {}
    for (k, regime), g in intervals.groupby(["k", "regime"]):
        means[(k, regime)] = (float(g["corrected"].mean()), np.mean(np.stack(g["reps"].to_list()), axis=0))
    ks = sorted({k for k, _ in means})
    first = sorted({r for kk, r in means if kk == ks[0]}, key=lambda r: -means[(ks[0], r)][0])
    tests = []
    for k in ks:
        for a, b in zip(first, first[1:]):
            if (k, a) not in means or (k, b) not in means:
                continue
            (ea, ra), (eb, rb) = means[(k, a)], means[(k, b)]
            if not (np.isfinite(ra).any() and np.isfinite(rb).any()):
                continue
            lo, hi = paired_interval(ra, rb, estimates=(ea, eb))
            tests.append(Test(f"k = {k}: {a} − {b} (mean chance-corrected, interval over images)",
                                     ea - eb, lo, hi, 0.0))
    return tests, tuple(first)


def fixed_ratio_intervals(rows: pd.DataFrame, *, dataset: str, quantity: str = "n-sweep:fixed-ratio:fixed",
                          ci: float = 0.95) -> pd.DataFrame:
    """Relative spread of the N sweep at fixed k/N per pair, with a 95 % interval over the image subsets.

    The statistic is that of ``G/fixed-ratio``: the mean raw score at each N (over caption draws and the random image
    subsets of size N within each draw), then ``(max − min) / mean`` over the N grid. Each subset is a random sample of
    N images, so the scores' spread at one N is the image-sampling variation of that mean (at the full N every subset is
    the whole set and only the caption draws vary). A max − min of noisy means is biased upward, and a bootstrap of it
    is biased further (its replicates sit above the estimate), so the interval is built from *simultaneous* intervals of
    the means instead: normal intervals ``mean ± z se`` at every N with Bonferroni's ``z = Φ⁻¹(1 − (1 − ci)/(2 m))``
    over the ``m`` sizes. With probability at least ``ci`` every true mean lies in its interval, so the true spread lies
    in ``[max(0, max L − min U), max U − min L]`` (divided by the mean of the means): a conservative upper end for a
    claim of stability (the side ``G/fixed-ratio`` reads), and an interval that always holds the estimate.

    Parameters
    ----------
    rows : DataFrame
        Results-table rows of the chapter (:func:`prh_lib.results.load` with ``expand_extra=True``): columns
        ``dataset``, ``model_x``, ``model_y``, ``quantity``, ``n``, ``draw``, ``score`` (``subset_seed`` optional).
    dataset, quantity : str
    ci : float in (0, 1)

    Returns
    -------
    DataFrame
        One row per pair: ``pair``, ``n_sizes``, ``units_min`` (fewest scores at one N), ``spread`` (max − min of
        the means), ``mean``, ``relative`` (spread / mean), ``low``, ``high``. Empty when ``rows`` has none.

    Raises
    ------
    ValueError
        If ``ci`` is outside (0, 1) or a column is missing.
    """
    from scipy.stats import norm

    if not 0 < ci < 1:
        raise ValueError(f"ci must lie in (0, 1); got {ci}")
    need = {"dataset", "model_x", "model_y", "quantity", "n", "draw", "score"}
    if not need <= set(rows.columns):
        raise ValueError(f"rows lack columns {sorted(need - set(rows.columns))}")
    cols = ["pair", "n_sizes", "units_min", "spread", "mean", "relative", "low", "high"]
    sel = rows[(rows["dataset"] == dataset) & (rows["quantity"] == quantity)]
    out = []
    for (x, y), g in sel.groupby(["model_x", "model_y"], sort=False):
        groups = [np.asarray(gn["score"], dtype=np.float64) for _, gn in g.groupby("n", sort=True)]
        groups = [v[np.isfinite(v)] for v in groups]
        groups = [v for v in groups if len(v)]
        if len(groups) < 2:
            continue
        means = np.array([v.mean() for v in groups])
        se = np.array([v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0 for v in groups])
        z = float(norm.ppf(1 - (1 - ci) / (2 * len(groups))))
        upper, lower = means + z * se, means - z * se
        scale = float(means.mean())
        out.append({"pair": f"{x} × {y}", "n_sizes": len(groups), "units_min": min(len(v) for v in groups),
                    "spread": float(means.max() - means.min()), "mean": scale,
                    "relative": float((means.max() - means.min()) / scale),
                    "low": float(max(0.0, lower.max() - upper.min()) / scale),
                    "high": float((upper.max() - lower.min()) / scale)})
    return pd.DataFrame(out, columns=cols)
