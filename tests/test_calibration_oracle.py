"""The calibration against an outside oracle: the Aristotelian authors' reference package (issue 43).

``calibrated-similarity`` (Gröger, Wen, Brbić; PyPI, github.com/mlbio-epfl/Aristotelian) implements
Algorithm 1 (``calibrate``) and Algorithm 2 (``calibrate_layers``, ``agg="max"``) of Gröger et al. (2026).
Here it is given OUR metric (prh_lib's mutual k-NN, as its callable) and THE SAME permutations (the rows
of one integer array: to the package through ``perm_fn``, to ours through ``permutations=``; or ours'
own seeded draws, reproduced for ``perm_fn``), and its threshold tau, p-value and calibrated score are
compared with ours, for one pair and for the maximum over layer pairs.

The same in both (package 0.1.1, read line by line):

- re-pairing ``Y -> Y[perm]``, one permutation for every layer of ``Y`` at once in the layer-wise form;
- ``tau`` = the ``ceil((1 - alpha)(K + 1))``-th smallest of the ``K + 1`` pooled values {observed} ∪ null;
- ``p = (1 + #{null >= observed}) / (K + 1)``: BOTH use the add-one estimator (Phipson & Smyth), and in
  both a null value tied with the observed score counts against it (``>=``);
- calibrated = ``clip((observed - tau) / (1 - tau), 0, 1)`` (the package's ``smax = 1``, its default);
- layer-wise: the maximum of the ``(L_x, L_y)`` matrix against the maxima of the permuted matrices.

Intended differences, each asserted below as a precise relation:

1. Precision. The package holds every score, tau, p and the calibrated score in float32
   (``torch.as_tensor(..., dtype=torch.float32)``); ours keeps float64 (k-NN scores are exact
   fixed-point sums, and float64 keeps them distinct). Rounding to float32 is monotone, so
   ``tau_pkg == float32(tau_ours)`` exactly, both p-values carry the same count, ``p_pkg ==
   float32(p_ours)``, and ``cal_pkg`` is exactly our formula evaluated in float32 on ``float32(observed)``
   and ``float32(tau)``; it equals ours to float32 rounding: ``|cal_pkg - cal_ours| <= 2**-21 / (1 - tau)``
   (about 8 float32 unit roundoffs of the numerator, amplified by the denominator ``1 - tau``).
2. The rank of tau. The package takes ``ceil`` of the floating-point product ``(1 - alpha)(K + 1)``;
   when that product is an integer in exact arithmetic but rounds up (``alpha = 0.44, K = 24``:
   ``0.56 * 25 = 14.000000000000002``) it takes the 15th smallest value instead of the 14th. Ours
   subtracts 1e-9 before the ceil and gets the exact rank. At alpha 0.01, 0.05 and 0.1 the two agree for
   every K up to 100 000 (asserted).
3. Too few permutations. With ``1/(K + 1) > alpha`` the rank is ``K + 1``: tau is the largest pooled
   value, the calibrated score is 0 whatever the data, and p > alpha. The package returns that silent 0;
   ours raises ValueError (:func:`prh_lib.stats.min_permutations`).
4. Degenerate (NaN) scores. A constant representation makes mutual k-NN NaN. The package's ``S.max()``
   propagates NaN into the observed and the null maxima: tau and the score are NaN and, as
   ``NaN >= NaN`` is False, p = 1/(K + 1), the smallest p possible, for an undefined score. Ours takes the
   maximum over the scored layer pairs (equal to the package run without the degenerate layer) and gives
   NaN tau, p and score for a NaN single score.
5. Drawing the permutations. The package's default draws ``torch.randperm`` from a torch Generator; ours
   draws ``np.random.default_rng(seed).permutation(n)`` K times. Not a difference in the calibration: the
   seeded test hands the package ours' draws through ``perm_fn``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import prh_lib.metrics as M
import prh_lib.stats as S

cs = pytest.importorskip(
    "calibrated_similarity", minversion="0.1.1",
    reason="the oracle package calibrated-similarity is not installed (pip install -e '.[test]' installs it)",
)

CAL_TOL = 2.0**-21  # |cal_pkg - cal_ours| * (1 - tau): float32 rounding of observed, tau and the division


def _sim(k):
    """Our metric, as the package's ``sim(X, Y)`` callable; records every value it returns (float64)."""

    def sim(A, B):
        v = M.mutual_knn(A, B, k=k)
        sim.values.append(v)
        return v

    sim.values = []
    return sim


