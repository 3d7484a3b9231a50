"""Tests for prh_lib.pages.ch_displacement (the displacement chapter's tables and figures)."""

from __future__ import annotations

import warnings

import matplotlib
import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from threadpoolctl import threadpool_limits

matplotlib.use("Agg")

from prh_lib.pages import ch_displacement as da  # noqa: E402
from prh_lib.analysis import core as analysis_core
from prh_lib.analysis.displacement import study as displacement_study
from prh_lib.analysis.displacement import consensus as dc  # noqa: E402
from prh_lib.extract import FeatureMismatchError, LayerFeatures  # noqa: E402
from prh_lib.metrics import displacement as D  # noqa: E402

N = 160


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # tiny matrices: extra BLAS threads only spin-wait on a shared CPU (a test-speed choice, not a check)
    with threadpool_limits(1):
        yield


def _features(seed=0, n=N):
    """Three fake models sharing a 4-D latent in chosen layers.

    ``vit`` (vision): layer 0 constant (a CLS token at "embed"), layer 1 noise, layer 2 the latent.
    ``lm`` (language): layer 0 noise, layer 1 the latent, layer 2 the latent more weakly.
    ``cnn`` (vision): 2 layers, layer 1 the latent, stored zero-padded (width 6 of 12).
    """
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((n, 4))
    ids = tuple(f"s{i}" for i in range(n))

    def view(d, noise):
        return S @ rng.standard_normal((4, d)) + noise * rng.standard_normal((n, d))

    vit = np.stack([np.tile(rng.standard_normal(12), (n, 1)), rng.standard_normal((n, 12)), view(12, 0.3)])
    lm = np.stack([rng.standard_normal((n, 12)), view(12, 0.3), view(12, 2.0)])
    cnn = np.zeros((2, n, 12))
    cnn[0, :, :6], cnn[1, :, :6] = rng.standard_normal((n, 6)), view(6, 0.3)

    def lf(values, name, modality, labels, dims=None):
        return LayerFeatures(torch.tensor(values, dtype=torch.float32), labels, ids,
                             {"model": name, "modality": modality}, dims)

    return {
        "vit": lf(vit, "vit", "vision", ("embed", "layer.1", "layer.2")),
        "lm": lf(lm, "lm", "language", ("embed", "layer.1", "layer.2")),
        "cnn": lf(cnn, "cnn", "vision", ("stem", "stage.1"), (6, 6)),
    }


OPTS = dict(k=10, n_components=8, n_pairs=2000, seed=1)
COMPARISONS = [("vit", "lm"), ("vit", "cnn"), ("lm", "cnn")]


@pytest.fixture(scope="module")
def feats():
    return _features()


@pytest.fixture(scope="module")
def views(feats):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*degenerate.*")
        return displacement_study.compare_views(feats, COMPARISONS, **OPTS)


def test_displacement_matrices_equal_the_layerwise_metric(feats):
    x, y = feats["vit"], feats["lm"]
    with pytest.warns(RuntimeWarning, match="degenerate"):
        mats = displacement_study.displacement_matrices(x, y, n_components=8, n_pairs=2000, seed=1)
    with pytest.warns(RuntimeWarning, match="degenerate"):
        ref = D.displacement_layerwise(x.values, y.values, n_components=8, n_pairs=2000, seed=1)
    assert set(mats) == set(D.MEASURES)
    for name, m in mats.items():
        np.testing.assert_array_equal(m.scores, ref[name])
        assert m.x_labels == x.layer_labels and m.y_labels == y.layer_labels and m.metric == name
        assert (m.x_name, m.y_name) == ("vit", "lm") and m.options["n"] == N
    np.testing.assert_array_equal(mats["cross_model"].options["r"], ref["n_components"])


def test_displacement_matrices_reject_misaligned_rows(feats):
    other = feats["lm"].rows(np.arange(N)[::-1])
    with pytest.raises(FeatureMismatchError, match="different row order"):
        displacement_study.displacement_matrices(feats["cnn"], other)


def test_compare_views_kinds_nan_consistency_and_missing(views, feats):
    assert [v.label for v in views] == ["vit × lm", "vit × cnn", "lm × cnn"]
    assert [v.kind for v in views] == ["vision-language", "vision-vision", "vision-language"]
    vl = views[0]
    # the constant "embed" layer is undefined in both views, and only there
    assert np.isnan(vl.knn.scores[0]).all() and np.isnan(vl.cross_model.scores[0]).all()
    assert np.isfinite(vl.knn.scores[1:]).all() and np.isfinite(vl.cross_model.scores[1:]).all()
    with pytest.raises(KeyError, match="no features for \\['nope'\\]"):
        displacement_study.compare_views(feats, [("vit", "nope")])


