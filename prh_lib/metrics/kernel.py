"""Kernel alignment metrics: linear CKA (biased and unbiased HSIC) and RBF CKA.

``CKA(K, L) = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))`` for Gram matrices ``K`` (of ``X``) and ``L``
(of ``Y``). The biased HSIC is ``tr(K H L H) / (n-1)^2`` with ``H = I - 11^T/n`` (Gretton et al. 2005,
used by Kornblith et al. 2019); the unbiased HSIC is Song et al.'s (2012) Eq. (5), which zeroes the
diagonal of the Gram matrices only. For independent data the biased CKA stays well above 0 when the
feature dimension is large relative to ``n``; the unbiased one is centred on 0.

Precision: pairwise functions compute in float64 from the given features. Layer-wise functions form
Gram matrices in float32, centre them in float64 (double centring for the biased HSIC, U-centring for
the unbiased one: ``HSIC_u(K, L) = <U(K), U(L)> / (n (n-3))``, Székely & Rizzo 2014, Eq. (2.3)),
store the centred matrices in float32 and take all ``L_x * L_y`` inner products in one float32 matrix
product. Features are centred before the linear Gram matrix is formed; both HSICs are exactly
invariant to that, and it removes the cancellation a large feature mean would otherwise cause.

References
----------
Kornblith, Norouzi, Lee, Hinton (2019). "Similarity of Neural Network Representations Revisited", ICML,
Eq. (2)-(5) and the RBF kernel with bandwidth relative to the median distance (their Colab ``gram_rbf``).
Gretton, Bousquet, Smola, Schölkopf (2005). "Measuring Statistical Dependence with Hilbert-Schmidt
Norms", ALT, Eq. (4) (biased HSIC).
Song, Smola, Gretton, Bedo, Borgwardt (2012). "Feature Selection via Dependence Maximization", JMLR 13,
Eq. (5) (unbiased HSIC).
Székely, Rizzo (2014). "Partial distance correlation with methods for dissimilarities", Ann. Statist.
42(6), Sec. 2 (U-centring).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from prh_lib.metrics import _validation as V

__all__ = ["cka_linear", "cka_linear_unbiased", "cka_rbf", "cka_linear_layerwise", "cka_linear_unbiased_layerwise",
           "cka_rbf_layerwise", "BANDWIDTHS"]

BANDWIDTHS = ("median", "absolute")

# -- private core ----------------------------------------------------------------------------------


def _hsic_unbiased_dense(K: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
    """Song et al. (2012) Eq. (5) on dense matrices (diagonals zeroed here; no symmetry assumed)."""
    n = K.shape[0]
    K = K.clone().fill_diagonal_(0)
    L = L.clone().fill_diagonal_(0)
    tr = (K * L.T).sum()
    return (tr + K.sum() * L.sum() / ((n - 1) * (n - 2)) - 2 * (K @ L).sum() / (n - 2)) / (n * (n - 3))


def _double_center(K: torch.Tensor) -> torch.Tensor:
    """``H K H`` for a stack ``(..., n, n)``."""
    return K - K.mean(-1, keepdim=True) - K.mean(-2, keepdim=True) + K.mean((-1, -2), keepdim=True)


def _u_center(K: torch.Tensor, exclude: torch.Tensor | None = None) -> torch.Tensor:
    """U-centring of a stack ``(..., n, n)``: zero diagonal, then remove row/column sums (S&R 2014).

    ``exclude`` (bool ``(n, n)``) zeroes further entries like the diagonal; used by the bootstrap for
    pairs of positions that hold the same sample.
    """
    n = K.shape[-1]
    K = K.clone()
    K.diagonal(dim1=-2, dim2=-1).zero_()
    if exclude is not None:
        K = K.masked_fill(exclude, 0)
    r = K.sum(-1, keepdim=True) / (n - 2)
    c = K.sum(-2, keepdim=True) / (n - 2)
    t = K.sum((-1, -2), keepdim=True) / ((n - 1) * (n - 2))
    U = K - r - c + t
    U.diagonal(dim1=-2, dim2=-1).zero_()
    return U


def _median_lastdim(a: torch.Tensor) -> torch.Tensor:
    """Median along the last axis, averaging the two middle values (as ``numpy.median``)."""
    m = a.shape[-1]
    lo = torch.kthvalue(a, (m + 1) // 2, dim=-1).values
    hi = torch.kthvalue(a, m // 2 + 1, dim=-1).values
    return 0.5 * (lo + hi)


def _sq_dists(Xc: torch.Tensor) -> torch.Tensor:
    sq = (Xc * Xc).sum(-1)
    D = sq[..., :, None] + sq[..., None, :] - 2 * torch.matmul(Xc, Xc.transpose(-1, -2))
    D = (0.5 * (D + D.transpose(-1, -2))).clamp_min(0)
    D.diagonal(dim1=-2, dim2=-1).zero_()
    return D


def _rbf_from_sqdist(D: torch.Tensor, sigma: float, bandwidth: str):
    """RBF kernel stack and a flag ``(L,)`` that is False where the median bandwidth is zero."""
    if bandwidth == "median":
        med = _median_lastdim(D.reshape(D.shape[0], -1))  # includes the zero diagonal, as Kornblith
        ok = med > 0
        width2 = (sigma**2) * torch.where(ok, med, torch.ones_like(med))
    else:
        ok = torch.ones(D.shape[0], dtype=torch.bool, device=D.device)
        width2 = torch.full((D.shape[0],), sigma**2, dtype=D.dtype, device=D.device)
    return torch.exp(-D / (2 * width2[:, None, None])), ok


def _gram(XL: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Linear Gram (``kind="linear"``) or squared distances (``"rbf"``) of centred features, float32.

    One layer at a time, so temporaries never exceed one layer's features.
    """
    L, N, _ = XL.shape
    G = torch.empty(L, N, N, dtype=torch.float32, device=XL.device)
    for l in range(L):
        Xc = XL[l] - XL[l].mean(0, keepdim=True)
        if kind == "rbf":
            G[l] = _sq_dists(Xc)
        else:
            g = Xc @ Xc.T
            G[l] = 0.5 * (g + g.T)
    return G, ~V.constant_layers(XL)