def _feed(perms):
    """The package's ``perm_fn``, handing it the rows of ``perms`` in order (one call per permutation)."""

    def perm_fn(n, device):
        assert n == perms.shape[1]
        perm_fn.calls += 1
        return torch.from_numpy(perms[perm_fn.calls - 1]).to(device)

    perm_fn.calls = 0
    return perm_fn


def _perms(rng, K, n):
    return np.stack([rng.permutation(n) for _ in range(K)])


def _rotation(rng, d):
    q, r = np.linalg.qr(rng.normal(size=(d, d)))
    return q * np.sign(np.diag(r))


def _data(rng, kind, n, dx, dy, noise=0.5):
    """(X, Y) as float64 tensors: ``random`` independent, ``quantised`` independent with exact ties in
    the cosine neighbourhoods, ``planted`` Y a noisy rotation of X (dx == dy)."""
    if kind == "random":
        X, Y = rng.normal(size=(n, dx)), rng.normal(size=(n, dy))
    elif kind == "quantised":
        X, Y = rng.integers(0, 3, size=(n, dx)) + 0.0, rng.integers(0, 3, size=(n, dy)) + 0.0
        X[X.sum(1) == 0, 0] = 1.0  # no zero rows (their cosine is undefined)
        Y[Y.sum(1) == 0, 0] = 1.0
    else:
        X = rng.normal(size=(n, dx))
        Y = X @ _rotation(rng, dx) + noise * rng.normal(size=(n, dx))
    return torch.from_numpy(X), torch.from_numpy(Y)


def _cal_float32(obs, tau):
    """The package's calibrated score, its arithmetic in float32, on our observed score and tau."""
    s, t = torch.tensor(obs, dtype=torch.float32), torch.tensor(tau, dtype=torch.float32)
    return float(torch.clamp((s - t) / (torch.tensor(1.0) - t).clamp_min(1e-12), min=0.0, max=1.0))


def _assert_agree(pkg, obs, null, tau, p, cal, *, alpha):
    """Ours (float64 ``obs``, ``null``, ``tau``, ``p``, ``cal``) against the package's (cal, p, tau)."""
    cal_pkg, p_pkg, tau_pkg = (float(v) for v in pkg)
    K = null.shape[0]
    # tau: the same order statistic (the rank convention agrees here, see test_rank_of_tau_*), in float32
    pool = np.sort(np.append(null, obs))
    r = math.ceil((1 - alpha) * (K + 1) - 1e-9)
    assert int(math.ceil((1.0 - alpha) * (K + 1))) == r  # the package's rank
    assert tau == pool[r - 1]
    assert tau_pkg == np.float32(tau)
    # p: add-one in both, ties counted; the count recovered from each is the same integer. The package
    # compares float32 values: no two distinct float64 scores here round to one float32 (else its count
    # could differ by precision alone).
    assert np.array_equal(null.astype(np.float32) >= np.float32(obs), null >= obs)
    count = int(np.sum(null >= obs))
    assert p == (1 + count) / (K + 1)
    assert round(p * (K + 1)) - 1 == count == round(p_pkg * (K + 1)) - 1
    assert p_pkg == np.float32(p)
    # calibrated: our formula in float32 exactly; to float32 rounding of ours
    assert cal_pkg == _cal_float32(obs, tau)
    assert abs(cal_pkg - cal) <= CAL_TOL / (1 - tau)
    assert 0.0 <= cal <= 1.0 and (cal == 0.0) == (obs <= tau)


def test_rank_convention_agrees_at_usual_alphas():
    for alpha in (0.01, 0.05, 0.1):
        for K in range(S.min_permutations(alpha), 100_001):
            assert int(math.ceil((1.0 - alpha) * (K + 1))) == math.ceil((1.0 - alpha) * (K + 1) - 1e-9)


# ------------------------------------------------------------------------------------------------
# one pair: cs.calibrate (Algorithm 1) against S.permutation_test
# ------------------------------------------------------------------------------------------------