def test_pair_kind_orders_vision_first(feats):
    assert displacement_study.pair_kind(feats["lm"], feats["vit"]) == "vision-language"
    assert displacement_study.pair_kind(feats["lm"], feats["lm"]) == "language-language"


def test_best_pair_table_picks_the_defined_maximum_and_reports_its_values(views, feats):
    best = displacement_study.best_pair_table(views, feats, n_splits=3)
    assert list(best.index) == [v.label for v in views]
    for v in views:
        row = best.loc[v.label]
        cm = v.cross_model.scores
        i, j = np.unravel_index(np.nanargmax(cm), cm.shape)
        assert (row["layer x"], row["layer y"]) == (v.cross_model.x_labels[i], v.cross_model.y_labels[j])
        assert row["Cross-Model"] == cm[i, j] == np.nanmax(cm)
        assert row["Cross-Object (shuffled)"] == v.displacement["cross_object_shuffled"].scores[i, j]
        assert row["Cross-Model shuffled (max)"] == np.nanmax(v.displacement["cross_model_shuffled"].scores)
        assert row["r"] == 6 if "cnn" in v.label else row["r"] == 8
    # the planted layers are found; a re-split re-scores the same layers on other samples
    assert tuple(best.loc["vit × lm", ["layer x", "layer y"]]) == ("layer.2", "layer.1")
    assert 0.4 < best.loc["vit × lm", "Cross-Model"] < 0.6  # 4 shared of r = 8 whitened dimensions: ~0.5
    assert abs(best.loc["vit × lm", "Cross-Model, 3 re-splits"] - best.loc["vit × lm", "Cross-Model"]) < 0.1
    assert 0 < best.loc["vit × lm", "re-split sd"] < 0.1
    assert (best["Cross-Model (shuffled)"].abs() < 0.15).all()


def test_views_table_peaks_and_rank_correlation(views):
    table = displacement_study.views_table(views)
    for v in views:
        row = table.loc[v.label]
        ok = np.isfinite(v.knn.scores) & np.isfinite(v.cross_model.scores)
        assert row["rank correlation"] == pytest.approx(spearmanr(v.knn.scores[ok], v.cross_model.scores[ok]).statistic)
        assert row["k-NN peak"] == np.nanmax(v.knn.scores)
        assert row["Cross-Model final"] == v.cross_model.scores[-1, -1]
    assert table.loc["vit × lm", "k-NN peak layers"] == "layer.2 × layer.1"
    assert table.loc["vit × lm", "k-NN peak depth"] == "1.00 × 0.50"


def test_best_layers_averages_partner_maxima(views):
    layers = displacement_study.best_layers(views)
    assert layers == {"vit": "layer.2", "lm": "layer.1", "cnn": "stage.1"}
    assert displacement_study.best_layers(views, ["lm"], measure="mutual_knn") == {"lm": "layer.1"}
    with pytest.raises(KeyError, match="in no comparison"):
        displacement_study.best_layers(views, ["other"])


def test_best_layers_profile_definition():
    # hand-made: model a's layer 1 is best with b, layer 0 with c; the mean decides
    def comp(x, y, scores):
        m = analysis_core.AlignmentMatrix(np.array(scores), ("l0", "l1"), ("m0", "m1"), x, y, "cross_model")
        return displacement_study.ViewComparison(f"{x} × {y}", "?", m, {"cross_model": m})

    res = [comp("a", "b", [[0.1, 0.2], [0.5, 0.3]]), comp("a", "c", [[0.6, np.nan], [0.0, 0.25]])]
    # a: profiles [0.2, 0.5] and [0.6, 0.25] -> mean [0.4, 0.375] -> l0
    assert displacement_study.best_layers(res, ["a"]) == {"a": "l0"}
    assert displacement_study.best_layers(res, ["b", "c"]) == {"b": "m0", "c": "m0"}


def test_n_components_sweep_matches_single_pair_and_caps_r(views, feats):
    sweep = displacement_study.n_components_sweep(views[:1], feats, n_components=(2, 4, 8, 500))
    assert list(sweep["n_components"]) == [2, 4, 8, 500]
    assert list(sweep["r"]) == [2, 4, 8, 12]  # 500 capped by d = 12 (< n_train - 1)
    ref = D.displacement_similarity(feats["vit"].layer(2), feats["lm"].layer(1), n_components=4, n_pairs=2000, seed=1)
    row = sweep.iloc[1]
    for name in D.MEASURES:
        assert row[name] == getattr(ref, name), name
    assert row["r / n_train"] == 4 / ref.n_train
    # the planted signal is 4-D: once r exceeds it, the measure is diluted
    assert sweep["cross_model"].iloc[1] > sweep["cross_model"].iloc[3] + 0.2


