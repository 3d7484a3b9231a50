"""k-nearest-neighbour alignment metrics: mutual k-NN, Jaccard k-NN, cycle k-NN and CKNNA.

Neighbourhoods
--------------
For ``mutual_knn``, ``jaccard_knn`` and ``cycle_knn`` the neighbours of sample ``i`` are the ``k`` other
samples with the largest cosine similarity to it (rows are L2-normalised inside; that is the metric's
definition, not a hidden preprocessing step). ``cknna`` ranks by the raw inner product ``<x_i, x_j>``, the
kernel it scores with; pass :func:`~prh_lib.metrics.preprocess.l2_normalize`-d features to reproduce
the PRH numbers, which normalise first.

A sample is excluded from its own neighbours *by index* (the diagonal of the similarity matrix), never by
dropping the first sorted column, which goes wrong when rows are duplicated. Ties at the k-th
neighbour are broken deterministically: among equal similarities the lowest index wins.

Layer-wise forms take stacks ``(L_x, N, d_x)`` and ``(L_y, N, d_y)``, compute each layer's neighbours
once, and score all ``L_x * L_y`` pairs with batched gathers from boolean neighbour masks (counts are
integers, so layer-wise and pairwise values are bit-identical for mutual and cycle k-NN).

References
----------
Huh, Cheung, Wang, Isola (2024). "The Platonic Representation Hypothesis", ICML. Sec. 3.1 and App. A
(mutual k-NN, cycle k-NN, CKNNA); reference code github.com/minyoungg/platonic-rep ``metrics.py``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from . import _validation as V
from .kernel import _hsic_unbiased_dense

__all__ = [
    "knn_indices",
    "mutual_knn",
    "mutual_knn_layerwise",
    "mutual_knn_chance",
    "jaccard_knn",
    "jaccard_knn_layerwise",
    "jaccard_knn_chance",
    "cycle_knn",
    "cycle_knn_layerwise",
    "cknna",
    "cknna_layerwise",
]

_GATHER_BUDGET = 1 << 24  # elements per batched gather; bounds memory of the layer-wise scores

# --------------------------------------------------------------------------------------------------
# private core: similarity, neighbour selection, per-layer state
# --------------------------------------------------------------------------------------------------


def _gram(XL: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Similarity stack ``(L, N, N)`` (float32, exactly symmetric) and validity flags ``(L,)``.

    ``kind="cosine"``: cosine similarity (rows L2-normalised; all-zero rows stay zero).
    ``kind="linear"``: raw inner products (CKNNA's kernel).
    A layer is invalid (degenerate) when all its rows are identical after this step. Layers are
    processed one at a time, so temporaries never exceed one layer's features.
    """
    L, N, _ = XL.shape
    G = torch.empty(L, N, N, dtype=torch.float32, device=XL.device)
    valid = torch.empty(L, dtype=torch.bool, device=XL.device)
    n_zero = 0
    for l in range(L):
        Z = XL[l]
        if kind == "cosine":
            norms = torch.linalg.vector_norm(Z, dim=-1, keepdim=True)
            n_zero += int((norms == 0).sum())
            Z = Z / norms.clamp_min(1e-12)
        g = Z @ Z.T
        G[l] = 0.5 * (g + g.T)
        valid[l] = ~V.constant_layers(Z[None])[0]
    if n_zero:
        warnings.warn(
            f"{n_zero} all-zero rows: their cosine similarity to every sample is 0, so their "
            "neighbours are decided by the lowest-index tie-break",
            RuntimeWarning,
            stacklevel=4,
        )
    return G, valid


