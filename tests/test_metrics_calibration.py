"""Tests of permutation calibration and multiple-comparison control (prh_lib.stats.calibration)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import prh_lib.metrics as M
import prh_lib.stats as S


def _related(rng, n, dx, dy, noise=1.0):
    X = rng.normal(size=(n, dx))
    return X, X @ rng.normal(size=(dx, dy)) + noise * rng.normal(size=(n, dy))


def _opts(name):
    return {"k": 5} if name in M.KNN_METRICS else {}


# ------------------------------------------------------------------------------------------------
# calibrate(): hand-worked values
# ------------------------------------------------------------------------------------------------


def test_calibrate_hand_worked():
    # K = 19, alpha = 0.05: rank ceil(0.95 * 20) = 19 -> tau is the 19th smallest of 20 values.
    null = 0.01 * np.arange(1, 20)  # 0.01 .. 0.19
    tau, p, cal = S.calibrate(0.5, null, alpha=0.05)
    assert tau == pytest.approx(0.19) and p == pytest.approx(1 / 20)
    assert cal == pytest.approx((0.5 - 0.19) / (1 - 0.19))
    # observed inside the null: 10 null values >= 0.10 (ties count) -> p = 11/20; tau = 0.18
    tau, p, cal = S.calibrate(0.10, null, alpha=0.05)
    assert (tau, p, cal) == (pytest.approx(0.18), pytest.approx(11 / 20), 0.0)
    # a perfect score calibrates to 1
    assert S.calibrate(1.0, null, alpha=0.05)[2] == 1.0


def test_calibrate_hand_worked_rank_differs_from_K_alpha():
    # K = 20, alpha = 0.05: rank ceil(0.95 * 21) = ceil(19.95) = 20, so tau is the 20th smallest of the
    # 21 pooled values {0.01, ..., 0.20, 0.5}: 0.20 (ceil(0.95 * 20) = 19 would give 0.19).
    null = 0.01 * np.arange(1, 21)
    tau, p, cal = S.calibrate(0.5, null, alpha=0.05)
    assert tau == pytest.approx(0.20) and p == pytest.approx(1 / 21)
    assert cal == pytest.approx((0.5 - 0.20) / 0.80)
    # The paper's K = 500 (Gröger et al. 2026): rank ceil(0.95 * 501) = ceil(475.95) = 476. Pooled values
    # {0.000, 0.001, ..., 0.499, 0.9}: the 476th smallest is 0.475 (rank 475 would give 0.474).
    null = np.arange(500) / 1000
    assert S.calibrate(0.9, null, alpha=0.05)[0] == pytest.approx(0.475)
    # alpha = 0.01: ceil(0.99 * 501) = ceil(495.99) = 496 -> 0.495
    assert S.calibrate(0.9, null, alpha=0.01)[0] == pytest.approx(0.495)
    # p-value: the observed ties 0.25 exactly; ties count (>=): 250 null values >= 0.25 -> 251/501
    assert S.calibrate(0.25, null, alpha=0.05)[1] == pytest.approx(251 / 501)


def _tau_by_definition(obs, null, alpha):
    """The order statistic by its definition, independently of calibrate(): the smallest pooled value
    v such that at least (1 - alpha)(K + 1) of the K + 1 pooled values are <= v (exact rationals)."""
    from fractions import Fraction

    pooled = [float(obs), *map(float, null)]
    need = (1 - Fraction(alpha).limit_denominator(10**6)) * len(pooled)
    return min(v for v in pooled if sum(u <= v for u in pooled) >= need)


def _p_by_loop(obs, null):
    """Phipson & Smyth (2010): (1 + #{null >= observed}) / (K + 1), as a plain loop."""
    b = 0
    for s in null:
        if s >= obs:
            b += 1
    return (1 + b) / (len(null) + 1)


@pytest.mark.parametrize("K,alpha", [(19, 0.05), (20, 0.05), (39, 0.05), (99, 0.01), (100, 0.05),
                                     (200, 0.05), (500, 0.05), (500, 0.01), (999, 0.001)])
def test_threshold_and_p_value_against_definition(K, alpha):
    rng = np.random.default_rng(K)
    grid = np.round(np.linspace(0.0, 0.3, 31), 2)  # a discrete null, as mutual k-NN's is: many ties
    for trial in range(6):
        null = rng.choice(grid, size=K)
        obs = [null.max() + 0.05, null.max(), float(np.median(null)), null.min(), 0.31, 1.0][trial]
        tau, p, cal = S.calibrate(obs, null, alpha=alpha)
        ref_tau = _tau_by_definition(obs, null, alpha)
        assert tau == ref_tau
        assert p == _p_by_loop(obs, null)
        assert cal == (min(max((obs - ref_tau) / (1 - ref_tau), 0.0), 1.0) if ref_tau < 1 else 0.0)


def test_null_mean_is_the_chance_level():
    # Under uniformly random re-pairings E[mutual k-NN] = k / (N - 1) exactly (also with ties, under the
    # tie-averaged semantics); k / N is 23 standard errors away at N = 30, k = 10, K = 2000.
    rng = np.random.default_rng(0)
    for X, Y in [(rng.normal(size=(30, 4)), rng.normal(size=(30, 6))),
                 (np.eye(3)[rng.integers(0, 3, 30)], np.eye(4)[rng.integers(0, 4, 30)])]:
        null = S.permutation_test(X, Y, k=10, n_permutations=2000, seed=1).null
        se = null.std() / np.sqrt(len(null))
        assert abs(null.mean() - M.mutual_knn_chance(30, 10)) < 4 * se
        assert abs(null.mean() - 10 / 30) > 10 * se


def test_calibrate_vectorised_and_nan():
    null = np.random.default_rng(0).uniform(size=(50, 2, 3))
    obs = np.array([[0.99, 0.5, np.nan], [0.2, 1.0, 0.0]])
    tau, p, cal = S.calibrate(obs, null)
    assert tau.shape == p.shape == cal.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            if np.isnan(obs[i, j]):
                assert np.isnan(tau[i, j]) and np.isnan(p[i, j]) and np.isnan(cal[i, j])
            else:
                assert (tau[i, j], p[i, j], cal[i, j]) == S.calibrate(obs[i, j], null[:, i, j])


def test_too_few_permutations_for_alpha():
    assert S.min_permutations(0.05) == 19
    assert S.min_permutations(0.01) == 99
    with pytest.raises(ValueError, match=r"n_permutations=18 is too small for alpha=0.05.*at least 19"):
        S.calibrate(0.5, np.zeros(18), alpha=0.05)
    X = np.random.default_rng(0).normal(size=(30, 3))
    with pytest.raises(ValueError, match="too small for alpha"):
        S.permutation_test(X, X, n_permutations=50, alpha=0.01)
    with pytest.raises(ValueError, match="alpha must be in"):
        S.calibrate(0.5, np.zeros(50), alpha=1.5)
    with pytest.raises(ValueError, match="null must have shape"):
        S.calibrate(np.zeros(3), np.zeros((20, 2)))


# ------------------------------------------------------------------------------------------------
# the permuted null equals recomputing the metric on re-paired data
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(M.METRICS))
def test_null_equals_metric_on_permuted_rows(name):
    rng = np.random.default_rng(1)
    X, Y = _related(rng, 40, 6, 8)
    perms = np.stack([rng.permutation(40) for _ in range(20)])
    res = S.permutation_test(X, Y, metric=name, permutations=perms, **_opts(name))
    ref = np.array([M.METRICS[name](X, Y[p], **_opts(name)) for p in perms])
    exact = name in ("mutual_knn", "cycle_knn")
    np.testing.assert_allclose(res.null, ref, rtol=0, atol=0 if exact else 2e-6)
    assert res.observed == pytest.approx(M.METRICS[name](X, Y, **_opts(name)), abs=0 if exact else 2e-6)
    assert res.seed is None and res.n_permutations == 20