def test_depth_profiles_are_rows_of_the_layerwise_matrices(views, feats):
    prof = displacement_study.depth_profiles(views, feats, n_components=(2, 8, 50))
    assert list(prof) == [v.label for v in views]
    for v in views:
        frame = prof[v.label]
        ik = np.unravel_index(np.nanargmax(v.knn.scores), v.knn.scores.shape)[0]
        assert frame.attrs["layer x"] == f"{v.knn.x_name} {v.knn.x_labels[ik]}"
        assert tuple(frame.index) == v.knn.y_labels
        np.testing.assert_array_equal(frame["mutual k-NN"], v.knn.scores[ik])
        r = 6 if "cnn" in v.label else 8
        # r = 8 is the r of the heatmaps; 50 is capped at d, so it collapses onto the largest r
        np.testing.assert_array_equal(frame[f"Cross-Model, r={r}"], v.cross_model.scores[ik])
        assert list(frame.columns) == ["mutual k-NN", "Cross-Model, r=2", f"Cross-Model, r={r}"] + (
            [] if r == 6 else ["Cross-Model, r=12"])
    fig = da.depth_profile_figure(prof)
    assert len([ax for ax in fig.axes if ax.get_ylabel() == "Cross-Model"]) == len(views)


def test_consensus_summary_shared_beats_random_beats_private(feats):
    layers = {"vit": "layer.2", "lm": "layer.1", "cnn": "stage.1"}
    s = dc.consensus_summary(feats, layers, n_components=6, n_shared=3, n_private=2, k=10, n_pairs=2000,
                             n_random=5, seed=0)
    assert list(s.table.index) == ["vit × lm", "vit × cnn", "lm × cnn"]
    assert list(s.table.columns) == [(m, sub) for m in ("mutual k-NN", "Cross-Model") for sub in dc.SUBSPACES]
    cm = s.table["Cross-Model"]
    assert (cm["shared"] > 0.9).all() and (cm["private"].abs() < 0.2).all()
    assert (cm["shared"] > cm["random"]).all() and (cm["random"] > cm["private"]).all()
    mk = s.table["mutual k-NN"]
    assert (mk["shared"] > mk["private"]).all()
    assert s.chance == pytest.approx(10 / (len(s.result.test_idx) - 1))
    # held-out Rayleigh quotients: high on the 4-D shared latent's directions, low on the private ones
    assert s.held_out_eigenvalues.shape == (6,)
    assert s.held_out_eigenvalues[:3].min() > 0.6 and np.abs(s.held_out_eigenvalues[-2:]).max() < 0.3
    assert s.layers == layers


def test_figures_have_the_expected_panels_and_nan_safe_peak(views, feats):
    import matplotlib.pyplot as plt

    fig = da.heatmaps_side_by_side(views, chance=0.1)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2 * len(views)
    star = [ln for ln in panels[0].lines if ln.get_marker() == "*"][0]  # vit × lm k-NN: NaN embed row
    i, j = np.unravel_index(np.nanargmax(views[0].knn.scores), views[0].knn.scores.shape)
    assert (star.get_xdata()[0], star.get_ydata()[0]) == (j, i)
    plt.close(fig)
    fig = da.sweep_figure(displacement_study.n_components_sweep(views, feats, n_components=(2, 4)))
    assert len(fig.axes[0].lines) >= len(views)
    plt.close(fig)
    s = dc.consensus_summary(feats, {"vit": "layer.2", "lm": "layer.1"}, n_components=6, n_shared=2, n_pairs=500,
                             n_random=2)
    fig = da.consensus_figure(s)
    assert len(fig.axes) == 3 and len(fig.axes[1].patches) == len(dc.SUBSPACES)  # 1 pair x 4 subspaces
    plt.close(fig)


def test_describe_states_the_measured_figures(views, feats):
    best, table = displacement_study.best_pair_table(views, feats, n_splits=2), displacement_study.views_table(views)
    s = dc.consensus_summary(feats, {"vit": "layer.2", "lm": "layer.1"}, n_components=6, n_shared=2, n_pairs=500)
    text = da.describe(best, table)
    assert text.count("- **") == len(views)  # one bullet per pair
    assert f"{best.loc['vit × lm', 'Cross-Model']:.3f}" in text and "layer.2 × layer.1" in text
    bullet = da.describe_consensus(s)
    assert bullet.startswith("- **Consensus** of vit (layer.2), lm (layer.1)")
    assert f"{s.result.eigenvalues[0]:.2f}" in bullet and f"{s.chance:.3f}" in bullet