def _select(G: torch.Tensor, k: int, groups: torch.Tensor | None = None):
    """k nearest neighbours per row of a similarity stack ``G`` of shape ``(L, N, N)``.

    The diagonal (and, with ``groups``, every position holding the same group id) is excluded. Among
    equal similarities the lowest column index wins: the k-th largest *value* is unique, every entry
    above it is taken, and the remaining places go to the entries equal to it in index order (an
    index-based tie-break, not ``torch.topk``'s unspecified order). Returns ``idx (L, N, k)`` ordered
    by decreasing similarity (ties by increasing index) and the boolean membership ``mask (L, N, N)``.
    One layer at a time, so temporaries stay at one ``(N, N)`` matrix.
    """
    L, N, _ = G.shape
    excluded = torch.eye(N, dtype=torch.bool, device=G.device)
    if groups is not None:
        excluded |= groups[:, None] == groups[None, :]
    mask = torch.empty(L, N, N, dtype=torch.bool, device=G.device)
    idx = torch.empty(L, N, k, dtype=torch.int64, device=G.device)
    for l in range(L):
        S = G[l].masked_fill(excluded, float("-inf"))
        kth = torch.topk(S, k, dim=-1, sorted=True).values[:, k - 1 :]  # (N, 1)
        m = S > kth
        ties = S == kth
        need = k - m.sum(-1, keepdim=True)
        if bool((ties.sum(-1, keepdim=True) == need).all()):
            m |= ties
        else:  # a tie straddles the k-th place: lowest indices first
            m |= ties & (torch.cumsum(ties, dim=-1) <= need)
        nb = torch.nonzero(m)[:, 1].view(N, k)  # ascending column index within each row
        order = torch.sort(torch.gather(S, -1, nb), dim=-1, descending=True, stable=True).indices
        idx[l] = torch.gather(nb, -1, order)
        mask[l] = m
    return idx, mask


@dataclass
class _KnnState:
    """Per-layer neighbour structure of one representation stack (private)."""

    idx: torch.Tensor  # (L, N, k) int64
    mask: torch.Tensor  # (L, N, N) bool; mask[l, i, j] <=> j in N_l(i)
    valid: torch.Tensor  # (L,) bool
    k: int
    gram: torch.Tensor | None = None  # (L, N, N) float32 kernel values (CKNNA only)
    self_hsic: torch.Tensor | None = None  # (L,) float64 (CKNNA only)
    return_mask: torch.Tensor | None = None  # (L, N, N) bool, cycle k-NN under the bootstrap only