@pytest.mark.parametrize("name", ["mutual_knn", "cycle_knn", "cknna", "cka_linear_unbiased"])
def test_layerwise_null_equals_loop(name):
    rng = np.random.default_rng(2)
    XL, YL = rng.normal(size=(2, 30, 5)), rng.normal(size=(3, 30, 4))
    YL[1] = XL[0] @ rng.normal(size=(5, 4)) + 0.3 * rng.normal(size=(30, 4))
    res = S.permutation_test_layerwise(XL, YL, metric=name, n_permutations=19, seed=3, **_opts(name))
    rng3 = np.random.default_rng(3)  # permutation_test_layerwise draws its permutations like this
    perms = np.stack([rng3.permutation(30) for _ in range(19)])
    f = M.METRICS[name]
    for t in (0, 7, 18):
        ref = np.array([[f(a, b[perms[t]], **_opts(name)) for b in YL] for a in XL])
        np.testing.assert_allclose(res.null[t], ref, rtol=0, atol=2e-6)
    np.testing.assert_allclose(res.observed, M.LAYERWISE_METRICS[name](XL, YL, **_opts(name)), atol=1e-12)


@pytest.mark.parametrize("numpy_backend", [True, False])
@pytest.mark.parametrize("n_layers_x", [7, 8, 15, 16, 31, 32, 63, 64])
@pytest.mark.parametrize("name", ["mutual_knn", "jaccard_knn", "cycle_knn"])
def test_layerwise_null_exact_at_every_word_width(name, n_layers_x, numpy_backend, monkeypatch):
    """The packed membership words are int8 / int16 / int32 / int64 by the number of X layers (and
    split past 63); the null equals the metric on explicitly permuted rows at each boundary, with
    tied rows (integer features) in half of the layers and a constant layer, on both backends (torch: the
    CUDA code path, run on the CPU)."""
    from prh_lib.metrics import _bits

    monkeypatch.setattr(_bits, "NUMPY_ON_CPU", numpy_backend)
    rng = np.random.default_rng(n_layers_x)
    n = 24
    XL = rng.normal(size=(n_layers_x, n, 4))
    XL[::2] = np.round(XL[::2])  # ties at the k-th place
    XL[1] = 1.0  # a constant layer (every row one tie, recorded as none): NaN scores
    YL = np.stack([XL[0] @ rng.normal(size=(4, 3)) + 0.5 * rng.normal(size=(n, 3)), np.round(rng.normal(size=(n, 3)))])
    res = S.permutation_test_layerwise(XL, YL, metric=name, k=4, n_permutations=19, seed=1)
    rng1 = np.random.default_rng(1)
    perms = np.stack([rng1.permutation(n) for _ in range(19)])
    f = M.METRICS[name]
    for t in (0, 18):
        ref = np.array([[f(a, b[perms[t]], k=4) for b in YL] for a in XL])
        np.testing.assert_array_equal(res.null[t], ref)
    assert np.isnan(res.null[:, 1]).all() and not np.isnan(res.null[:, 0]).any()


