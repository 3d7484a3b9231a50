"""Displacement's best layer pair, held out: selected on one half of the images, scored on the other.

The chapter's "best layer pair" is the maximum of a Cross-Model heatmap, and Pointwise is read at that pair on
the same images: the selection and the report share their data, so the Cross-Model value is biased upwards (the
maximum of ``L_x × L_y`` noisy scores) and the Cross-Model − Pointwise gap with it. Here the layer pair is chosen
on one random half of the images and every measure is read on the other half, both directions, over
``n_splits`` random splits (:func:`prh_lib.stats.selection.split_halves`, the splits of the held-out k-NN
peaks). The in-sample maximum on the same halves is kept, so the optimism is a number.

Intervals come from *subsampling* the images without replacement (Politis & Romano 1994), not from the
bootstrap: the measures split their rows into a whitening (training) and a scoring part, and a bootstrap
resample puts copies of one image on both sides, which leaks the whitening into the score (measured: replicates
0.2-0.4 above the estimates). Replicate ``b`` takes split ``b mod n_splits`` and a random half of each of its
halves (no copies), re-selects the layer pair on one subsample among the ``n_candidates`` best layer pairs of that
split's selecting half (a full heatmap per replicate would cost ``L_x × L_y`` whitenings; with
``n_candidates = L_x × L_y`` the re-selection is exact), and reads the measures on the other. The interval is
the replicates' spread around their own median, rescaled by ``sqrt(m / n)`` (``m`` the subsample, ``n`` the half)
and placed on the estimate: ``(θ̂ − sqrt(m/n) (q_hi − med), θ̂ − sqrt(m/n) (q_lo − med))`` (Politis, Romano &
Wolf 1999, Sec. 2.2, centred on the subsamples' median): the measures depend on how many rows they whiten on
(on coco-mini, subsamples of 59 images put DINOv2-S × Lite0 roughly 0.05 below halves of 119), a
shift that is the sample size's, not uncertainty, and would otherwise move the interval off the estimate.

References
----------
"Displacement geometry captures platonic shared reality across models and modalities", arXiv:2609.24209,
Sec. "Method"; Kriegeskorte et al. (2009), Nature Neuroscience 12 (circular analysis); Politis & Romano (1994),
Annals of Statistics 22 (subsampling); Politis, Romano & Wolf (1999), "Subsampling", Sec. 2.2.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from prh_lib.results import score_cache
from prh_lib.metrics import displacement as D
from prh_lib.stats.selection import split_halves

#: Fewest samples of a held-out best layer pair: halves of 16, subsamples of 8 (each split again by the measures).
MIN_SAMPLES = 32

_MEASURES = ("cross_model", "pointwise", "cross_object")


@dataclass(frozen=True)
class HeldoutBestPair:
    """Held-out measures at the Cross-Model best layer pair of one model pair.

    Attributes
    ----------
    heldout : dict of str to float
        ``cross_model``, ``pointwise``, ``cross_object`` on the half that did not select the pair (mean over
        splits and both directions), in [-1, 1].
    insample_half : float
        The Cross-Model maximum on the selecting half (selected and read on the same images), same averaging.
    reps : dict of str to ndarray of shape (n_boot,)
        The held-out measures on each bootstrap replicate (mean of the two directions).
    selected : ndarray of shape (n_layers_x, n_layers_y)
        How often each layer pair was selected (over splits × 2 directions).
    n, n_splits, n_boot, n_candidates, seed : int
    """

    heldout: dict
    insample_half: float
    reps: dict = field(repr=False)
    selected: np.ndarray = field(repr=False)
    n: int = 0
    n_splits: int = 0
    n_boot: int = 0
    n_candidates: int = 0
    seed: int = 0
    subsample_ratio: float = 0.5

    def interval(self, measure: str = "cross_model", ci: float = 0.95) -> tuple[float, float]:
        """Subsampling interval of a held-out measure over images (module docstring)."""
        return subsample_interval(self.heldout[measure], self.reps[measure], self.subsample_ratio, ci=ci)

    def gap_interval(self, ci: float = 0.95) -> tuple[float, float]:
        """Paired interval of Cross-Model − Pointwise (held out, the same subsamples)."""
        return subsample_interval(self.heldout["cross_model"] - self.heldout["pointwise"],
                                  self.reps["cross_model"] - self.reps["pointwise"], self.subsample_ratio, ci=ci)


def subsample_interval(estimate: float, reps, ratio: float, ci: float = 0.95) -> tuple[float, float]:
    """``(θ̂ − sqrt(ratio) q_hi(θ* − med θ*), θ̂ − sqrt(ratio) q_lo(θ* − med θ*))`` over finite replicates ``θ*``
    computed on subsamples of ``ratio`` times the sample size (Politis, Romano & Wolf 1999, Sec. 2.2, centred on
    the replicates' median: module docstring); NaN without any."""
    r = np.asarray(reps, dtype=np.float64)
    r = r[np.isfinite(r)]
    if r.size == 0 or not np.isfinite(estimate):
        return float("nan"), float("nan")
    q_lo, q_hi = np.quantile(r - np.median(r), [(1 - ci) / 2, (1 + ci) / 2])
    s = np.sqrt(ratio)
    return float(estimate - s * q_hi), float(estimate - s * q_lo)


def _matrices(X, Y, opts) -> dict:
    with warnings.catch_warnings():  # a constant layer (a ViT's CLS at embed) is NaN by design
        warnings.filterwarnings("ignore", message=".*degenerate.*", category=RuntimeWarning)
        warnings.filterwarnings("ignore", message=".*zero norm.*", category=RuntimeWarning)
        return D.displacement_layerwise(X, Y, **opts)


def _pair(X, Y, opts) -> dict:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning)
        try:
            return D.displacement_similarity(X, Y, **opts).measures()
        except ValueError:  # a layer constant on a resampled half: undefined, as in the heatmap
            return dict.fromkeys(_MEASURES, np.nan)