def _identity_mask(mask: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """``out[l, j, i]``: some position holding the same sample as ``i`` is in ``N_l(j)``.

    With positions resampled with replacement, "returning to ``i``" means returning to any copy of it.
    Counts are small integers, so the float index_add is exact (and deterministic) on any device.
    """
    _, gid = torch.unique(groups, return_inverse=True)
    L, N, _ = mask.shape
    per_group = torch.zeros(L, N, int(gid.max()) + 1, device=mask.device)
    per_group.index_add_(2, gid, mask.float())
    return per_group[:, :, gid] > 0


def _state(G, valid, *, k, groups=None, with_gram=False, return_by_identity=False) -> _KnnState:
    idx, mask = _select(G, k, groups)
    st = _KnnState(idx=idx, mask=mask, valid=valid, k=k)
    if return_by_identity and groups is not None:
        st.return_mask = _identity_mask(mask, groups)
    if with_gram:
        st.gram = G
        st.self_hsic = _cknna_self(G, idx, mask)
    return st


def _prepare(XL: torch.Tensor, *, k: int, kind: str) -> _KnnState:
    G, valid = _gram(XL, kind)
    return _state(G, valid, k=k, with_gram=(kind == "linear"))


def _blocks(n_x: int, per_x: int):
    step = max(1, _GATHER_BUDGET // max(per_x, 1))
    for s in range(0, n_x, step):
        yield slice(s, min(s + step, n_x))


def _overlap_counts(sx: _KnnState, sy: _KnnState, perm=None, *, per_sample: bool) -> torch.Tensor:
    """``counts[a, b, i] = |N_Xa(i) ∩ N_Yb'(i)|`` with ``Y' = Y[perm]``; shape ``(L_x, L_y, N)``.

    With ``per_sample=False`` the sum over samples, shape ``(L_x, L_y)``. Looks up Y's mask at X's
    neighbour positions; a permutation of the pairing only relabels the positions looked up
    (``M_Y'[i, j] = M_Y[perm[i], perm[j]]``), nothing is recomputed.
    """
    Lx, N, k = sx.idx.shape
    Ly = sy.mask.shape[0]
    rows = (torch.arange(N, device=sx.idx.device) if perm is None else perm).view(1, N, 1)
    out = []
    for blk in _blocks(Lx, Ly * N * k):
        cols = sx.idx[blk] if perm is None else perm[sx.idx[blk]]
        hits = sy.mask[:, rows, cols]  # (Ly, B, N, k) bool
        if per_sample:
            out.append(hits.count_nonzero(-1).transpose(0, 1))
        else:
            out.append(hits.view(Ly, hits.shape[1], -1).count_nonzero(-1).transpose(0, 1))
    return torch.cat(out, 0)


def _cycle_hits(sx: _KnnState, sy: _KnnState, perm=None) -> torch.Tensor:
    """``hits[a, b] = #{i : i in N_Xa(j) for some j in N_Yb'(i)}``; shape ``(L_x, L_y)``, int64."""
    Lx = sx.mask.shape[0]
    Ly, N, k = sy.idx.shape
    knn_y = sy.idx
    if perm is not None:  # N_Y'(i) = perm^-1(N_Y(perm[i]))
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(N, device=perm.device)
        knn_y = inv[sy.idx[:, perm, :]]
    rows = torch.arange(N, device=knn_y.device).view(1, N, 1)
    back = sx.mask if sx.return_mask is None else sx.return_mask
    out = []
    for blk in _blocks(Ly, Lx * N * k):
        hit = back[:, knn_y[blk], rows]  # (Lx, B, N, k): M_X[j, i] for j in N_Y'(i)
        out.append(hit.any(-1).count_nonzero(-1))
    return torch.cat(out, 1)


def _masked_hsic(A, Bv, rec, rowB_at_nbr, n: int) -> torch.Tensor:
    """Song et al. (2012) Eq. (5) for matrices supported on neighbour lists (sums over last 2 axes).

    ``A[..., i, t] = A_{i, j_t}``, ``Bv`` likewise, ``rec`` = ``M_{j_t, i}`` (reciprocal membership),
    ``rowB_at_nbr[..., i, t] = sum_l B_{j_t, l}``. The diagonal is zero by construction (a sample is
    never its own neighbour), as Eq. (5) requires.
    """
    tr = (A * Bv * rec).sum((-1, -2))  # tr(A B) = sum_ij A_ij B_ji, with B symmetric in value
    sA, sB = A.sum((-1, -2)), Bv.sum((-1, -2))
    ab = (A * rowB_at_nbr).sum((-1, -2))  # 1^T A B 1 = sum_ij A_ij rowsum(B)_j  (no scatter)
    return (tr + sA * sB / ((n - 1) * (n - 2)) - 2.0 * ab / (n - 2)) / (n * (n - 3))


def _cknna_self(G, idx, mask) -> torch.Tensor:
    """``HSIC_u(M∘K, M∘K)`` per layer, float64, shape ``(L,)``."""
    L, N, k = idx.shape
    lidx = torch.arange(L, device=idx.device).view(L, 1, 1)
    rows = torch.arange(N, device=idx.device).view(1, N, 1)
    kv = torch.gather(G, -1, idx).double()
    rec = mask[lidx, idx, rows]
    rowA = kv.sum(-1)  # (L, N)
    return _masked_hsic(kv, kv, rec, torch.gather(rowA, -1, idx.view(L, -1)).view(L, N, k), N)


def _cknna_hsic(sx: _KnnState, sy: _KnnState, perm=None) -> torch.Tensor:
    """``HSIC_u(M∘K_a, M∘L_b')`` with ``M = M_Xa ∘ M_Yb'``; shape ``(L_x, L_y)``, float64."""
    Lx, N, k = sx.idx.shape
    Ly = sy.mask.shape[0]
    dev = sx.idx.device
    r = torch.arange(N, device=dev) if perm is None else perm
    rows_i = torch.arange(N, device=dev).view(1, N, 1)
    out = []
    for blk in _blocks(Lx, 4 * Ly * N * k):
        knn = sx.idx[blk]  # (B, N, k)
        B = knn.shape[0]
        bidx = torch.arange(B, device=dev).view(B, 1, 1)
        kv = torch.gather(sx.gram[blk], -1, knn).double()  # K_a[i, j]
        rec_x = sx.mask[blk][bidx, knn, rows_i]  # M_Xa[j, i]
        pr, pc = r.view(1, N, 1), r[knn]
        w = sy.mask[:, pr, pc]  # M_Yb'[i, j]            (Ly, B, N, k)
        rec_y = sy.mask[:, pc, pr]  # M_Yb'[j, i]
        lv = sy.gram[:, pr, pc].double()  # L_b'[i, j]
        A = w * kv
        Bv = w * lv
        rowB = Bv.sum(-1)  # (Ly, B, N)
        rowB_at = torch.gather(rowB, -1, knn.reshape(1, B, N * k).expand(Ly, B, N * k)).view(Ly, B, N, k)
        out.append(_masked_hsic(A, Bv, rec_x & rec_y, rowB_at, N).transpose(0, 1))
    return torch.cat(out, 0)


# score functions on states: (sx, sy, perm) -> (L_x, L_y) float64, NaN where a layer is degenerate


def _nan_invalid(S: torch.Tensor, sx: _KnnState, sy: _KnnState) -> torch.Tensor:
    bad = ~(sx.valid[:, None] & sy.valid[None, :])
    return S.masked_fill(bad, float("nan")) if bool(bad.any()) else S


def _score_mutual(sx, sy, perm=None):
    N, k = sx.idx.shape[1], sx.k
    return _nan_invalid(_overlap_counts(sx, sy, perm, per_sample=False).double() / (N * k), sx, sy)


def _score_jaccard(sx, sy, perm=None):
    c = _overlap_counts(sx, sy, perm, per_sample=True).double()
    return _nan_invalid((c / (2 * sx.k - c)).mean(-1), sx, sy)


def _score_cycle(sx, sy, perm=None):
    N = sx.idx.shape[1]
    return _nan_invalid(_cycle_hits(sx, sy, perm).double() / N, sx, sy)


def _score_cknna(sx, sy, perm=None):
    den = sx.self_hsic[:, None] * sy.self_hsic[None, :]
    out = _cknna_hsic(sx, sy, perm) / den.clamp_min(0).sqrt()
    return _nan_invalid(out.masked_fill(den <= 0, float("nan")), sx, sy)


# --------------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------------


def _check_pair(X, Y, *, ndim, k, min_n=2, estimator="k-NN metric", device=None):
    dev = V.resolve_device(device, X, Y)
    X = V.to_tensor(X, "X", ndim=ndim, device=dev)
    Y = V.to_tensor(Y, "Y", ndim=ndim, device=dev)
    n = V.check_same_samples(X, Y)
    V.check_min_samples(n, min_n, estimator)
    return X, Y, V.check_k(k, n)


def _report(valid_x, valid_y, metric):
    V.warn_degenerate(~valid_x, "X", metric, "all samples identical after normalisation")
    V.warn_degenerate(~valid_y, "Y", metric, "all samples identical after normalisation")


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
        by index, so a duplicate of ``i`` is its first neighbour); ties go to the lowest index.

    Raises
    ------
    ValueError
        Wrong number of dimensions, NaN/inf values, or ``k`` out of range.
    """
    stacked = isinstance(X, (np.ndarray, torch.Tensor)) and X.ndim == 3
    XL = V.to_tensor(X, "X", ndim=3 if stacked else 2, device=V.resolve_device(device, X))
    XL = XL if stacked else XL[None]
    k = V.check_k(k, XL.shape[1])
    idx, _ = _select(_gram(XL, "cosine")[0], k)
    idx = idx.cpu().numpy()
    return idx if stacked else idx[0]


def _pairwise_masks(X, Y, k, kind):
    Gx, vx = _gram(X[None], kind)
    Gy, vy = _gram(Y[None], kind)
    return Gx[0], Gy[0], _select(Gx, k)[1][0], _select(Gy, k)[1][0], bool(vx[0]), bool(vy[0])


def mutual_knn(X, Y, *, k: int = 10) -> float:
    """Mutual k-NN alignment: mean over samples of ``|N_X(i) ∩ N_Y(i)| / k``.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)
        Row ``i`` of ``X`` and of ``Y`` describe the same sample.
    k : int in [1, n_samples - 1], default=10

    Returns
    -------
    score : float in [0, 1]
        1 when every sample has the same neighbours in both; :func:`mutual_knn_chance` (``k/(N-1)``) in
        expectation for an unrelated pairing. NaN (with a RuntimeWarning) if either representation has
        all samples identical. Symmetric in ``X`` and ``Y``; invariant to rotations and to any rescaling
        of rows.

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
    X, Y, k = _check_pair(X, Y, ndim=2, k=k)
    _, _, mx, my, vx, vy = _pairwise_masks(X, Y, k, "cosine")
    _report(torch.tensor([vx]), torch.tensor([vy]), "mutual_knn")
    if not (vx and vy):
        return float("nan")
    return int((mx & my).sum()) / (X.shape[0] * k)


