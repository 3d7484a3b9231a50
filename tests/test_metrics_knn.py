"""Tests of the k-NN family (prh_lib.metrics.knn) and of the preprocessing helpers it relies on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import prh_lib.metrics as M
import prh_lib.stats as S
from prh_lib.metrics import knn
from prh_lib.metrics.preprocess import center, clip_outliers, l2_normalize

KNN = {"mutual_knn": M.mutual_knn, "jaccard_knn": M.jaccard_knn, "cycle_knn": M.cycle_knn, "cknna": M.cknna}
SYMMETRIC = ("mutual_knn", "jaccard_knn")  # cycle_knn is asymmetric by definition; cknna see below


def _circle(degrees):
    """Unit vectors at the given angles: cosine similarity decreases with angular distance."""
    a = np.deg2rad(np.asarray(degrees, dtype=float))
    return np.stack([np.cos(a), np.sin(a)], axis=1)


def _related(rng, n, dx, dy, noise=1.0):
    X = rng.normal(size=(n, dx))
    return X, X @ rng.normal(size=(dx, dy)) + noise * rng.normal(size=(n, dy))


def _rotation(rng, d):
    q, r = np.linalg.qr(rng.normal(size=(d, d)))
    return q * np.sign(np.diag(r))


# ------------------------------------------------------------------------------------------------
# neighbour selection
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n,d,k", [(30, 5, 3), (80, 40, 10)])
def test_knn_indices_match_brute_force_sort(seed, n, d, k):
    # Reference: float64 cosine similarities, diagonal excluded, lexicographic (-sim, index) order.
    X = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    Xn = X.astype(np.float64) / np.linalg.norm(X, axis=1, keepdims=True)
    S = Xn @ Xn.T
    np.fill_diagonal(S, -np.inf)
    ref = np.stack([np.lexsort((np.arange(n), -row))[:k] for row in S])
    np.testing.assert_array_equal(M.knn_indices(X, k=k), ref)


def test_knn_indices_exact_ties_lowest_index_wins():
    # Standard basis vectors: every pair has cosine exactly 0, so all neighbours are ties.
    np.testing.assert_array_equal(
        M.knn_indices(np.eye(6), k=3),
        [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2], [0, 1, 2], [0, 1, 2]],
    )
    # One strict neighbour, then a tie straddling the k-th place: row 0 = e0, row 1 = e0 + e1.
    E = np.eye(6)
    E[1, 0] = 1.0
    np.testing.assert_array_equal(M.knn_indices(E, k=3)[:2], [[1, 2, 3], [0, 2, 3]])


def test_knn_indices_duplicates_exclude_self_by_index():
    # Rows 0 and 1 are identical; row 3 is equally similar (cos = 1/sqrt(2), exactly tied) to 0, 1, 2.
    D = np.array([[1, 0], [1, 0], [0, 1], [1, 1.0]])
    np.testing.assert_array_equal(M.knn_indices(D, k=1).ravel(), [1, 0, 3, 0])
    np.testing.assert_array_equal(M.knn_indices(D, k=2), [[1, 3], [0, 3], [3, 0], [0, 1]])
    # Many duplicates: the sample itself never appears, its twin always comes first.
    rng = np.random.default_rng(0)
    base = rng.normal(size=(20, 6))
    X = np.concatenate([base, base])  # row i and row i + 20 are twins
    idx = M.knn_indices(X, k=4)
    n = len(X)
    assert not np.any(idx == np.arange(n)[:, None])
    np.testing.assert_array_equal(idx[:, 0], (np.arange(n) + 20) % n)


def test_knn_indices_stacked_equals_per_layer_and_is_deterministic():
    XL = np.random.default_rng(3).normal(size=(3, 40, 8))
    idx = M.knn_indices(XL, k=5)
    assert idx.shape == (3, 40, 5) and idx.dtype == np.int64
    for layer in range(3):
        np.testing.assert_array_equal(idx[layer], M.knn_indices(XL[layer], k=5))
    np.testing.assert_array_equal(idx, M.knn_indices(torch.from_numpy(XL), k=5))


# ------------------------------------------------------------------------------------------------
# hand-worked references
# ------------------------------------------------------------------------------------------------

# X at angles (deg) [0, 10, 25, 60, 100, 150], Y at [0, 40, 15, 70, 95, 205], k = 2. By hand:
#   N_X = {1,2} {0,2} {0,1} {2,4} {3,5} {3,4};   N_Y = {1,2} {2,3} {0,1} {1,4} {1,3} {3,4}
#   overlaps m_i = 2 1 2 1 1 2  -> mutual = 9 / (6 * 2) = 3/4
#   Jaccard m/(2k - m) = 1 1/3 1 1/3 1/3 1 -> 4/6 = 2/3
#   cycle(X, Y): every i is in N_X(j) for some j in N_Y(i) -> 1
#   cycle(Y, X): i = 5 fails (N_X(5) = {3,4}; N_Y(3) = {1,4}, N_Y(4) = {1,3}) -> 5/6
#   cycle(Y, Y): i = 5 fails the same way -> 5/6
HAND_X = _circle([0, 10, 25, 60, 100, 150])
HAND_Y = _circle([0, 40, 15, 70, 95, 205])


def test_hand_worked_example_neighbours():
    assert [set(r) for r in M.knn_indices(HAND_X, k=2)] == [{1, 2}, {0, 2}, {0, 1}, {2, 4}, {3, 5}, {3, 4}]
    assert [set(r) for r in M.knn_indices(HAND_Y, k=2)] == [{1, 2}, {2, 3}, {0, 1}, {1, 4}, {1, 3}, {3, 4}]


def test_hand_worked_example_scores():
    assert M.mutual_knn(HAND_X, HAND_Y, k=2) == 0.75
    assert M.jaccard_knn(HAND_X, HAND_Y, k=2) == pytest.approx(2 / 3, abs=1e-15)
    assert M.cycle_knn(HAND_X, HAND_Y, k=2) == 1.0
    assert M.cycle_knn(HAND_Y, HAND_X, k=2) == pytest.approx(5 / 6, abs=1e-15)
    assert M.cycle_knn(HAND_Y, HAND_Y, k=2) == pytest.approx(5 / 6, abs=1e-15)  # < 1 against itself


def test_hand_worked_disjoint_neighbourhoods_score_zero():
    # k = 1. X pairs up (0,1), (2,3), (4,5); Y pairs up (1,2), (3,4), (5,0): no shared neighbour, so
    # mutual = Jaccard = 0, the CKNNA mask is empty (numerator HSIC of zero matrices = 0), and no
    # sample returns to itself: N_Y(0) = {5}, N_X(5) = {4}, etc.
    X = _circle([0, 10, 100, 110, 200, 210])
    Y = _circle([210, 0, 10, 100, 110, 200])
    for name in KNN:
        assert KNN[name](X, Y, k=1) == 0.0, name


# ------------------------------------------------------------------------------------------------
# properties
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n,d", [(50, 8), (120, 64)])
@pytest.mark.parametrize("name", ["mutual_knn", "jaccard_knn", "cknna"])
def test_self_similarity_is_one(name, seed, n, d):
    X = np.random.default_rng(seed).normal(size=(n, d))
    assert KNN[name](X, X, k=7) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", SYMMETRIC)
def test_symmetry(name, seed):
    X, Y = _related(np.random.default_rng(seed), 90, 10, 20)
    assert KNN[name](X, Y, k=8) == KNN[name](Y, X, k=8)


def test_cycle_knn_is_asymmetric_on_random_data():
    X, Y = _related(np.random.default_rng(0), 120, 10, 20, noise=3.0)
    assert M.cycle_knn(X, Y, k=5) != M.cycle_knn(Y, X, k=5)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", list(KNN))
def test_invariances(name, seed):
    rng = np.random.default_rng(seed)
    X, Y = _related(rng, 80, 12, 16)
    f, k = KNN[name], 6
    ref = f(X, Y, k=k)
    perm = rng.permutation(80)
    tol = 1e-9 if name == "cknna" else 0.0
    # isotropic scaling by powers of two is exact in floating point
    assert f(4.0 * X, 0.5 * Y, k=k) == pytest.approx(ref, abs=tol)
    # the same permutation of samples in both
    assert f(X[perm], Y[perm], k=k) == pytest.approx(ref, abs=tol)
    # orthogonal rotations: neighbours may only change through float32 rounding at near-ties
    Xr, Yr = X @ _rotation(rng, 12), Y @ _rotation(rng, 16)
    assert f(Xr, Yr, k=k) == pytest.approx(ref, abs=1e-4 if name == "cknna" else 1.0 / 80)
    if name != "cknna":  # cosine neighbourhoods ignore any positive rescaling of individual rows
        w = rng.uniform(0.5, 3.0, size=(80, 1))
        assert f(w * X, Y, k=k) == pytest.approx(ref, abs=1.0 / 80)


def test_cknna_is_nearly_but_not_exactly_symmetric():
    # The PRH formula applies the unbiased HSIC to masked, non-symmetric kernels; its cross term
    # 1^T A B 1 changes when A and B swap. Documented in cknna's docstring.
    X, Y = _related(np.random.default_rng(0), 150, 10, 20)
    a, b = M.cknna(X, Y, k=10), M.cknna(Y, X, k=10)
    assert a != b and abs(a - b) < 0.05


@pytest.mark.parametrize("n,k", [(150, 5), (150, 15)])
def test_random_pairings_at_chance(n, k):
    rng = np.random.default_rng(42)
    mut = [M.mutual_knn(rng.normal(size=(n, 10)), rng.normal(size=(n, 10)), k=k) for _ in range(6)]
    jac = [M.jaccard_knn(rng.normal(size=(n, 10)), rng.normal(size=(n, 10)), k=k) for _ in range(6)]
    # per-run std ~ sqrt(Var(hypergeom) / (k^2 n)) <= 0.006; six runs -> SE <= 0.0025
    assert np.mean(mut) == pytest.approx(M.mutual_knn_chance(n, k), abs=0.01)
    assert np.mean(jac) == pytest.approx(M.jaccard_knn_chance(n, k), abs=0.01)


def test_chance_levels_closed_form():
    assert M.mutual_knn_chance(1024, 10) == 10 / 1023
    # k = 1: Jaccard is 1 when the single neighbours agree (prob 1/(n-1)), else 0
    assert M.jaccard_knn_chance(11, 1) == pytest.approx(1 / 10, abs=1e-15)
    with pytest.raises(ValueError, match="k must be in"):
        M.mutual_knn_chance(10, 10)


def test_duplicate_rows_handled():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(30, 5))
    X = np.concatenate([base, base])
    Q = _rotation(rng, 5)
    Y = np.concatenate([base @ Q, 2.0 * (base @ Q)])  # rotated, and twins again (up to scale)
    for name in ("mutual_knn", "jaccard_knn"):
        assert KNN[name](X, X, k=3) == 1.0
        # Y is a rotation of X with the same twins: same neighbourhoods up to float rounding
        assert KNN[name](X, Y, k=3) == pytest.approx(1.0, abs=1 / 60)


# ------------------------------------------------------------------------------------------------
# layer-wise forms
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", list(KNN))
def test_layerwise_equals_loop(name, seed):
    rng = np.random.default_rng(seed)
    XL = rng.normal(size=(3, 60, 10))
    YL = rng.normal(size=(4, 60, 7))
    YL[2] = XL[1] @ rng.normal(size=(10, 7)) + 0.5 * rng.normal(size=(60, 7))
    got = M.LAYERWISE_METRICS[name](XL, YL, k=5)
    ref = np.array([[KNN[name](a, b, k=5) for b in YL] for a in XL])
    assert got.shape == (3, 4)
    if name in ("mutual_knn", "cycle_knn"):  # integer counts: bit-identical
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10)


def test_layerwise_blocks_match_unblocked(monkeypatch):
    # Force one x-layer per packed word and per gather block, one permutation per batch; the result
    # must not depend on the blocking.
    from prh_lib.metrics import _bits, _cknna, _overlap

    rng = np.random.default_rng(5)
    XL, YL = rng.normal(size=(3, 40, 6)), rng.normal(size=(2, 40, 6))
    XL[1, 7] = XL[1, 3]  # a duplicate: a straddling tie in some rows
    full = {n: M.LAYERWISE_METRICS[n](XL, YL, k=4) for n in KNN}
    nulls = {n: S.permutation_test_layerwise(XL, YL, metric=n, k=4, n_permutations=19).null for n in KNN}
    monkeypatch.setattr(_bits, "WORD", 1)
    monkeypatch.setattr(_overlap, "_BUDGET", 1)
    monkeypatch.setattr(_cknna, "_GATHER_BUDGET", 1)
    for n in KNN:
        np.testing.assert_array_equal(M.LAYERWISE_METRICS[n](XL, YL, k=4), full[n])
        np.testing.assert_array_equal(
            S.permutation_test_layerwise(XL, YL, metric=n, k=4, n_permutations=19).null, nulls[n]
        )


def test_layerwise_deterministic_and_dtype_independent():
    rng = np.random.default_rng(7)
    XL = rng.normal(size=(2, 50, 9)).astype(np.float32)
    YL = rng.normal(size=(3, 50, 9)).astype(np.float32)
    a = M.mutual_knn_layerwise(XL, YL, k=5)
    b = M.mutual_knn_layerwise(torch.from_numpy(XL), torch.from_numpy(YL), k=5, device="cpu")
    c = M.mutual_knn_layerwise(XL.astype(np.float64), YL.astype(np.float64), k=5)  # rounded to float32
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert a.dtype == np.float64
    h = M.mutual_knn_layerwise(XL.astype(np.float16), YL.astype(np.float16), k=5)  # computed in float32
    np.testing.assert_array_equal(
        h, M.mutual_knn_layerwise(XL.astype(np.float16).astype(np.float32), YL.astype(np.float16).astype(np.float32), k=5)
    )


# ------------------------------------------------------------------------------------------------
# CKNNA against an independent double-sum implementation
# ------------------------------------------------------------------------------------------------


def _hsic_song_loops(A, B):
    """Song et al. (2012), JMLR 13, Eq. (5), written as explicit sums (no matrix products)."""
    n = A.shape[0]
    A = A.copy()
    B = B.copy()
    np.fill_diagonal(A, 0)
    np.fill_diagonal(B, 0)
    tr = sum(A[i, j] * B[j, i] for i in range(n) for j in range(n))
    sA, sB = A.sum(), B.sum()
    ab = sum(A[i, j] * B[j, l] for i in range(n) for j in range(n) for l in range(n))
    return (tr + sA * sB / ((n - 1) * (n - 2)) - 2 * ab / (n - 2)) / (n * (n - 3))


@pytest.mark.parametrize("seed", [0, 1])
def test_cknna_against_double_sum_reference(seed):
    # Huh et al. (2024), App. A / PRH metrics.cknna: K = X X^T, neighbours by K (self excluded),
    # M = M_X * M_Y; CKNNA = HSIC_u(M K, M L) / sqrt(HSIC_u(M_X K, M_X K) HSIC_u(M_Y L, M_Y L)).
    rng = np.random.default_rng(seed)
    X, Y = _related(rng, 14, 4, 5, noise=0.7)
    X, Y = X.astype(np.float32).astype(np.float64), Y.astype(np.float32).astype(np.float64)
    k = 4

    def masks(Z):
        K = Z @ Z.T
        S = K.copy()
        np.fill_diagonal(S, -np.inf)
        m = np.zeros_like(K)
        for i, row in enumerate(S):
            m[i, np.argsort(-row, kind="stable")[:k]] = 1
        return K, m

    K, mx = masks(X)
    L, my = masks(Y)
    m = mx * my
    ref = _hsic_song_loops(m * K, m * L) / np.sqrt(_hsic_song_loops(mx * K, mx * K) * _hsic_song_loops(my * L, my * L))
    assert M.cknna(X, Y, k=k) == pytest.approx(ref, rel=1e-5)
    assert M.cknna_layerwise(X[None], Y[None], k=k)[0, 0] == pytest.approx(ref, rel=1e-5)


# ------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(KNN))
def test_bad_input_raises_clear_errors(name):
    f, fl = KNN[name], M.LAYERWISE_METRICS[name]
    X = np.random.default_rng(0).normal(size=(20, 4))
    with pytest.raises(ValueError, match=r"same number of samples.*\(20, 4\).*\(19, 4\)"):
        f(X, X[:19], k=3)
    with pytest.raises(ValueError, match="k must be in"):
        f(X, X, k=0)
    with pytest.raises(ValueError, match="k=20"):
        f(X, X, k=20)
    with pytest.raises(TypeError, match="k must be an integer"):
        f(X, X, k=2.5)
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="1 NaN"):
        f(Xn, X, k=3)
    Xi = X.copy()
    Xi[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinite"):
        f(X, Xi, k=3)
    with pytest.raises(ValueError, match="2-D"):
        f(X[None], X[None], k=3)
    with pytest.raises(ValueError, match="3-D"):
        fl(X, X, k=3)
    with pytest.raises(TypeError, match="numpy.ndarray or torch.Tensor"):
        f(X.tolist(), X, k=3)


def test_huge_values_rank_by_cosine_and_overflow_is_reported_for_cknna():
    # Squared norms of rows with entries ~1e25 overflow float32; cosine ranking is scale-invariant, so
    # the cosine metrics rescale such rows; CKNNA's inner-product kernel cannot and says so.
    X, Y = _related(np.random.default_rng(0), 40, 5, 6)
    assert M.mutual_knn(1e25 * X, Y, k=4) == M.mutual_knn(X, Y, k=4)
    with pytest.raises(ValueError, match="overflow float32"):
        M.cknna(1e25 * X, Y, k=4)


def test_cknna_needs_four_samples():
    X = np.random.default_rng(0).normal(size=(3, 2))
    with pytest.raises(ValueError, match="at least 4 samples"):
        M.cknna(X, X, k=1)


@pytest.mark.parametrize("name", list(KNN))
def test_constant_representation_warns_and_gives_nan(name):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 4))
    C = np.tile(rng.normal(size=(1, 4)), (20, 1))
    with pytest.warns(RuntimeWarning, match="degenerate"):
        assert np.isnan(KNN[name](X, C, k=3))
    XL = np.stack([X, C, X])
    with pytest.warns(RuntimeWarning, match=r"layers \[1\]"):
        out = M.LAYERWISE_METRICS[name](XL, X[None], k=3)
    assert np.isnan(out[1, 0]) and np.all(np.isfinite(out[[0, 2], 0]))


def test_zero_rows_warn():
    X = np.random.default_rng(0).normal(size=(20, 4))
    X[5] = 0
    with pytest.warns(RuntimeWarning, match="all-zero rows"):
        M.mutual_knn(X, X, k=3)


# ------------------------------------------------------------------------------------------------
# preprocessing (l2_normalize is part of the k-NN definition; clipping follows the PRH code)
# ------------------------------------------------------------------------------------------------


def test_l2_normalize_and_center():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 10, 5))
    X[0, 3] = 0
    Xn = l2_normalize(X)
    assert isinstance(Xn, np.ndarray) and Xn.dtype == np.float64
    norms = np.linalg.norm(Xn, axis=-1)
    np.testing.assert_allclose(np.delete(norms[0], 3), 1.0, rtol=1e-12)
    assert norms[0, 3] == 0.0
    assert isinstance(l2_normalize(torch.from_numpy(X)), torch.Tensor)
    np.testing.assert_allclose(center(X).mean(axis=-2), 0.0, atol=1e-12)


def test_clip_outliers_matches_prh_formulas():
    rng = np.random.default_rng(0)
    XL = rng.standard_t(df=2, size=(3, 25, 8))  # (L, N, D), heavy tails
    q = 0.9
    # PRH remove_outliers(feats, q, exact=False) on feats of shape (N, L, D):
    #   q_val = torch.quantile(feats.abs().flatten(start_dim=1), q, dim=1).mean(); feats.clamp(-q_val, q_val)
    feats = np.transpose(XL, (1, 0, 2))
    t = np.quantile(np.abs(feats).reshape(25, -1), q, axis=1).mean()
    np.testing.assert_allclose(clip_outliers(XL, q=q), np.clip(XL, -t, t), rtol=1e-12)
    # exact=True: feats.view(-1).abs().sort().values[int(q * feats.numel())]
    tg = np.sort(np.abs(XL).ravel())[int(q * XL.size)]
    np.testing.assert_allclose(clip_outliers(XL, q=q, scope="global"), np.clip(XL, -tg, tg), rtol=1e-12)
    # per feature: quantile of |x| over samples for every column
    tf = np.quantile(np.abs(XL), q, axis=1, keepdims=True)
    np.testing.assert_allclose(clip_outliers(XL, q=q, scope="feature"), np.clip(XL, -tf, tf), rtol=1e-12)
    np.testing.assert_array_equal(clip_outliers(XL, q=1.0), XL)
    with pytest.raises(ValueError, match="q must be in"):
        clip_outliers(XL, q=0.0)
    with pytest.raises(ValueError, match="scope must be one of"):
        clip_outliers(XL, scope="rows")


def test_neighbourhood_memo_follows_the_tensor_and_its_edits():
    import gc

    from prh_lib.metrics import knn as K

    rng = np.random.default_rng(11)
    X = torch.from_numpy(rng.normal(size=(3, 50, 6)).astype(np.float32))
    Y = torch.from_numpy(rng.normal(size=(2, 50, 5)).astype(np.float32))
    K._HOODS_MEMO.clear()
    first = M.mutual_knn_layerwise(X, Y, k=4)
    assert len(K._HOODS_MEMO) == 2
    null = S.permutation_test_layerwise(X, Y, k=4, n_permutations=19, seed=0)  # served from the memo
    assert len(K._HOODS_MEMO) == 2
    np.testing.assert_array_equal(null.observed, first)
    # an in-place edit (through a view) is seen: the stale entry is not used
    X[1, :, :3] = torch.from_numpy(rng.normal(size=(50, 3)).astype(np.float32))
    edited = M.mutual_knn_layerwise(X, Y, k=4)
    np.testing.assert_array_equal(edited, M.mutual_knn_layerwise(X.numpy().copy(), Y.numpy(), k=4))
    assert not np.array_equal(edited[1], first[1]) and np.array_equal(edited[0], first[0])
    # NumPy inputs have no version counter: never memoised; a freed tensor's entries go with it
    n = len(K._HOODS_MEMO)
    M.mutual_knn_layerwise(X.numpy(), Y.numpy(), k=4)
    assert len(K._HOODS_MEMO) == n
    del X, Y, null
    gc.collect()
    assert len(K._HOODS_MEMO) == 0


def test_a_memoised_stack_with_zero_rows_warns_every_time():
    X = torch.zeros(2, 20, 4)
    X[:, 5:] = torch.randn(2, 15, 4, generator=torch.Generator().manual_seed(0))
    Y = torch.randn(1, 20, 3, generator=torch.Generator().manual_seed(1))
    for _ in range(2):
        with pytest.warns(RuntimeWarning, match="X: 10 all-zero rows"):
            M.mutual_knn_layerwise(X, Y, k=3)


def test_inference_mode_tensors_are_scored_without_the_memo():
    # tensors made under torch.inference_mode() (as extraction makes them) have no version counter
    from prh_lib.extract.features import values_digest

    with torch.inference_mode():
        X, Y = torch.randn(2, 30, 4, generator=torch.Generator().manual_seed(0)), torch.randn(2, 30, 5)
    ref = M.mutual_knn_layerwise(X.clone(), Y.clone(), k=3)
    np.testing.assert_array_equal(M.mutual_knn_layerwise(X, Y, k=3), ref)
    assert S.permutation_test_layerwise(X, Y, k=3, n_permutations=19).observed.shape == (2, 2)
    assert values_digest(X) == values_digest(X.clone())


def test_the_memo_keeps_no_scoring_tables():
    from prh_lib.metrics import knn as K

    K._HOODS_MEMO.clear()
    X, Y = torch.randn(2, 30, 4), torch.randn(3, 30, 5)
    S.permutation_test_layerwise(X, Y, k=3, n_permutations=19)
    assert K._HOODS_MEMO and all(not hasattr(e[1], "_views") for e in K._HOODS_MEMO.values())


@pytest.mark.parametrize("numpy_backend", [True, False])
@pytest.mark.parametrize("m, stop", [(1, 1), (2, 1), (7, 1), (10, 1), (239, 8), (5975, 8), (33, 4), (64, 8), (9, 8)])
def test_bit_sliced_column_counts_equal_plain_popcount(m, stop, numpy_backend, monkeypatch):
    """The bit-sliced counter (one zero padding, then halvings) gives, for every bit position, the
    number of words with that bit set, along any axis, on both backends."""
    from prh_lib.metrics import _bits as B

    monkeypatch.setattr(B, "NUMPY_ON_CPU", numpy_backend)
    bk = B.Backend(torch.device("cpu"))
    rng = np.random.default_rng(m * 31 + stop)
    nbits = 13
    W = rng.integers(0, 2**nbits, size=(3, m, 5), dtype=np.int64)
    ref = ((W[..., None] >> np.arange(nbits)) & 1).sum(axis=1)  # (3, 5, nbits)
    got = bk.to_numpy(B.column_counts_axis(bk.asarray(W), nbits, bk, axis=1, stop=stop))
    np.testing.assert_array_equal(got, ref)
    planes = B.count_planes(bk.asarray(W), bk, axis=1, stop=1)  # full counters: bit l of each count
    full = sum(((bk.to_numpy(p)[..., None] >> np.arange(nbits)) & 1) << lvl for lvl, p in enumerate(planes))
    np.testing.assert_array_equal(full, ref)