@dataclass
class _KernelState:
    """Centred Gram matrices of one stack (private)."""

    C: torch.Tensor  # (L, N, N) float32, double- or U-centred
    self_hsic: torch.Tensor  # (L,) float64, <C, C> (unnormalised)
    valid: torch.Tensor  # (L,) bool


def _state(G, valid, *, kind, unbiased, sigma=1.0, bandwidth="median", groups=None) -> _KernelState:
    if kind == "rbf":
        G, ok = _rbf_from_sqdist(G, sigma, bandwidth)
        if bool((valid & ~ok).any()):
            V.warn_degenerate(valid & ~ok, "X or Y", "cka_rbf", "median squared distance is 0")
        valid = valid & ok
    Gd = G.double()
    if unbiased:
        excl = None if groups is None else groups[:, None] == groups[None, :]
        C = _u_center(Gd, excl)
    else:
        C = _double_center(Gd)
    self_hsic = (C * C).sum((-1, -2))
    return _KernelState(C=C.float(), self_hsic=self_hsic, valid=valid)


def _prepare(XL, *, kind, unbiased, sigma=1.0, bandwidth="median") -> _KernelState:
    G, valid = _gram(XL, kind)
    return _state(G, valid, kind=kind, unbiased=unbiased, sigma=sigma, bandwidth=bandwidth)


def _score(sx: _KernelState, sy: _KernelState, perm=None) -> torch.Tensor:
    """CKA for all layer pairs, ``(L_x, L_y)`` float64, with ``Y' = Y[perm]`` (Gram permuted, not rebuilt)."""
    Cy = sy.C if perm is None else sy.C[:, perm][:, :, perm]
    Lx, Ly = sx.C.shape[0], Cy.shape[0]
    hsic = (sx.C.reshape(Lx, -1) @ Cy.reshape(Ly, -1).T).double()
    den = sx.self_hsic[:, None] * sy.self_hsic[None, :]
    out = hsic / den.clamp_min(0).sqrt()
    bad = ~(sx.valid[:, None] & sy.valid[None, :]) | (den <= 0)
    return out.masked_fill(bad, float("nan"))


# -- public API ------------------------------------------------------------------------------------


def _check(X, Y, *, ndim, min_n, estimator, device=None):
    dev = V.resolve_device(device, X, Y)
    X = V.to_tensor(X, "X", ndim=ndim, device=dev)
    Y = V.to_tensor(Y, "Y", ndim=ndim, device=dev)
    V.check_min_samples(V.check_same_samples(X, Y), min_n, estimator)
    return X, Y


