"""Exact ties in the k-NN family: semantics, nulls equal to recomputation, the test's level.

Tie semantics (see ``prh_lib.metrics.knn``): mutual and Jaccard k-NN average over the choices a tie at
the ``k``-th place leaves open (tie-averaged membership = expected overlap under independent uniform
tie-breaking); cycle k-NN and CKNNA keep the lowest-index rule, re-applied in the re-paired frame.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

import prh_lib.metrics as M
import prh_lib.stats as S
from prh_lib.metrics import _bits

TIE_KINDS = ("duplicates", "ternary", "categorical", "zero_rows")


def tied(kind, n, rng):
    """Independent data with exact ties whose float values are exact (no ties made or broken by rounding)."""
    if kind == "duplicates":  # every sample appears about three times
        base = rng.normal(size=(max(n // 3, 2), 5))
        return base[rng.integers(0, len(base), size=n)]
    if kind == "ternary":  # quantised features in {-1, 0, 1}^2: cosines G / sqrt(m), values far apart
        return np.sign(np.round(rng.normal(size=(n, 2))))
    if kind == "categorical":  # one-hot of 4 categories
        return np.eye(4)[rng.integers(0, 4, size=n)]
    if kind == "zero_rows":  # 30 % all-zero rows
        Z = rng.normal(size=(n, 5))
        Z[rng.random(n) < 0.3] = 0.0
        return Z
    raise ValueError(kind)


# ------------------------------------------------------------------------------------------------
# an independent reference: enumerate every tie-break
# ------------------------------------------------------------------------------------------------


def _choices(Z, k):
    """For each row, the list of all equally justified k-neighbour sets (float64 cosine, self excluded)."""
    Z = np.asarray(Z, dtype=np.float64)
    norms = np.linalg.norm(Z, axis=1)
    U = Z / np.where(norms > 0, norms, 1.0)[:, None]
    S = U @ U.T
    S = np.round(S, 12)  # exact ties of the data, not of rounding (the test data have exact ties)
    out = []
    for i in range(len(Z)):
        s = S[i].copy()
        s[i] = -np.inf
        kth = np.sort(s)[::-1][k - 1]
        strict = [j for j in range(len(Z)) if s[j] > kth]
        tie = [j for j in range(len(Z)) if s[j] == kth]
        out.append([set(strict) | set(c) for c in itertools.combinations(tie, k - len(strict))])
    return out


def expected_scores_by_enumeration(X, Y, k):
    """Mutual and Jaccard k-NN averaged over all independent tie-breaks of X and Y, per row."""
    cx, cy = _choices(X, k), _choices(Y, k)
    mut, jac = [], []
    for ax, ay in zip(cx, cy):
        m = np.mean([len(a & b) for a in ax for b in ay])  # expected overlap
        mut.append(m / k)
        jac.append(m / (2 * k - m))
    return float(np.mean(mut)), float(np.mean(jac))


def test_hand_worked_tie():
    # Circle, k = 2. Sample 0 at 0 deg has sample 1 (10 deg) strictly nearest, then 2 and 3 at +-40 deg
    # tied exactly (cos is even): one of the two is its 2nd neighbour, each with probability 1/2.
    # In Y, sample 0's neighbours are {2, 4}. Expected overlap for sample 0: 1/2 (2 counts if chosen).
    a = np.deg2rad([0, 10, 40, -40, 150])
    X = np.stack([np.cos(a), np.sin(a)], 1)
    assert (X[0] @ X[2]) == (X[0] @ X[3])  # an exact tie
    b = np.deg2rad([0, 100, 5, 200, 12])
    Y = np.stack([np.cos(b), np.sin(b)], 1)
    # Row by row (k = 2; by hand from the angular distances):
    #   X: N(0) = {1} + one of {2, 3}; N(1) = {0, 2}; N(2) = {1, 0}; N(3) = {0, 1}; N(4) = {2, 1}
    #   Y: N(0) = {2, 4}; N(1) = {4, 2}; N(2) = {0, 4}; N(3) = {1, 0}; N(4) = {2, 0}
    #   overlaps: 1/2, 1, 1, 2, 1  -> mutual = 5.5 / (5 * 2) = 0.55
    #   Jaccard m / (2k - m): (1/2)/(7/2) = 1/7, 1/3, 1/3, 1, 1/3 -> (1/7 + 2) / 5
    assert M.mutual_knn(X, Y, k=2) == pytest.approx(0.55, abs=1e-12)
    assert M.jaccard_knn(X, Y, k=2) == pytest.approx((1 / 7 + 2) / 5, abs=1e-12)
    assert expected_scores_by_enumeration(X, Y, 2) == pytest.approx((0.55, (1 / 7 + 2) / 5), abs=1e-12)
    # the lowest-index rule (used by cycle k-NN and CKNNA) would count row 0 as 1: mutual 0.6
    # cycle k-NN and CKNNA use the lowest index: N_X(0) = {1, 2}
    np.testing.assert_array_equal(M.knn_indices(X, k=2)[0], [1, 2])


@pytest.mark.parametrize("kind", TIE_KINDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_tie_averaged_equals_enumeration(kind, seed):
    rng = np.random.default_rng(seed)
    X, Y = tied(kind, 16, rng), tied(kind, 16, rng)
    k = 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-zero rows warn
        mut, jac = M.mutual_knn(X, Y, k=k), M.jaccard_knn(X, Y, k=k)
    ref_mut, ref_jac = expected_scores_by_enumeration(X, Y, k)
    assert mut == pytest.approx(ref_mut, abs=1e-12)
    assert jac == pytest.approx(ref_jac, abs=1e-9)  # fixed point, 2**-52 resolution per sample


def test_no_ties_is_the_usual_count():
    # Without straddling ties the tie-averaged overlap is the plain count, exactly.
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(60, 5)), rng.normal(size=(60, 7))
    nx, ny = M.knn_indices(X, k=5), M.knn_indices(Y, k=5)
    count = sum(len(set(a) & set(b)) for a, b in zip(nx, ny))
    assert M.mutual_knn(X, Y, k=5) == count / (60 * 5)


def test_self_similarity_below_one_only_with_straddling_ties():
    rng = np.random.default_rng(0)
    X = tied("categorical", 30, rng)
    assert M.mutual_knn(X, X, k=3) < 1.0  # neighbourhoods not determined by the data
    D = np.eye(6)[[0, 0, 1, 1, 2, 2]] + 0.0  # pairs of twins, k = 1: the twin, unambiguous
    assert M.mutual_knn(D, D, k=1) == 1.0


# ------------------------------------------------------------------------------------------------
# the null equals recomputation, bit for bit, whatever the ties; torch and NumPy paths agree
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", TIE_KINDS)
@pytest.mark.parametrize("name", list(M.KNN_METRICS))
def test_null_equals_recomputation_with_ties(kind, name):
    rng = np.random.default_rng(7)
    X, Y = tied(kind, 30, rng), tied(kind, 30, rng)
    perms = np.stack([rng.permutation(30) for _ in range(12)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = S.permutation_test(X, Y, metric=name, k=4, permutations=perms, alpha=0.1)
        ref = np.array([M.METRICS[name](X, Y[p], k=4) for p in perms])
        np.testing.assert_array_equal(res.null, ref)
        assert res.observed == M.METRICS[name](X, Y, k=4)
        # layer-wise stacks: every pair against the pairwise function, bit for bit
        XL, YL = np.stack([X, tied(kind, 30, rng)]), np.stack([Y, X, tied(kind, 30, rng)])
        lw = M.LAYERWISE_METRICS[name](XL, YL, k=4)
        np.testing.assert_array_equal(lw, [[M.METRICS[name](a, b, k=4) for b in YL] for a in XL])
        lres = S.permutation_test_layerwise(XL, YL, metric=name, k=4, permutations=perms[:3], alpha=0.5)
        for t in range(3):
            np.testing.assert_array_equal(lres.null[t], M.LAYERWISE_METRICS[name](XL, YL[:, perms[t]], k=4))


@pytest.mark.parametrize("name", list(M.KNN_METRICS))
def test_torch_code_path_matches_numpy(name, monkeypatch):
    # On CUDA the integer kernels run in torch; here the same torch code runs on the CPU. Counts are
    # integers or exact fixed point: the two paths agree bit for bit (CKNNA's float64 sums: to rounding).
    rng = np.random.default_rng(3)
    def six(Z):  # zero-padded to 6 features (cosines unchanged) to stack kinds of different widths
        return np.pad(Z, ((0, 0), (0, 6 - Z.shape[1])))

    XL = np.stack([six(tied("duplicates", 40, rng)), six(tied("zero_rows", 40, rng))])
    YL = np.stack([six(tied("ternary", 40, rng)), six(tied("categorical", 40, rng)), rng.normal(size=(40, 6))])
    kw = dict(metric=name, k=4, n_permutations=19, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        a = S.permutation_test_layerwise(XL, YL, **kw)
        b_boot = S.bootstrap_ci(XL[0], YL[0], metric=name, k=4, n_boot=5, seed=2)
        monkeypatch.setattr(_bits, "NUMPY_ON_CPU", False)
        b = S.permutation_test_layerwise(torch.from_numpy(XL), torch.from_numpy(YL), **kw)
        a_boot = S.bootstrap_ci(XL[0], YL[0], metric=name, k=4, n_boot=5, seed=2)
    if name == "cknna":  # float64 sums in another order on the GPU path: equal to rounding
        np.testing.assert_allclose(a.observed, b.observed, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(a.null, b.null, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(a_boot.replicates, b_boot.replicates, rtol=1e-12, atol=1e-14)
        return
    np.testing.assert_array_equal(a.observed, b.observed)
    np.testing.assert_array_equal(a.null, b.null)
    np.testing.assert_array_equal(a_boot.replicates, b_boot.replicates)


# ------------------------------------------------------------------------------------------------
# the permutation test keeps its level on independent tied data
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", TIE_KINDS)
def test_false_positive_rate_on_tied_independent_data(kind):
    # 40 independent data sets, K = 19, alpha = 0.05: an exact test rejects about twice (at most
    # 7 with probability 0.9996). With the lowest-index tie-break shared by X and Y and a relabelled
    # null (before the tie-averaged semantics) these data sets gave 17 (ternary), 27 (categorical) and
    # 23 (zero rows) rejections of 40; duplicates drawn independently in X and Y gave 1 (a shared
    # tie-break needs ties at the same positions in both to inflate the score). Full measurement:
    # ``benchmarks/bench_metrics.py --ties-fpr``, figures in benchmarks/README.md.
    rejections, observed = 0, []
    for d in range(40):
        rng = np.random.default_rng(1000 * TIE_KINDS.index(kind) + d)
        X, Y = tied(kind, 40, rng), tied(kind, 40, rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = S.permutation_test(X, Y, metric="mutual_knn", k=4, n_permutations=19, seed=d)
        rejections += res.p_value <= 0.05
        observed.append(res.observed)
    assert rejections <= 7
    # and the raw score of unrelated tied data sits at the chance level k / (N - 1)
    assert np.mean(observed) == pytest.approx(M.mutual_knn_chance(40, 4), abs=0.02)


def test_degenerate_layer_records_no_straddling_rows():
    """A constant layer's rows are one tie each (N - 1 samples); its scores are NaN, so no tie records
    are kept for it, while a tied valid layer keeps its own."""
    import torch

    from prh_lib.metrics._bits import Backend
    from prh_lib.metrics._neighbours import hoods_from_features

    rng = np.random.default_rng(0)
    XL = torch.tensor(np.stack([np.ones((20, 3)), np.round(rng.normal(size=(20, 3))), rng.normal(size=(20, 3))]))
    h = hoods_from_features(XL, k=4, kind="cosine", name="X", bk=Backend(torch.device("cpu")))
    assert h.valid.tolist() == [False, True, True]
    assert not np.asarray(h.straddle)[0].any() and 0 not in set(np.asarray(h.s_layer).tolist())
    assert np.asarray(h.straddle)[1].any() and set(np.asarray(h.s_layer).tolist()) == {1}
