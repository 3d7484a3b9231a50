"""k-nearest-neighbour alignment metrics: mutual k-NN, Jaccard k-NN, cycle k-NN and CKNNA.

Neighbourhoods
--------------
For ``mutual_knn``, ``jaccard_knn`` and ``cycle_knn`` the neighbours of sample ``i`` are the ``k`` other
samples with the largest cosine similarity to it (ranking by cosine is the metric's definition, not a
hidden preprocessing step; it is computed from the Gram matrix of the raw rows, see
:mod:`._neighbours`). ``cknna`` ranks by the raw inner product ``<x_i, x_j>``, the kernel it scores
with; pass :func:`~prh_lib.metrics.preprocess.l2_normalize`-d features to reproduce the PRH numbers,
which normalise first. A sample is excluded from its own neighbours *by index*, never by dropping the
first sorted column, which goes wrong when rows are duplicated.

Ties
----
Exact ties are common (duplicate samples, quantised features, all-zero rows). When a tie *straddles* the
``k``-th place (``r`` of ``t`` equally similar samples must be chosen), a choice made the same way in ``X``
and ``Y`` (say, lowest index first) makes the neighbourhoods agree for no reason in the data, an inflation
a permutation null does not reproduce.

- ``mutual_knn`` and ``jaccard_knn`` use **tie-averaged membership**: sample ``j`` belongs to ``N(i)`` with weight 1 if
  it is strictly among the ``k`` nearest, ``r / t`` if it is one of the ``t`` samples tied at the ``k``-th place, 0
  otherwise. The per-sample overlap ``m_i = sum_j w_X(i, j) w_Y(i, j)`` is the *expected* overlap under independent,
  uniformly random tie-breaking in ``X`` and ``Y`` (:func:`prh_lib.metrics.reference.mutual_knn` computes it with plain
  loops); without straddling ties it is the usual count. It does not depend on sample order, so the re-paired null
  equals recomputation; unrelated tied data stay at chance, ``k / (N - 1)``, in expectation; a representation with
  straddling ties scores below 1 against itself. Jaccard uses the same ``m_i`` in ``m_i / (2k - m_i)``.
- ``cycle_knn`` and ``cknna`` are not linear in the memberships, so an expectation over tie-breaks has
  no cheap closed form; they keep the deterministic **lowest-index** rule of :func:`knn_indices` (as
  ``torch.topk`` in the PRH code does in practice), and their permutation nulls re-apply it in the
  re-paired sample order, which is exactly what recomputation does; their tests stay exact, but their
  raw scores on heavily tied data carry the shared-tie-break inflation.

All counting is integer or exact fixed-point arithmetic (resolution ``2**-36`` of a neighbour per sample
at the paper's size; :mod:`._bits`): given the same similarity matrices, results are deterministic and identical on
CPU and GPU, and a layer-wise score equals the pairwise one bit for bit.

Layer-wise forms take each layer's top ``k + 1`` similarities per row once and count the overlaps of all
``L_x L_y`` pairs with bit-sliced popcounts (:mod:`._overlap`); permutation nulls relabel the same lists.

References
----------
Huh, Cheung, Wang, Isola (2024). "The Platonic Representation Hypothesis", ICML. Sec. 3.1 and App. A
(mutual k-NN, cycle k-NN, CKNNA); reference code github.com/minyoungg/platonic-rep ``metrics.py``.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections import OrderedDict

import numpy as np
import torch

from prh_lib.metrics import _cknna as C
from prh_lib.metrics import _overlap as O
from prh_lib.metrics import _validation as V
from prh_lib.metrics._bits import Backend
from prh_lib.metrics._neighbours import (Hoods, hoods_from_features, hoods_from_similarity, hoods_of_resamples,
    hoods_of_subsample, similarity, warn_zero_rows)

__all__ = ["knn_indices", "mutual_knn", "mutual_knn_layerwise", "mutual_knn_chance", "jaccard_knn",
           "jaccard_knn_layerwise", "jaccard_knn_chance", "cycle_knn", "cycle_knn_layerwise", "cknna",
           "cknna_layerwise"]

# -- private core: two-stage form (neighbourhoods, then scores for any re-pairings), used by the engines ---

# "mutual_knn_dot": mutual k-NN with neighbours by raw inner product (the PRH code without its L2 normalisation)
_KIND = {"mutual_knn": "cosine", "jaccard_knn": "cosine", "cycle_knn": "cosine", "cknna": "linear",
         "mutual_knn_dot": "linear"}


#: Neighbourhoods of recently seen feature stacks (a stack meets many partners), by the identity and
#: ``_version`` of the caller's tensor: used only while that tensor is alive and unmodified through torch
#: (a write through a NumPy view or ``.data`` is not seen: pass a new tensor). NumPy and inference-mode
#: inputs are not memoised. Bounded by :data:`_HOODS_MEMO_SIZE` and :data:`_HOODS_MEMO_BYTES`; every access
#: holds :data:`_HOODS_LOCK` (draws are scored on several threads).
_HOODS_MEMO: "OrderedDict[tuple, tuple]" = OrderedDict()
_HOODS_MEMO_SIZE = 64
_HOODS_MEMO_BYTES = 256 * 2**20
_HOODS_LOCK = threading.RLock()
_HOODS_HELD = [0]  # bytes of the entries in _HOODS_MEMO


def _memo_key(source, XL: torch.Tensor, k: int, kind: str):
    if not isinstance(source, torch.Tensor) or kind != "cosine" or source.is_inference():
        return None  # CKNNA keeps (L, N, N) Gram matrices in its state: too large to hold on to
    return (id(source), source._version, k, kind, str(XL.device), tuple(XL.shape))


def _forget(key):
    with _HOODS_LOCK:
        entry = _HOODS_MEMO.pop(key, None)
        if entry is not None:
            _HOODS_HELD[0] -= entry[2]


def _nbytes(h: Hoods) -> int:
    return sum(int(a.nbytes) if hasattr(a, "nbytes") else int(a.numel() * a.element_size())
               for a in (h.idx, h.straddle, h.s_layer, h.s_row, h.s_code, h.s_r, h.s_t))


def _hoods(XL: torch.Tensor, *, k: int, kind: str, name: str, source=None) -> Hoods:
    key = _memo_key(source, XL, k, kind)
    if key is not None:
        with _HOODS_LOCK:
            hit = _HOODS_MEMO.get(key)
            if hit is not None and hit[0]() is source:
                _HOODS_MEMO.move_to_end(key)
                return dataclasses.replace(hit[1])  # a fresh object: the tables a score caches on it go with it
    h = hoods_from_features(XL, k=k, kind=kind, name=name, bk=Backend(XL.device), keep_gram=(kind == "linear"))
    size = _nbytes(h) if key is not None else 0
    if key is not None and size <= _HOODS_MEMO_BYTES:
        entry = (weakref.ref(source, lambda _, key=key: _forget(key)), dataclasses.replace(h), size)
        with _HOODS_LOCK:
            old = _HOODS_MEMO.pop(key, None)  # another thread may have computed the same stack meanwhile
            _HOODS_HELD[0] += size - (old[2] if old is not None else 0)
            _HOODS_MEMO[key] = entry
            while len(_HOODS_MEMO) > _HOODS_MEMO_SIZE or _HOODS_HELD[0] > _HOODS_MEMO_BYTES:
                _HOODS_HELD[0] -= _HOODS_MEMO.popitem(last=False)[1][2]
    return h


def _prepare(XL: torch.Tensor, *, k: int, metric: str, name: str = "X", source=None):
    """Neighbourhood state of a stack ``XL`` (L, N, d) for ``metric``, memoised by ``source``, the caller's
    tensor ``XL`` was made from (:data:`_HOODS_MEMO`; the same bits and warnings either way)."""
    kind = _KIND[metric]
    h = _hoods(XL, k=k, kind=kind, name=name, source=source)
    warn_zero_rows(h, name, stacklevel=5)
    return C.state(h) if metric == "cknna" else h


def _gram(XL: torch.Tensor, kind: str):
    """Similarity stack ``(L, N, N)`` float32 and validity ``(L,)`` bool tensor (bootstrap path)."""
    from prh_lib.metrics._neighbours import is_constant

    S = torch.stack([similarity(Z, kind, "X")[0] for Z in XL])
    return S, torch.tensor([not is_constant(Z, kind) for Z in XL])


def _state(G: torch.Tensor, valid, *, k: int, metric: str, groups=None):
    """State from a (resampled) similarity stack, excluding same-group positions (bootstrap path)."""
    gram = G if metric == "cknna" else None
    h = hoods_from_similarity(G, np.asarray(valid.cpu() if isinstance(valid, torch.Tensor) else valid),
                              k=k, bk=Backend(G.device), groups=groups, gram=gram)
    return C.state(h) if metric == "cknna" else h


def _resample_state(G: torch.Tensor, valid, draws: torch.Tensor, *, k: int) -> Hoods:
    """Neighbourhoods of the resamples ``G[0][d][:, d]`` (rows ``d`` of ``draws``, with or without
    copies) as the layers of one state (mutual, Jaccard and cycle k-NN; bootstrap path)."""
    valid = np.repeat(np.asarray(valid.cpu() if isinstance(valid, torch.Tensor) else valid), draws.shape[0])
    return hoods_of_resamples(G[0], valid, draws, k=k, bk=Backend(G.device))


def _subsample_state(G: torch.Tensor, valid, cands, idx: torch.Tensor, *, k: int) -> Hoods:
    """Neighbourhoods of the subsample ``G[:, idx][:, :, idx]`` (distinct samples, ``idx`` sorted) from the full
    stack's candidates ``cands`` (:func:`subsample_candidates`): the same bits as :func:`_state` of it."""
    return hoods_of_subsample(G, *cands, np.asarray(valid.cpu() if isinstance(valid, torch.Tensor) else valid),
                              idx, k=k, bk=Backend(G.device))


