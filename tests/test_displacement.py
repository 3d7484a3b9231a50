"""Tests for prh_lib.metrics.displacement (displacement geometry, arXiv:2609.24209)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.stats import ortho_group
from threadpoolctl import threadpool_limits

from prh_lib.metrics import displacement as D
from prh_lib.metrics import _whitening as metrics_whitening

MAIN = ("pointwise", "cross_model", "cross_object")


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # tiny matrices: extra BLAS threads only spin-wait on a shared CPU (a test-speed choice, not a check)
    with threadpool_limits(1):
        yield


def _orth(d, seed):
    return ortho_group.rvs(d, random_state=seed)


def _shared_signal(n, seed, *, k=8, dx=40, dy=56, noise=0.3):
    """Two views of one latent S (n, k) through random linear maps, plus independent noise."""
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((n, k))
    X = S @ rng.standard_normal((k, dx)) + noise * rng.standard_normal((n, dx))
    Y = S @ rng.standard_normal((k, dy)) + noise * rng.standard_normal((n, dy))
    return X, Y


# --------------------------------------------------------------------------- split
@pytest.mark.parametrize("n,frac", [(10, 0.5), (101, 0.3), (7, 0.6)])
def test_split_partitions_and_is_seeded(n, frac):
    tr, te = metrics_whitening.split_indices(n, test_fraction=frac, seed=3)
    assert len(te) == round(n * frac) and len(tr) == n - len(te)
    assert np.intersect1d(tr, te).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([tr, te])), np.arange(n))
    assert np.all(np.diff(tr) > 0) and np.all(np.diff(te) > 0)
    tr2, te2 = metrics_whitening.split_indices(n, test_fraction=frac, seed=3)
    np.testing.assert_array_equal(te, te2)


def test_split_seed_changes_split():
    assert not np.array_equal(metrics_whitening.split_indices(100, seed=0)[1],
                              metrics_whitening.split_indices(100, seed=1)[1])


@pytest.mark.parametrize("n,frac", [(3, 0.5), (10, 0.95), (10, 0.0), (10, 1.0)])
def test_split_rejects_too_small_or_bad_fraction(n, frac):
    with pytest.raises(ValueError, match="test_fraction|too small"):
        metrics_whitening.split_indices(n, test_fraction=frac)


# --------------------------------------------------------------------------- whitening
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n,d,q", [(200, 30, 100), (80, 300, 40), (50, 10, 10)])
def test_whitened_train_features_have_identity_covariance(seed, n, d, q):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) @ rng.standard_normal((d, d)) * np.logspace(0, 2, d) + 5.0
    w = metrics_whitening.fit_whitening(X, n_components=q)
    Z = w.transform(X)
    assert w.n_components == min(q, n - 1, d)
    np.testing.assert_allclose(Z.mean(0), 0.0, atol=1e-10)
    np.testing.assert_allclose(np.cov(Z.T), np.eye(w.n_components), atol=1e-8)


def test_whitening_matches_mahalanobis_gram():
    # Independent reference: for full-rank data, Z Z^T = Xc C^{-1} Xc^T (C = np.cov, ddof=1).
    rng = np.random.default_rng(4)
    X = rng.standard_normal((60, 12)) @ rng.standard_normal((12, 12))
    Z = metrics_whitening.fit_whitening(X).transform(X)
    Xc = X - X.mean(0)
    np.testing.assert_allclose(Z @ Z.T, Xc @ np.linalg.inv(np.cov(X.T)) @ Xc.T, atol=1e-8)


def test_whitening_rank_deficient_drops_components_and_stays_finite():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 7)) @ rng.standard_normal((7, 200))  # rank 7 in 200-D
    w = metrics_whitening.fit_whitening(X, n_components=100)
    assert w.n_components == 7 and w.n_dropped == 50 - 7  # q = min(100, 50, 200) = 50
    Z = w.transform(rng.standard_normal((20, 200)))  # off-subspace inputs too
    assert np.isfinite(Z).all() and np.abs(Z).max() < 1e3
    np.testing.assert_allclose(np.cov(w.transform(X).T), np.eye(7), atol=1e-8)


def test_whitening_eps_threshold_is_relative_variance():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((100, 5))
    X[:, 4] *= 1e-7  # variance ratio ~1e-14 < default eps 1e-10
    assert metrics_whitening.fit_whitening(X).n_components == 4
    assert metrics_whitening.fit_whitening(X, eps=0.0).n_components == 5
    with pytest.raises(ValueError, match="eps"):
        metrics_whitening.fit_whitening(X, eps=1.0)


def test_whitening_rejects_constant_and_bad_input():
    with pytest.raises(ValueError, match="zero variance"):
        metrics_whitening.fit_whitening(np.ones((10, 4)))
    with pytest.raises(ValueError, match="at least 2 rows"):
        metrics_whitening.fit_whitening(np.ones((1, 4)))
    with pytest.raises(ValueError, match="2-D"):
        metrics_whitening.fit_whitening(np.ones(4))
    with pytest.raises(ValueError, match="non-finite"):
        metrics_whitening.fit_whitening(np.array([[1.0, np.nan], [0.0, 1.0], [2.0, 3.0]]))
    w = metrics_whitening.fit_whitening(np.random.default_rng(0).standard_normal((10, 4)))
    with pytest.raises(ValueError, match="4"):
        w.transform(np.ones((3, 5)))


# --------------------------------------------------------------------------- procrustes
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("reflect", [False, True])
def test_procrustes_recovers_known_orthogonal_map(seed, reflect):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((50, 12))
    R0 = _orth(12, seed)
    if (np.linalg.det(R0) < 0) != reflect:
        R0[:, 0] *= -1
    R = metrics_whitening.procrustes(A, A @ R0)
    np.testing.assert_allclose(R, R0, atol=1e-10)
    np.testing.assert_allclose(R.T @ R, np.eye(12), atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_procrustes_is_orthogonal_optimal_and_antisymmetric(seed):
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((40, 9)), rng.standard_normal((40, 9))
    R = metrics_whitening.procrustes(A, B)
    np.testing.assert_allclose(R.T @ R, np.eye(9), atol=1e-10)
    U, _, Vt = np.linalg.svd(A.T @ B)  # textbook closed form (Schönemann 1966)
    np.testing.assert_allclose(R, U @ Vt, atol=1e-10)
    np.testing.assert_allclose(metrics_whitening.procrustes(B, A), R.T, atol=1e-10)
    # no random orthogonal map does better
    best = np.linalg.norm(A @ R - B)
    assert all(best <= np.linalg.norm(A @ _orth(9, s) - B) for s in range(20))


def test_procrustes_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\(5, 3\) and \(5, 4\)"):
        metrics_whitening.procrustes(np.ones((5, 3)), np.ones((5, 4)))


# --------------------------------------------------------------------------- cosine measures
def test_cosine_measures_hand_worked_two_sample_example():
    # n = 2: every sampled pair is (0, 1) or (1, 0) and the derangement is the swap,
    # so every value is hand-computable.
    A = np.array([[1.0, 0.0], [0.0, 1.0]])
    B = np.array([[1.0, 1.0], [0.0, 2.0]])
    m = D.cosine_measures(A, B, n_pairs=50, seed=0)
    s = np.sqrt(0.5)
    expected = {
        "pointwise": (s + 1.0) / 2,  # cos((1,0),(1,1)), cos((0,1),(0,2))
        "cross_model": 1.0,  # (1,-1) vs (1,-1)
        "cross_object": 1.0,  # (0,-1) vs (0,-1)
        "pointwise_shuffled": (0.0 + s) / 2,  # cos((1,0),(0,2)), cos((0,1),(1,1))
        "cross_model_shuffled": -1.0,  # (1,-1) vs (-1,1)
        "cross_object_shuffled": -1.0 / np.sqrt(5.0),  # (1,-2) vs (-1,0)
    }
    assert list(m) == list(D.MEASURES)
    for k, v in expected.items():
        assert m[k] == pytest.approx(v, abs=1e-12), k


def test_cosine_measures_with_explicit_predecessor_pairs_hand_worked():
    # pairs (0, 2), (1, 0), (2, 1): each row with its predecessor, cyclically (the reference code's pairing)
    A = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    B = np.array([[2.0, 0.0], [0.0, 2.0], [2.0, 1.0]])
    m = D.cosine_measures(A, B, pairs=(np.arange(3), np.array([2, 0, 1])))
    # displacements: (0,-1)/(0,-1) -> 1; (-1,1)/(-2,2) -> 1; (1,0)/(2,-1) -> 2/sqrt(5)
    assert m["cross_model"] == pytest.approx((2 + 2 / np.sqrt(5)) / 3, abs=1e-12)
    # residuals a - b: (-1,0), (0,-1), (-1,0): cos(e0, e2) = 1, cos(e1, e0) = 0, cos(e2, e1) = 0
    assert m["cross_object"] == pytest.approx(1 / 3, abs=1e-12)
    assert m["pointwise"] == pytest.approx((2 + 3 / np.sqrt(10)) / 3, abs=1e-12)  # pairs do not enter it


def test_explicit_pairs_are_validated():
    A = np.random.default_rng(0).standard_normal((5, 3))
    with pytest.raises(ValueError, match="i != j"):
        D.cosine_measures(A, A + 1, pairs=(np.array([0, 1]), np.array([0, 2])))
    with pytest.raises(ValueError, match=r"index \[0, 5\)"):
        D.cosine_measures(A, A + 1, pairs=(np.array([0, 5]), np.array([1, 2])))
    with pytest.raises(ValueError, match="equal length"):
        D.cosine_measures(A, A + 1, pairs=(np.array([0, 1]), np.array([1])))
    with pytest.raises(TypeError, match="tuple"):
        D.cosine_measures(A, A + 1, pairs=np.array([[0, 1], [1, 0]]))


def test_cross_object_is_one_for_a_constant_offset():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((30, 5))
    m = D.cosine_measures(A, A + 3.0 * rng.standard_normal(5))
    assert m["cross_object"] == pytest.approx(1.0, abs=1e-12)
    assert m["cross_model"] == pytest.approx(1.0, abs=1e-12)
    assert m["pointwise"] < 0.9


def test_cross_object_of_identical_inputs_is_nan_with_warning():
    A = np.random.default_rng(0).standard_normal((30, 5))
    with pytest.warns(RuntimeWarning, match="cross_object"):
        m = D.cosine_measures(A, A.copy())
    assert np.isnan(m["cross_object"])
    assert m["pointwise"] == pytest.approx(1.0, abs=1e-12)
    assert m["cross_model"] == pytest.approx(1.0, abs=1e-12)


def test_zero_vectors_are_left_out_not_counted_as_zero():
    A = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    B = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # partially undefined is not all-undefined: no warning
        m = D.cosine_measures(A, B)
    assert m["pointwise"] == pytest.approx(1.0)  # row 0 undefined; a zero counted as 0 would give 2/3


@pytest.mark.parametrize("seed", [0, 1])
def test_cosine_measures_invariant_to_common_rotation_and_symmetric(seed):
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((40, 6)), rng.standard_normal((40, 6))
    B = 0.7 * A + B
    m = D.cosine_measures(A, B, seed=seed)
    Q = _orth(6, seed)
    mq = D.cosine_measures(A @ Q, B @ Q, seed=seed)
    mt = D.cosine_measures(B, A, seed=seed)
    for k in D.MEASURES:
        assert mq[k] == pytest.approx(m[k], abs=1e-10), k
    for k in MAIN:
        assert mt[k] == pytest.approx(m[k], abs=1e-10), k


# --------------------------------------------------------------------------- one pair
@pytest.mark.parametrize("seed", [0, 1])
def test_rotated_copy_scores_one_and_cross_object_undefined(seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((300, 20)) @ rng.standard_normal((20, 20))
    Y = X @ _orth(20, seed + 10)
    with pytest.warns(RuntimeWarning, match="cross_object"):
        r = D.displacement_similarity(X, Y, seed=seed)
    assert r.pointwise == pytest.approx(1.0, abs=1e-10)
    assert r.cross_model == pytest.approx(1.0, abs=1e-10)
    assert np.isnan(r.cross_object)
    assert abs(r.pointwise_shuffled) < 0.1 and abs(r.cross_model_shuffled) < 0.1


@pytest.mark.parametrize("seed", [0, 1])
def test_rotated_copy_with_small_noise(seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((400, 16))
    Y = 2.5 * X @ _orth(16, seed) + 1e-3 * rng.standard_normal((400, 16)) - 7.0
    r = D.displacement_similarity(X, Y, seed=seed)
    assert r.pointwise > 0.999 and r.cross_model > 0.999
    assert abs(r.cross_object) < 0.05  # residuals are independent noise: no shared gap direction


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_independent_representations_score_near_zero(seed):
    rng = np.random.default_rng(seed)
    X, Y = rng.standard_normal((400, 60)), rng.standard_normal((400, 90))
    r = D.displacement_similarity(X, Y, n_components=50, seed=seed)
    for k in D.MEASURES:
        assert abs(getattr(r, k)) < 0.05, (k, getattr(r, k))


def test_held_out_evaluation_removes_procrustes_overfit():
    # Independent data with r close to n_train: Procrustes fitted on the same rows it is
    # scored on would look aligned; held out it must not. (Catches fitting on all rows.)
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((160, 60)), rng.standard_normal((160, 60))
    tr, te = metrics_whitening.split_indices(160, seed=0)
    wx, wy = metrics_whitening.fit_whitening(X[tr]), metrics_whitening.fit_whitening(Y[tr])
    Zx, Zy = wx.transform(X[tr]), wy.transform(Y[tr])
    in_sample = D.cosine_measures(Zx, Zy @ metrics_whitening.procrustes(Zy, Zx))["pointwise"]
    held_out = D.displacement_similarity(X, Y, seed=0).pointwise
    assert in_sample > 0.4 and abs(held_out) < 0.1


def test_split_never_leaks_test_rows_into_fits():
    # Train rows independent, test rows an exact copy: a fit that saw test rows would align them.
    rng = np.random.default_rng(1)
    n = 400
    X, Y = rng.standard_normal((n, 20)), rng.standard_normal((n, 20))
    tr, te = metrics_whitening.split_indices(n, seed=5)
    Y[te] = X[te] @ _orth(20, 3)
    r = D.displacement_similarity(X, Y, seed=5)
    assert abs(r.cross_model) < 0.1
    # and changing only test rows leaves the fitted maps alone: result == manual pipeline
    X2, Y2 = _shared_signal(n, 2)
    wx, wy = metrics_whitening.fit_whitening(X2[tr]), metrics_whitening.fit_whitening(Y2[tr])
    q = min(wx.n_components, wy.n_components)
    R = metrics_whitening.procrustes(wy.transform(Y2[tr])[:, :q], wx.transform(X2[tr])[:, :q])
    manual = D.cosine_measures(wx.transform(X2[te])[:, :q], wy.transform(Y2[te])[:, :q] @ R, seed=5)
    assert D.displacement_similarity(X2, Y2, seed=5).measures() == pytest.approx(manual, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_shared_signal_is_found_and_shuffled_control_is_chance(seed):
    X, Y = _shared_signal(600, seed)
    r = D.displacement_similarity(X, Y, n_components=8, seed=seed)
    assert r.n_components == 8 and r.n_train == 300 and r.n_test == 300
    assert r.cross_model > 0.9 and r.pointwise > 0.9
    assert abs(r.cross_model_shuffled) < 0.05 and abs(r.pointwise_shuffled) < 0.05


def test_symmetric_and_invariant_to_similarity_transforms_of_inputs():
    X, Y = _shared_signal(300, 3)
    r = D.displacement_similarity(X, Y, n_components=20, seed=1)
    swapped = D.displacement_similarity(Y, X, n_components=20, seed=1)
    moved = D.displacement_similarity(3.0 * X @ _orth(X.shape[1], 0) + 1.0, Y, n_components=20, seed=1)
    for k in MAIN:
        assert getattr(swapped, k) == pytest.approx(getattr(r, k), abs=1e-10), k
    for k in D.MEASURES:
        assert getattr(moved, k) == pytest.approx(getattr(r, k), abs=1e-8), k


def test_seeded_determinism():
    X, Y = _shared_signal(300, 0)
    a = D.displacement_similarity(X, Y, seed=7)
    assert a == D.displacement_similarity(X, Y, seed=7)
    assert a.cross_model != D.displacement_similarity(X, Y, seed=8).cross_model


def test_torch_input_matches_numpy():
    torch = pytest.importorskip("torch")
    X, Y = _shared_signal(200, 0)
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    a = D.displacement_similarity(torch.from_numpy(X32), torch.from_numpy(Y32).to(torch.bfloat16).float())
    b = D.displacement_similarity(X32, torch.from_numpy(Y32).to(torch.bfloat16).float().numpy())
    assert a == b


@pytest.mark.parametrize(
    "X,Y,match",
    [
        (np.ones((20, 3)), np.ones((21, 3)), r"same n_samples.*\(20, 3\).*\(21, 3\)"),
        (np.ones(20), np.ones((20, 3)), r"2-D.*\(20,\)"),
        (np.full((20, 3), np.nan), np.ones((20, 3)), "non-finite"),
        (np.eye(3), np.eye(3), "too small"),
    ],
)
def test_bad_input_raises_value_error_naming_the_problem(X, Y, match):
    with pytest.raises(ValueError, match=match):
        D.displacement_similarity(X, Y)


@pytest.mark.parametrize("which", ["X", "Y"])
def test_constant_input_gives_nan_with_warning_not_an_error(which):
    # A ViT's CLS token at hidden state 0 is the same vector for every image: nothing to whiten.
    rng = np.random.default_rng(0)
    const, other = np.tile(rng.standard_normal(5), (40, 1)), rng.standard_normal((40, 5))
    X, Y = (const, other) if which == "X" else (other, const)
    with pytest.warns(RuntimeWarning, match=f"{which} is degenerate.*zero variance"):
        r = D.displacement_similarity(X, Y)
    assert all(np.isnan(v) for v in r.measures().values()) and r.n_components == 0
    with pytest.raises(ValueError, match="zero variance"):  # the whitening itself still refuses
        metrics_whitening.fit_whitening(const)


def test_bad_options_raise():
    X, Y = _shared_signal(50, 0)
    with pytest.raises(ValueError, match="n_components"):
        D.displacement_similarity(X, Y, n_components=0)
    with pytest.raises(TypeError, match="n_pairs"):
        D.displacement_similarity(X, Y, n_pairs=2.5)
    with pytest.raises(TypeError, match="real numbers"):
        D.displacement_similarity(X.astype(complex), Y)
    with pytest.raises(TypeError, match="ndarray or torch.Tensor"):
        D.displacement_similarity(X.tolist(), Y)


# --------------------------------------------------------------------------- layer-wise
def test_layerwise_equals_loop_over_pairs():
    rng = np.random.default_rng(0)
    X, Y = _shared_signal(160, 0, dx=24, dy=24)
    XL = np.stack([X, X + rng.standard_normal(X.shape), rng.standard_normal(X.shape)])
    YL = np.stack([Y, np.tanh(Y)])
    opts = dict(n_components=8, test_fraction=0.4, n_pairs=3000, seed=4)
    out = D.displacement_layerwise(XL, YL, **opts)
    assert set(out) == set(D.MEASURES) | {"n_components"}
    for l in range(3):
        for m in range(2):
            r = D.displacement_similarity(XL[l], YL[m], **opts)
            for k in D.MEASURES:
                assert out[k].shape == (3, 2)
                assert out[k][l, m] == getattr(r, k), (k, l, m)
            assert out["n_components"][l, m] == r.n_components
    assert out["cross_model"][0, 0] > 0.9 and abs(out["cross_model"][2, 0]) < 0.1


def test_layerwise_fits_each_layer_once(monkeypatch):
    calls = []
    real = metrics_whitening._fit_whitening
    monkeypatch.setattr(D, "_fit_whitening", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(0)
    D.displacement_layerwise(rng.standard_normal((4, 40, 6)), rng.standard_normal((3, 40, 5)), n_pairs=100)
    assert len(calls) == 4 + 3


def test_layerwise_determinism_and_self_diagonal():
    rng = np.random.default_rng(1)
    XL = rng.standard_normal((3, 80, 10))
    with pytest.warns(RuntimeWarning):  # cross_object of a layer with itself is undefined
        a = D.displacement_layerwise(XL, XL, n_pairs=500, seed=2)
    with pytest.warns(RuntimeWarning):
        b = D.displacement_layerwise(XL, XL, n_pairs=500, seed=2)
    for k in D.MEASURES:
        np.testing.assert_array_equal(a[k], b[k])
    np.testing.assert_allclose(np.diag(a["cross_model"]), 1.0, atol=1e-10)
    assert np.isnan(np.diag(a["cross_object"])).all()


def test_layerwise_constant_layer_is_a_nan_row_and_other_entries_unchanged():
    rng = np.random.default_rng(3)
    X, Y = _shared_signal(120, 0, dx=10, dy=12)
    XL = np.stack([np.tile(X[0], (120, 1)), X])  # layer 0 constant, like a ViT's CLS at "embed"
    YL = np.stack([Y, rng.standard_normal(Y.shape)])
    with pytest.warns(RuntimeWarning, match=r"XL is degenerate.*layers \[0\]"):
        out = D.displacement_layerwise(XL, YL, n_components=8, n_pairs=500)
    for k in D.MEASURES:
        assert np.isnan(out[k][0]).all() and np.isfinite(out[k][1]).all(), k
    np.testing.assert_array_equal(out["n_components"][0], 0)
    ref = D.displacement_layerwise(XL[1:], YL, n_components=8, n_pairs=500)
    for k in D.MEASURES:
        np.testing.assert_array_equal(out[k][1:], ref[k])


def test_layerwise_ignores_zero_padding():
    # Stacks pad narrow layers with zero columns; PCA must give the same whitened space.
    X, Y = _shared_signal(150, 1, dx=10, dy=12)
    padded = np.hstack([X, np.zeros((150, 6))])
    a = D.displacement_layerwise(X[None], Y[None], n_components=6, n_pairs=500)
    b = D.displacement_layerwise(padded[None], Y[None], n_components=6, n_pairs=500)
    for k in D.MEASURES:
        np.testing.assert_allclose(a[k], b[k], atol=1e-10)


def test_layerwise_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"axis 1.*\(2, 30, 4\).*\(2, 31, 4\)"):
        D.displacement_layerwise(np.ones((2, 30, 4)), np.ones((2, 31, 4)))
    with pytest.raises(ValueError, match="3-D"):
        D.displacement_layerwise(np.ones((30, 4)), np.ones((2, 30, 4)))


def test_cosine_kernel_paths_agree(monkeypatch):
    # The cross_object inner products use a Gram matrix when it is cheaper than gathering
    # rows, and pairs are processed in chunks; neither choice may change the result.
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((60, 5)), rng.standard_normal((60, 5))
    B = 0.5 * A + B + 0.3
    i, j, perm = D._draw_pairs(60, 20, seed=0)  # 60**2 > 20 * 5: gather path
    gathered = D._cosine_measures(A, B, i, j, perm)
    tiled = D._cosine_measures(A, B, np.tile(i, 50), np.tile(j, 50), perm)  # Gram path, same pairs
    monkeypatch.setattr(D, "_CHUNK", 7)
    chunked = D._cosine_measures(A, B, i, j, perm)
    assert tiled == pytest.approx(gathered, abs=1e-12)
    assert chunked == pytest.approx(gathered, abs=1e-12)
