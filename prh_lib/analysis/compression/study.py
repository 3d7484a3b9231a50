"""The computation of the PCA-compression chapter (Section 3.1, Figure 2, App. C): sweeps and the study.

:func:`pca_sweep` on one layer pair (by dimension or by retained variance, ``space`` ``"original"`` or
``"pca"``, below), :func:`select_layer_pairs` / :func:`compress_layer_pairs` /
:func:`compress_comparisons` over the comparisons, :func:`run_study` over draws (rows: :func:`sweep_rows`) and
:func:`aggregate_sweeps` reading the results table back. PCA is scikit-learn's, exact and fitted on each layer alone
(:mod:`prh_lib.analysis.compression.pca`).

Where the projection lives (``space``):

- ``"original"`` (default): the rank-``m`` reconstruction ``mean + Z[:, :m] V[:m]`` in the layer's own coordinates
  (``PCA.inverse_transform``). It removes the variance outside the top ``m`` directions and changes nothing else, so at
  full rank it *is* the uncompressed layer and the score equals the uncompressed score exactly (tested). Mutual k-NN
  uses cosine similarity, which is not invariant to centring, so this matters.
- ``"pca"``: the PCA coordinates ``Z[:, :m]`` (``PCA.transform``), centred. At full rank this equals the
  *centred* layer up to a rotation; the reference score is then that of the centred layer.

References
----------
Herbst, Roschmann, Bouniot, Akata. "Where Does Alignment Emerge and What Does It Mean? A Closer Look at
the Platonic Representation Hypothesis", Section 3.1, Figure 2, Appendix C.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from prh_lib.results import score_cache
from prh_lib.extract.features import check_aligned
from prh_lib.metrics.knn import mutual_knn, mutual_knn_chance, mutual_knn_layerwise
from prh_lib.validation import as_float64_matrix
from prh_lib.analysis.core import check_comparisons, layerwise_alignment, preprocessing_label
from prh_lib.analysis.study import run_draws
from prh_lib.analysis.compression.pca import components_for_variance, default_dims, fit_pca, max_components

COMPRESS = ("x", "y", "both")
SPACES = ("original", "pca")

#: Default grid of the variance sweep (fractions of the total variance retained).
DEFAULT_VARIANCE = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)

_CHUNK_ELEMENTS = 1 << 24  # float32 elements of the reconstructions scored in one call


@dataclass(frozen=True)
class CompressionSweep:
    """Mutual k-NN of one layer pair with one side (or both) compressed by PCA, over a grid of sizes.

    Attributes
    ----------
    dims : ndarray of int, shape (n_points,)
        Components kept on the compressed side (on x with ``compress="both"``).
    dims_y : ndarray of int, shape (n_points,)
        Components kept on y: as ``dims`` for ``compress="y"``; with ``"both"``, y's own number (its variance
        target, or ``min(m, max of y)``); the full number when y is not compressed.
    variance : ndarray of float, shape (n_points,)
        Variance retained on the compressed side (x for ``"both"``): cumulative explained variance ratio.
    scores : ndarray of float, shape (n_points,)
        Mutual k-NN at each point.
    reference : float
        The uncompressed score (of the centred features in ``space="pca"``).
    target_variance : ndarray of float or None
        The requested variance fractions of a variance sweep; None for a dimension sweep.
    compress, space : str
    k, n_samples : int
    max_dims : tuple of int
        ``(max components of x, of y)``.
    labels : dict
        Free-form description (model and layer names) carried into tables.
    """

    dims: np.ndarray
    dims_y: np.ndarray
    variance: np.ndarray
    scores: np.ndarray
    reference: float
    target_variance: np.ndarray | None
    compress: str
    space: str
    k: int
    n_samples: int
    max_dims: tuple[int, int]
    labels: dict = field(default_factory=dict)

    @property
    def chance(self) -> float:
        """Chance level ``k / (N - 1)`` of mutual k-NN."""
        return mutual_knn_chance(self.n_samples, self.k)

    @property
    def relative(self) -> np.ndarray:
        """``scores / reference``."""
        return self.scores / self.reference

    def min_dims(self, fraction: float = 0.95) -> int | None:
        """Smallest swept number of components with ``score >= fraction * reference``; None if none reaches it.

        Where the grid holds every ``m`` up to the answer (the default grid up to 32, :func:`default_dims`) this
        is the exact smallest dimension; past a gap in the grid it is an upper bound on it.
        """
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must lie in (0, 1]; got {fraction}")
        ok = np.nonzero(self.scores >= fraction * self.reference - 1e-12)[0]
        return int(self.dims[ok[0]]) if ok.size else None

class _Side:
    """One side of a pair: its float64 features and (lazily) its full PCA."""

    def __init__(self, X: np.ndarray, name: str):
        self.X = X
        self.name = name
        self.top = max_components(*X.shape)
        self._pca = None

    @property
    def pca(self):
        if self._pca is None:
            self._pca = fit_pca(self.X)
        return self._pca

    @property
    def cum_variance(self) -> np.ndarray:
        r = self.pca.explained_variance_ratio_
        return np.cumsum(r) / r.sum()

    def projected(self, dims: Sequence[int], space: str) -> np.ndarray:
        """float32 stack ``(len(dims), n_samples, width)`` of the projections at each number of components."""
        Z = self.pca.transform(self.X)  # (n, top)
        if space == "pca":
            out = np.zeros((len(dims), Z.shape[0], self.top), dtype=np.float32)
            for i, m in enumerate(dims):
                out[i, :, :m] = Z[:, :m]  # zero padding leaves cosine similarities unchanged
            return out
        V, mean = self.pca.components_, self.pca.mean_
        return np.stack([(Z[:, :m] @ V[:m] + mean).astype(np.float32) for m in dims])


def _check_dims(dims, top: int, name: str) -> np.ndarray:
    d = np.atleast_1d(np.asarray(dims))
    if d.dtype.kind not in "iu" or d.ndim != 1:
        raise ValueError(f"dims must be a 1-D sequence of ints; got {dims!r}")
    bad = d[(d < 1) | (d > top)]
    if bad.size:
        raise ValueError(f"dims {bad.tolist()} out of range for {name}: PCA keeps 1 to min(n_samples, n_features) "
                         f"= {top} components (no silent cap; drop them or pass dims=None for 1..{top})")
    return d.astype(int)


def _score_stack(A: np.ndarray, B: np.ndarray, k: int, paired: bool, device) -> np.ndarray:
    """Mutual k-NN of each ``A[i]`` with ``B[0]`` (``paired=False``) or with ``B[i]`` (``paired=True``)."""
    n, width = A.shape[1], max(A.shape[2], B.shape[2])
    step = max(1, _CHUNK_ELEMENTS // (n * width))
    out = []
    for s in range(0, len(A), step):
        a = A[s : s + step]
        if paired:
            b = B[s : s + step]
            out.append(np.array([mutual_knn_layerwise(a[i : i + 1], b[i : i + 1], k=k, device=device)[0, 0]
                                 for i in range(len(a))]))
        else:
            out.append(mutual_knn_layerwise(a, B, k=k, device=device)[:, 0])
    return np.concatenate(out)


def pca_sweep(X, Y, *, compress: str = "x", dims=None, variance=None, k: int = 10, space: str = "original",
              device=None, labels: dict | None = None) -> CompressionSweep:
    """Mutual k-NN between ``X`` and ``Y`` with one or both compressed to their top principal components.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)
        Row ``i`` of both describes the same sample (one layer of each model, e.g. after
        :func:`prh_lib.analysis.clip_features`).
    compress : {"x", "y", "both"}
        Which side is replaced by its PCA projection; the other is kept as given.
    dims : sequence of int, optional
        Numbers of components to keep, each in ``[1, min(n_samples, d)]`` of the compressed side. Default
        (with ``variance=None``): :func:`default_dims` of that maximum (every number up to 32, then
        geometric), so :meth:`CompressionSweep.min_dims` is exact up to 32 dimensions. With
        ``compress="both"`` the range is that of the wider side, and the narrower side keeps
        ``min(m, its maximum)`` components (a documented cap; ``dims_y`` records what y kept), so the last
        default point is full rank on both sides.
    variance : sequence of float in (0, 1], optional
        Sweep by variance retained instead (each compressed side keeps the fewest components reaching the
        fraction, :func:`components_for_variance`). Mutually exclusive with ``dims``.
    k : int
        Neighbours of mutual k-NN (the paper: 10).
    space : {"original", "pca"}
        Score the rank-``m`` reconstruction in the layer's coordinates (default; full rank reproduces the
        uncompressed score exactly) or the centred PCA coordinates (see the module docstring).
    device : str, optional
        Where mutual k-NN runs (default CPU).
    labels : dict, optional
        Stored on the result (e.g. model and layer names).

    Returns
    -------
    CompressionSweep
        Scores in [0, 1] over the grid, the uncompressed reference and the variance retained.

    Raises
    ------
    ValueError
        Unknown ``compress`` or ``space``; ``dims`` and ``variance`` both given; a number of components outside
        ``[1, min(n_samples, d)]`` of a compressed side (never silently capped); variance fractions outside
        (0, 1]; different numbers of samples; ``k`` out of range.

    References
    ----------
    Herbst et al., Section 3.1 (Figure 2) and Appendix C: alignment under PCA compression of each modality.
    Huh et al. (2024), App. A (mutual k-NN).
    """
    if compress not in COMPRESS:
        raise ValueError(f"unknown compress={compress!r}; use one of {COMPRESS}")
    if space not in SPACES:
        raise ValueError(f"unknown space={space!r}; use one of {SPACES}")
    if dims is not None and variance is not None:
        raise ValueError("pass either dims or variance, not both")
    X, Y = as_float64_matrix(X, "X"), as_float64_matrix(Y, "Y")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must have the same number of samples: shapes {X.shape} and {Y.shape}")
    ref = float(mutual_knn(X - X.mean(0) if space == "pca" and compress != "y" else X,
                           Y - Y.mean(0) if space == "pca" and compress != "x" else Y, k=k))
    sx, sy = _Side(X, "X"), _Side(Y, "Y")
    sides = {"x": [sx], "y": [sy], "both": [sx, sy]}[compress]
    top = max(s.top for s in sides)
    target = None
    if variance is not None:
        target = np.atleast_1d(np.asarray(variance, dtype=np.float64))
        per_side = [components_for_variance(s.pca.explained_variance_ratio_, target) for s in sides]
    else:
        grid = default_dims(top) if dims is None else _check_dims(dims, top, "X and Y" if compress == "both" else
                                                                    sides[0].name)
        per_side = [np.minimum(grid, s.top) for s in sides]  # only "both" can cap (documented)
    first = sides[0]
    stack_a = first.projected(per_side[0], space)
    if compress == "both":
        scores = _score_stack(stack_a, sy.projected(per_side[1], space), k, True, device)
    elif compress == "x":
        scores = _score_stack(stack_a, Y.astype(np.float32)[None], k, False, device)
    else:
        scores = _score_stack(stack_a, X.astype(np.float32)[None], k, False, device)
    var = first.cum_variance[np.asarray(per_side[0]) - 1]
    dims_y = per_side[-1] if compress != "x" else np.full(len(per_side[0]), sy.top)
    return CompressionSweep(np.asarray(per_side[0], dtype=int), np.asarray(dims_y, dtype=int), var, scores, ref,
                            target, compress, space, int(k), X.shape[0], (sx.top, sy.top), dict(labels or {}))


# -- intervals over images of the relative scores the claims read ----------------------------------------

#: The paper's language-side probe as a share of rank: 100 components of a rank of at most N - 1 = 1023
PAPER_RANK_SHARE = 100 / 1023

#: The relative scores the PCA claims read, and the interval each gets (:func:`relative_intervals`)
PROBES = ("40% variance", "share of rank", "8 dims")


def probe_dims(X, *, variance_probe: float = 0.4, rank_share: float = PAPER_RANK_SHARE, low_dims: int = 8) -> dict:
    """Components kept at each of :data:`PROBES` for the compressed side ``X`` (n_samples, d).

    ``"40% variance"``: the fewest components reaching ``variance_probe`` of the variance
    (:func:`components_for_variance`); ``"share of rank"``: ``round(rank_share × min(n, d))`` (the paper's 100 of
    1,023), at least 1; ``"8 dims"``: ``min(low_dims, min(n, d))``.
    """
    side = _Side(as_float64_matrix(X, "X"), "X")
    var = int(components_for_variance(side.pca.explained_variance_ratio_, np.array([variance_probe]))[0])
    return {"40% variance": var, "share of rank": max(1, int(round(rank_share * side.top))),
            "8 dims": min(low_dims, side.top)}


def relative_intervals(X, Y, *, compress: str = "x", dims: dict | None = None, k: int = 10, n_boot: int = 200,
                       seed: int = 0, space: str = "original", ci: float = 0.95) -> list[dict]:
    """Relative scores (compressed / uncompressed) at a few numbers of components, with paired intervals over images.

    The compressed and the uncompressed score are scored on the *same* half-samples of the images
    (:func:`prh_lib.stats.bootstrap_ci` with ``method="subsample"``, ``fraction=0.5`` and one ``seed``), and the
    interval is the centred interval of their ratio over the replicates, on the log scale
    (:func:`prh_lib.stats.intervals.paired_interval`; :mod:`prh_lib.stats.selection` says why half-sampling). The PCA is fitted once on all
    images (the compression is the analysis' choice; what varies is which images are scored).

    Parameters
    ----------
    X, Y : ndarray of shape (n_samples, d_x), (n_samples, d_y)
    compress : {"x", "y"}
        The side compressed.
    dims : dict of str to int, optional
        Probe name -> components kept (default :func:`probe_dims` of the compressed side).
    k, n_boot, seed, ci
        Mutual k-NN neighbours; bootstrap replicates, seed and interval level.
    space : {"original", "pca"}
        As in :func:`pca_sweep`.

    Returns
    -------
    list of dict
        Per probe: ``probe``, ``n_components``, ``relative`` (point estimate on all images), ``low``, ``high``,
        ``n_boot``.

    Raises
    ------
    ValueError
        ``compress`` other than "x" or "y"; components outside ``[1, min(n_samples, d)]``; as :func:`pca_sweep`.
    """
    from prh_lib.stats.bootstrap import bootstrap_ci
    from prh_lib.stats.intervals import paired_interval

    if compress not in ("x", "y"):
        raise ValueError(f"relative_intervals compresses one side, 'x' or 'y'; got {compress!r}")
    X, Y = as_float64_matrix(X, "X"), as_float64_matrix(Y, "Y")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must have the same number of samples: shapes {X.shape} and {Y.shape}")
    A, B = (X, Y) if compress == "x" else (Y, X)
    side = _Side(A, "X" if compress == "x" else "Y")
    dims = probe_dims(A) if dims is None else dims
    m = [int(v) for v in _check_dims(list(dims.values()), side.top, side.name)]

    def halves(Z):  # only the replicates' spread is read (centred interval)
        return bootstrap_ci(Z, B, k=k, n_boot=n_boot, seed=seed, method="subsample", fraction=0.5, warn_outside=False)

    ref = halves(A - A.mean(0) if space == "pca" else A)
    out = []
    for (name, _), mm, Z in zip(dims.items(), m, side.projected(m, space)):
        c = halves(Z)
        lo, hi = paired_interval(c.replicates, ref.replicates, ci=ci, ratio=True, estimates=(c.estimate, ref.estimate))
        out.append({"probe": name, "n_components": mm, "relative": c.estimate / ref.estimate, "low": lo, "high": hi,
                    "n_boot": int(n_boot)})
    return out


# -- layer pairs of two models ---------------------------------------------------------------------------


#: Layer pairs compressed by default: the peak of mutual k-NN over all layer pairs, and the final layers.
LAYER_ROLES = ("peak", "final")


def select_layer_pairs(matrix, roles: Sequence[str] = LAYER_ROLES) -> dict[str, tuple[int, int]]:
    """Row and column of each named layer pair of an :class:`~prh_lib.analysis.AlignmentMatrix` (role -> (i, j)).

    Parameters
    ----------
    matrix : AlignmentMatrix
    roles : sequence of {"peak", "final"}
        ``"peak"``: the maximum over all layer pairs (:attr:`AlignmentMatrix.peak`); ``"final"``: the last
        layer of each model.

    Raises
    ------
    ValueError
        If a role is unknown.
    """
    out = {}
    for role in roles:
        if role == "peak":
            out[role] = matrix.peak[:2]
        elif role == "final":
            out[role] = (len(matrix.x_labels) - 1, len(matrix.y_labels) - 1)
        else:
            raise ValueError(f"unknown layer role {role!r}; use any of {LAYER_ROLES}")
    return out


@score_cache.memoize("compress_layer_pairs")
def compress_layer_pairs(x, y, layer_pairs: dict, *, compress: Sequence[str] = ("x", "y"), dims=None,
                         variance=DEFAULT_VARIANCE, k: int = 10, space: str = "original",
                         device=None) -> list[CompressionSweep]:
    """:func:`pca_sweep` by dimensions and by variance, for each named layer pair and each side compressed.

    Parameters
    ----------
    x, y : LayerFeatures
        Two models' features on the same pairs (checked), e.g. after :func:`prh_lib.analysis.clip_features`.
    layer_pairs : dict of str to (int, int)
        Role -> (layer of x, layer of y), e.g. from :func:`select_layer_pairs`.
    compress : sequence of {"x", "y", "both"}
        Sides compressed, one sweep each (default: each modality separately, the other kept whole).
    dims : sequence of int, optional
        Grid of the dimension sweep (default :func:`default_dims`, see :func:`pca_sweep`).
    variance : sequence of float in (0, 1]
        Grid of the variance sweep.
    k, space, device
        As in :func:`pca_sweep`.

    Returns
    -------
    list of CompressionSweep
        ``labels`` hold ``pair`` (``"x × y"``), ``layers`` (the role), ``layer x``, ``layer y``, ``x``, ``y``
        (model names) and ``sweep`` (``"dims"`` or ``"variance"``).

    Raises
    ------
    FeatureMismatchError
        If ``x`` and ``y`` hold different samples or row orders.
    ValueError
        As :func:`pca_sweep`.
    """
    check_aligned(x, y)
    out = []
    for role, (i, j) in layer_pairs.items():
        X, Y = x.layer(int(i)), y.layer(int(j))
        base = {"pair": f"{x.name} × {y.name}", "x": x.name, "y": y.name, "layers": role,
                "layer x": x.layer_labels[i], "layer y": y.layer_labels[j]}
        for side in compress:
            out.append(pca_sweep(X, Y, compress=side, dims=dims, k=k, space=space, device=device,
                                 labels={**base, "sweep": "dims"}))
            out.append(pca_sweep(X, Y, compress=side, variance=variance, k=k, space=space, device=device,
                                 labels={**base, "sweep": "variance"}))
    return out


def compress_comparisons(features: dict, comparisons, *, roles: Sequence[str] = LAYER_ROLES, k: int = 10,
                         **options) -> list[CompressionSweep]:
    """:func:`compress_layer_pairs` at the :func:`select_layer_pairs` of each ``(x, y)`` model pair.

    Parameters
    ----------
    features : dict of str to LayerFeatures
        Features of every model named in ``comparisons`` on the same pairs (clip them first if wanted).
    comparisons : sequence of (str, str)
    roles : sequence of {"peak", "final"}
        Layer pairs to compress; the peak is that of mutual k-NN at ``k`` over all layer pairs.
    k : int
    **options
        Passed to :func:`compress_layer_pairs` (``compress``, ``dims``, ``variance``, ``space``, ``device``).

    Raises
    ------
    KeyError
        If a model of ``comparisons`` has no features.
    """
    check_comparisons(features, comparisons)
    out = []
    for x_name, y_name in comparisons:
        x, y = features[x_name], features[y_name]
        matrix = layerwise_alignment(x, y, metric="mutual_knn", k=k, device=options.get("device"))
        out += compress_layer_pairs(x, y, select_layer_pairs(matrix, roles), k=k, **options)
    return out


# ------------------------------------------------------------------------------------ datasets x draws


def sweep_rows(sweep: CompressionSweep) -> list[dict]:
    """Results-table rows of one sweep: one per grid point (``quantity`` ``"pca:dims"`` or ``"pca:variance"``)
    and one ``"pca:reference"`` row (the uncompressed score). Extra columns: ``role`` (peak/final),
    ``compress`` (x/y/both), ``n_components``, ``variance`` (retained), ``target_variance``, ``relative``."""
    lab = sweep.labels
    base = {"model_x": lab.get("x"), "model_y": lab.get("y"), "layer_x": lab.get("layer x"),
            "layer_y": lab.get("layer y"), "role": lab.get("layers"), "compress": sweep.compress}
    kind = lab.get("sweep", "dims")
    rows = [base | {"quantity": f"pca:{kind}", "score": float(sc), "n_components": int(d), "variance": float(v),
                    "target_variance": float(t) if t is not None else None, "relative": float(sc / sweep.reference)}
            for sc, d, v, t in zip(sweep.scores, sweep.dims, sweep.variance,
                                   sweep.target_variance if sweep.target_variance is not None else [None] * len(sweep.dims))]
    if kind == "dims":
        rows.append(base | {"quantity": "pca:reference", "score": float(sweep.reference),
                            "n_components": int(sweep.max_dims[0 if sweep.compress != "y" else 1])})
    return rows


def run_study(draws, comparisons, *, chapter: str, params: dict, roles=LAYER_ROLES, k: int = 10,
              variance=DEFAULT_VARIANCE, dims=None, space: str = "original", clip_q: float | None = 0.95,
              clip: str | None = "stack", device: str = "cpu", dtype: str = "float32", batch_size: int = 32,
              num_threads: int | None = None, n_boot: int = 200, seed: int = 0, root=None) -> dict:
    """:func:`compress_comparisons` on every draw; every grid point written to the results table.

    On the first draw of each dataset, each (pair, layer pair, side compressed) also gets the relative scores of
    :data:`PROBES` with paired intervals over images (:func:`relative_intervals`, ``n_boot`` replicates; 0: none),
    written as ``"pca:interval"`` rows.

    Returns
    -------
    dict
        ``(dataset, draw) -> list of CompressionSweep``.
    """
    def score(d, feats):
        # BLAS threads of scikit-learn's PCA limited to num_threads (None: unchanged)
        with contextlib.nullcontext() if num_threads is None else threadpool_limits(int(num_threads)):
            sweeps = compress_comparisons(feats, comparisons, roles=roles, k=k, variance=variance, dims=dims,
                                          space=space, device=None if device == "cpu" else device)
            rows = [r for sw in sweeps for r in sweep_rows(sw)]
            if n_boot and d.draw == min(e.draw for e in draws if e.dataset == d.dataset):
                rows += _interval_rows(feats, sweeps, k=k, n_boot=n_boot, seed=seed, space=space)
        return sweeps, rows

    return run_draws(draws, comparisons, score, chapter=chapter, params=params, clip_q=clip_q, clip=clip,
                     device=device, dtype=dtype, batch_size=batch_size, num_threads=num_threads, root=root, k=k,
                     metric="mutual_knn", preprocessing=preprocessing_label(clip_q, clip))


def _interval_rows(feats: dict, sweeps, *, k: int, n_boot: int, seed: int, space: str) -> list[dict]:
    """``"pca:interval"`` rows of :func:`relative_intervals` for every dims sweep of one draw (cached)."""
    rows = []
    for sw in sweeps:
        lab = sw.labels
        if lab.get("sweep") != "dims" or sw.compress not in ("x", "y"):
            continue
        x, y = feats[lab["x"]], feats[lab["y"]]
        X = x.layer(x.layer_labels.index(lab["layer x"]))
        Y = y.layer(y.layer_labels.index(lab["layer y"]))
        res = _cached_intervals(X, Y, sw.compress, k, n_boot, seed, space)
        base = {"model_x": lab["x"], "model_y": lab["y"], "layer_x": lab["layer x"], "layer_y": lab["layer y"],
                "role": lab["layers"], "compress": sw.compress}
        rows += [base | {"quantity": "pca:interval", "score": r["relative"], **r} for r in res]
    return rows


@score_cache.memoize("pca_relative_intervals")
def _cached_intervals(X, Y, compress, k, n_boot, seed, space):
    return relative_intervals(X, Y, compress=compress, k=k, n_boot=n_boot, seed=seed, space=space)


def interval_table(df: pd.DataFrame) -> pd.DataFrame:
    """The ``"pca:interval"`` rows of a results table: dataset, model_x, model_y, role, compress, probe,
    n_components, relative, low, high (first draw of each dataset)."""
    from prh_lib import results as results_table

    if df.empty or "quantity" not in df:
        return pd.DataFrame()
    sub = df[df["quantity"] == "pca:interval"]
    if sub.empty:
        return pd.DataFrame()
    sub = results_table.expand_extra_columns(sub)
    return sub[["dataset", "model_x", "model_y", "role", "compress", "probe", "n_components", "relative", "low",
                "high"]].reset_index(drop=True)


def aggregate_sweeps(df: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std over draws of each grid point's score and relative score (score / uncompressed).

    Groups: dataset, model_x, model_y, role, compress, quantity and the grid value (``n_components`` for the
    dims sweep, ``target_variance`` for the variance sweep, as column ``x``). Columns ``score_mean``,
    ``score_std``, ``relative_mean``, ``relative_std``, ``n_draws``, ``single_draw``, ``n``, ``k``.
    """
    from prh_lib import results as results_table

    df = results_table.expand_extra_columns(df)
    df = df[df["quantity"].isin(["pca:dims", "pca:variance", "pca:reference"])].copy()
    df["x"] = np.where(df["quantity"] == "pca:variance", df["target_variance"], df["n_components"]).astype(float)
    df.loc[df["quantity"] == "pca:reference", "relative"] = 1.0
    by = ["dataset", "model_x", "model_y", "role", "compress", "quantity", "x"]
    agg = results_table.aggregate(df, by=by, values=["score", "relative"])
    meta = df.groupby(["dataset"])[["n", "k"]].first()
    return agg.join(meta, on="dataset")