def _check_rbf_options(sigma, bandwidth):
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float, np.floating, np.integer)):
        raise TypeError(f"sigma must be a positive number; got {sigma!r}")
    if not (np.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be positive and finite; got sigma={sigma}")
    if bandwidth not in BANDWIDTHS:
        raise ValueError(f"bandwidth must be one of {BANDWIDTHS}; got {bandwidth!r}")
    return float(sigma)


def _degenerate(X, Y, metric) -> bool:
    cx, cy = V.constant_layers(X[None]), V.constant_layers(Y[None])
    V.warn_degenerate(cx, "X", metric, "all samples identical")
    V.warn_degenerate(cy, "Y", metric, "all samples identical")
    return bool(cx[0] or cy[0])


def _ratio(num, kk, ll, metric) -> float:
    den = kk * ll
    if not bool(den > 0):
        V.warn_degenerate(torch.tensor([True]), "X or Y", metric, "non-positive self-HSIC")
        return float("nan")
    return float(num / den.sqrt())


def cka_linear(X, Y) -> float:
    """Linear CKA with the biased HSIC (Kornblith et al. 2019).

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)

    Returns
    -------
    score : float in [0, 1]
        ``||Y_c^T X_c||_F^2 / (||X_c^T X_c||_F ||Y_c^T Y_c||_F)`` with column-centred ``X_c, Y_c``, computed in float64.
        1 for ``X`` against itself; symmetric; invariant to orthogonal transforms, isotropic scaling and sample
        permutation. NaN (RuntimeWarning) if either input has all rows identical.

    Raises
    ------
    ValueError
        Different numbers of samples, fewer than 3 samples (with 2 the centred Grams have rank 1 and CKA
        is 1 for any X and Y), NaN/inf values, wrong number of dimensions.
    TypeError
        Inputs that are not real NumPy arrays or torch tensors.

    References
    ----------
    Kornblith et al. (2019), Eq. (5) ("linear CKA"); Gretton et al. (2005), Eq. (4).
    """
    X, Y = _check(X, Y, ndim=2, min_n=3, estimator="cka_linear")
    if _degenerate(X, Y, "cka_linear"):
        return float("nan")
    Xc = X.double() - X.double().mean(0)
    Yc = Y.double() - Y.double().mean(0)
    if X.shape[0] <= min(X.shape[1], Y.shape[1]):  # same value, cheaper via n x n Gram matrices
        K, L = Xc @ Xc.T, Yc @ Yc.T
        return _ratio((K * L).sum(), (K * K).sum(), (L * L).sum(), "cka_linear")
    return _ratio(
        (Yc.T @ Xc).square().sum(), (Xc.T @ Xc).square().sum(), (Yc.T @ Yc).square().sum(), "cka_linear"
    )


def cka_linear_unbiased(X, Y) -> float:
    """Linear CKA with the unbiased HSIC estimator of Song et al. (2012).

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)

    Returns
    -------
    score : float
        ``HSIC_u(K, L) / sqrt(HSIC_u(K, K) HSIC_u(L, L))`` with linear kernels, float64. 1 for ``X``
        against itself, about 0 (positive or negative) for independent data. NaN (RuntimeWarning) if
        either input is constant or a self-HSIC is not positive.

    Raises
    ------
    ValueError
        As :func:`cka_linear`, and fewer than 4 samples (Eq. (5) divides by ``n - 3``).
    TypeError
        Inputs that are not real NumPy arrays or torch tensors.

    References
    ----------
    Song et al. (2012), JMLR 13, Eq. (5): ``HSIC_1 = [tr(K~L~) + 1^T K~ 1 1^T L~ 1 / ((n-1)(n-2))
    - 2/(n-2) 1^T K~ L~ 1] / (n (n-3))``, ``K~`` = ``K`` with zero diagonal.
    Used for CKA by Nguyen, Raghu, Kornblith (2021) and Huh et al. (2024), App. A.
    """
    X, Y = _check(X, Y, ndim=2, min_n=4, estimator="cka_linear_unbiased")
    if _degenerate(X, Y, "cka_linear_unbiased"):
        return float("nan")
    Xc = X.double() - X.double().mean(0)
    Yc = Y.double() - Y.double().mean(0)
    K, L = Xc @ Xc.T, Yc @ Yc.T
    h = _hsic_unbiased_dense
    return _ratio(h(K, L), h(K, K), h(L, L), "cka_linear_unbiased")


def cka_rbf(X, Y, *, sigma: float = 1.0, bandwidth: str = "median", unbiased: bool = False) -> float:
    """CKA with Gaussian (RBF) kernels ``k(x, x') = exp(-||x - x'||^2 / (2 w^2))``.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)
    sigma : float > 0, default=1.0
        Bandwidth. With ``bandwidth="median"``, ``w = sigma * sqrt(median ||x_i - x_j||^2)`` per representation, the
        median taken over all ``n^2`` pairs including the zero diagonal (Kornblith et al.'s
        ``gram_rbf(x, threshold=sigma)``); with ``"absolute"``, ``w = sigma`` (the PRH code's ``rbf_sigma``).
    bandwidth : {"median", "absolute"}, default="median"
    unbiased : bool, default=False
        Use Song et al.'s unbiased HSIC instead of the biased one (then ``n_samples >= 4``).

    Returns
    -------
    score : float
        In [0, 1] for the biased HSIC. Invariant to orthogonal transforms and sample permutation; to isotropic scaling
        only with ``bandwidth="median"``. NaN (RuntimeWarning) for constant inputs or a zero median distance.

    Raises
    ------
    ValueError
        As :func:`cka_linear`; non-positive ``sigma``; unknown ``bandwidth``.

    References
    ----------
    Kornblith et al. (2019), Sec. 3 ("RBF CKA"), bandwidth as a fraction of the median distance.
    """
    sigma = _check_rbf_options(sigma, bandwidth)
    X, Y = _check(X, Y, ndim=2, min_n=4 if unbiased else 3, estimator="cka_rbf")
    if _degenerate(X, Y, "cka_rbf"):
        return float("nan")
    Ks = []
    for Z in (X, Y):
        D = torch.cdist(Z.double(), Z.double()).square()
        if bandwidth == "median":
            med = float(np.median(D.cpu().numpy()))
            if med <= 0:
                V.warn_degenerate(torch.tensor([True]), "X or Y", "cka_rbf", "median squared distance is 0")
                return float("nan")
            w2 = sigma**2 * med
        else:
            w2 = sigma**2
        Ks.append(torch.exp(-D / (2 * w2)))
    K, L = Ks
    if unbiased:
        h = _hsic_unbiased_dense
        return _ratio(h(K, L), h(K, K), h(L, L), "cka_rbf")
    Kc, Lc = _double_center(K), _double_center(L)
    return _ratio((Kc * Lc).sum(), (Kc * Kc).sum(), (Lc * Lc).sum(), "cka_rbf")


def _layerwise(X, Y, *, device, metric, kind, unbiased, sigma=1.0, bandwidth="median"):
    X, Y = _check(X, Y, ndim=3, min_n=4 if unbiased else 3, estimator=metric, device=device)
    sx = _prepare(X, kind=kind, unbiased=unbiased, sigma=sigma, bandwidth=bandwidth)
    sy = _prepare(Y, kind=kind, unbiased=unbiased, sigma=sigma, bandwidth=bandwidth)
    V.warn_degenerate(V.constant_layers(X), "X", metric, "all samples identical")
    V.warn_degenerate(V.constant_layers(Y), "Y", metric, "all samples identical")
    return _score(sx, sy).cpu().numpy()


_LAYERWISE_DOC = """Layer-wise :func:`{name}` for every pair of layers of two stacked representations.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_layers_x, n_samples, d_x)
    Y : ndarray or Tensor of shape (n_layers_y, n_samples, d_y){extra}
    device : str or torch.device, optional
        Where to compute (e.g. ``"cuda"``); defaults to the input's device, CPU for NumPy input.

    Returns
    -------
    scores : ndarray of float64, shape (n_layers_x, n_layers_y)
        ``scores[a, b] == {name}(X[a], Y[b])`` to float32 accuracy (about 1e-5). NaN rows/columns (with
        a RuntimeWarning) for degenerate layers.

    Raises
    ------
    ValueError, TypeError
        As :func:`{name}`, for 3-D inputs.

    Notes
    -----
    ``L_x + L_y`` Gram matrices are formed and centred once; all pair HSICs come from one
    ``(L_x, n^2) @ (n^2, L_y)`` float32 matrix product. Memory: ``4 n^2 (L_x + L_y)`` bytes.
    """


def cka_linear_layerwise(X, Y, *, device=None) -> np.ndarray:
    return _layerwise(X, Y, device=device, metric="cka_linear", kind="linear", unbiased=False)


def cka_linear_unbiased_layerwise(X, Y, *, device=None) -> np.ndarray:
    return _layerwise(X, Y, device=device, metric="cka_linear_unbiased", kind="linear", unbiased=True)


def cka_rbf_layerwise(
    X, Y, *, sigma: float = 1.0, bandwidth: str = "median", unbiased: bool = False, device=None
) -> np.ndarray:
    sigma = _check_rbf_options(sigma, bandwidth)
    return _layerwise(
        X, Y, device=device, metric="cka_rbf", kind="rbf", unbiased=unbiased, sigma=sigma, bandwidth=bandwidth
    )


_RBF_EXTRA = """
    sigma : float > 0, default=1.0
    bandwidth : {{"median", "absolute"}}, default="median"
    unbiased : bool, default=False
        As in :func:`cka_rbf`."""
cka_linear_layerwise.__doc__ = _LAYERWISE_DOC.format(name="cka_linear", extra="")
cka_linear_unbiased_layerwise.__doc__ = _LAYERWISE_DOC.format(name="cka_linear_unbiased", extra="")
cka_rbf_layerwise.__doc__ = _LAYERWISE_DOC.format(name="cka_rbf", extra=_RBF_EXTRA.format())