def test_p_value_against_scipy_permutation_test():
    # scipy.stats.permutation_test with permutation_type="pairings" on one sample of row indices
    # re-pairs Y with X; its Monte-Carlo p-value for alternative="greater" is (1 + #{null >= obs})/(K+1).
    # We record the permutations scipy draws and feed them to permutation_test.
    from scipy.stats import permutation_test as scipy_permutation_test

    rng = np.random.default_rng(4)
    X, Y = _related(rng, 25, 4, 4, noise=3.0)
    seen = []

    def statistic(idx):
        seen.append(np.array(idx))
        return M.mutual_knn(X, Y[np.asarray(idx)], k=4)

    ref = scipy_permutation_test(
        (np.arange(25),), statistic, permutation_type="pairings", n_resamples=99,
        alternative="greater", vectorized=False, random_state=np.random.default_rng(0),
    )
    obs_call = [i for i, s in enumerate(seen) if np.array_equal(s, np.arange(25))][0]
    perms = np.stack([s for i, s in enumerate(seen) if i != obs_call])
    assert perms.shape == (99, 25)
    ours = S.permutation_test(X, Y, metric="mutual_knn", k=4, permutations=perms)
    assert ours.observed == pytest.approx(ref.statistic, abs=0)
    np.testing.assert_array_equal(np.sort(ours.null), np.sort(ref.null_distribution))
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-12)


# ------------------------------------------------------------------------------------------------
# behaviour
# ------------------------------------------------------------------------------------------------


def test_determinism_and_seed():
    rng = np.random.default_rng(5)
    X, Y = _related(rng, 50, 5, 5, noise=2.0)
    a = S.permutation_test(X, Y, n_permutations=40, seed=11)
    b = S.permutation_test(torch.from_numpy(X), torch.from_numpy(Y), n_permutations=40, seed=11)
    c = S.permutation_test(X, Y, n_permutations=40, seed=12)
    np.testing.assert_array_equal(a.null, b.null)
    assert (a.observed, a.threshold, a.p_value, a.calibrated) == (b.observed, b.threshold, b.p_value, b.calibrated)
    assert not np.array_equal(a.null, c.null)
    assert a.seed == 11 and a.alpha == 0.05 and a.options == {"k": 10} and a.metric == "mutual_knn"