# --------------------------------------------------------------------------- the paper and this build
def _draws(means, sd=0.01, n=5, seed=0):
    rng = np.random.default_rng(seed)
    return np.asarray(means) + sd * rng.standard_normal((n, len(means)))


@pytest.mark.parametrize("means,expected", [
    ((0.46, 0.30), "reproduces"),            # both within 0.05 of (0.45, 0.31)
    ((0.60, 0.10), "reproduces in kind"),    # the ordering holds and is resolved, the values do not match
    ((0.56, 0.56), "differs"),               # no gap
    ((0.20, 0.40), "differs"),               # reversed
    ((0.60, 0.57), "differs"),               # a gap below the tolerance, values off
])
def test_claim_verdict_cases(means, expected):
    assert da.claim_verdict((0.45, 0.31), _draws(means)) == expected


def test_claim_verdict_uses_the_spread_and_handles_one_draw():
    noisy = _draws((0.55, 0.35), sd=0.08, n=40)  # 0.10 off, but within two standard deviations
    assert da.claim_verdict((0.45, 0.31), noisy) == "reproduces"
    assert da.claim_verdict((0.45, 0.31), [[0.55, 0.35]]) == "reproduces in kind"  # one draw: sd taken as 0
    assert da.claim_verdict((0.3,), [[0.29], [0.31]]) == "reproduces"
    assert da.claim_verdict((0.3,), [[-0.2], [-0.25]]) == "differs"
    assert da.claim_verdict((0.3,), [[0.6], [0.62]]) == "reproduces in kind"


def test_claim_verdict_not_testable_and_bad_input():
    assert da.claim_verdict((0.7, 0.4), None, reason="no data") == "not testable offline (no data)"
    with pytest.raises(ValueError, match="needs a reason"):
        da.claim_verdict((0.7, 0.4), None)
    with pytest.raises(ValueError, match=r"\(n_draws, 2\)"):
        da.claim_verdict((0.7, 0.4), [0.7, 0.4, 0.1])
    with pytest.raises(ValueError, match="finite"):
        da.claim_verdict((0.7, 0.4), [[np.nan, 0.4]])


def test_paper_table_rows_values_and_verdicts():
    import pandas as pd

    rows = []
    for split in range(3):
        for pair, kind, cm, pw in (("a × b", "vision-vision", 0.50, 0.10), ("c × d", "vision-language", 0.20, 0.05),
                                   ("e × f", "vision-language", 0.30, 0.15)):
            rows.append({"pair": pair, "kind": kind, "step": "reference code", "split": split,
                         "cross_model": cm + 0.01 * split, "pointwise": pw})
            rows.append({"pair": pair, "kind": kind, "step": "our procedure", "split": split,
                         "cross_model": cm, "pointwise": cm})
    t = da.paper_table(pd.DataFrame(rows))
    # the concept-level claims are the concept chapter's (C/*): this chapter's table has the sample level only
    assert len(t) == len(da.SAMPLE_CLAIMS) == 3 and not t.index.str.contains("concept level").any()
    every = da.paper_table(pd.DataFrame(rows), claims=da.PAPER_CLAIMS)
    concept = every[every.index.str.contains("concept level")]
    assert len(every) == 6 and (concept["reference code verdict"].str.startswith("not testable offline")).all()
    vv = t.loc["Cross-Model > Pointwise, vision-vision, sample level (Flickr30k image-caption pairs)"]
    assert vv["paper"] == "0.45 vs 0.31" and vv["reference code"] == "0.51 ± 0.01 vs 0.10 ± 0.00"
    assert vv["reference code verdict"] == "reproduces in kind" and vv["our procedure verdict"] == "differs"
    vl = t.loc["Cross-Model > Pointwise, vision-language, sample level (Flickr30k image-caption pairs)"]
    np.testing.assert_allclose(vl["reference code draws"], [[0.25, 0.10], [0.26, 0.10], [0.27, 0.10]])  # pair means
    ll = t.loc["Cross-Model > Pointwise, language-language, sample level (Flickr30k image-caption pairs)"]
    assert ll["reference code verdict"] == "not testable offline (no language-language pair in this build)"
    assert set(t["our procedure verdict"].str.split(" \\(").str[0]) <= set(da.VERDICTS)