def jaccard_knn(X, Y, *, k: int = 10) -> float:
    """Jaccard k-NN alignment: mean over samples of ``|N_X(i) ∩ N_Y(i)| / |N_X(i) ∪ N_Y(i)|``.

    The intersection-over-union counterpart of :func:`mutual_knn`; with ``m`` shared neighbours a
    sample scores ``m / (2k - m)`` rather than ``m / k``.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)
    k : int in [1, n_samples - 1], default=10

    Returns
    -------
    score : float in [0, 1]
        Chance level :func:`jaccard_knn_chance`. Symmetric; NaN (warning) for degenerate inputs.

    Raises
    ------
    ValueError, TypeError
        As :func:`mutual_knn`.

    References
    ----------
    Jaccard (1912); used for neighbourhood overlap e.g. by Klabunde et al. (2023), "Similarity of
    Neural Network Models: A Survey of Functional and Representational Measures", Sec. 3.6.
    """
    X, Y, k = _check_pair(X, Y, ndim=2, k=k)
    _, _, mx, my, vx, vy = _pairwise_masks(X, Y, k, "cosine")
    _report(torch.tensor([vx]), torch.tensor([vy]), "jaccard_knn")
    if not (vx and vy):
        return float("nan")
    m = (mx & my).sum(1).double()
    return float((m / (mx | my).sum(1).double()).mean())


