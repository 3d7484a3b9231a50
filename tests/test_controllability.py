"""Distillation losses on hand-checked cases, and the student's training moving its loss."""

import numpy as np
import pytest
import torch

from prh_lib.analysis.concepts import controllability as C


def test_mse_hand_case():
    s = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    t = torch.zeros(2, 2)
    assert C.feature_distillation_loss(s, t).item() == pytest.approx(1.25)  # (1 + 4 + 0 + 0) / 4
    with pytest.raises(ValueError, match="shapes differ"):
        C.feature_distillation_loss(s, torch.zeros(2, 3))


def _kl_by_hand(S, T, tau):
    def dist(Z):
        U = Z / np.linalg.norm(Z, axis=1, keepdims=True)
        G = U @ U.T / tau
        P = []
        for i in range(len(Z)):
            row = np.array([G[i, j] for j in range(len(Z)) if j != i])
            e = np.exp(row - row.max())
            P.append(e / e.sum())
        return np.array(P)
    p, q = dist(T), dist(S)
    return float(np.mean(np.sum(p * np.log(p / q), axis=1)))


def test_relation_hand_case_unwhitened():
    T = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    S = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    got = C.relation_distillation_loss(torch.tensor(S), torch.tensor(T), temperature=0.5, whiten=False).item()
    assert got == pytest.approx(_kl_by_hand(S, T, 0.5), rel=1e-9)
    # by hand: row 0 p = softmax(0, -2) = (0.8808, 0.1192), q = softmax(sqrt2, 0) = (0.8044, 0.1956),
    # KL = 0.0209; row 1 both (0.5, 0.5), KL 0; row 2 mirrors row 0; mean 0.0139
    assert got == pytest.approx(0.0139, abs=1e-4)


def test_relation_invariances():
    rng = np.random.default_rng(0)
    T = torch.tensor(rng.normal(size=(40, 5)))
    A = torch.tensor(rng.normal(size=(5, 5)))  # invertible linear map of the same features
    assert C.relation_distillation_loss(T, T).item() == pytest.approx(0.0, abs=1e-10)
    # whitened cosines do not see an invertible linear map (nor a translation): loss ~ 0
    assert C.relation_distillation_loss(T @ A + 3.0, T).item() == pytest.approx(0.0, abs=1e-4)
    # without whitening the map matters
    assert C.relation_distillation_loss(T @ A, T, whiten=False).item() > 1e-3
    with pytest.raises(ValueError, match="row counts"):
        C.relation_distillation_loss(T, T[:5])


def test_batch_whiten_identity_covariance():
    rng = np.random.default_rng(1)
    Z = torch.tensor(rng.normal(size=(500, 4)) @ rng.normal(size=(4, 4)))
    W = C.batch_whiten(Z, eps=0.0)
    cov = (W.T @ W / 499).numpy()
    np.testing.assert_allclose(cov, np.eye(4), atol=1e-8)


def test_training_lowers_each_loss():
    rng = np.random.default_rng(0)
    n = 400
    X = rng.normal(size=(n, 16))
    teacher = np.tanh(X[:, :8] @ rng.normal(size=(8, 8)))
    labels = (X[:, 0] > 0).astype(int)
    init = C.Student(16, 8, hidden=32)
    tt = torch.tensor(C._std(teacher), dtype=torch.float32)
    _, Z0 = C.train_student(X, method="mse", teacher=teacher, init=init, steps=0, seed=0)
    _, Z1 = C.train_student(X, method="mse", teacher=teacher, init=init, steps=300, lr=1e-2, seed=0)
    assert np.mean((Z1 - C._std(teacher)) ** 2) < 0.5 * np.mean((Z0 - C._std(teacher)) ** 2)
    r0 = C.relation_distillation_loss(torch.tensor(Z0, dtype=torch.float32), tt).item()
    _, Z2 = C.train_student(X, method="relation", teacher=teacher, init=init, steps=200, lr=1e-2, batch_size=128)
    r2 = C.relation_distillation_loss(torch.tensor(Z2, dtype=torch.float32), tt).item()
    assert r2 < r0
    m, _ = C.train_student(X, method="finetune", labels=labels, init=init, steps=200, lr=1e-2)
    with torch.no_grad():
        acc = (m.head(m(torch.tensor(C._std(X), dtype=torch.float32))).argmax(1).numpy() == labels).mean()
    assert acc > 0.9
    with pytest.raises(ValueError, match="needs teacher"):
        C.train_student(X, method="mse")
    with pytest.raises(ValueError, match="method must be"):
        C.train_student(X, method="kd")