def test_checklist_rows_carry_our_procedures_verdict_and_the_reference_reading_as_a_note():
    import pandas as pd

    from prh_lib.pages import claims

    table = pd.DataFrame({
        "paper": ["0.45 vs 0.31", "0.73 vs 0.41"],
        "reference code": ["0.53 ± 0.02 vs 0.11 ± 0.01", "—"],
        "reference code verdict": ["reproduces in kind", "not testable offline (concept level)"],
        "our procedure": ["0.56 vs 0.56", "—"],
        "our procedure verdict": ["differs", "not testable offline (concept level)"],
    }, index=["Cross-Model > Pointwise, vision-vision, sample level (Flickr30k)",
              "Cross-Model > Pointwise, vision-vision, concept level (ImageNet)"])
    rows = da.checklist_rows(table)
    assert [r["id"] for r in rows] == ["D/vision-vision"]
    # the front page carries our procedure's verdict, never the reference code's
    assert rows[0]["verdict"] == "differs" and "reference code: 0.53" in rows[0]["this build"]
    assert "reproduces in kind" in rows[0]["note"]
    assert {r["id"]: r for r in claims.checklist({"ch_displacement": rows})}["D/vision-vision"]["verdict"] == "differs"


def test_checklist_verdicts_read_the_held_out_gap_and_its_interval_over_images():
    """With held-out estimates the front-page verdict is a test on the paired gap interval, not the split spread."""
    import pandas as pd

    from prh_lib.analysis.displacement.heldout import HeldoutBestPair

    def held(cm, pw, gap_sd):
        rng = np.random.default_rng(0)
        noise = rng.normal(size=40)
        reps = {"cross_model": cm + gap_sd * noise, "pointwise": np.full(40, pw), "cross_object": np.zeros(40)}
        return HeldoutBestPair({"cross_model": cm, "pointwise": pw, "cross_object": 0.0}, cm + 0.02, reps,
                               np.ones((2, 2)), n=64, n_splits=5, n_boot=40, n_candidates=4, subsample_ratio=0.5)

    table = pd.DataFrame({
        "reference code": ["0.53 ± 0.02 vs 0.11 ± 0.01"] * 3, "reference code verdict": ["reproduces in kind"] * 3,
        # the in-sample reading over splits says the opposite of the held-out one, so the test can tell them apart
        "our procedure": ["0.56 ± 0.01 vs 0.56 ± 0.01"] * 3, "our procedure verdict": ["differs"] * 3,
    }, index=[f"Cross-Model > Pointwise, {k}, sample level (Flickr30k)"
              for k in ("vision-vision", "language-language", "vision-language")])
    heldout = {"a × b": held(0.60, 0.40, 0.01),  # gap 0.20, interval far above 0
               "c × d": held(0.45, 0.46, 0.01),  # gap below 0
               "a × c": held(0.30, 0.28, 0.03),  # gap 0.02 with an interval reaching below 0
               "b × d": held(0.50, 0.30, 0.01)}
    kinds = {"a × b": "vision-vision", "c × d": "language-language", "a × c": "vision-language",
             "b × d": "vision-language"}
    with pytest.raises(ValueError, match="kinds"):
        da.checklist_rows(table, heldout=heldout)
    rows = {r["id"]: r for r in da.checklist_rows(table, heldout=heldout, kinds=kinds)}
    assert rows["D/vision-vision"]["verdict"] == "reproduces in kind"
    # ours differs while the reference code's procedure reproduces the paper: explained (the chapter's cause)
    assert rows["D/language-language"]["verdict"] == "explained"
    assert rows["D/language-language"]["note"].startswith("the reference code's procedure reproduces the paper's gap")
    assert "c × d: held-out Cross-Model − Pointwise: needs > 0, got -0.010" in rows["D/language-language"]["note"]
    # one of the two vision-language pairs cannot decide: the claim is inconclusive, and says which
    assert rows["D/cross-modal"]["verdict"] == "inconclusive"
    assert "cannot decide: a × c" in rows["D/cross-modal"]["note"] and "b × d" not in rows["D/cross-modal"]["note"]
    assert all("reference code's procedure: reproduces in kind" in r["note"] for r in rows.values())
    assert "held out (our procedure): a × b: 0.600 [" in rows["D/vision-vision"]["this build"]
    # a kind with no held-out estimate (too few images) keeps the split reading and says so
    rows = {r["id"]: r for r in da.checklist_rows(table, heldout={"a × b": 20}, kinds=kinds)}
    assert rows["D/vision-vision"]["verdict"] == "differs" and "too few images" in rows["D/vision-vision"]["note"]