def _argmax(M) -> tuple[int, int]:
    if np.all(np.isnan(M)):
        return -1, -1
    return divmod(int(np.nanargmax(M)), M.shape[1])


def heldout_best_pair(X, Y, *, n_splits: int = 5, n_boot: int = 20, n_candidates: int = 6,
                      n_components: int = 32, test_fraction: float = 0.5, n_pairs: int = 2000,
                      seed: int = 0) -> HeldoutBestPair:
    """Cross-fitted best layer pair of the displacement measures, with a stratified image bootstrap.

    Parameters
    ----------
    X, Y : ndarray of shape (n_layers_x, n_samples, d_x), (n_layers_y, n_samples, d_y)
        Layer stacks of the same samples in the same row order.
    n_splits : int, default=5
        Random halvings of the images (:func:`~prh_lib.stats.selection.split_halves` with ``seed``).
    n_boot : int, default=20
        Subsampling replicates (0: none; the intervals are then NaN); each uses half of each half's images.
    n_candidates : int, default=6
        Layer pairs among which a replicate re-selects (the best of the split's selecting half).
    n_components, test_fraction, n_pairs : int, float, int
        As in :func:`prh_lib.metrics.displacement.displacement_similarity` (on each half).
    seed : int, default=0
        Splits, resampling and the measures' own train/test split and sampled pairs.

    Raises
    ------
    ValueError
        Different sample counts; fewer than 16 samples; ``n_splits < 1``, ``n_boot < 0`` or ``n_candidates < 1``.
    """
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    if X.ndim != 3 or Y.ndim != 3 or X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must be (n_layers, n_samples, d) stacks of the same samples; got {X.shape}, {Y.shape}")
    n = X.shape[1]
    if n < MIN_SAMPLES:
        raise ValueError(f"a held-out best layer pair needs at least {MIN_SAMPLES} samples (subsamples of 8); got {n}")
    if n_splits < 1 or n_boot < 0 or n_candidates < 1:
        raise ValueError(f"need n_splits >= 1, n_boot >= 0, n_candidates >= 1; got {n_splits}, {n_boot}, {n_candidates}")
    opts = {"n_components": n_components, "test_fraction": test_fraction, "n_pairs": n_pairs, "seed": seed}
    splits = split_halves(n, n_splits=n_splits, seed=seed)
    counts = np.zeros((X.shape[0], Y.shape[0]))
    held = {m: [] for m in _MEASURES}
    ins, candidates = [], []
    for A, B in splits:
        MA, MB = _matrices(X[:, A], Y[:, A], opts), _matrices(X[:, B], Y[:, B], opts)
        cands = []
        for sel, on in ((MA, MB), (MB, MA)):
            i, j = _argmax(sel["cross_model"])
            order = np.argsort(np.nan_to_num(sel["cross_model"], nan=-np.inf), axis=None)[::-1][:n_candidates]
            cands.append([divmod(int(c), sel["cross_model"].shape[1]) for c in order])
            if i < 0:
                continue
            counts[i, j] += 1
            for m in _MEASURES:
                held[m].append(on[m][i, j])
            ins.append(np.nanmax(on["cross_model"]))
        candidates.append(cands)
    reps = {m: np.full(n_boot, np.nan) for m in _MEASURES}
    rng = np.random.default_rng([int(seed), 2])
    subsamples = []
    for b in range(n_boot):  # half of each half, without replacement: no image twice, so nothing leaks
        s = b % len(splits)
        A, B = splits[s]
        subsamples.append((s, np.sort(rng.choice(A, size=len(A) // 2, replace=False)),
                           np.sort(rng.choice(B, size=len(B) // 2, replace=False))))
    for b, (s, A, B) in enumerate(subsamples):
        vals = {m: [] for m in _MEASURES}
        for (sel_rows, on_rows), cands in zip(((A, B), (B, A)), candidates[s]):
            scored = [(_pair(X[i][sel_rows], Y[j][sel_rows], opts)["cross_model"], (i, j)) for i, j in cands]
            scored = [t for t in scored if np.isfinite(t[0])]
            if not scored:
                continue
            i, j = max(scored, key=lambda t: t[0])[1]
            res = _pair(X[i][on_rows], Y[j][on_rows], opts)
            for m in _MEASURES:
                vals[m].append(res[m])
        for m in _MEASURES:
            if vals[m] and np.isfinite(vals[m]).any():
                reps[m][b] = float(np.nanmean(vals[m]))
    mean = {m: float(np.nanmean(v)) if np.isfinite(v).any() else float("nan") for m, v in held.items()}
    ratio = (len(splits[0][0]) // 2) / len(splits[0][0])
    return HeldoutBestPair(mean, float(np.nanmean(ins)) if ins else float("nan"), reps, counts, n=n,
                           n_splits=n_splits, n_boot=n_boot, n_candidates=n_candidates, seed=seed,
                           subsample_ratio=ratio)


def heldout_best_pairs(pairs, features: dict, **options) -> dict:
    """:func:`heldout_best_pair` of each ``(x, y)`` in ``pairs`` (features by name), cached on the features.

    Returns
    -------
    dict
        ``"x × y" -> HeldoutBestPair``, or ``-> int`` (the sample count) for a pair with fewer than
        :data:`MIN_SAMPLES` samples: no held-out estimate exists there, and :func:`heldout_table` says so in
        words (a small draw, such as the rehearsal's, is not an error of the chapter).
    """
    out = {}
    for x, y in pairs:
        fx, fy = features[x], features[y]
        n = np.shape(fx.values)[1]
        if n < MIN_SAMPLES:
            out[f"{x} × {y}"] = int(n)
            continue
        key = {"x": score_cache.features_key(fx), "y": score_cache.features_key(fy), **options}
        out[f"{x} × {y}"] = score_cache.cached(
            "displacement_heldout", key, lambda fx=fx, fy=fy: heldout_best_pair(
                np.asarray(fx.values, dtype=np.float64), np.asarray(fy.values, dtype=np.float64), **options))
    return out


def heldout_table(heldout: dict, features: dict, insample: pd.DataFrame | None = None) -> pd.DataFrame:
    """The page's table: the in-sample best-pair values (labelled so) beside the held-out ones with intervals.

    Parameters
    ----------
    heldout : dict
        :func:`heldout_best_pairs`.
    features : dict of str to LayerFeatures
        For the layer labels of the most often selected pair.
    insample : DataFrame, optional
        :func:`prh_lib.pages.ch_displacement.best_pair_table` (index ``"x × y"``; columns ``Cross-Model``,
        ``Pointwise``), read at the maximum of the heatmap on all images: the in-sample values.

    Returns
    -------
    DataFrame
        Indexed by pair: in-sample Cross-Model and Pointwise (when given), held-out Cross-Model, Pointwise,
        Cross-Model − Pointwise (each with its 95 % interval over images), Cross-Model maximum on the selecting
        half (in-sample, same halves), held-out layer pair (share of selections), splits and resamples. A pair
        with too few samples (an ``int`` in ``heldout``) says so in words in each of its cells.
    """
    from prh_lib.formatting import format_interval

    rows = []
    for label, r in heldout.items():
        x, y = label.split(" × ")
        if not isinstance(r, HeldoutBestPair):  # too few samples (heldout_best_pairs)
            rows.append({"pair": label, "held out": f"not estimated: the draw has {r} images, a held-out best "
                                                    f"layer pair needs at least {MIN_SAMPLES}"})
            continue
        i, j = np.unravel_index(int(np.argmax(r.selected)), r.selected.shape)
        share = r.selected[i, j] / max(r.selected.sum(), 1)
        gap = r.heldout["cross_model"] - r.heldout["pointwise"]
        row = {"pair": label}
        if insample is not None and label in insample.index:
            for col in ("Cross-Model", "Pointwise"):
                if col in insample.columns:
                    row[f"{col}, in-sample (all images)"] = f"{float(insample.loc[label, col]):.3f}"
        row |= {
            "Cross-Model, held out [95 % CI]": format_interval(r.heldout["cross_model"], *r.interval("cross_model")),
            "Pointwise, held out [CI]": format_interval(r.heldout["pointwise"], *r.interval("pointwise")),
            "Cross-Model − Pointwise [paired CI]": format_interval(gap, *r.gap_interval()),
            "Cross-Model max on the selecting half (in-sample)": f"{r.insample_half:.3f}",
            "held-out layer pair (share)": f"{features[x].layer_labels[i]} × {features[y].layer_labels[j]} ({share:.0%})",
            "splits / resamples": f"{r.n_splits} / {r.n_boot}",
        }
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    table = pd.DataFrame(rows).set_index("pair")
    if "held out" in table.columns and len(table.columns) > 1:  # too-few rows say why in every column
        reason = table.pop("held out")
        table = table.apply(lambda col: col.fillna(reason))
    return table