def _scores(metric: str, sx, sy, perms=None) -> np.ndarray:
    """``(P, L_x, L_y)`` float64 scores; ``perms`` a ``(P, N)`` int64 array of re-pairings or None."""
    if metric == "cknna":
        return C.scores(sx, sy, perms)
    bk = sx.bk
    P = None if perms is None else bk.asarray(perms)
    if metric == "cycle_knn":
        return O.cycle_scores(sx, sy, P)
    return O.overlap_scores(sx, sy, P, jaccard=(metric == "jaccard_knn"))


def _valid(state) -> np.ndarray:
    return state.valid


# -- public API ------------------------------------------------------------------------------------


def _check(X, Y, *, ndim, k, min_n=2, estimator="k-NN metric", device=None):
    dev = V.resolve_device(device, X, Y)
    X = V.to_tensor(X, "X", ndim=ndim, device=dev, check_finite=False)
    Y = V.to_tensor(Y, "Y", ndim=ndim, device=dev, check_finite=False)
    n = V.check_same_samples(X, Y)
    V.check_min_samples(n, min_n, estimator)
    return X, Y, V.check_k(k, n)


def _report(sx, sy, metric):
    V.warn_degenerate(torch.from_numpy(~_valid(sx)), "X", metric, "all samples identical after normalisation")
    V.warn_degenerate(torch.from_numpy(~_valid(sy)), "Y", metric, "all samples identical after normalisation")


