"""Metric functions on bad input (issue 27, item 7): NaN/inf rows, empty or 1-D arrays, too few samples,
X and Y with different N, k out of range or saturating, float16. Each raises an error naming the problem,
never returns a silent number; float16 is handled exactly (promoted to float32), which is tested too."""

import re

import numpy as np
import pytest

from prh_lib import metrics as M
import prh_lib.stats as S

RNG = np.random.default_rng(27)
X = RNG.standard_normal((20, 8)).astype(np.float32)
Y = RNG.standard_normal((20, 6)).astype(np.float32)


def _kw(name, k=3):
    return {"k": k} if name in M.KNN_METRICS else {}


def _with(a, value, at=(3, 2)):
    a = a.copy()
    a[(...,) + at] = value
    return a


FAULTS = {
    # fault: (X, Y, error type, pattern the message must match)
    "nan row": (_with(X, np.nan), Y, ValueError, r"NaN"),
    "inf row": (X, _with(Y, np.inf), ValueError, r"infinite"),
    "empty": (X[:0], Y[:0], ValueError, r"empty axis|non-empty"),
    "no features": (X[:, :0], Y, ValueError, r"empty axis"),
    "1-D": (X[:, 0], Y[:, 0], ValueError, r"2-D|3-D"),
    "different N": (X, Y[:15], ValueError, r"same number of samples.*20, 8\).*15, 6\)"),
    "one sample": (X[:1], Y[:1], ValueError, r"at least \d samples|k must be in"),
    "two samples": (X[:2], Y[:2], ValueError, r"at least \d samples|k must be in|is 1 whatever"),
    "list input": (X.tolist(), Y, TypeError, r"numpy.ndarray or torch.Tensor"),
    "complex": (X.astype(np.complex64), Y, TypeError, r"real numbers"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("name", list(M.METRICS))
def test_pairwise_metric_refuses_bad_input(name, fault):
    a, b, error, pattern = FAULTS[fault]
    with pytest.raises(error, match=pattern):
        M.METRICS[name](a, b, **_kw(name, k=1 if fault == "two samples" else 3))


@pytest.mark.parametrize("fault", ["nan row", "different N", "empty", "two samples"])
@pytest.mark.parametrize("name", list(M.LAYERWISE_METRICS))
def test_layerwise_metric_refuses_bad_input(name, fault):
    a, b, error, pattern = FAULTS[fault]
    with pytest.raises(error, match=pattern):
        M.LAYERWISE_METRICS[name](np.stack([a, a]), np.stack([b, b]),
                                  **_kw(name, k=1 if fault == "two samples" else 3))


@pytest.mark.parametrize("name", list(M.KNN_METRICS))
@pytest.mark.parametrize("k", [0, 20, 25, -1])
def test_k_out_of_range_names_k_and_n(name, k):
    with pytest.raises(ValueError, match=rf"k must be in \[1, 19\] for n_samples=20; got k={k}"):
        M.METRICS[name](X, Y, k=k)


@pytest.mark.parametrize("name", ["mutual_knn", "jaccard_knn", "cycle_knn"])
def test_k_of_n_minus_one_is_refused_where_every_score_would_be_1(name):
    message = re.escape(f"{name} with k=19 and n_samples=20 is 1 whatever X and Y are")
    with pytest.raises(ValueError, match=message):
        M.METRICS[name](X, Y, k=19)
    with pytest.raises(ValueError, match=message):
        M.LAYERWISE_METRICS[name](X[None], Y[None], k=19)
    with pytest.raises(ValueError, match=message):
        S.permutation_test(X, Y, metric=name, k=19, n_permutations=20)
    score = M.METRICS[name](X, Y, k=18)  # the largest informative k still scores
    assert 0 < score <= 1 and (score < 1 or name == "cycle_knn")  # cycle k-NN nears 1 before n - 1


def test_cknna_at_k_n_minus_one_stays_defined():
    assert np.isfinite(M.cknna(X, Y, k=19))


@pytest.mark.parametrize("name", ["cka_linear", "cka_rbf"])
def test_cka_of_two_samples_is_refused_not_1(name):
    with pytest.raises(ValueError, match=rf"{name} needs at least 3 samples; got n_samples=2"):
        M.METRICS[name](X[:2], Y[:2])
    with pytest.raises(ValueError, match="at least 3 samples"):
        S.permutation_test(X[:2], Y[:2], metric=name, n_permutations=20)
    assert np.isfinite(M.METRICS[name](X[:3], Y[:3]))


@pytest.mark.parametrize("name", list(M.METRICS))
def test_float16_is_computed_exactly_in_float32(name):
    """float16 input is promoted exactly: the score is that of the same values in float32."""
    a, b = (X * 7).astype(np.float16), Y.astype(np.float16)
    got = M.METRICS[name](a, b, **_kw(name))
    assert got == M.METRICS[name](a.astype(np.float32), b.astype(np.float32), **_kw(name))


def test_float16_overflow_is_reported_as_infinite_values():
    with np.errstate(over="ignore"):
        big = X.astype(np.float16) * np.float16(30000)  # > 65504 overflows to inf in float16
    with pytest.raises(ValueError, match=r"infinite values"):
        M.cka_linear(big, Y)
    with pytest.raises(ValueError, match=r"infinite values"):
        M.mutual_knn(big, Y, k=3)