SCALAR_CASES = [  # (kind, n, dx, dy, k, alpha, K)
    ("random", 20, 4, 3, 2, 0.05, 39),  # scores are multiples of 1/40: ties with the observed score in the null
    ("random", 48, 10, 6, 5, 0.1, 19),
    ("random", 48, 10, 6, 5, 0.05, 39),
    ("quantised", 30, 3, 3, 4, 0.05, 39),  # tie-averaged memberships (fractional overlaps)
    ("planted", 48, 8, 8, 5, 0.05, 39),
    ("planted", 30, 6, 6, 3, 0.1, 19),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind,n,dx,dy,k,alpha,K", SCALAR_CASES)
def test_scalar_matches_package(kind, n, dx, dy, k, alpha, K, seed):
    rng = np.random.default_rng(seed)
    X, Y = _data(rng, kind, n, dx, dy)
    perms = _perms(rng, K, n)
    ours = S.permutation_test(X, Y, k=k, alpha=alpha, permutations=perms)
    sim, feed = _sim(k), _feed(perms)
    pkg = cs.calibrate(X, Y, sim, K=K, alpha=alpha, perm_fn=feed)
    assert feed.calls == K
    # the package scored exactly the re-pairings ours scored: observed and null, bit for bit
    assert sim.values[0] == ours.observed
    np.testing.assert_array_equal(np.array(sim.values[1:]), ours.null)
    _assert_agree(pkg, ours.observed, ours.null, ours.threshold, ours.p_value, ours.calibrated, alpha=alpha)
    if kind == "planted":  # well above the null: the smallest p, a clearly positive score
        assert ours.p_value == 1 / (K + 1) and ours.calibrated > 0.3


def test_scalar_ties_in_the_null_count_in_both():
    # n = 20, k = 2: 41 possible scores, so null values equal to the observed score are common; both count
    # them against it (>=), and _assert_agree finds the same count in both p-values
    rng = np.random.default_rng(3)
    X, Y = _data(rng, "random", 20, 4, 3)
    perms = _perms(rng, 39, 20)
    ours = S.permutation_test(X, Y, k=2, permutations=perms)
    assert np.sum(ours.null == ours.observed) > 0
    pkg = cs.calibrate(X, Y, _sim(2), K=39, alpha=0.05, perm_fn=_feed(perms))
    _assert_agree(pkg, ours.observed, ours.null, ours.threshold, ours.p_value, ours.calibrated, alpha=0.05)
    assert ours.p_value == (1 + np.sum(ours.null > ours.observed) + np.sum(ours.null == ours.observed)) / 40


def test_perfect_alignment_calibrates_to_one_in_both():
    rng = np.random.default_rng(4)
    X, Y = _data(rng, "planted", 40, 6, 6, noise=0.0)  # an exact rotation: mutual k-NN is 1
    perms = _perms(rng, 19, 40)
    ours = S.permutation_test(X, Y, k=4, permutations=perms)
    cal_pkg, p_pkg, _ = cs.calibrate(X, Y, _sim(4), K=19, perm_fn=_feed(perms))
    assert ours.observed == 1.0 and ours.calibrated == 1.0 == float(cal_pkg)
    assert ours.p_value == 1 / 20 and float(p_pkg) == np.float32(1 / 20)


def test_seeded_draws_match_package_fed_the_same_draws():
    # ours draws np.random.default_rng(seed).permutation(n), K times; the package gets the same draws
    rng = np.random.default_rng(5)
    X, Y = _data(rng, "planted", 40, 6, 6, noise=1.0)
    ours = S.permutation_test(X, Y, k=4, n_permutations=19, seed=11)
    draws = np.random.default_rng(11)
    pkg = cs.calibrate(X, Y, _sim(4), K=19, perm_fn=lambda n, device: torch.from_numpy(draws.permutation(n)))
    _assert_agree(pkg, ours.observed, ours.null, ours.threshold, ours.p_value, ours.calibrated, alpha=0.05)

    XL, YL = torch.stack([X, X.flip(0)]), torch.stack([Y, Y.roll(3, 0), Y.flip(0)])
    ours = S.permutation_test_layerwise(XL, YL, k=4, n_permutations=19, seed=12)
    draws = np.random.default_rng(12)
    pkg = cs.calibrate_layers(list(XL), list(YL), _sim(4), K=19,
                              perm_fn=lambda n, device: torch.from_numpy(draws.permutation(n)))
    _assert_agree(pkg, ours.observed_max, ours.null_max, ours.threshold_max, ours.p_max, ours.calibrated_max,
                  alpha=0.05)


# ------------------------------------------------------------------------------------------------
# the maximum over layer pairs: cs.calibrate_layers (Algorithm 2, agg="max") against
# S.permutation_test_layerwise (selection_aware=True)
# ------------------------------------------------------------------------------------------------


def _layers(rng, kind, n, lx, ly, d):
    XL, YL = rng.normal(size=(lx, n, d)), rng.normal(size=(ly, n, d))
    if kind == "planted":  # Y's middle layer a noisy rotation of X's last: the maximum, far above the null
        YL[ly // 2] = XL[-1] @ _rotation(rng, d) + 0.4 * rng.normal(size=(n, d))
    return torch.from_numpy(XL), torch.from_numpy(YL)


@pytest.mark.parametrize("kind,seed,n,lx,ly,d,k,alpha,K", [
    ("random", 0, 30, 2, 3, 5, 3, 0.05, 19),
    ("random", 1, 40, 3, 2, 8, 4, 0.1, 19),
    ("planted", 2, 30, 2, 3, 5, 3, 0.05, 19),
    ("planted", 3, 40, 3, 2, 8, 4, 0.05, 29),
])
def test_layerwise_max_matches_package(kind, seed, n, lx, ly, d, k, alpha, K):
    rng = np.random.default_rng(seed)
    XL, YL = _layers(rng, kind, n, lx, ly, d)
    perms = _perms(rng, K, n)
    ours = S.permutation_test_layerwise(XL, YL, k=k, alpha=alpha, permutations=perms)
    sim, feed = _sim(k), _feed(perms)
    pkg = cs.calibrate_layers(list(XL), list(YL), sim, agg="max", K=K, alpha=alpha, perm_fn=feed)
    assert feed.calls == K
    # the package scored every layer pair of every re-pairing, row-major, as ours did: bit for bit
    scored = np.array(sim.values).reshape(K + 1, lx, ly)
    np.testing.assert_array_equal(scored[0], ours.observed)
    np.testing.assert_array_equal(scored[1:], ours.null)
    np.testing.assert_array_equal(scored[1:].reshape(K, -1).max(1), ours.null_max)
    _assert_agree(pkg, ours.observed_max, ours.null_max, ours.threshold_max, ours.p_max, ours.calibrated_max,
                  alpha=alpha)
    if kind == "planted":
        assert ours.argmax == (lx - 1, ly // 2)
        assert ours.p_max == 1 / (K + 1) and ours.calibrated_max > 0.2


def test_layerwise_pairs_match_package_one_pair_at_a_time():
    # ours' per-pair matrices (each pair against its own null; and the naive, selection-unaware maximum)
    # equal the package's Algorithm 1 on that pair with the same permutations
    rng = np.random.default_rng(6)
    XL, YL = _layers(rng, "planted", 30, 2, 3, 5)
    perms = _perms(rng, 19, 30)
    ours = S.permutation_test_layerwise(XL, YL, k=3, permutations=perms)
    naive = S.permutation_test_layerwise(XL, YL, k=3, permutations=perms, selection_aware=False)
    for a in range(2):
        for b in range(3):
            pkg = cs.calibrate(XL[a], YL[b], _sim(3), K=19, perm_fn=_feed(perms))
            _assert_agree(pkg, ours.observed[a, b], ours.null[:, a, b], ours.threshold[a, b],
                          ours.p_value[a, b], ours.calibrated[a, b], alpha=0.05)
            if (a, b) == naive.argmax:
                assert (naive.threshold_max, naive.p_max, naive.calibrated_max) == (
                    ours.threshold[a, b], ours.p_value[a, b], ours.calibrated[a, b])


# ------------------------------------------------------------------------------------------------
# intended differences
# ------------------------------------------------------------------------------------------------


def test_rank_of_tau_exact_in_ours_one_higher_in_package_when_the_product_rounds_up():
    # difference 2: alpha = 0.44, K = 24: (1 - alpha)(K + 1) = 14 exactly, 14.000000000000002 in floating
    # point. Ours: tau = 14th smallest of the 25 pooled values; the package: the 15th.
    alpha, K = 0.44, 24
    assert (1.0 - alpha) * (K + 1) > 14 and math.ceil((1.0 - alpha) * (K + 1) - 1e-9) == 14
    rng = np.random.default_rng(13)
    X, Y = _data(rng, "planted", 40, 6, 6, noise=0.8)
    perms = _perms(rng, K, 40)
    ours = S.permutation_test(X, Y, k=4, alpha=alpha, permutations=perms)
    cal_pkg, p_pkg, tau_pkg = (float(v) for v in cs.calibrate(X, Y, _sim(4), K=K, alpha=alpha, perm_fn=_feed(perms)))
    pool = np.sort(np.append(ours.null, ours.observed))
    assert pool[13] < pool[14]  # the two ranks give different thresholds here
    assert ours.threshold == pool[13] and tau_pkg == np.float32(pool[14])
    # the p-value does not involve the rank: the same
    assert p_pkg == np.float32(ours.p_value)
    # the package's calibrated score is ours' formula on its (higher) tau: lower than ours
    assert cal_pkg == _cal_float32(ours.observed, pool[14]) and 0 < cal_pkg < ours.calibrated


@pytest.mark.parametrize("alpha,K", [(0.05, 10), (0.01, 50)])
def test_too_few_permutations_package_returns_zero_ours_raises(alpha, K):
    # difference 3: 1/(K + 1) > alpha. Rank K + 1: the package's tau is the pooled maximum, so its score
    # is 0 even for strongly aligned data; ours refuses.
    assert K < S.min_permutations(alpha) and math.ceil((1.0 - alpha) * (K + 1)) == K + 1
    rng = np.random.default_rng(8)
    X, Y = _data(rng, "planted", 40, 6, 6, noise=0.3)
    perms = _perms(rng, K, 40)
    with pytest.raises(ValueError, match="too small for alpha"):
        S.permutation_test(X, Y, k=4, alpha=alpha, permutations=perms)
    sim = _sim(4)
    cal_pkg, p_pkg, tau_pkg = (float(v) for v in cs.calibrate(X, Y, sim, K=K, alpha=alpha, perm_fn=_feed(perms)))
    obs = sim.values[0]
    assert obs == max(sim.values) and obs > 0.5  # aligned: the observed score is the largest
    assert tau_pkg == np.float32(obs) and cal_pkg == 0.0
    assert p_pkg == np.float32(1 / (K + 1)) and p_pkg > alpha


@pytest.mark.filterwarnings("ignore:mutual_knn.*degenerate:RuntimeWarning")
def test_degenerate_layer_ignored_by_ours_poisons_package():
    # difference 4: Y's layer 0 is constant, so its scores are NaN (the planted pair is (1, 1))
    rng = np.random.default_rng(9)
    XL, YL = _layers(rng, "planted", 30, 2, 3, 5)
    YL[0] = 1.0
    K = 19
    perms = _perms(rng, K, 30)
    ours = S.permutation_test_layerwise(XL, YL, k=3, permutations=perms)
    assert np.isnan(ours.observed[:, 0]).all() and np.isnan(ours.null[:, :, 0]).all()
    # ours' maximum is over the scored pairs: the package without the degenerate layer
    sim = _sim(3)
    pkg = cs.calibrate_layers(list(XL), [YL[1], YL[2]], sim, K=K, perm_fn=_feed(perms))
    _assert_agree(pkg, ours.observed_max, ours.null_max, ours.threshold_max, ours.p_max, ours.calibrated_max,
                  alpha=0.05)
    assert ours.argmax == (1, 1) and ours.calibrated_max > 0.2
    # the package with it: NaN tau and score, and the smallest p-value 1/(K + 1)
    cal_pkg, p_pkg, tau_pkg = (float(v) for v in cs.calibrate_layers(list(XL), list(YL), _sim(3), K=K,
                                                                      perm_fn=_feed(perms)))
    assert math.isnan(cal_pkg) and math.isnan(tau_pkg) and p_pkg == np.float32(1 / (K + 1))

    # one pair whose score is NaN: ours NaN throughout; the package NaN score and tau, p = 1/(K + 1)
    ours = S.permutation_test(XL[0], YL[0], k=3, permutations=perms)
    assert all(math.isnan(v) for v in (ours.observed, ours.threshold, ours.p_value, ours.calibrated))
    cal_pkg, p_pkg, tau_pkg = (float(v) for v in cs.calibrate(XL[0], YL[0], _sim(3), K=K, perm_fn=_feed(perms)))
    assert math.isnan(cal_pkg) and math.isnan(tau_pkg) and p_pkg == np.float32(1 / (K + 1))
