"""Tests of the kernel family (prh_lib.metrics.kernel)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import prh_lib.metrics as M
from prh_lib.metrics.kernel import _hsic_unbiased_dense

KERNEL = {"cka_linear": M.cka_linear, "cka_linear_unbiased": M.cka_linear_unbiased, "cka_rbf": M.cka_rbf}


def _related(rng, n, dx, dy, noise=1.0):
    X = rng.normal(size=(n, dx))
    return X, X @ rng.normal(size=(dx, dy)) + noise * rng.normal(size=(n, dy))


def _f32(*arrays):
    """Round to float32 (as the metrics do at their boundary) so float64 references see the same data."""
    return tuple(a.astype(np.float32).astype(np.float64) for a in arrays)


def _rotation(rng, d):
    q, r = np.linalg.qr(rng.normal(size=(d, d)))
    return q * np.sign(np.diag(r))


# ------------------------------------------------------------------------------------------------
# independent references
# ------------------------------------------------------------------------------------------------


def test_linear_cka_hand_worked_one_dimensional():
    # For 1-D features linear CKA is the squared Pearson correlation. x = [1,2,3], y = [1,4,9]:
    # x_c = [-1,0,1], y_c = [-11,-2,13]/3, x_c.y_c = 8, |x_c|^2 = 2, |y_c|^2 = 294/9 -> r^2 = 48/49.
    x, y = np.array([[1.0], [2.0], [3.0]]), np.array([[1.0], [4.0], [9.0]])
    assert M.cka_linear(x, y) == pytest.approx(48 / 49, rel=1e-12)
    from scipy.stats import pearsonr

    assert M.cka_linear(x, y) == pytest.approx(pearsonr(x[:, 0], y[:, 0])[0] ** 2, rel=1e-12)


def _hsic_song_double_sum(K, L):
    """Song et al. (2012), JMLR 13, Eq. (5), term by term with explicit sums over indices."""
    n = K.shape[0]
    Kt = [[0.0 if i == j else K[i, j] for j in range(n)] for i in range(n)]
    Lt = [[0.0 if i == j else L[i, j] for j in range(n)] for i in range(n)]
    tr = sum(Kt[i][j] * Lt[j][i] for i in range(n) for j in range(n))
    sK = sum(map(sum, Kt))
    sL = sum(map(sum, Lt))
    kl = sum(Kt[i][j] * Lt[j][l] for i in range(n) for j in range(n) for l in range(n))
    return (tr + sK * sL / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * kl) / (n * (n - 3))


def _hsic_u_statistic(K, L):
    """The U-statistic HSIC_1 is (Song et al. 2012, Theorem 2): average over distinct (i,j,q,r) of
    h = 1/24 sum over the 24 orderings (s,t,u,v) of (K_st L_st + K_st L_uv - 2 K_st L_su)."""
    n = K.shape[0]
    total = 0.0
    for quad in itertools.permutations(range(n), 4):
        h = 0.0
        for s, t, u, v in itertools.permutations(quad):
            h += K[s, t] * L[s, t] + K[s, t] * L[u, v] - 2 * K[s, t] * L[s, u]
        total += h / 24
    return total / (n * (n - 1) * (n - 2) * (n - 3))


@pytest.mark.parametrize("seed", [0, 1])
def test_unbiased_hsic_against_song_formula_and_u_statistic(seed):
    rng = np.random.default_rng(seed)
    X, Y = _related(rng, 7, 3, 2)
    X, Y = _f32(X - X.mean(0), Y - Y.mean(0))
    K, L = X @ X.T, Y @ Y.T
    got = float(_hsic_unbiased_dense(torch.from_numpy(K), torch.from_numpy(L)))
    assert got == pytest.approx(_hsic_song_double_sum(K, L), rel=1e-10)
    assert got == pytest.approx(_hsic_u_statistic(K, L), rel=1e-9)
    ref = _hsic_song_double_sum(K, L) / np.sqrt(_hsic_song_double_sum(K, K) * _hsic_song_double_sum(L, L))
    assert M.cka_linear_unbiased(X, Y) == pytest.approx(ref, rel=1e-9)
    # U-centring route used by the layer-wise form (Székely & Rizzo 2014): same value
    assert M.cka_linear_unbiased_layerwise(X[None], Y[None])[0, 0] == pytest.approx(ref, abs=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_rbf_cka_against_sklearn_kernel(seed):
    from sklearn.metrics.pairwise import euclidean_distances, rbf_kernel

    rng = np.random.default_rng(seed)
    X, Y = _f32(*_related(rng, 40, 6, 9))

    def gram(Z, sigma):  # Kornblith et al.'s gram_rbf: width^2 = sigma^2 * median squared distance
        med = np.median(euclidean_distances(Z, squared=True))
        return rbf_kernel(Z, gamma=1.0 / (2 * sigma**2 * med))

    H = np.eye(40) - 1.0 / 40

    def cka(K, L):
        return np.trace(K @ H @ L @ H) / np.sqrt(np.trace(K @ H @ K @ H) * np.trace(L @ H @ L @ H))

    for sigma in (0.5, 1.0):
        ref = cka(gram(X, sigma), gram(Y, sigma))
        assert M.cka_rbf(X, Y, sigma=sigma) == pytest.approx(ref, rel=1e-9)
        assert M.cka_rbf_layerwise(X[None], Y[None], sigma=sigma)[0, 0] == pytest.approx(ref, abs=1e-5)
    ref_abs = cka(rbf_kernel(X, gamma=1 / (2 * 3.0**2)), rbf_kernel(Y, gamma=1 / (2 * 3.0**2)))
    assert M.cka_rbf(X, Y, sigma=3.0, bandwidth="absolute") == pytest.approx(ref_abs, rel=1e-9)


# ------------------------------------------------------------------------------------------------
# properties
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n,d", [(30, 5), (60, 100)])
@pytest.mark.parametrize("name", list(KERNEL))
def test_self_similarity_and_symmetry(name, seed, n, d):
    rng = np.random.default_rng(seed)
    X, Y = _related(rng, n, d, 7)
    f = KERNEL[name]
    assert f(X, X) == pytest.approx(1.0, abs=1e-12)
    assert f(X, Y) == pytest.approx(f(Y, X), abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", list(KERNEL))
def test_invariances(name, seed):
    rng = np.random.default_rng(seed)
    X, Y = _related(rng, 50, 8, 12)
    f = KERNEL[name]
    ref = f(X, Y)
    perm = rng.permutation(50)
    assert f(X @ _rotation(rng, 8), Y @ _rotation(rng, 12)) == pytest.approx(ref, abs=1e-6)
    assert f(3.0 * X, 0.25 * Y) == pytest.approx(ref, abs=1e-6)
    assert f(X[perm], Y[perm]) == pytest.approx(ref, abs=1e-6)
    assert f(X + 5.0, Y - 2.0) == pytest.approx(ref, abs=1e-6)  # translation


def test_rbf_absolute_bandwidth_is_not_scale_invariant():
    X, Y = _related(np.random.default_rng(0), 50, 8, 12)
    a = M.cka_rbf(X, Y, sigma=2.0, bandwidth="absolute")
    assert abs(M.cka_rbf(10 * X, 10 * Y, sigma=2.0, bandwidth="absolute") - a) > 0.05


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unbiased_cka_of_independent_data_is_near_zero_biased_is_not(seed):
    rng = np.random.default_rng(seed)
    X, Y = rng.normal(size=(64, 512)), rng.normal(size=(64, 512))
    assert abs(M.cka_linear_unbiased(X, Y)) < 0.05
    assert M.cka_linear(X, Y) > 0.5  # the d >> n inflation of the biased estimator


# ------------------------------------------------------------------------------------------------
# layer-wise
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(KERNEL))
def test_layerwise_equals_loop(name):
    rng = np.random.default_rng(3)
    XL = rng.normal(size=(3, 40, 10))
    YL = rng.normal(size=(2, 40, 6))
    YL[1] = XL[0] @ rng.normal(size=(10, 6)) + rng.normal(size=(40, 6))
    got = M.LAYERWISE_METRICS[name](XL, YL)
    ref = np.array([[KERNEL[name](a, b) for b in YL] for a in XL])
    assert got.shape == (3, 2) and got.dtype == np.float64
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6)


def test_layerwise_float32_path_survives_large_feature_means():
    # Features with a large common offset: naive float32 Gram matrices would lose the signal to
    # cancellation; the layer-wise path centres features first (both HSICs are invariant to it).
    rng = np.random.default_rng(0)
    X, Y = _related(rng, 80, 20, 20, noise=2.0)
    X, Y = X + 1e3, Y - 3e3
    np.testing.assert_allclose(
        M.cka_linear_unbiased_layerwise(X[None], Y[None])[0, 0], M.cka_linear_unbiased(X, Y), atol=1e-4
    )
    np.testing.assert_allclose(M.cka_linear_layerwise(X[None], Y[None])[0, 0], M.cka_linear(X, Y), atol=1e-4)


def test_layerwise_deterministic_torch_and_numpy():
    rng = np.random.default_rng(1)
    XL, YL = rng.normal(size=(2, 30, 5)).astype(np.float32), rng.normal(size=(2, 30, 4)).astype(np.float32)
    a = M.cka_linear_unbiased_layerwise(XL, YL)
    b = M.cka_linear_unbiased_layerwise(torch.from_numpy(XL), torch.from_numpy(YL))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, M.cka_linear_unbiased_layerwise(XL, YL))


# ------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(KERNEL))
def test_bad_input(name):
    f = KERNEL[name]
    X = np.random.default_rng(0).normal(size=(10, 3))
    with pytest.raises(ValueError, match="same number of samples"):
        f(X, X[:9])
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        f(Xn, X)
    with pytest.raises(ValueError, match="2-D"):
        f(X[:, 0], X[:, 0])
    with pytest.raises(ValueError, match="3-D"):
        M.LAYERWISE_METRICS[name](X, X)
    with pytest.raises(ValueError, match="at least"):
        f(X[:1], X[:1])


def test_unbiased_needs_four_samples():
    X = np.random.default_rng(0).normal(size=(3, 2))
    with pytest.raises(ValueError, match="at least 4 samples"):
        M.cka_linear_unbiased(X, X)
    with pytest.raises(ValueError, match="at least 4 samples"):
        M.cka_rbf(X, X, unbiased=True)
    assert np.isfinite(M.cka_linear(X, X))


def test_rbf_options_validated():
    X = np.random.default_rng(0).normal(size=(10, 3))
    with pytest.raises(ValueError, match="sigma must be positive"):
        M.cka_rbf(X, X, sigma=0.0)
    with pytest.raises(ValueError, match="bandwidth must be one of"):
        M.cka_rbf(X, X, bandwidth="scott")
    with pytest.raises(TypeError, match="sigma"):
        M.cka_rbf(X, X, sigma="1")


@pytest.mark.parametrize("name", list(KERNEL))
def test_constant_representation_warns_and_gives_nan(name):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 3))
    C = np.ones((12, 3))
    with pytest.warns(RuntimeWarning, match="degenerate"):
        assert np.isnan(KERNEL[name](X, C))
    with pytest.warns(RuntimeWarning, match=r"layers \[0\]"):
        out = M.LAYERWISE_METRICS[name](np.stack([C, X]), X[None])
    assert np.isnan(out[0, 0]) and np.isfinite(out[1, 0])
