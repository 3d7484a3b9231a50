"""PCA compression sweeps (prh_lib.pages.sec3_1b_pca): exactness at full rank, scikit-learn agreement, validation."""

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.decomposition import PCA

from prh_lib.pages import sec3_1b_pca as compression
from prh_lib.analysis.compression import pca as compression_pca
from prh_lib.analysis.compression import study as compression_study
from prh_lib.analysis import AlignmentMatrix
from prh_lib.extract import FeatureMismatchError, LayerFeatures
from prh_lib.metrics import mutual_knn


def _pair(seed, n=60, dx=12, dy=20, shared=4, noise=0.5):
    """Two views of the same latent structure: X and Y share ``shared`` latent factors plus their own noise."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, shared))
    X = z @ rng.normal(size=(shared, dx)) + noise * rng.normal(size=(n, dx)) + 0.3
    Y = z @ rng.normal(size=(shared, dy)) + noise * rng.normal(size=(n, dy)) - 0.2
    return X.astype(np.float32), Y.astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [(60, 12, 20), (30, 50, 8)])  # N > d and N < d
@pytest.mark.parametrize("side", ["x", "y", "both"])
def test_full_rank_reproduces_uncompressed_score_exactly(seed, shape, side):
    n, dx, dy = shape
    X, Y = _pair(seed, n, dx, dy)
    s = compression_study.pca_sweep(X, Y, compress=side, k=5)
    plain = mutual_knn(X, Y, k=5)
    assert s.reference == plain
    assert s.scores[-1] == plain  # the last default grid point is min(N, d): full rank
    assert s.dims[-1] == min(n, dy if side == "y" else dx)
    assert s.dims_y[-1] == min(n, dy)  # y whole, or compressed to its full rank


@pytest.mark.parametrize("seed", [0, 3])
def test_pca_space_full_rank_equals_centred_features(seed):
    X, Y = _pair(seed)
    s = compression_study.pca_sweep(X, Y, compress="x", k=5, space="pca")
    centred = mutual_knn(X - X.astype(np.float64).mean(0), Y, k=5)
    assert s.reference == pytest.approx(centred, abs=0)
    assert s.scores[-1] == pytest.approx(centred, abs=1e-12)
    # centring changes cosine neighbourhoods, so the two spaces are genuinely different references
    assert compression_study.pca_sweep(X, Y, compress="x", k=5, dims=[12]).reference == mutual_knn(X, Y, k=5)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("space", ["original", "pca"])
def test_sweep_equals_a_plain_loop_over_sklearn_fits(seed, space):
    """Each grid point equals a separate scikit-learn PCA(n_components=m) fit, scored with mutual_knn."""
    X, Y = _pair(seed)
    dims = [1, 2, 3, 5, 8, 12]
    s = compression_study.pca_sweep(X, Y, compress="x", dims=dims, k=5, space=space)
    for m, got in zip(dims, s.scores):
        p = PCA(n_components=m, svd_solver="full").fit(X.astype(np.float64))
        Z = p.transform(X.astype(np.float64))
        proj = p.inverse_transform(Z) if space == "original" else Z
        assert got == mutual_knn(proj.astype(np.float32), Y, k=5), m


def test_slicing_a_full_fit_equals_a_truncated_fit():
    X, _ = _pair(4, n=40, dx=16)
    full = compression_pca.fit_pca(X)
    for m in (1, 3, 7):
        part = compression_pca.fit_pca(X, n_components=m)
        np.testing.assert_allclose(full.transform(X.astype(np.float64))[:, :m], part.transform(X.astype(np.float64)),
                                   atol=1e-9)
    # deterministic signs: two fits give the same components bit for bit
    np.testing.assert_array_equal(full.components_, compression_pca.fit_pca(X).components_)


def test_compression_to_the_rank_of_the_signal_keeps_the_score():
    """Exactly rank-3 features (plus a mean) are reconstructed exactly from 3 components."""
    rng = np.random.default_rng(5)
    z = rng.normal(size=(50, 3))
    X = (z @ rng.normal(size=(3, 10)) + 1.0).astype(np.float64)
    Y = z @ rng.normal(size=(3, 7)) + rng.normal(scale=0.3, size=(50, 7))
    s = compression_study.pca_sweep(X, Y, compress="x", dims=[1, 2, 3, 4, 10], k=5)
    np.testing.assert_allclose(s.scores[2:], s.reference, atol=0.02)  # float32 rounding of the reconstruction
    assert s.variance[2] == pytest.approx(1.0, abs=1e-9)
    assert s.scores[0] < s.reference  # one component is not enough


def test_variance_sweep_reaches_its_targets():
    X, Y = _pair(6)
    targets = [0.1, 0.5, 0.9, 1.0]
    s = compression_study.pca_sweep(X, Y, compress="y", variance=targets, k=5)
    assert np.all(s.variance >= np.array(targets) - 1e-9)
    assert np.all(np.diff(s.dims) >= 0)
    ratio = compression_pca.fit_pca(Y).explained_variance_ratio_
    for m, t in zip(s.dims, targets):  # the smallest such m
        assert m == 1 or np.cumsum(ratio)[m - 2] < t - 1e-9
    np.testing.assert_array_equal(s.target_variance, targets)
    assert s.scores[-1] == s.reference


def test_components_for_variance_hand_example():
    ratio = [0.5, 0.3, 0.2]
    got = compression_pca.components_for_variance(ratio, [0.1, 0.5, 0.6, 0.8, 0.81, 1.0])
    np.testing.assert_array_equal(got, [1, 1, 2, 2, 3, 3])
    with pytest.raises(ValueError, match="fractions"):
        compression_pca.components_for_variance(ratio, [0.0])
    with pytest.raises(ValueError, match="fractions"):
        compression_pca.components_for_variance(ratio, [1.2])
    with pytest.raises(ValueError, match="non-increasing"):
        compression_pca.components_for_variance([0.2, 0.8], [0.5])


def test_too_many_components_is_an_error_not_a_silent_cap():
    X, Y = _pair(0, n=30, dx=12, dy=8)
    with pytest.raises(ValueError, match=r"\[1, 12\]"):
        compression_pca.fit_pca(X, n_components=13)
    with pytest.raises(ValueError, match="out of range"):
        compression_study.pca_sweep(X, Y, compress="x", dims=[5, 13], k=5)
    with pytest.raises(ValueError, match="out of range"):
        compression_study.pca_sweep(X, Y, compress="y", dims=[10], k=5)  # Y has only 8 features
    with pytest.raises(ValueError, match="out of range"):
        compression_study.pca_sweep(X, Y, compress="both", dims=[13], k=5)
    both = compression_study.pca_sweep(X, Y, compress="both", dims=[4, 10, 12], k=5)  # documented cap on the narrower Y
    np.testing.assert_array_equal(both.dims, [4, 10, 12])
    np.testing.assert_array_equal(both.dims_y, [4, 8, 8])
    assert both.scores[-1] == mutual_knn(X, Y, k=5)
    with pytest.raises(ValueError, match="out of range"):
        compression_study.pca_sweep(X, Y, compress="x", dims=[0], k=5)
    with pytest.raises(ValueError, match=r"\[1, 30\]"):
        compression_pca.fit_pca(np.ones((30, 40)) + np.eye(30, 40), n_components=31)  # capped by N as well


@pytest.mark.parametrize("kwargs, match", [
    ({"compress": "z"}, "compress"),
    ({"space": "raw"}, "space"),
    ({"dims": [2], "variance": [0.5]}, "either"),
    ({"k": 60}, "k"),
])
def test_bad_options_raise(kwargs, match):
    X, Y = _pair(0)
    with pytest.raises(ValueError, match=match):
        compression_study.pca_sweep(X, Y, **kwargs)


def test_different_sample_counts_raise():
    X, Y = _pair(0)
    with pytest.raises(ValueError, match="same number of samples"):
        compression_study.pca_sweep(X, Y[:-1])


def test_default_dims_grid():
    g = compression_pca.default_dims(239)
    assert g[0] == 1 and g[-1] == 239 and np.all(np.diff(g) > 0)
    np.testing.assert_array_equal(g[:32], np.arange(1, 33))
    np.testing.assert_array_equal(compression_pca.default_dims(5), [1, 2, 3, 4, 5])
    assert len(g) < 60


def test_min_dims():
    s = compression_study.CompressionSweep(np.array([1, 2, 3, 4]), np.array([9] * 4), np.array([.2, .5, .8, 1.]),
                                           np.array([0.1, 0.19, 0.18, 0.2]), 0.2, None, "x", "original", 5, 40, (4, 9))
    assert s.min_dims(0.95) == 2  # 0.19 >= 0.95 * 0.2
    assert s.min_dims(0.5) == 1
    assert s.min_dims(1.0) == 4
    s2 = compression_study.CompressionSweep(np.array([1, 2]), np.array([9] * 2), np.array([.5, .9]), np.array([0.1, 0.15]),
                                            0.2, None, "x", "original", 5, 40, (2, 9))
    assert s2.min_dims(0.95) is None
    assert s.chance == pytest.approx(5 / 39)


def _features(X3, name):
    L, N, _ = X3.shape
    return LayerFeatures(torch.as_tensor(X3, dtype=torch.float32), tuple(f"layer.{i}" for i in range(L)),
                         tuple(f"s{i}" for i in range(N)), {"model": name})


def test_layer_pairs_and_tables():
    X, Y = _pair(7)
    rng = np.random.default_rng(7)
    x = _features(np.stack([rng.normal(size=X.shape), X]), "vis")
    y = _features(np.stack([Y, rng.normal(size=Y.shape), Y[:, ::-1].copy()]), "lang")
    scores = np.array([[0.1, 0.2, 0.1], [0.5, 0.1, 0.4]])
    m = AlignmentMatrix(scores, x.layer_labels, y.layer_labels, "vis", "lang", "mutual_knn")
    pairs = compression_study.select_layer_pairs(m)
    assert pairs == {"peak": (1, 0), "final": (1, 2)}
    with pytest.raises(ValueError, match="layer role"):
        compression_study.select_layer_pairs(m, ["middle"])
    sweeps = compression_study.compress_layer_pairs(x, y, pairs, k=5, variance=[0.5, 1.0])
    assert len(sweeps) == 2 * 2 * 2  # roles x sides x (dims, variance)
    table = compression.summary_table(sweeps)
    assert list(table.index.names) == ["pair", "layers", "compress"]
    assert len(table) == 4
    assert (table["min dims (95%)"] <= table["max dims"]).all()
    assert table.loc[("vis × lang", "peak", "x"), "uncompressed"] == mutual_knn(X, Y, k=5)
    assert "relative @ 50% var" in table
    wrong = LayerFeatures(y.values, y.layer_labels, tuple(reversed(y.sample_ids)), {"model": "lang"})
    with pytest.raises(FeatureMismatchError):
        compression_study.compress_layer_pairs(x, wrong, pairs, k=5)


def test_relative_intervals_pair_the_compressed_and_uncompressed_resamples():
    """Full rank reproduces the uncompressed score on every resample: relative 1 with a zero-width interval; the
    interval equals the centred interval of the log ratio of two half-sampling bootstrap_ci runs with one seed."""
    from prh_lib.analysis.compression.study import probe_dims, relative_intervals
    from prh_lib.stats import bootstrap_ci

    rng = np.random.default_rng(0)
    Z = rng.normal(size=(80, 4))
    X = Z @ rng.normal(size=(4, 12)) + 0.3 * rng.normal(size=(80, 12))
    Y = Z @ rng.normal(size=(4, 9)) + 0.3 * rng.normal(size=(80, 9))
    full = relative_intervals(X, Y, compress="x", dims={"full": 12}, k=5, n_boot=30, seed=1)[0]
    assert full["relative"] == pytest.approx(1.0) and full["low"] == pytest.approx(1.0) and full["high"] == pytest.approx(1.0)
    (two,) = relative_intervals(X, Y, compress="y", dims={"2": 2}, k=5, n_boot=30, seed=1)
    from prh_lib.analysis.compression.study import _Side

    Yc = _Side(Y, "Y").projected([2], "original")[0]
    a = bootstrap_ci(X, Yc, k=5, n_boot=30, seed=1, method="subsample", fraction=0.5)
    b = bootstrap_ci(X, Y, k=5, n_boot=30, seed=1, method="subsample", fraction=0.5)
    ratio = a.replicates / b.replicates
    q_lo, q_med, q_hi = np.quantile(np.log(ratio[np.isfinite(ratio) & (ratio > 0)]), [0.025, 0.5, 0.975])
    est = np.log(a.estimate / b.estimate)  # centred interval of the log ratio: the spread placed on the estimate
    assert (two["low"], two["high"]) == pytest.approx((np.exp(est + q_lo - q_med), np.exp(est + q_hi - q_med)))
    assert two["relative"] == pytest.approx(a.estimate / b.estimate)
    dims = probe_dims(X)
    assert dims["share of rank"] == max(1, round(100 / 1023 * 12)) and dims["8 dims"] == 8
    with pytest.raises(ValueError, match="one side"):
        relative_intervals(X, Y, compress="both")


def test_pca_claims_read_intervals_by_majority():
    from prh_lib.pages.sec3_1b_pca import _majority

    # three rows: two clearly above 0.95, one below -> holds; if the clear ones overlap 0.95 -> inconclusive
    assert _majority([(0.99, 0.97, 1.0), (0.98, 0.96, 1.0), (0.9, 0.85, 0.95)], 0.95, ">")[:2] == (True, True)
    assert _majority([(0.99, 0.93, 1.0), (0.98, 0.96, 1.0), (0.9, 0.85, 0.95)], 0.95, ">")[:2] == (True, False)
    # symmetric: the estimates give no majority, but two intervals reach 0.95, so a majority is still possible
    assert _majority([(0.99, 0.97, 1.0), (0.9, 0.8, 0.99), (0.9, 0.85, 0.95)], 0.95, ">")[:2] == (True, False)
    # two rows wholly below: no majority is possible -> differs
    assert _majority([(0.99, 0.97, 1.0), (0.9, 0.8, 0.94), (0.9, 0.85, 0.94)], 0.95, ">")[:2] == (False, True)
    assert _majority([(0.7, 0.6, 0.75), (0.7, 0.6, 0.85)], 0.8, "<")[:2] == (True, False)


@pytest.mark.parametrize("n, d", [(1000, 384), (1000, 576), (239, 384), (60, 8)])
def test_the_share_of_rank_dimension_has_one_source_for_figure_table_and_verdict(n, d):
    """3.1/pca-100 is read at one dimension: the intervals' probe (analysis), the figure's mark and the table's
    column all use the page's share_dims of the compressed side's rank."""
    from prh_lib.analysis.compression.study import probe_dims
    from prh_lib.pages import sec3_1b_pca as page

    X = np.random.default_rng(0).normal(size=(n, d))
    rank = min(n, d)
    assert probe_dims(X)["share of rank"] == page.share_dims(rank)
    (x_at, y_at, label), _ = page.claim_marks("dims", n=n)
    assert x_at(rank) == page.share_dims(rank) and y_at == 0.9 and "9.8%" in label
    if (n, d) == (1000, 384):
        assert page.share_dims(rank) == 38  # not 98 (= 9.8 % of N − 1), the figure's old mark


def test_pca_rules_figure_marks_and_verdicts_read_one_set_of_thresholds(monkeypatch):
    """Change a threshold in one place: the rule's text, the figure's mark and the verdict's reading all follow."""
    from prh_lib.pages import sec3_1b_pca as page

    for cid, (_, need, _) in page.THRESHOLDS.items():
        assert f"{need * 100:g} %" in page.RULES[cid]
    marks = {label.split(":")[0]: y for _, y, label in page.claim_marks("variance", n=1000) +
             page.claim_marks("dims", n=1000)}
    assert marks == {cid: t[1] for cid, t in page.THRESHOLDS.items()}
    seen = []
    monkeypatch.setattr(page, "_majority", lambda vals, thr, side: seen.append((thr, side)) or (True, True, 1, 1))
    table = pd.DataFrame([{"dataset": "d", "layers": "peak", "compressed": "smollm2-135m", "pair": "v × smollm2-135m",
                           "rel_var": 0.9, "rel_share": 0.9, "rel_low": 0.7, "dims_share": 38, "max_dims": 384,
                           "min dims (90%)": 20, "min dims (95%)": 40}])
    page.findings(table, dataset="d")
    assert seen == [(t[1], t[2]) for t in page.THRESHOLDS.values()]