def _run(X, Y, *, ndim, k, metric, device=None, min_n=2, estimator=None):
    Xin, Yin = X, Y
    X, Y, k = _check(X, Y, ndim=ndim, k=k, min_n=min_n, estimator=estimator or metric, device=device)
    k = V.check_informative_k(k, X.shape[-2], metric)
    XL, YL = (X, Y) if ndim == 3 else (X[None], Y[None])
    sx = _prepare(XL, k=k, metric=metric, name="X", source=Xin)
    sy = _prepare(YL, k=k, metric=metric, name="Y", source=Yin)
    _report(sx, sy, metric)
    S = _scores(metric, sx, sy)[0]
    return S if ndim == 3 else float(S[0, 0])


def knn_indices(X, *, k: int, device=None) -> np.ndarray:
    """Indices of the ``k`` nearest neighbours of every sample by cosine similarity.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, n_features) or (n_layers, n_samples, n_features)
    k : int in [1, n_samples - 1]
    device : str or torch.device, optional
        Where to compute; defaults to the input's device (CPU for NumPy input).

    Returns
    -------
    idx : ndarray of int64, shape (n_samples, k) or (n_layers, n_samples, k)
        Row ``i`` lists its neighbours by decreasing similarity. ``i`` itself never appears (excluded
        by index, so a duplicate of ``i`` is its first neighbour); ties go to the lowest index. (This is
        one deterministic list; ``mutual_knn`` and ``jaccard_knn`` average over the choices a tie at the
        ``k``-th place leaves open, see the module notes.)

    Raises
    ------
    ValueError
        Wrong number of dimensions, NaN/inf values, or ``k`` out of range.
    """
    stacked = isinstance(X, (np.ndarray, torch.Tensor)) and X.ndim == 3
    XL = V.to_tensor(X, "X", ndim=3 if stacked else 2, device=V.resolve_device(device, X), check_finite=False)
    XL = XL if stacked else XL[None]
    k = V.check_k(k, XL.shape[1])
    h = hoods_from_features(XL, k=k, kind="cosine", name="X", bk=Backend(XL.device))
    warn_zero_rows(h, "X", stacklevel=3)
    idx = h.bk.to_numpy(h.idx)
    return idx if stacked else idx[0]


