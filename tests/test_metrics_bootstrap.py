"""Tests of bootstrap confidence intervals (prh_lib.stats.bootstrap)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import prh_lib.metrics as M
import prh_lib.stats as S


def _related(rng, n, dx, dy, noise=1.0):
    X = rng.normal(size=(n, dx))
    return X, X @ rng.normal(size=(dx, dy)) + noise * rng.normal(size=(n, dy))


@pytest.fixture(scope="module")
def related():
    return _related(np.random.default_rng(0), 120, 8, 10, noise=2.0)


@pytest.fixture(scope="module")
def independent():
    rng = np.random.default_rng(1)
    return rng.normal(size=(200, 30)), rng.normal(size=(200, 40))


@pytest.mark.parametrize("name", list(M.METRICS))
def test_estimate_is_the_metric_and_result_unpacks(name, related):
    X, Y = related
    kw = {"k": 5} if name in M.KNN_METRICS else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # biased estimators may warn (tested below)
        res = S.bootstrap_ci(X, Y, metric=name, n_boot=20, seed=3, **kw)
    est, low, high = res
    assert est == M.METRICS[name](X, Y, **kw)
    assert low < high and res.replicates.shape == (20,) and np.all(np.isfinite(res.replicates))
    assert res.n_boot == 20 and res.seed == 3 and res.method == "bootstrap" and res.metric == name


def test_bit_identical_for_same_seed(related):
    X, Y = related
    a = S.bootstrap_ci(X, Y, metric="mutual_knn", k=5, n_boot=30, seed=9)
    b = S.bootstrap_ci(torch.from_numpy(X), torch.from_numpy(Y), metric="mutual_knn", k=5, n_boot=30, seed=9)
    c = S.bootstrap_ci(X, Y, metric="mutual_knn", k=5, n_boot=30, seed=10)
    np.testing.assert_array_equal(a.replicates, b.replicates)
    assert tuple(a) == tuple(b)
    assert not np.array_equal(a.replicates, c.replicates)


@pytest.mark.parametrize("name", ["mutual_knn", "jaccard_knn", "cknna"])
def test_duplicates_do_not_inflate_knn_scores(name, independent):
    # Treated naively, the twin of a resampled sample is its nearest neighbour in X and in Y, which
    # adds ~0.63 / k to mutual k-NN (+0.06 at k = 10). Excluding same-sample positions keeps the
    # replicates centred on the estimate.
    X, Y = independent
    res = S.bootstrap_ci(X, Y, metric=name, k=10, n_boot=40, seed=0)
    assert abs(res.bias) < 0.015
    assert res.low <= res.estimate <= res.high


def test_duplicates_do_not_bias_unbiased_cka(independent):
    # Copies at different positions would re-introduce the self-similarity terms the unbiased HSIC
    # removes (replicates would drift towards the biased CKA, ~0.25 here).
    X, Y = independent
    res = S.bootstrap_ci(X, Y, metric="cka_linear_unbiased", n_boot=40, seed=0)
    assert abs(res.bias) < 0.015 and res.low <= 0.0 <= res.high


def test_biased_cka_bootstrap_shift_is_reported(independent):
    X, Y = independent
    with pytest.warns(RuntimeWarning, match="outside its percentile interval"):
        res = S.bootstrap_ci(X, Y, metric="cka_linear", n_boot=40, seed=0)
    assert res.bias > 0.05
    # the basic interval [2 s - q_hi, 2 s - q_lo] moves against the bias, towards the population
    # value 0 of CKA for independent data
    basic = S.bootstrap_ci(X, Y, metric="cka_linear", n_boot=40, seed=0, interval="basic")
    np.testing.assert_array_equal(basic.replicates, res.replicates)
    assert basic.high < res.low
    assert basic.low + basic.high == pytest.approx(2 * basic.estimate * 2 - (res.low + res.high), abs=1e-12)


def test_subsample_method(related):
    X, Y = related
    with warnings.catch_warnings():
        # at half the sample size k = 5 neighbours cover twice the fraction of the data, so mutual
        # k-NN of related data is higher there (documented); the estimate may fall below the interval
        warnings.simplefilter("ignore", RuntimeWarning)
        res = S.bootstrap_ci(X, Y, metric="mutual_knn", k=5, n_boot=20, method="subsample", fraction=0.5)
    assert res.method == "subsample" and res.fraction == 0.5 and np.all(np.isfinite(res.replicates))
    with pytest.raises(ValueError, match="too small"):
        S.bootstrap_ci(X, Y, metric="mutual_knn", k=10, method="subsample", fraction=0.05)


def test_callable_metric(related):
    X, Y = related

    def first_corr(A, B):
        return float(np.corrcoef(A[:, 0], B[:, 0])[0, 1])

    res = S.bootstrap_ci(X, Y, metric=first_corr, n_boot=50, seed=0)
    assert res.estimate == first_corr(X, Y) and res.low < res.estimate < res.high
    assert res.metric == "first_corr"


def test_bad_arguments(related):
    X, Y = related
    with pytest.raises(ValueError, match="method must be one of"):
        S.bootstrap_ci(X, Y, method="jackknife")
    with pytest.raises(ValueError, match="ci must be in"):
        S.bootstrap_ci(X, Y, ci=95)
    with pytest.raises(ValueError, match="n_boot must be in"):
        S.bootstrap_ci(X, Y, n_boot=0)
    with pytest.raises(ValueError, match="interval must be one of"):
        S.bootstrap_ci(X, Y, interval="bca")
    with pytest.raises(ValueError, match="unknown metric"):
        S.bootstrap_ci(X, Y, metric="svcca")
    with pytest.raises(ValueError, match="same number of samples"):
        S.bootstrap_ci(X, Y[:-1])


def _brute_force_mutual_knn_replicate(X, Y, idx, k):
    """Mutual k-NN of one resample, from scratch: positions holding the sample itself excluded, copies of
    another sample tied exactly and taken in position order (the first copy first)."""
    def hoods(Z):
        Z = Z[idx] / np.linalg.norm(Z[idx], axis=1, keepdims=True)
        S = Z @ Z.T
        S[idx[:, None] == idx[None, :]] = -np.inf
        return [set(np.argsort(-row, kind="stable")[:k]) for row in S]

    hx, hy = hoods(X), hoods(Y)
    return np.mean([len(a & b) / k for a, b in zip(hx, hy)])


def test_replicates_equal_a_from_scratch_computation(related):
    X, Y = related
    res = S.bootstrap_ci(X, Y, metric="mutual_knn", k=5, n_boot=12, seed=4)
    rng = np.random.default_rng(4)
    ref = [_brute_force_mutual_knn_replicate(X, Y, np.sort(rng.integers(0, len(X), size=len(X))), 5)
           for _ in range(12)]
    np.testing.assert_allclose(res.replicates, ref, rtol=0, atol=1e-12)


def _tied_pair(rng):
    base = rng.integers(0, 3, size=(30, 4)).astype(float)
    X = np.concatenate([base, base[:10]])  # exact duplicates and few values: ties at the k-th place
    Y = np.concatenate([base[:, ::-1] + rng.integers(0, 2, size=(30, 4)), base[:10, ::-1]])
    return X, Y


def _continuous_pair(rng):
    X = rng.normal(size=(60, 6))
    return X, X @ rng.normal(size=(6, 7)) + rng.normal(size=(60, 7))


@pytest.mark.parametrize("name", ["mutual_knn", "jaccard_knn", "cycle_knn"])
@pytest.mark.parametrize("method", ["bootstrap", "subsample"])
@pytest.mark.parametrize("data", ["tied", "continuous", "continuous, few candidates"])
def test_stacked_replicates_equal_one_at_a_time(name, method, data, monkeypatch):
    # The replicates' neighbourhoods are read off each row's best candidates of the full sample, and all
    # replicates are scored against each other at once (the diagonal is kept). Rows with ties between
    # samples (tied data), or with too few drawn candidates (only k + 1 candidates here), are selected
    # exactly instead. Each way must equal scoring every replicate on its own, bit for bit.
    from dataclasses import replace

    from prh_lib.metrics import _engines, _neighbours

    rng = np.random.default_rng(5)
    X, Y = _tied_pair(rng) if data == "tied" else _continuous_pair(rng)
    if data == "continuous, few candidates":
        monkeypatch.setattr(_neighbours, "candidates", lambda k, n: k + 1)
    kw = dict(metric=name, k=4, n_boot=70, seed=2, method=method)  # 70: two chunks of replicates
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        stacked = S.bootstrap_ci(X, Y, **kw)
        monkeypatch.setitem(_engines.ENGINES, name, replace(_engines.ENGINES[name], resample_state=None))
        single = S.bootstrap_ci(X, Y, **kw)
    assert _engines.get_engine(name).resample_state is None
    np.testing.assert_array_equal(stacked.replicates, single.replicates)
    assert np.isfinite(stacked.replicates).sum() >= 60


def test_layer_chunks_do_not_change_a_bit(related, monkeypatch):
    from prh_lib.metrics import _neighbours

    rng = np.random.default_rng(6)
    XL = np.stack([related[0] @ rng.normal(size=(8, 8)) for _ in range(5)])
    YL = np.stack([related[1] @ rng.normal(size=(10, 10)) for _ in range(4)])
    whole = S.permutation_test_layerwise(XL, YL, metric="mutual_knn", k=5, n_permutations=20, seed=1)
    monkeypatch.setattr(_neighbours, "CHUNK_ELEMENTS", 2 * 120 * 120)  # two layers per chunk
    chunked = S.permutation_test_layerwise(XL, YL, metric="mutual_knn", k=5, n_permutations=20, seed=1)
    np.testing.assert_array_equal(whole.observed, chunked.observed)
    np.testing.assert_array_equal(whole.null, chunked.null)


def test_half_samples_at_a_fixed_k_warn_unless_only_their_spread_is_read():
    """At fixed k a half-sample scores at its own, higher chance level, so its percentile interval can miss the
    estimate: bootstrap_ci warns, and callers that read only the spread (App. G, PCA) turn that off."""
    import warnings

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 8))
    Y = X + 2.0 * rng.normal(size=(400, 8))  # weak alignment: the chance shift dominates the spread
    with pytest.warns(RuntimeWarning, match="lies outside its percentile interval"):
        S.bootstrap_ci(X, Y, k=10, n_boot=30, method="subsample", fraction=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = S.bootstrap_ci(X, Y, k=10, n_boot=30, method="subsample", fraction=0.5, warn_outside=False)
    assert quiet.low > quiet.estimate  # the same replicates: they sit above the full-sample estimate


def test_replicate_size_is_the_size_bootstrap_ci_draws():
    from prh_lib.stats.bootstrap import replicate_size

    # 23 images: round(11.5) = 12 per half-sample (not 23 // 2 = 11), so k = 11 = m - 1 is the largest k
    assert replicate_size(23) == 12 and replicate_size(23, "bootstrap") == 23 and replicate_size(239) == 120
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(23, 4)), rng.normal(size=(23, 4))
    b = S.bootstrap_ci(x, y, metric="mutual_knn", k=11, n_boot=3, method="subsample", fraction=0.5)
    assert np.isfinite(b.replicates).all()
    with pytest.raises(ValueError, match="k <= m - 1"):
        S.bootstrap_ci(x, y, metric="mutual_knn", k=12, n_boot=3, method="subsample", fraction=0.5)