def test_aligned_data_calibrates_high_independent_data_to_zero():
    rng = np.random.default_rng(6)
    X, Y = _related(rng, 80, 5, 8, noise=0.5)
    good = S.permutation_test(X, Y, n_permutations=39, k=5)
    assert good.p_value == 1 / 40 and good.calibrated > 0.2
    bad = S.permutation_test(X, rng.normal(size=(80, 8)), n_permutations=39, k=5)
    assert bad.p_value > 0.05 and bad.calibrated == 0.0


def test_selection_aware_max_is_more_conservative_than_naive():
    rng = np.random.default_rng(7)
    XL, YL = rng.normal(size=(4, 40, 5)), rng.normal(size=(4, 40, 5))
    kw = dict(metric="mutual_knn", k=5, n_permutations=39, seed=0)
    aware = S.permutation_test_layerwise(XL, YL, selection_aware=True, **kw)
    naive = S.permutation_test_layerwise(XL, YL, selection_aware=False, **kw)
    a, b = aware.argmax
    assert aware.observed_max == aware.observed[a, b] == np.nanmax(aware.observed)
    np.testing.assert_array_equal(aware.null_max, aware.null.reshape(39, -1).max(1))
    np.testing.assert_array_equal(naive.null_max, naive.null[:, a, b])
    assert np.all(aware.null_max >= naive.null_max)
    assert aware.threshold_max >= naive.threshold_max and aware.p_max >= naive.p_max


def test_selection_aware_controls_false_positives_naive_does_not():
    # 20 data sets without any alignment, 5 x 5 layer pairs each, max over pairs tested at alpha=0.05.
    hits_aware = hits_naive = 0
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        XL, YL = rng.normal(size=(5, 30, 4)), rng.normal(size=(5, 30, 4))
        kw = dict(metric="mutual_knn", k=3, n_permutations=19, seed=seed)
        hits_aware += S.permutation_test_layerwise(XL, YL, selection_aware=True, **kw).p_max <= 0.05
        hits_naive += S.permutation_test_layerwise(XL, YL, selection_aware=False, **kw).p_max <= 0.05
    assert hits_aware <= 4  # expected 1 in 20
    assert hits_naive >= 8  # the maximum of 25 pairs against one pair's null


def test_layerwise_all_nan_raises():
    rng = np.random.default_rng(0)
    C = np.ones((1, 20, 3))
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError, match="every layer pair is NaN"):
        S.permutation_test_layerwise(C, rng.normal(size=(2, 20, 3)), k=3, n_permutations=19)


def test_option_and_name_errors():
    X = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(ValueError, match="unknown metric 'mknn'.*mutual_knn"):
        S.permutation_test(X, X, metric="mknn")
    with pytest.raises(TypeError, match="does not take k"):
        S.permutation_test(X, X, metric="cka_linear", k=5)
    with pytest.raises(TypeError, match=r"does not take option\(s\) \['sigma'\]"):
        S.permutation_test(X, X, metric="mutual_knn", sigma=1.0)
    with pytest.raises(ValueError, match="permutation of range"):
        S.permutation_test(X, X, permutations=np.zeros((19, 20), dtype=int))
    with pytest.raises(ValueError, match="shape"):
        S.permutation_test(X, X, permutations=np.zeros((19, 5), dtype=int))
    res = S.permutation_test(X, X, metric="cka_rbf", sigma=2.0, bandwidth="absolute", n_permutations=19)
    assert res.options == {"sigma": 2.0, "bandwidth": "absolute"} and res.observed == pytest.approx(1.0, abs=1e-6)


# ------------------------------------------------------------------------------------------------
# Benjamini-Hochberg
# ------------------------------------------------------------------------------------------------


def test_benjamini_hochberg_hand_worked():
    # sorted p: .01 .03 .04 .5 -> p*m/rank: .04 .06 .0533 .5 -> running min from the top:
    # .04 .0533 .0533 .5, mapped back to the input order.
    q = S.benjamini_hochberg([0.01, 0.04, 0.03, 0.5])
    np.testing.assert_allclose(q, [0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.5], rtol=1e-12)
    q2 = S.benjamini_hochberg(np.array([[0.01, np.nan], [0.04, 0.03]]))
    assert np.isnan(q2[0, 1])
    np.testing.assert_allclose(q2[[0, 1, 1], [0, 0, 1]], [0.03, 0.04, 0.04], rtol=1e-12)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        S.benjamini_hochberg([0.2, 1.5])