def mutual_knn(X, Y, *, k: int = 10) -> float:
    """Mutual k-NN alignment: mean over samples of ``|N_X(i) ∩ N_Y(i)| / k``.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)
        Row ``i`` of ``X`` and of ``Y`` describe the same sample.
    k : int in [1, n_samples - 2], default=10
        (``k = n_samples - 1`` is refused: every score would be 1)

    Returns
    -------
    score : float in [0, 1]
        1 when every sample has the same, unambiguous neighbours in both; :func:`mutual_knn_chance`
        (``k/(N-1)``) in expectation for an unrelated pairing. Ties straddling the ``k``-th place count
        with their expected overlap under independent random tie-breaking (module notes). NaN (with a
        RuntimeWarning) if either representation has all samples identical. Symmetric in ``X`` and
        ``Y``; invariant to rotations, to any rescaling of rows and to a common permutation of samples.

    Raises
    ------
    ValueError
        Different numbers of samples, ``k`` out of range, NaN/inf values, wrong number of dimensions.
    TypeError
        Inputs that are not real NumPy arrays or torch tensors.

    References
    ----------
    Huh et al. (2024), "The Platonic Representation Hypothesis", Sec. 3.1 and App. A, Eq. (11)
    (``m_NN``); ``AlignmentMetrics.mutual_knn`` in github.com/minyoungg/platonic-rep.

    Examples
    --------
    >>> rng = np.random.default_rng(0); X = rng.normal(size=(100, 8))
    >>> mutual_knn(X, 2 * X, k=5)
    1.0
    """
    return _run(X, Y, ndim=2, k=k, metric="mutual_knn")


def jaccard_knn(X, Y, *, k: int = 10) -> float:
    """Jaccard k-NN alignment: mean over samples of ``|N_X(i) ∩ N_Y(i)| / |N_X(i) ∪ N_Y(i)|``.

    The intersection-over-union counterpart of :func:`mutual_knn`; with ``m`` shared neighbours a
    sample scores ``m / (2k - m)`` rather than ``m / k`` (``m`` the tie-averaged overlap).

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)
    k : int in [1, n_samples - 2], default=10
        (``k = n_samples - 1`` is refused: every score would be 1)

    Returns
    -------
    score : float in [0, 1]
        Chance level :func:`jaccard_knn_chance` (without ties). Symmetric; NaN (warning) for degenerate inputs.

    Raises
    ------
    ValueError, TypeError
        As :func:`mutual_knn`.

    References
    ----------
    Jaccard (1912); used for neighbourhood overlap e.g. by Klabunde et al. (2023), "Similarity of
    Neural Network Models: A Survey of Functional and Representational Measures", Sec. 3.6.
    """
    return _run(X, Y, ndim=2, k=k, metric="jaccard_knn")