def cycle_knn(X, Y, *, k: int = 10) -> float:
    """Cycle k-NN: fraction of samples ``i`` found among the X-neighbours of their Y-neighbours.

    ``i`` scores 1 when ``i in N_X(j)`` for some ``j in N_Y(i)`` (go to a neighbour in Y, come back
    through X). Asymmetric: ``cycle_knn(X, Y) != cycle_knn(Y, X)`` in general, and
    ``cycle_knn(X, X) < 1`` when neighbourhoods are not reciprocal.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)
    k : int in [1, n_samples - 1], default=10

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
    X, Y, k = _check_pair(X, Y, ndim=2, k=k)
    _, _, mx, my, vx, vy = _pairwise_masks(X, Y, k, "cosine")
    _report(torch.tensor([vx]), torch.tensor([vy]), "cycle_knn")
    if not (vx and vy):
        return float("nan")
    return int((my & mx.T).any(1).sum()) / X.shape[0]


def cknna(X, Y, *, k: int = 10) -> float:
    """CKNNA: centered kernel alignment restricted to mutual k-nearest neighbours.

    ``CKNNA = HSIC_u(M∘K, M∘L) / sqrt(HSIC_u(M_X∘K, M_X∘K) HSIC_u(M_Y∘L, M_Y∘L))`` with linear kernels
    ``K = X X^T``, ``L = Y Y^T``, neighbour masks ``M_X[i, j] = 1[j in N_X(i)]`` (neighbours by the same
    inner product, self excluded by index), ``M = M_X ∘ M_Y`` and the unbiased HSIC of Song et al.
    (2012). Computed in float64 after float32 Gram matrices.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
        Not normalised inside; pass ``l2_normalize(X)`` to reproduce the PRH code.
    Y : ndarray or Tensor of shape (n_samples, d_y)
    k : int in [1, n_samples - 1], default=10

    Returns
    -------
    score : float
        1 for ``X`` against itself; invariant to rotations and isotropic scaling. Can be slightly
        negative. *Not exactly symmetric*: the masked kernels are not symmetric matrices (neighbour
        relations need not be reciprocal), and Eq. (5)'s term ``1^T A B 1`` changes when ``A`` and ``B``
        swap; the difference is small for realistic ``N`` (about 1e-3 at N=150, k=10). NaN (warning) if
        either representation is constant or a denominator HSIC is not positive.

    Raises
    ------
    ValueError
        As :func:`mutual_knn`, and ``n_samples < 4`` (the unbiased HSIC divides by ``n - 3``).
    TypeError
        Inputs that are not real NumPy arrays or torch tensors.

    Notes
    -----
    This follows the PRH reference implementation (``AlignmentMetrics.cknna`` with ``unbiased=True``),
    which applies ``hsic_unbiased`` to the masked kernels, rather than the row-centred sum written in
    App. A. The PRH code adds ``1e-6`` to the denominator; this function does not, so values differ
    from it by that offset.

    References
    ----------
    Huh et al. (2024), App. A, Eq. (13)-(14) (``Align_knn``, CKNNA); ``AlignmentMetrics.cknna`` in
    github.com/minyoungg/platonic-rep. Song, Smola, Gretton, Bedo, Borgwardt (2012), "Feature Selection
    via Dependence Maximization", JMLR 13, Eq. (5).
    """
    X, Y, k = _check_pair(X, Y, ndim=2, k=k, min_n=4, estimator="cknna (unbiased HSIC)")
    Gx, Gy, mx, my, vx, vy = _pairwise_masks(X, Y, k, "linear")
    V.warn_degenerate(torch.tensor([not vx]), "X", "cknna", "all samples identical")
    V.warn_degenerate(torch.tensor([not vy]), "Y", "cknna", "all samples identical")
    if not (vx and vy):
        return float("nan")
    Kd, Ld = Gx.double(), Gy.double()
    m = (mx & my).double()
    num = _hsic_unbiased_dense(m * Kd, m * Ld)
    den = _hsic_unbiased_dense(mx * Kd, mx * Kd) * _hsic_unbiased_dense(my * Ld, my * Ld)
    if not bool(den > 0):
        V.warn_degenerate(torch.tensor([True]), "X or Y", "cknna", "non-positive self-HSIC")
        return float("nan")
    return float(num / den.sqrt())


def _layerwise(X, Y, *, k, device, metric, kind, score, min_n=2):
    X, Y, k = _check_pair(X, Y, ndim=3, k=k, min_n=min_n, estimator=metric, device=device)
    sx, sy = _prepare(X, k=k, kind=kind), _prepare(Y, k=k, kind=kind)
    _report(sx.valid, sy.valid, metric)
    return score(sx, sy).cpu().numpy()


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
        ``scores[a, b] == {name}(X[a], Y[b], k=k)`` ({equality}). Rows/columns of degenerate layers
        are NaN (with a RuntimeWarning).

    Raises
    ------
    ValueError, TypeError
        As :func:`{name}`, for 3-D inputs.

    Notes
    -----
    Each layer's neighbours are computed once (``L_x + L_y`` similarity matrices), then all pair scores
    come from batched look-ups of one representation's neighbour masks at the other's neighbour indices.
    """


