"""Tests for prh_lib.analysis.displacement.consensus (shared/private decomposition, arXiv:2609.24209)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from prh_lib.analysis.displacement import consensus as C
from prh_lib.metrics import displacement as D
from prh_lib.metrics import _whitening as metrics_whitening


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # tiny matrices: extra BLAS threads only spin-wait on a shared CPU (a test-speed choice, not a check)
    with threadpool_limits(1):
        yield


def _planted(n, M, seed, *, n_sh=4, n_pr=4, noise=0.05):
    """M models sharing latent S (n, n_sh), each with its own private latent (n, n_pr)."""
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((n, n_sh))
    feats = []
    for m in range(M):
        d = 20 + 5 * m
        L = np.hstack([S, rng.standard_normal((n, n_pr))])
        feats.append(L @ rng.standard_normal((n_sh + n_pr, d)) + noise * rng.standard_normal((n, d)))
    return feats


@pytest.mark.parametrize("M", [2, 3])
def test_consensus_recovers_planted_shared_subspace(M):
    feats = _planted(600, M, seed=M)
    res = C.consensus_subspaces(feats, n_components=8, n_shared=4, n_private=4, seed=0)
    ev = res.eigenvalues
    assert ev.shape == (8,) and np.all(np.diff(ev) <= 1e-12) and np.all(np.abs(ev) <= 1 + 1e-9)
    assert ev[:4].min() > 0.95 and np.abs(ev[4:]).max() < 0.2
    for basis in (res.shared_basis, res.private_basis, res.eigenvectors):
        np.testing.assert_allclose(basis.T @ basis, np.eye(basis.shape[1]), atol=1e-10)
    np.testing.assert_allclose(res.rotations[0], np.eye(8), atol=1e-12)
    for q in res.rotations:
        np.testing.assert_allclose(q.T @ q, np.eye(8), atol=1e-10)
    te = res.test_idx
    sh = C.project([f[te] for f in res.features], res.shared_basis)
    pr = C.project([f[te] for f in res.features], res.private_basis)
    assert sh[0].shape == (300, 4)
    assert D.cosine_measures(sh[0], sh[1])["cross_model"] > 0.95
    assert abs(D.cosine_measures(pr[0], pr[1])["cross_model"]) < 0.15


def test_consensus_two_models_matches_pairwise_procrustes():
    feats = _planted(300, 2, seed=5, noise=0.5)
    res = C.consensus_subspaces(feats, n_components=10, n_shared=2, seed=1)
    tr = res.train_idx
    Z0 = res.whitenings[0].transform(feats[0][tr])[:, :10]
    Z1 = res.whitenings[1].transform(feats[1][tr])[:, :10]
    np.testing.assert_allclose(res.rotations[1], metrics_whitening.procrustes(Z1, Z0), atol=1e-8)
    # S_cross by its definition, from the aligned training features
    A0, A1 = res.features[0][tr], res.features[1][tr]
    S = (A0.T @ A1 + A1.T @ A0) / (2 * (len(tr) - 1))
    np.testing.assert_allclose(res.eigenvalues, np.sort(np.linalg.eigvalsh(S))[::-1], atol=1e-10)


def test_consensus_rotations_are_a_generalized_procrustes_fixed_point():
    # Gower (1975): at convergence each model's rotation is the Procrustes map onto the mean.
    feats = _planted(400, 3, seed=2, noise=0.5)
    res = C.consensus_subspaces(feats, n_components=10, n_shared=2, seed=0)
    tr = res.train_idx
    G = sum(f[tr] for f in res.features) / 3
    for m, w in enumerate(res.whitenings):
        Z = w.transform(feats[m][tr])[:, :10]
        np.testing.assert_allclose(metrics_whitening.procrustes(Z, G), res.rotations[m], atol=1e-3)


def test_consensus_ignores_test_rows_and_is_deterministic():
    feats = _planted(200, 3, seed=0)
    a = C.consensus_subspaces(feats, n_components=8, n_shared=3, seed=2)
    changed = [f.copy() for f in feats]
    for f in changed:
        f[a.test_idx] = np.random.default_rng(9).standard_normal((len(a.test_idx), f.shape[1]))
    b = C.consensus_subspaces(changed, n_components=8, n_shared=3, seed=2)
    np.testing.assert_array_equal(a.eigenvalues, b.eigenvalues)
    np.testing.assert_array_equal(a.shared_basis, b.shared_basis)
    c = C.consensus_subspaces(feats, n_components=8, n_shared=3, seed=2)
    np.testing.assert_array_equal(a.eigenvectors, c.eigenvectors)


def test_consensus_and_project_reject_bad_input():
    feats = _planted(100, 2, seed=0)
    with pytest.raises(ValueError, match="at least 2 models"):
        C.consensus_subspaces(feats[:1])
    with pytest.raises(ValueError, match="same n_samples"):
        C.consensus_subspaces([feats[0], feats[1][:-1]])
    with pytest.raises(ValueError, match="exceeds.*r=8"):
        C.consensus_subspaces(feats, n_components=8, n_shared=5)
    with pytest.raises(TypeError, match="list"):
        C.consensus_subspaces(np.stack([feats[0], feats[0]]))
    with pytest.raises(ValueError, match="k must be in"):
        C.subspace_alignment(C.consensus_subspaces(feats, n_components=4, n_shared=1), k=50)
    with pytest.raises(ValueError, match="basis has shape"):
        C.project(np.ones((4, 3)), np.eye(4)[:, :2])


def test_subspace_alignment_reports_full_shared_private():
    feats = _planted(400, 3, seed=1)
    res = C.consensus_subspaces(feats, n_components=8, n_shared=4, n_private=4, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rep = C.subspace_alignment(res, k=10, n_pairs=2000)
    assert set(rep) == {"full", "shared", "private"}
    for sub in rep.values():
        for mat in sub.values():
            assert mat.shape == (3, 3) and np.isnan(np.diag(mat)).all()
            np.testing.assert_array_equal(mat, mat.T)
    assert rep["shared"]["cross_model"][0, 1] > 0.95 > rep["full"]["cross_model"][0, 1]
    assert abs(rep["private"]["cross_model"][0, 1]) < 0.15
    assert rep["shared"]["mutual_knn"][0, 1] > rep["full"]["mutual_knn"][0, 1] > rep["private"]["mutual_knn"][0, 1]


def test_cross_covariance_matches_its_definition_and_is_symmetric():
    rng = np.random.default_rng(0)
    Z = [rng.standard_normal((30, 4)) for _ in range(3)]
    S = C.cross_covariance(Z)
    ref = sum(Z[a].T @ Z[b] + Z[b].T @ Z[a] for a in range(3) for b in range(3) if a != b) / (2 * 6 * 29)
    np.testing.assert_allclose(S, ref, atol=1e-12)
    np.testing.assert_array_equal(S, S.T)
    np.testing.assert_allclose(C.cross_covariance([Z[0], Z[0]]), Z[0].T @ Z[0] / 29, atol=1e-12)
    with pytest.raises(ValueError, match="same shape"):
        C.cross_covariance([Z[0], Z[1][:, :3]])
    with pytest.raises(ValueError, match="at least 2 models"):
        C.cross_covariance(Z[:1])


def test_consensus_eigenvalues_are_those_of_cross_covariance_on_training_rows():
    feats = _planted(300, 3, seed=4, noise=0.3)
    res = C.consensus_subspaces(feats, n_components=8, n_shared=2, seed=0)
    S = C.cross_covariance([f[res.train_idx] for f in res.features])
    np.testing.assert_allclose(res.eigenvectors.T @ S @ res.eigenvectors, np.diag(res.eigenvalues), atol=1e-10)


def test_subspace_alignment_random_control_sits_between_shared_and_private():
    feats = _planted(400, 2, seed=3, n_sh=4, n_pr=4, noise=0.1)
    res = C.consensus_subspaces(feats, n_components=8, n_shared=4, n_private=4, seed=0)
    rep = C.subspace_alignment(res, k=10, n_pairs=2000, n_random=10)
    assert set(rep) == {"full", "shared", "private", "random"}
    cm = {s: rep[s]["cross_model"][0, 1] for s in rep}
    # half of the 8 whitened dimensions are shared: a random 4-D subspace sees about half of them
    assert cm["shared"] > 0.9 and abs(cm["private"]) < 0.15
    assert 0.2 < cm["random"] < 0.8
    again = C.subspace_alignment(res, k=10, n_pairs=2000, n_random=10)
    np.testing.assert_array_equal(again["random"]["cross_model"], rep["random"]["cross_model"])
    with pytest.raises(ValueError, match="n_random"):
        C.subspace_alignment(res, n_random=-1)
