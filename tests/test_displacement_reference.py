"""Tests for prh_lib.analysis.displacement.procedures (the public reference code's procedure, arXiv:2609.24209)."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch
from threadpoolctl import threadpool_limits

matplotlib.use("Agg")

from prh_lib.analysis.displacement import procedures as dr, reference as dref  # noqa: E402
from prh_lib.extract import LayerFeatures  # noqa: E402
from prh_lib.metrics import displacement as D  # noqa: E402
from prh_lib.metrics import _whitening as metrics_whitening

MAIN = ("pointwise", "cross_model", "cross_object")


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # tiny matrices: extra BLAS threads only spin-wait on a shared CPU (a test-speed choice, not a check)
    with threadpool_limits(1):
        yield


# --------------------------------------------------------------------------- the steps
def test_reference_split_is_the_seeded_permutation_cut_after_train_size():
    # frozen from np.random.default_rng(42).permutation(10) (NumPy PCG64)
    train, ev = dref.reference_split(10, train_size=4, seed=42)
    np.testing.assert_array_equal(train, [5, 6, 0, 7])
    np.testing.assert_array_equal(ev, [3, 2, 4, 9, 1, 8])  # permutation order, not sorted
    a, b = dref.reference_split(101, train_size=30, seed=3)
    assert len(a) == 30 and len(b) == 71 and set(a) | set(b) == set(range(101)) and not set(a) & set(b)
    with pytest.raises(ValueError, match="train_size must be in"):
        dref.reference_split(10, train_size=9)
    with pytest.raises(ValueError, match="train_size must be in"):
        dref.reference_split(10)  # the command-line default of 10 000 does not fit 10 samples


def _independent_whitening(X, k):
    """Top-k whitening from NumPy's eigendecomposition of the covariance (ddof=1): (X - mu) W, mu W."""
    mu = X.mean(0)
    evals, evecs = np.linalg.eigh(np.cov(X, rowvar=False))
    W = evecs[:, ::-1][:, :k] / np.sqrt(evals[::-1][:k])
    return (X - mu) @ W, mu @ W


