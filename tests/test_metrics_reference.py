"""The engine's mutual k-NN (bit-sliced, tie-averaged) against the plain reference ``prh_lib.metrics.reference``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import prh_lib.metrics as M
from prh_lib.metrics import reference as R


def _engine(X, Y, k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-zero rows and degenerate layers warn
        return M.mutual_knn(X, Y, k=k)


def test_hand_worked_five_samples():
    # Cosines by hand, k = 2 (u ~ v: same direction; "tie r/t": r places among t tied samples).
    # X = (1,0), (1,0), (0,1), (1,1), (-1,0):
    #   N(0) = {1, 3}; N(1) = {0, 3}; N(2) = {3} + tie 1/3 of {0, 1, 4} (cosine 0);
    #   N(3) = tie 2/3 of {0, 1, 2} (cosine 1/sqrt 2); N(4) = {2, 3}
    # Y = (1,0), (0,1), (0,2), (1,1), (1,-1):
    #   N(0) = {3, 4}; N(1) = {2, 3}; N(2) = {1, 3}; N(3) = tie 2/3 of {0, 1, 2}; N(4) = {0, 3}
    # expected overlaps: 1, 1, 1 + 1/3, 3 * (2/3)^2 = 4/3, 1  -> (17/3) / (5 * 2) = 17/30
    X = np.array([[1, 0], [1, 0], [0, 1], [1, 1], [-1, 0]], dtype=float)
    Y = np.array([[1, 0], [0, 1], [0, 2], [1, 1], [1, -1]], dtype=float)
    assert R.mutual_knn(X, Y, k=2) == pytest.approx(17 / 30, abs=1e-15)
    assert M.mutual_knn(X, Y, k=2) == pytest.approx(17 / 30, abs=1e-12)
    # the lowest-index rule would take N_X(2) = {3, 0}, N_X(3) = N_Y(3) = {0, 1}: overlaps 1, 1, 1, 2, 1 -> 0.6
    assert R.mutual_knn(X, Y, k=2) != 0.6


@pytest.mark.parametrize("n, dx, dy, k", [(12, 3, 4, 1), (40, 8, 5, 3), (100, 16, 16, 10), (150, 4, 32, 25)])
@pytest.mark.parametrize("seed", [0, 1])
def test_continuous_data(n, dx, dy, k, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dx)).astype(np.float32)
    Y = (X[:, :1] * rng.normal(size=(1, dy)) + rng.normal(size=(n, dy))).astype(np.float32)  # related
    assert M.mutual_knn(X, Y, k=k) == pytest.approx(R.mutual_knn(X, Y, k=k), abs=1e-12)
    assert M.mutual_knn(X, X[:, ::-1] * 3, k=k) == R.mutual_knn(X, X, k=k) == 1.0


def test_layerwise_equals_reference_for_every_pair():
    rng = np.random.default_rng(3)
    XL = rng.normal(size=(3, 30, 6)).astype(np.float32)
    YL = np.stack([XL[0] + rng.normal(size=(30, 6)), rng.normal(size=(30, 6)), XL[2][:, ::-1]]).astype(np.float32)
    YL[1, ::3] = YL[1, 1::3]  # duplicated rows: ties
    got = M.mutual_knn_layerwise(XL, YL, k=4)
    want = [[R.mutual_knn(x, y, k=4) for y in YL] for x in XL]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def _tied(kind, n, rng):
    """Data whose exact ties survive float32 and float64 (small integers, duplicates)."""
    if kind == "duplicates":
        base = rng.normal(size=(max(n // 3, 2), 5)).astype(np.float32)
        return base[rng.integers(0, len(base), size=n)]
    if kind == "quantised":  # {-1, 0, 1}^3
        return np.round(rng.normal(size=(n, 3))).clip(-1, 1)
    if kind == "binary_equal_norm":  # three ones among six features: every norm sqrt 3, cosines in {0, 1/3, 2/3, 1}
        return np.stack([rng.permutation([1, 1, 1, 0, 0, 0]) for _ in range(n)]).astype(float)
    if kind == "zero_rows":
        Z = rng.normal(size=(n, 4)).astype(np.float32)
        Z[rng.random(n) < 0.3] = 0
        return Z
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["duplicates", "quantised", "binary_equal_norm", "zero_rows"])
@pytest.mark.parametrize("n, k", [(10, 2), (24, 5), (60, 7)])
def test_ties(kind, n, k):
    rng = np.random.default_rng(n + k)
    X, Y = _tied(kind, n, rng), _tied(kind, n, rng)
    assert _engine(X, Y, k) == pytest.approx(R.mutual_knn(X, Y, k=k), abs=1e-12)
    assert _engine(X, X, k) == pytest.approx(R.mutual_knn(X, X, k=k), abs=1e-12)


@pytest.mark.parametrize("n, k", [(6, 1), (9, 4), (20, 3)])
def test_all_distances_equal(n, k):
    # one-hot rows: every cosine is 0, every neighbourhood is one tie of n - 1 samples -> chance, k / (n - 1)
    X = np.eye(n)
    Y = np.random.default_rng(n).normal(size=(n, 3))
    assert R.mutual_knn(X, X, k=k) == pytest.approx(k / (n - 1), abs=1e-15)
    assert R.mutual_knn(X, Y, k=k) == pytest.approx(k / (n - 1), abs=1e-15)
    assert _engine(X, X, k) == pytest.approx(k / (n - 1), abs=1e-12)
    assert _engine(X, Y, k) == pytest.approx(k / (n - 1), abs=1e-12)


def test_degenerate_and_bad_input():
    X = np.ones((8, 3))
    Y = np.random.default_rng(0).normal(size=(8, 3))
    assert np.isnan(R.mutual_knn(X, Y, k=2)) and np.isnan(_engine(X, Y, 2))
    with pytest.raises(ValueError, match="same n_samples"):
        R.mutual_knn(Y, Y[:5], k=2)
    with pytest.raises(ValueError, match="k=8"):
        R.mutual_knn(Y, Y, k=8)