def mutual_knn_layerwise(X, Y, *, k: int = 10, device=None) -> np.ndarray:
    return _layerwise(X, Y, k=k, device=device, metric="mutual_knn", kind="cosine", score=_score_mutual)


def jaccard_knn_layerwise(X, Y, *, k: int = 10, device=None) -> np.ndarray:
    return _layerwise(X, Y, k=k, device=device, metric="jaccard_knn", kind="cosine", score=_score_jaccard)


def cycle_knn_layerwise(X, Y, *, k: int = 10, device=None) -> np.ndarray:
    return _layerwise(X, Y, k=k, device=device, metric="cycle_knn", kind="cosine", score=_score_cycle)


def cknna_layerwise(X, Y, *, k: int = 10, device=None) -> np.ndarray:
    return _layerwise(
        X, Y, k=k, device=device, metric="cknna", kind="linear", score=_score_cknna, min_n=4
    )


mutual_knn_layerwise.__doc__ = _LAYERWISE_DOC.format(name="mutual_knn", equality="bit-identical")
jaccard_knn_layerwise.__doc__ = _LAYERWISE_DOC.format(name="jaccard_knn", equality="up to rounding")
cycle_knn_layerwise.__doc__ = _LAYERWISE_DOC.format(name="cycle_knn", equality="bit-identical")
cknna_layerwise.__doc__ = _LAYERWISE_DOC.format(name="cknna", equality="up to float64 rounding")


def mutual_knn_chance(n: int, k: int) -> float:
    """Expected :func:`mutual_knn` for an unrelated pairing: ``k / (n - 1)``.

    Each of ``i``'s ``k`` X-neighbours is one of ``i``'s Y-neighbours with probability ``k / (n - 1)``.

    Raises
    ------
    ValueError
        Unless ``n >= 2`` and ``1 <= k <= n - 1``.
    """
    n = V.check_int(n, "n", low=2)
    return V.check_k(k, n) / (n - 1)


def jaccard_knn_chance(n: int, k: int) -> float:
    """Expected :func:`jaccard_knn` for an unrelated pairing.

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