def cycle_knn(X, Y, *, k: int = 10) -> float:
    """Cycle k-NN: fraction of samples ``i`` found among the X-neighbours of their Y-neighbours.

    ``i`` scores 1 when ``i in N_X(j)`` for some ``j in N_Y(i)`` (go to a neighbour in Y, come back
    through X). Asymmetric: ``cycle_knn(X, Y) != cycle_knn(Y, X)`` in general, and
    ``cycle_knn(X, X) < 1`` when neighbourhoods are not reciprocal. Ties: lowest index (module notes).

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)
    k : int in [1, n_samples - 2], default=10
        (``k = n_samples - 1`` is refused: every score would be 1)

    Returns
    -------
    score : float in [0, 1]
        NaN (warning) for degenerate inputs.

    Raises
    ------
    ValueError, TypeError
        As :func:`mutual_knn`.

    References
    ----------
    Huh et al. (2024), App. A (cycle k-NN); ``AlignmentMetrics.cycle_knn(feats_A=X, feats_B=Y)`` in
    github.com/minyoungg/platonic-rep, which tests ``i in knn_A[knn_B[i]]``.
    """
    return _run(X, Y, ndim=2, k=k, metric="cycle_knn")


def cknna(X, Y, *, k: int = 10) -> float:
    """CKNNA: centered kernel alignment restricted to mutual k-nearest neighbours.

    ``CKNNA = HSIC_u(M∘K, M∘L) / sqrt(HSIC_u(M_X∘K, M_X∘K) HSIC_u(M_Y∘L, M_Y∘L))`` with linear kernels
    ``K = X X^T``, ``L = Y Y^T``, neighbour masks ``M_X[i, j] = 1[j in N_X(i)]`` (neighbours by the same
    inner product, self excluded by index, ties by lowest index), ``M = M_X ∘ M_Y`` and the unbiased
    HSIC of Song et al. (2012). Computed in float64 after float32 Gram matrices.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
        Not normalised inside; pass ``l2_normalize(X)`` to reproduce the PRH code.
    Y : ndarray or Tensor of shape (n_samples, d_y)
    k : int in [1, n_samples - 1], default=10

    Returns
    -------
    score : float
        1 for ``X`` against itself; invariant to rotations and isotropic scaling. Can be slightly negative. *Not exactly
        symmetric*: the masked kernels are not symmetric matrices (neighbour relations need not be reciprocal), and Eq.
        (5)'s term ``1^T A B 1`` changes when ``A`` and ``B`` swap; the difference is small for realistic ``N`` (about
        1e-3 at N=150, k=10). NaN (warning) if either representation is constant or a denominator HSIC is not positive.

    Raises
    ------
    ValueError
        As :func:`mutual_knn`, and ``n_samples < 4`` (the unbiased HSIC divides by ``n - 3``).
    TypeError
        Inputs that are not real NumPy arrays or torch tensors.

    Notes
    -----
    This follows the PRH reference implementation (``AlignmentMetrics.cknna`` with ``unbiased=True``), which applies
    ``hsic_unbiased`` to the masked kernels, rather than the row-centred sum written in App. A. The PRH code adds
    ``1e-6`` to the denominator; this function does not, so values differ from it by that offset.

    References
    ----------
    Huh et al. (2024), App. A, Eq. (13)-(14) (``Align_knn``, CKNNA); ``AlignmentMetrics.cknna`` in
    github.com/minyoungg/platonic-rep. Song, Smola, Gretton, Bedo, Borgwardt (2012), "Feature Selection
    via Dependence Maximization", JMLR 13, Eq. (5).
    """
    return _run(X, Y, ndim=2, k=k, metric="cknna", min_n=4, estimator="cknna (unbiased HSIC)")


