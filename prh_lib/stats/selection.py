"""Selection-free layer-pair estimates with image-level intervals: cross-fitting and a stratified bootstrap.

The peak of a layer-wise alignment matrix is the maximum over ``L_x × L_y`` scores *chosen and reported on
the same samples*: it is biased upwards (a winner's curse), and the more layer pairs there are, the more so.
Its spread over caption draws (which keep the images fixed) measures neither that bias nor the sampling of
images. This module gives the estimates a reviewer asks for instead:

Cross-fitted (held-out) peak
    The images are split at random into two halves ``A`` and ``B``. The layer pair with the highest score on ``A`` is
    scored on ``B``, and the reverse; the held-out peak is the mean of the two over ``n_splits`` random splits (and over
    the caption draws, which share the images). A half has about ``N/2`` samples, so each half is scored with
    ``k_half = round(k (n_half - 1) / (N - 1))`` neighbours: the chance level ``k/(N-1)`` of mutual k-NN stays the same
    as on all ``N`` (Herbst et al., App. G: at a fixed ``k/N`` mutual k-NN is stable across ``N``). The in-sample
    maximum on the same halves is kept too (``insample_half``), and how often each layer pair is selected.
Image-level intervals by half-sampling, paired
    Replicate ``b`` draws half of the images *without replacement* and repeats the whole cross-fitted procedure on them,
    selection included, for every caption draw: ``rep_splits`` random splits of the subsample into halves, each half
    scored with the same ``k_half`` as the estimate. This is subsampling (Politis & Romano 1994) at ``m = n/2``, i.e.
    half-sampling: for a statistic whose variance is ``σ²/size``, the variance of the estimate on ``m`` of ``n`` images
    drawn without replacement, around the full-sample estimate, is ``σ² (1/m − 1/n)``, which at ``m = n/2`` equals the
    ``σ²/n`` of the estimate itself, so the replicates' spread needs no rescaling (Shao & Wu 1989). A subsample scores
    at its own level (half the images: a noisier selection, a higher chance level at the same ``k``), so the intervals
    read only the replicates' spread, never their level: they are centred (:func:`bootstrap_interval`, ``"centred"``).
    Not the bootstrap with replacement (kept as ``resampling="bootstrap"`` for comparison): duplicates change every
    neighbourhood, and it fails for nearest-neighbour statistics (Abadie & Imbens 2008); against the true spread
    (``benchmarks/crossfit_interval_coverage.py``) half-sampling errs wide by 1.1–1.3×, the bootstrap's reflected
    interval was 1.6–2.2× wide and off-centre. The subsamples depend only on ``(N, n_boot, seed, rep_splits)``, so two
    comparisons on the same images scored in separate calls get the *same* replicates: the difference of their replicate
    vectors is the paired replicate of their difference (:func:`prh_lib.stats.intervals.paired_interval`).

References
----------
Politis & Romano (1994), "Large sample confidence regions based on subsamples under minimal assumptions",
Annals of Statistics 22 (subsampling); Abadie & Imbens (2008), "On the failure of the bootstrap for matching
estimators", Econometrica 76; Shao & Wu (1989), "A general theory for jackknife variance estimation", Annals
of Statistics 17 (delete-d, half-sampling); Efron & Tibshirani (1993), "An Introduction to the Bootstrap", Sec. 8.4, 10.6 and 14.3; Davison & Hinkley
(1997), Sec. 5.2; Chernozhukov et al. (2018), "Double/debiased machine learning", Econometrics Journal 21; Kriegeskorte et al.
(2009), "Circular analysis in systems neuroscience", Nature Neuroscience 12 (selection and reporting on the
same data); Herbst et al. (arXiv 2611.12869), App. G.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from prh_lib.metrics import _validation as V
from prh_lib.metrics._engines import get_engine
from prh_lib.metrics._neighbours import candidates
from prh_lib.metrics._parallel import ignoring
from prh_lib.stats.intervals import bootstrap_interval

__all__ = ["CrossFitPeak", "crossfit_peak", "crossfit_peaks", "half_k", "split_halves", "subsample_size", "resampled_halves", "RESAMPLING"]


def half_k(k: int, n: int, n_half: int) -> int:
    """Neighbours on a half of ``n_half`` samples that keep the chance level ``k/(n-1)`` of all ``n``.

    Returns ``max(1, round(k (n_half - 1) / (n - 1)))``. For ``k = 10``: 5 at ``n = 239`` (halves of 119),
    5 at ``n = 1000`` (halves of 500).
    """
    return max(1, int(round(k * (n_half - 1) / (n - 1))))


def split_halves(n: int, *, n_splits: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_splits`` random splits of ``range(n)`` into halves ``(A, B)`` (sorted; ``|A| = n // 2``).

    Seeded with ``numpy.random.default_rng([seed, 0])``; the same arguments give the same splits.
    """
    rng = np.random.default_rng([int(seed), 0])
    out = []
    for _ in range(n_splits):
        p = rng.permutation(n)
        out.append((np.sort(p[: n // 2]), np.sort(p[n // 2:])))
    return out


def subsample_size(n: int) -> int:
    """Images in a half-sampling replicate: ``n // 2``."""
    return int(n) // 2


def resampled_halves(splits, *, n_boot: int, seed: int = 0, resampling: str = "subsample",
                     rep_splits: int = 3) -> list[tuple[int, list[tuple[np.ndarray, np.ndarray]]]]:
    """The replicates' splits: replicate ``b`` is ``(b, [(A*_1, B*_1), ...])``.

    ``resampling="subsample"`` (default): a subsample ``S_b`` of :func:`subsample_size` images of all ``n``
    (those of ``splits``), drawn *without* replacement, split at random into halves ``rep_splits`` times:
    the cross-fitted procedure repeated on half of the images. ``resampling="bootstrap"``: one pair, the
    halves of split ``b mod len(splits)`` each drawn with replacement at the half's size (the scheme before
    stop 34, kept for comparison; the module docstring says why it is not used). Every index array is sorted
    (so the lowest-index tie-break of the k-NN family keeps its meaning). Seeded with
    ``numpy.random.default_rng([seed, 1])``, independent of the splits' stream.

    Raises
    ------
    ValueError
        For an unknown ``resampling`` or ``rep_splits < 1``.
    """
    if resampling not in RESAMPLING:
        raise ValueError(f"unknown resampling {resampling!r}; valid: {RESAMPLING}")
    rep_splits = V.check_int(rep_splits, "rep_splits", low=1)
    rng = np.random.default_rng([int(seed), 1])
    out = []
    n = sum(len(h) for h in splits[0]) if splits else 0
    m = subsample_size(n)
    for b in range(n_boot):
        if resampling == "subsample":
            S = rng.choice(n, size=m, replace=False)
            pairs = []
            for _ in range(rep_splits):
                p = rng.permutation(S)
                pairs.append((np.sort(p[: m // 2]), np.sort(p[m // 2:])))
            out.append((b, pairs))
        else:
            A, B = splits[b % len(splits)]
            out.append((b, [(np.sort(rng.choice(A, size=len(A))), np.sort(rng.choice(B, size=len(B))))]))
    return out


#: Replicate schemes of :func:`crossfit_peak` (the first is the default).
RESAMPLING = ("subsample", "bootstrap")


@dataclass(frozen=True)
class CrossFitPeak:
    """Cross-fitted peak of one comparison, with its image-level bootstrap replicates.

    Attributes
    ----------
    heldout : float
        Held-out peak: the score on one half at the layer pair selected on the other, averaged over both
        directions, ``n_splits`` splits and the caption draws. In [0, 1] for mutual k-NN.
    insample_half : float
        The in-sample maximum on the same halves (selected and scored on the same images), same averaging.
    final : float
        The final-layer pair's score on the halves (no selection), same averaging.
    selected : ndarray of shape (n_layers_x, n_layers_y)
        How often each layer pair was selected (counts over draws × splits × 2 directions).
    depth_x, depth_y : float
        Mean relative depth (0 = embedding, 1 = last layer) of the selected layers.
    late_minus_early : float
        Share of selections in the late third of depth on *both* sides minus the share in the early third
        on both sides (relative depth > 2/3, resp. < 1/3).
    heldout_reps, insample_reps, final_reps, late_minus_early_reps, depth_x_reps, depth_y_reps : ndarray (n_boot,)
        The same quantities on each replicate (half-sampling: half of each half, without replacement; NaN
        where a replicate is undefined).
    k, k_half, n, n_half : int
        Neighbours on all ``n`` samples and on a half of ``n_half`` (the larger half).
    n_splits, n_boot, seed, n_draws : int
    resampling : str
        How the replicates drew images (:data:`RESAMPLING`).
    """

    heldout: float
    insample_half: float
    final: float
    selected: np.ndarray
    depth_x: float
    depth_y: float
    late_minus_early: float
    heldout_reps: np.ndarray = field(repr=False)
    insample_reps: np.ndarray = field(repr=False)
    final_reps: np.ndarray = field(repr=False)
    late_minus_early_reps: np.ndarray = field(repr=False)
    depth_x_reps: np.ndarray = field(repr=False)
    depth_y_reps: np.ndarray = field(repr=False)
    k: int = 10
    k_half: int = 5
    n: int = 0
    n_half: int = 0
    n_splits: int = 0
    n_boot: int = 0
    seed: int = 0
    n_draws: int = 1
    resampling: str = "subsample"

    def interval(self, quantity: str = "heldout", ci: float = 0.95, *, method: str = "centred") -> tuple[float, float]:
        """Interval of a quantity from its point estimate and replicates (:func:`bootstrap_interval`).

        ``quantity`` is ``"heldout"``, ``"insample"``, ``"final"``, ``"late_minus_early"``, ``"depth_x"`` or
        ``"depth_y"``. Every quantity gets the centred interval by default (the replicates' spread placed on the
        estimate: half-sampled replicates sit at their own size's level, and for depths and selection shares
        half the images select less reliably, which draws the replicates towards the middle of the network; a
        percentile interval of them can exclude the estimate). The depths and shares are bounded, in [0, 1]
        and [-1, 1]: their intervals are clipped to that range.
        """
        point = {"heldout": "heldout", "insample": "insample_half"}.get(quantity, quantity)
        bounds = {"late_minus_early": (-1.0, 1.0), "depth_x": (0.0, 1.0), "depth_y": (0.0, 1.0)}.get(quantity)
        return bootstrap_interval(getattr(self, point), getattr(self, f"{quantity}_reps"), ci=ci, method=method,
                                  bounds=bounds)


def _first_argmax(M: np.ndarray) -> tuple[int, int]:
    """Row-major first maximum, NaN ignored (as :func:`prh_lib.analysis.core.find_peak`)."""
    if np.all(np.isnan(M)):
        return -1, -1
    i = int(np.nanargmax(M))
    return divmod(i, M.shape[1])


class _Stacks:
    """One side of a comparison: its draws' feature stacks as ids in a shared :class:`_Registry`. Equal stacks
    (a vision model's features are the same in every caption draw, and other comparisons hold them too) share
    one Gram matrix and, per half, one set of neighbourhoods."""

    def __init__(self, registry: "_Registry", tensors: Sequence[torch.Tensor]):
        self.registry = registry
        self.ids = [registry.add(t) for t in tensors]

    def states(self, idx: np.ndarray, k: int, groups: bool):
        return self.registry.states_of(self.ids, idx, k, groups)


class _Registry:
    """The distinct feature stacks of several comparisons, with the neighbourhoods of one half at a time.

    :func:`crossfit_peaks` scores comparisons that share stacks (a language model against several vision
    models and floors) on the same halves; a stack's neighbourhoods on a half are computed once and kept
    until the next half is asked for (memory: the states of one half of every distinct stack)."""

    def __init__(self, engine, candidates: int | None = None):
        self.engine, self.grams, self._prints = engine, [], []
        self._halves: "OrderedDict[tuple, dict]" = OrderedDict()  # the last two halves (A and B of a split)
        # each row's best `candidates` samples of the full sample, per stack, when the engine reads a half's
        # neighbourhoods off them (the same bits as selecting on the half, see _neighbours.hoods_of_subsample)
        self.candidates = candidates if engine.subsample_state is not None else None
        self._cands: dict[int, tuple] = {}

    def add(self, t: torch.Tensor) -> int:
        # equal stacks are found by a cheap fingerprint first, then confirmed element by element
        tf = t.float()
        print_ = (tuple(t.shape), float(tf.sum()), float(tf.abs().sum()))
        for u, (ref, _) in enumerate(self.grams):
            if ref is t or (self._prints[u] == print_ and torch.equal(ref, t)):
                return u
        self.grams.append((t, self.engine.gram(t)))
        self._prints.append(print_)
        return len(self.grams) - 1

    def states_of(self, ids, idx: np.ndarray, k: int, groups: bool):
        key = (idx.tobytes(), int(k), bool(groups))
        if key not in self._halves:
            self._halves[key] = {}
            while len(self._halves) > 2:
                self._halves.popitem(last=False)
        states = self._halves[key]
        missing = [u for u in dict.fromkeys(ids) if u not in states]
        if missing:
            it = torch.from_numpy(idx).to(self.grams[0][1][0].device)
            m = len(idx)
            for u in missing:
                G, valid = self.grams[u][1]
                if self.candidates is not None and not groups:
                    if u not in self._cands:
                        self._cands[u] = self.engine.subsample_candidates(G, self.candidates)
                    states[u] = self.engine.subsample_state(G, valid, self._cands[u], it, k=k)
                    continue
                # one gather of the (L, m, m) block: index_select on the flattened N * N positions is exact and
                # about 4x faster on a CPU than the two-axis advanced index G[:, it[:, None], it[None, :]]
                n = G.shape[-1]
                flat = (it[:, None] * n + it[None, :]).reshape(-1)
                Gs = G.reshape(G.shape[0], n * n).index_select(1, flat).view(G.shape[0], m, m)
                states[u] = self.engine.state(Gs, valid, k=k, groups=it if groups else None)
        return [states[u] for u in ids]


def _half_matrices(engine, xs: _Stacks, ys: _Stacks, idx: np.ndarray, k: int, groups: bool) -> list[np.ndarray]:
    sx, sy = xs.states(idx, k, groups), ys.states(idx, k, groups)
    return [engine.score(a, b) for a, b in zip(sx, sy)]


def _crossfit_many(engine, comps, halves, k: int, groups: bool) -> list[tuple]:
    """One pass of the procedure over ``halves`` (a list of (A, B)) for each comparison ``(xs, ys, dx, dy)``:
    per comparison the summary quantities and selection counts (:func:`_summarise`). Halves are visited in the
    outer loop, so with a shared :class:`_Registry` every distinct stack's neighbourhoods are computed once
    per half."""
    acc = [(np.zeros((len(dx), len(dy))), [], [], []) for _, _, dx, dy in comps]
    for A, B in halves:
        for (xs, ys, _, _), (counts, held, ins, fin) in zip(comps, acc):
            MA = _half_matrices(engine, xs, ys, A, k, groups)
            MB = _half_matrices(engine, xs, ys, B, k, groups)
            for ma, mb in zip(MA, MB):
                for sel, score_on in ((ma, mb), (mb, ma)):
                    i, j = _first_argmax(sel)
                    if i < 0:
                        held.append(np.nan)
                        ins.append(np.nan)
                        continue
                    counts[i, j] += 1
                    held.append(score_on[i, j])
                    ins.append(np.nanmax(score_on))
                fin += [ma[-1, -1], mb[-1, -1]]
    return [_summarise(counts, held, ins, fin, dx, dy) for (counts, held, ins, fin), (_, _, dx, dy) in zip(acc, comps)]


def _summarise(counts, held, ins, fin, dx, dy) -> tuple:
    total = counts.sum()
    if total:
        w = counts / total
        depth_x, depth_y = float((w.sum(1) * dx).sum()), float((w.sum(0) * dy).sum())
        late = float(w[np.ix_(dx > 2 / 3, dy > 2 / 3)].sum())
        early = float(w[np.ix_(dx < 1 / 3, dy < 1 / 3)].sum())
    else:
        depth_x = depth_y = late = early = np.nan
    return (_nanmean(held), _nanmean(ins), _nanmean(fin), counts, depth_x, depth_y, late - early)


def _nanmean(v) -> float:
    v = np.asarray(v, dtype=np.float64)
    return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")


def crossfit_peak(X_draws, Y_draws, *, metric: str = "mutual_knn", k: int = 10, n_splits: int = 10,
                  n_boot: int = 200, seed: int = 0, resampling: str = "subsample", rep_splits: int = 3,
                  device=None) -> CrossFitPeak:
    """Held-out (cross-fitted) peak of a layer-wise score, with a paired, stratified image bootstrap.

    Parameters
    ----------
    X_draws, Y_draws : sequence of ndarray or Tensor of shape (n_layers, n_samples, d)
        One stack per caption draw (a single stack is taken as one draw). Every draw holds the *same images
        in the same row order* (only the captions differ), so the images are split and resampled together.
        Layer counts may differ between X and Y but not between draws of one side; the width ``d`` may differ
        between draws (e.g. a TF-IDF vocabulary fitted on each draw's captions).
    metric : str, default="mutual_knn"
        Any metric of :data:`prh_lib.metrics._engines.ENGINES`: the k-NN family or a kernel metric (CKA).
    k : int, default=10
        Neighbours on all ``n_samples``; each half uses :func:`half_k` (same chance level). Ignored by kernel metrics.
    n_splits : int, default=10
        Random splits into halves for the point estimate (seeded).
    n_boot : int, default=200
        Replicates (0: none; the ``*_reps`` are then empty).
    seed : int, default=0
        Seeds the splits and the resampling (:func:`split_halves`, :func:`resampled_halves`). Equal ``n``, ``n_splits``,
        ``n_boot`` and ``seed`` give equal splits and replicates: comparisons on the same images are paired.
    resampling : {"subsample", "bootstrap"}, default="subsample"
        How replicates draw images (:func:`resampled_halves`): half of the images without replacement, on
        which the procedure is repeated with ``rep_splits`` splits and the halves' ``k_half``, or the
        stratified bootstrap with replacement at the half's size (for comparison only).
    rep_splits : int, default=3
        Random splits per half-sampling replicate (the estimate uses ``n_splits``; fewer splits add split
        noise to the replicates, which errs wide: see ``benchmarks/crossfit_interval_coverage.py``).
    device : str or torch.device, optional

    Returns
    -------
    CrossFitPeak

    Raises
    ------
    ValueError
        Fewer than 8 samples; draws of different layer or sample counts; ``n_splits < 1``; ``n_boot < 0``; ``k`` too
        large for a half; an unknown metric or ``resampling``.

    References
    ----------
    Module docstring.
    """
    return crossfit_peaks([(X_draws, Y_draws)], metric=metric, k=k, n_splits=n_splits, n_boot=n_boot, seed=seed,
                          resampling=resampling, rep_splits=rep_splits, device=device)[0]


def crossfit_peaks(comparisons, *, metric: str = "mutual_knn", k: int = 10, n_splits: int = 10, n_boot: int = 200,
                   seed: int = 0, resampling: str = "subsample", rep_splits: int = 3, device=None) -> list[CrossFitPeak]:
    """:func:`crossfit_peak` of several comparisons on the same images, sharing their neighbourhoods.

    Every comparison is split and resampled identically (same ``n``, ``n_splits``, ``n_boot`` and ``seed``),
    so a feature stack that several comparisons hold (a language model scored against several vision models
    and floors) has its neighbourhoods computed once per half instead of once per comparison. The results
    equal :func:`crossfit_peak` of each comparison alone, exactly.

    Parameters
    ----------
    comparisons : sequence of (X_draws, Y_draws)
        Each as in :func:`crossfit_peak`; all must hold the same number of samples ``n``.
    metric, k, n_splits, n_boot, seed, resampling, rep_splits, device
        As in :func:`crossfit_peak`, for every comparison.

    Returns
    -------
    list of CrossFitPeak
        One per comparison, in order.

    Raises
    ------
    ValueError
        As :func:`crossfit_peak`, for any comparison; comparisons of different ``n``; none given.
    """
    comparisons = list(comparisons)
    if not comparisons:
        raise ValueError("crossfit_peaks needs at least one comparison")
    n_splits = V.check_int(n_splits, "n_splits", low=1)
    n_boot = V.check_int(n_boot, "n_boot", low=0)
    seed = V.check_int(seed, "seed", low=0)
    if resampling not in RESAMPLING:
        raise ValueError(f"unknown resampling {resampling!r}; valid: {RESAMPLING}")
    engine = get_engine(metric)
    prepared = []
    for c, (X_draws, Y_draws) in enumerate(comparisons):
        Xs = [X_draws] if _is_stack(X_draws) else list(X_draws)
        Ys = [Y_draws] if _is_stack(Y_draws) else list(Y_draws)
        if not Xs or len(Xs) != len(Ys):
            raise ValueError(f"X_draws and Y_draws must list the same number of draws (>= 1); got {len(Xs)} and "
                             f"{len(Ys)}" + (f" (comparison {c})" if len(comparisons) > 1 else ""))
        dev = V.resolve_device(device, Xs[0], Ys[0])
        Xt = [V.to_tensor(x, f"X_draws[{i}]", ndim=3, device=dev, check_finite=engine.check_finite)
              for i, x in enumerate(Xs)]
        Yt = [V.to_tensor(y, f"Y_draws[{i}]", ndim=3, device=dev, check_finite=engine.check_finite)
              for i, y in enumerate(Ys)]
        for name, ts in (("X_draws", Xt), ("Y_draws", Yt)):
            if len({tuple(t.shape[:2]) for t in ts}) != 1:  # widths may differ (a TF-IDF vocabulary per draw)
                raise ValueError(f"every draw of {name} must have one shape (n_layers, n_samples); got "
                                 f"{[tuple(t.shape) for t in ts]}")
        n = Xt[0].shape[1]
        if Yt[0].shape[1] != n:
            raise ValueError(f"X and Y must hold the same samples: {tuple(Xt[0].shape)} vs {tuple(Yt[0].shape)}")
        if prepared and n != prepared[0][2]:
            raise ValueError(f"crossfit_peaks scores comparisons on the same images; comparison {c} has {n} samples, "
                             f"the first {prepared[0][2]}")
        prepared.append((Xt, Yt, n))
    n = prepared[0][2]
    if n < 8:
        raise ValueError(f"cross-fitting needs at least 8 samples (two halves of 4); got {n}")
    n_half = n - n // 2
    kh = half_k(V.check_int(k, "k", low=1), n, n_half)
    if kh > n // 2 - 1:
        raise ValueError(f"k = {k} is too large for halves of {n // 2} samples (k_half = {kh})")
    sub = resampling == "subsample"
    if sub and n_boot and kh > subsample_size(n) // 2 - 2:
        raise ValueError(f"k = {k} is too large for half-sampling replicates (halves of {subsample_size(n) // 2} "
                         f"images with k_half = {kh}); use more samples, a smaller k or n_boot = 0")
    # candidates per row for the halves' neighbourhoods: enough that the k_half-th member of the smallest half
    # (a replicate's half when half-sampling) lies among them but for rare rows, which are selected exactly
    smallest = subsample_size(n) // 2 if (sub and n_boot) else n // 2
    registry = _Registry(engine, candidates=candidates(kh, n, smallest))
    comps = []
    for Xt, Yt, _ in prepared:
        Lx, Ly = Xt[0].shape[0], Yt[0].shape[0]
        comps.append((_Stacks(registry, Xt), _Stacks(registry, Yt),
                      np.arange(Lx) / max(Lx - 1, 1), np.arange(Ly) / max(Ly - 1, 1)))

    def run(halves, groups):
        with ignoring(RuntimeWarning):  # constant layers are NaN by definition, skipped by the selection
            return _crossfit_many(engine, comps, halves, kh, groups)

    splits = split_halves(n, n_splits=n_splits, seed=seed)
    estimates = run(splits, groups=False)
    reps = [np.full((6, n_boot), np.nan) for _ in comps]
    for b, (_, pairs) in enumerate(resampled_halves(splits, n_boot=n_boot, seed=seed, resampling=resampling,
                                                     rep_splits=rep_splits)):
        for r, (h, i_, f, _, rx, ry, r_lme) in zip(reps, run(pairs, groups=not sub)):
            r[:, b] = (h, i_, f, r_lme, rx, ry)
    return [CrossFitPeak(held, ins, fin, counts, depx, depy, lme, r[0], r[1], r[2], r[3], r[4], r[5], k=int(k),
                         k_half=int(kh or 0), n=n, n_half=n_half, n_splits=n_splits, n_boot=n_boot, seed=seed,
                         n_draws=len(Xt), resampling=resampling)
            for (held, ins, fin, counts, depx, depy, lme), r, (Xt, _, _) in zip(estimates, reps, prepared)]


def _is_stack(a) -> bool:
    return isinstance(a, (np.ndarray, torch.Tensor)) and a.ndim == 3
