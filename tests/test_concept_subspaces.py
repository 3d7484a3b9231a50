import numpy as np
import pytest

from prh_lib.analysis.concepts import subspaces as CS


def test_rbf_hand_case():
    K = CS.rbf_kernel(np.array([[0.0], [1.0]]), sigma=1.0)
    np.testing.assert_allclose(K, [[1, np.exp(-0.5)], [np.exp(-0.5), 1]])


def test_hsic_dependent_vs_independent():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    assert CS.hsic_rbf(X, X) == pytest.approx(1.0)
    dep = CS.hsic_rbf(X, X[:, :1] ** 2)  # nonlinear dependence (0.10 here)
    ind = CS.hsic_rbf(X, rng.normal(size=(200, 2)))
    assert dep > 0.07 > 0.045 > ind  # independent: 0.03 here
    assert CS.hsic_rbf(X, X[:, :1]) > 0.4
    with pytest.raises(ValueError, match="rows"):
        CS.hsic_rbf(X, X[:5])


def test_linear_probe_separable_and_baseline():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 50)
    X = rng.normal(size=(100, 4)) + 4 * y[:, None]
    acc, base = CS.linear_probe(X, y)
    assert acc > 0.95 and base == pytest.approx(0.5)