@pytest.mark.parametrize("seed", [0, 1])
def test_reference_whitening_matches_an_independent_eigendecomposition(seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((200, 12)) @ rng.standard_normal((12, 12)) + 5.0 * rng.standard_normal(12)
    Z, m = dref.reference_whitening(X, n_components=6, seed=seed)
    Zi, mi = _independent_whitening(X, 6)
    # PCA axes are defined up to sign: compare sign-free quantities
    np.testing.assert_allclose(Z @ Z.T, Zi @ Zi.T, atol=1e-8)
    np.testing.assert_allclose((Z + m) @ (Z + m).T, (Zi + mi) @ (Zi + mi).T, atol=1e-7)
    assert m @ m == pytest.approx(mi @ mi, rel=1e-9)
    np.testing.assert_allclose(Z.mean(0), 0, atol=1e-10)
    np.testing.assert_allclose(np.cov(Z, rowvar=False), np.eye(6), atol=1e-10)


def test_reference_whitening_on_chosen_rows_centres_and_whitens_those_rows():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((120, 10)) + 2.0
    rows = np.arange(0, 120, 2)
    Z, m = dref.reference_whitening(X, n_components=5, fit_rows=rows)
    np.testing.assert_allclose(Z[rows].mean(0), 0, atol=1e-10)
    np.testing.assert_allclose(np.cov(Z[rows], rowvar=False), np.eye(5), atol=1e-10)
    assert np.abs(Z[1::2].mean(0)).max() > 1e-3  # the other rows are not centred by it


def test_reference_whitening_rejects_what_the_reference_rejects():
    X = np.random.default_rng(0).standard_normal((50, 8))
    with pytest.raises(ValueError, match="fewer than the 8 features"):
        dref.reference_whitening(X, n_components=8)
    with pytest.raises(ValueError, match="exceeds the 5 rows"):
        dref.reference_whitening(X, n_components=6, fit_rows=np.arange(5))
    with pytest.raises(ValueError, match="zero variance"):
        dref.reference_whitening(np.ones((20, 6)), n_components=2)


def test_predecessor_pairs():
    i, j = dref.predecessor_pairs(4)
    np.testing.assert_array_equal(i, [0, 1, 2, 3])
    np.testing.assert_array_equal(j, [3, 0, 1, 2])


def test_predicted_measures_hand_worked():
    p = dref.predicted_measures(0.5, [3.0, 0.0], [0.0, 4.0], norm2_a=9.0)
    # c = 0.5 * 9 = 4.5; m_a.m_b = 0; |m_a|^2 = 9, |m_b|^2 = 16; |m_a - m_b|^2 = 25
    assert p["pointwise"] == pytest.approx(4.5 / np.sqrt(18 * 25), abs=1e-12)
    assert p["cross_model"] == 0.5
    assert p["cross_object"] == pytest.approx(25 / (18 - 9 + 25), abs=1e-12)
    # the forms with r: (r rho + m_a.m_b) / sqrt((r + |m_a|^2)(r + |m_b|^2)), |dm|^2 / (2 r (1 - rho) + |dm|^2)
    r, rho, ma, mb = 32.0, 0.4, np.array([2.0, 1.0, 0.0]), np.array([1.0, -1.0, 3.0])
    q = dref.predicted_measures(rho, ma, mb, norm2_a=r, norm2_b=r)
    assert q["pointwise"] == pytest.approx((r * rho + ma @ mb) / np.sqrt((r + ma @ ma) * (r + mb @ mb)))
    assert q["cross_object"] == pytest.approx(((ma - mb) @ (ma - mb)) / (2 * r * (1 - rho) + (ma - mb) @ (ma - mb)))
    assert dref.predicted_measures(0.3, np.zeros(4), np.zeros(4), norm2_a=4.0) == {
        "pointwise": pytest.approx(0.3), "cross_model": 0.3, "cross_object": 0.0}
    with pytest.raises(ValueError, match="one shape"):
        dref.predicted_measures(0.3, np.zeros(3), np.zeros(4), norm2_a=1.0)
    with pytest.raises(ValueError, match="positive"):
        dref.predicted_measures(0.3, np.zeros(3), np.zeros(3), norm2_a=0.0)


def test_synthetic_pair_has_the_stated_canonical_correlations_and_offsets():
    X, Y, rho = dref.synthetic_pair(6000, r=8, n_shared=4, correlation=0.8, offset_a=3.0, offset_b=1.0,
                                  dims=(16, 20), seed=0)
    assert rho == pytest.approx(0.4)
    Zx, mx = dref.reference_whitening(X, n_components=8)
    Zy, my = dref.reference_whitening(Y, n_components=8)
    canon = np.linalg.svd(Zx.T @ Zy / (len(X) - 1), compute_uv=False)  # canonical correlations
    np.testing.assert_allclose(canon[:4], 0.8, atol=0.02)
    assert canon[4:].max() < 0.06
    assert np.linalg.norm(mx) == pytest.approx(3.0, rel=0.03) and np.linalg.norm(my) == pytest.approx(1.0, rel=0.03)
    with pytest.raises(ValueError, match="r must be in"):
        dref.synthetic_pair(100, r=16, dims=(16, 20))


# --------------------------------------------------------------------------- the procedure
def test_reference_with_all_steps_ours_is_our_pipeline_on_the_reference_split():
    X, Y, _ = dref.synthetic_pair(400, r=10, n_shared=5, correlation=0.8, offset_a=4.0, offset_b=2.0,
                                dims=(24, 30), seed=1)
    res = dref.reference_procedure(X, Y, n_components=10, train_size=200, seed=7, whiten_rows="train",
                                 add_means=False, pairing="random", n_pairs=3000)
    train, ev = dref.reference_split(400, train_size=200, seed=7)
    wx, wy = (metrics_whitening.fit_whitening(Z[train], n_components=10) for Z in (X, Y))
    Zx, Zy = wx.transform(X), wy.transform(Y)
    R = metrics_whitening.procrustes(Zy[train], Zx[train])
    ours = D.cosine_measures(Zx[ev], Zy[ev] @ R, n_pairs=3000, seed=7)
    for k in MAIN:
        assert getattr(res, k) == pytest.approx(ours[k], abs=1e-9), k
    assert (res.n_train, res.n_eval, res.n_components) == (200, 200, 10)


@pytest.mark.parametrize("seed", [0, 1])
def test_without_offsets_both_procedures_agree_within_noise(seed):
    X, Y, rho = dref.synthetic_pair(2000, r=32, n_shared=16, correlation=0.9, seed=seed)
    ref = dref.reference_procedure(X, Y, n_components=32, train_size=1000, seed=seed)
    ours = D.displacement_similarity(X, Y, n_components=32, seed=seed)
    for k in MAIN:
        assert abs(getattr(ref, k) - getattr(ours, k)) < 0.03, k
    assert abs(ref.pointwise - rho) < 0.03 and abs(ref.cross_model - rho) < 0.03 and abs(ref.cross_object) < 0.03


@pytest.mark.parametrize("offset2_a,offset2_b", [(0.5, 0.0), (2.0, 0.0), (1.0, 1.0), (4.0, 0.25)])
def test_offsets_move_pointwise_and_cross_object_as_predicted_and_leave_cross_model(offset2_a, offset2_b):
    r = 32
    base = dref.reference_procedure(*dref.synthetic_pair(2000, r=r, seed=4)[:2], n_components=r, train_size=1000, seed=4)
    X, Y, rho = dref.synthetic_pair(2000, r=r, offset_a=np.sqrt(offset2_a * r), offset_b=np.sqrt(offset2_b * r), seed=4)
    res = dref.reference_procedure(X, Y, n_components=r, train_size=1000, seed=4)
    # the prediction from the known rho, norms r and the procedure's own projected means
    pred = dref.predicted_measures(rho, res.mean_a, res.mean_b, norm2_a=r)
    assert abs(res.pointwise - pred["pointwise"]) < 0.03
    assert abs(res.cross_object - pred["cross_object"]) < 0.03
    assert res.cross_object > base.cross_object + 0.3
    if offset2_b == 0.0:  # m_a.m_b ~ 0: Pointwise falls by the factor sqrt(r / (r + |m_a|^2))
        assert res.pointwise == pytest.approx(base.pointwise / np.sqrt(1 + offset2_a), abs=0.03)
        assert res.pointwise < base.pointwise - 0.05
    # offsets cancel in displacements: the same split, whitening and pairs give the same Cross-Model
    assert res.cross_model == pytest.approx(base.cross_model, abs=1e-9)
    # and the result's own prediction (measured rho and norms) agrees too
    for k in MAIN:
        assert abs(res.predicted()[k] - getattr(res, k)) < 0.03, k


def test_second_models_mean_is_added_after_the_rotation_not_rotated():
    # Y is X in another orthonormal basis with a mean along its first axis; rotating Y's mean into X's frame
    # would make b_i = a_i exactly (Pointwise 1); the reference adds m_b unrotated, so Pointwise < 1.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 6)) * np.arange(6, 0, -1) + 3.0
    Q = np.linalg.qr(rng.standard_normal((6, 6)))[0]
    Y = X @ Q
    res = dref.reference_procedure(np.hstack([X, np.zeros((300, 1))]), np.hstack([Y, np.zeros((300, 1))]),
                                 n_components=6, train_size=150, seed=0)
    assert res.cross_model == pytest.approx(1.0, abs=1e-9)  # the rotation is recovered exactly
    assert np.linalg.norm(res.mean_a) == pytest.approx(np.linalg.norm(res.mean_b), rel=1e-9)
    expected = dref.predicted_measures(1.0, res.mean_a, res.mean_b, norm2_a=res.norm2_a, norm2_b=res.norm2_b)
    assert res.pointwise == pytest.approx(expected["pointwise"], abs=0.03) and res.pointwise < 0.99


def test_reference_procedure_options_are_validated():
    X = np.random.default_rng(0).standard_normal((40, 6))
    with pytest.raises(ValueError, match="unknown pairing 'roll'; valid: 'predecessor', 'random'"):
        dref.reference_procedure(X, X, n_components=3, train_size=20, pairing="roll")
    with pytest.raises(ValueError, match="unknown whiten_rows"):
        dref.reference_procedure(X, X, n_components=3, train_size=20, whiten_rows="test")
    with pytest.raises(ValueError, match="same n_samples"):
        dref.reference_procedure(X, X[:-1], n_components=3, train_size=20)
    with pytest.raises(TypeError, match="add_means"):
        dref.reference_procedure(X, X, n_components=3, train_size=20, add_means="yes")


# --------------------------------------------------------------------------- the chapter's comparison
def _features(n=160, seed=0):
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((n, 4))
    ids = tuple(f"s{i}" for i in range(n))

    def lf(name, modality, offset):
        v = S @ rng.standard_normal((4, 12)) + 0.5 * rng.standard_normal((n, 12)) + offset
        return LayerFeatures(torch.tensor(v[None], dtype=torch.float32), ("layer.1",), ids,
                             {"model": name, "modality": modality})

    return {"vit": lf("vit", "vision", 4.0 * rng.standard_normal(12)), "lm": lf("lm", "language", 0.0)}


@pytest.fixture(scope="module")
def table():
    best = pd.DataFrame({"kind": ["vision-language"], "layer x": ["layer.1"], "layer y": ["layer.1"]},
                        index=pd.Index(["vit × lm"], name="pair"))
    return dr.compare_procedures(_features(), best, n_components=6, n_pairs=2000, n_splits=3, seed=0,
                                 train_fractions=(0.3,), reference_components=100)


def test_compare_procedures_table(table):
    steps = [dr.OURS, dr.REFERENCE, "reference, means not added back", "reference, whitening on training rows",
             "reference, random pairs", "reference, all three steps ours", "reference, 30% training rows",
             "reference, r = 100 (capped)"]
    assert list(dict.fromkeys(table["step"])) == steps and len(table) == 3 * len(steps)
    assert set(table["split"]) == {0, 1, 2}
    last = table["step"] == "reference, r = 100 (capped)"
    assert (table.loc[~last, "r"] == 6).all() and (table.loc[last, "r"] == 11).all()  # capped at d - 1
    assert (table.loc[table["step"] == dr.OURS, "rho"].isna()).all()
    # the mean added back changes nothing but Pointwise and Cross-Object
    ref, nomean = (table[table["step"] == s].set_index("split")
                   for s in (dr.REFERENCE, "reference, means not added back"))
    np.testing.assert_allclose(ref["cross_model"], nomean["cross_model"], atol=1e-9)
    assert (nomean["offset2_a"] == 0).all() and (ref["offset2_a"] > 1).all()
    np.testing.assert_allclose(nomean["predicted_pointwise"], nomean["rho"])


def test_summaries_and_formula_check(table):
    side = dr.side_by_side(table)
    assert side.shape == (1, 8) and side.columns[0] == ("Pointwise", dr.OURS)
    assert " ± " in side.iloc[0, 0]
    steps = dr.step_table(table)
    assert len(steps) == 8 and {"r", "training rows", "evaluation rows"} <= set(steps.columns)
    check = dr.formula_check(table)
    assert list(check.index.get_level_values("step")) == [dr.REFERENCE, "reference, means not added back"]
    assert (check["largest |error|"] < 0.15).all()


def _verdict_inputs(gap_ref, err):
    rows = []
    for step, pw, cm in ((dr.OURS, 0.5, 0.5), (dr.REFERENCE, 0.5 - gap_ref, 0.5),
                         ("reference, means not added back", 0.5, 0.5),
                         ("reference, random pairs", 0.5 - gap_ref, 0.51)):
        rows.append({"pair": "a × b", "step": step, "split": 0, "pointwise": pw, "cross_model": cm,
                     "cross_object": 0.0, "predicted_pointwise": pw + err, "predicted_cross_model": cm,
                     "predicted_cross_object": 0.0})
    sweep = pd.DataFrame([{"procedure": dr.REFERENCE, "pointwise": 0.2, "cross_model": 0.4, "cross_object": 0.5,
                           "predicted_pointwise": 0.21, "predicted_cross_model": 0.4, "predicted_cross_object": 0.5}])
    return pd.DataFrame(rows), sweep


def test_procedure_verdict_follows_the_numbers():
    text = dr.procedure_verdict(*_verdict_inputs(gap_ref=0.3, err=0.01), tol=0.05)
    assert "because it adds the projected means back" in text and "+0.30 to +0.30" in text
    assert "- Reference with random pairs: Pointwise +0.00 to +0.00, Cross-Model +0.01 to +0.01" in text
    assert "does not predict" in dr.procedure_verdict(*_verdict_inputs(gap_ref=0.3, err=0.2), tol=0.05)
    assert "too small" in dr.procedure_verdict(*_verdict_inputs(gap_ref=0.01, err=0.01), tol=0.05)


def test_procedure_figure_is_readable(table):
    import matplotlib.pyplot as plt

    sweep = dr.synthetic_sweep((0.0, 1.0), n=600, r=8, n_shared=4, n_seeds=2, n_pairs=1000)
    assert set(sweep["procedure"]) == {dr.OURS, dr.REFERENCE} and len(sweep) == 8
    fig = dr.procedure_figure(sweep, table)
    assert len(fig.axes) == 4 and fig.dpi >= 150 and fig.get_size_inches()[0] <= 8.5
    sizes = [t.get_fontsize() for ax in fig.axes for t in
             [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.get_xticklabels(), *ax.get_yticklabels(),
              *(ax.get_legend().get_texts() if ax.get_legend() else [])]]
    assert min(sizes) >= 8
    plt.close(fig)


def test_procedure_verdict_names_each_pair_without_a_gap_by_its_gap_and_prediction():
    """A pair whose reference gap is negative is not one where 'the means are too small': the page says its gap
    and what the derivation predicts for it."""
    t1, sweep = _verdict_inputs(gap_ref=0.3, err=0.01)
    t2, _ = _verdict_inputs(gap_ref=-0.06, err=0.01)
    text = dr.procedure_verdict(pd.concat([t1, t2.assign(pair="c × d")]), sweep, tol=0.05)
    assert "in 1 of the 2 pairs (a × b; in c × d its gap is -0.060 (the derivation predicts -0.070)" in text
    assert "too small" not in text