_LAYERWISE_DOC = """Layer-wise {name}: every pair of layers of two stacked representations.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_layers_x, n_samples, d_x)
    Y : ndarray or Tensor of shape (n_layers_y, n_samples, d_y)
    k : int in [1, n_samples - 1], default=10
    device : str or torch.device, optional
        Where to compute (e.g. ``"cuda"``); defaults to the input's device, CPU for NumPy input.

    Returns
    -------
    scores : ndarray of float64, shape (n_layers_x, n_layers_y)
        ``scores[a, b] == {name}(X[a], Y[b], k=k)``, bit for bit. Rows/columns of degenerate layers
        are NaN (with a RuntimeWarning).

    Raises
    ------
    ValueError, TypeError
        As :func:`{name}`, for 3-D inputs.

    Notes
    -----
    Each layer's Gram matrix and neighbours are computed once (``L_x + L_y`` Gram matrices, one at a
    time); {how}. Time is close to forming the Gram matrices alone (see ``benchmarks/README.md``).
    """


def mutual_knn_layerwise(X, Y, *, k: int = 10, device=None) -> np.ndarray:
    return _run(X, Y, ndim=3, k=k, metric="mutual_knn", device=device)


def jaccard_knn_layerwise(X, Y, *, k: int = 10, device=None) -> np.ndarray:
    return _run(X, Y, ndim=3, k=k, metric="jaccard_knn", device=device)


def cycle_knn_layerwise(X, Y, *, k: int = 10, device=None) -> np.ndarray:
    return _run(X, Y, ndim=3, k=k, metric="cycle_knn", device=device)


def cknna_layerwise(X, Y, *, k: int = 10, device=None) -> np.ndarray:
    return _run(X, Y, ndim=3, k=k, metric="cknna", device=device, min_n=4, estimator="cknna (unbiased HSIC)")


_BITS = "all pair overlaps are counted at once with bit-sliced popcounts over packed membership words"
mutual_knn_layerwise.__doc__ = _LAYERWISE_DOC.format(name="mutual_knn", how=_BITS)
jaccard_knn_layerwise.__doc__ = _LAYERWISE_DOC.format(name="jaccard_knn", how=_BITS + " (per sample)")
cycle_knn_layerwise.__doc__ = _LAYERWISE_DOC.format(name="cycle_knn", how=_BITS)
cknna_layerwise.__doc__ = _LAYERWISE_DOC.format(
    name="cknna", how="the masked HSIC terms are gathered at neighbour positions for all pairs in batches"
)


def mutual_knn_chance(n: int, k: int) -> float:
    """Expected :func:`mutual_knn` for an unrelated pairing: ``k / (n - 1)``.

    Each of ``i``'s ``k`` X-neighbours is one of ``i``'s Y-neighbours with probability ``k / (n - 1)``
    (with tie-averaged membership this holds with ties as well).

    Raises
    ------
    ValueError
        Unless ``n >= 2`` and ``1 <= k <= n - 1``.
    """
    n = V.check_int(n, "n", low=2)
    return V.check_k(k, n) / (n - 1)


def jaccard_knn_chance(n: int, k: int) -> float:
    """Expected :func:`jaccard_knn` for an unrelated pairing (without ties).

    The overlap ``m`` of two independent uniformly random ``k``-subsets of the ``n - 1`` other samples is
    hypergeometric; the value is ``E[m / (2k - m)]``, computed exactly.

    Raises
    ------
    ValueError
        Unless ``n >= 2`` and ``1 <= k <= n - 1``.
    """
    from scipy.stats import hypergeom

    n = V.check_int(n, "n", low=2)
    k = V.check_k(k, n)
    m = np.arange(0, k + 1)
    return float(np.sum(hypergeom.pmf(m, n - 1, k, k) * m / (2 * k - m)))
