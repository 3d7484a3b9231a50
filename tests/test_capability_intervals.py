"""Image-level intervals of the capability correlation, and the verdict that reads them."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from prh_lib.pages import sec3_2_capability as capability
from prh_lib.analysis.capability import intervals as capability_intervals
from prh_lib.analysis.capability.intervals import image_correlations, replicate_correlations


def test_replicate_correlations_equal_scipy_column_by_column():
    rng = np.random.default_rng(0)
    A, c = rng.normal(size=(5, 7)), rng.normal(size=5)
    for method, ref in (("pearson", stats.pearsonr), ("spearman", stats.spearmanr)):
        got = replicate_correlations(A, c, method=method)
        np.testing.assert_allclose(got, [ref(A[:, b], c)[0] for b in range(7)], atol=1e-12)
    A[1, 3] = np.nan
    assert np.isnan(replicate_correlations(A, c)[3])
    with pytest.raises(ValueError, match="n_models"):
        replicate_correlations(A, c[:3])


def _corr(p, r=-0.9, n=6):
    """study_correlations-shaped rows: one vision model, peak and final against bits per byte, ``n`` models
    (six by default: enough for an exact p below 0.05; with three or four no exact p can be, and the claims
    are not testable, whatever ``p`` says)."""
    rows = []
    for a, rr in (("peak", r), ("final", r / 2)):
        for m in ("pearson", "spearman"):
            rows.append({"dataset": "toy", "vision": "v", "alignment": a, "capability": "bpb", "method": m, "r": rr,
                         "ci low": np.nan, "ci high": np.nan, "p": p, "p method": "exact", "n": n, "direction": -1,
                         "r (capability)": -rr})
    return pd.DataFrame(rows)


def _img(lo_cap, hi_cap, r_cap=0.8):
    return pd.DataFrame([{"dataset": "toy", "vision": "v", "capability": "bpb", "method": m, "r": -r_cap,
                          "ci low": -hi_cap, "ci high": -lo_cap, "r draws mean": -r_cap, "r draws std": 0.01,
                          "n draws": 5, "n": 3, "n_boot": 50, "direction": -1, "r (capability)": r_cap,
                          "low (capability)": lo_cap, "high (capability)": hi_cap} for m in ("pearson", "spearman")])


@pytest.mark.parametrize("p", [0.01, 0.5])
def test_the_capability_verdict_uses_the_interval_over_images(p):
    def verdict(img):
        rows = {r["id"]: r for r in capability.findings(_corr(p), main_dataset="toy", image_corr=img)}
        return rows["3.2/capability-trend"]

    significant = p < 0.05
    # an interval over images above 0: only the models' p decides
    assert verdict(_img(0.3, 0.95))["verdict"] == ("reproduces in kind" if significant else "inconclusive")
    # an interval holding 0: never a reproduction, even at a significant p over models (the draws' std is tiny)
    row = verdict(_img(-0.2, 0.95))
    assert row["verdict"] == "inconclusive" and "over images" in row["note"] and "[-0.200, 0.950]" in row["note"]
    # the estimate over images has the other sign: the trend differs
    assert verdict(_img(-0.9, -0.1, r_cap=-0.5))["verdict"] == "differs"  # the whole interval below 0
    assert verdict(_img(-0.9, 0.2, r_cap=-0.5))["verdict"] == "inconclusive"  # symmetric: it reaches 0
    assert "interval over images" in capability.RULES["3.2/capability-trend"]


class _Feats:
    """A LayerFeatures stand-in with what clip_features and the cache read."""

    def __init__(self, values, name):
        import torch

        from prh_lib.extract.features import LayerFeatures

        self.f = LayerFeatures(torch.as_tensor(values, dtype=torch.float32), [f"l{i}" for i in range(len(values))],
                               list(range(values.shape[1])), name)


def _planted(layer_noises, n=64, seed=0):
    """A two-layer vision stack and one two-layer language model per entry of ``layer_noises`` (the noise of
    each layer around a shared 4-d latent), seeded: ``(V, models)``."""
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 4))
    V = np.stack([Z @ rng.normal(size=(4, 8)) + 0.3 * rng.normal(size=(n, 8)) for _ in range(2)])
    lms = []
    for i, noises in enumerate(layer_noises):
        L = np.stack([Z @ rng.normal(size=(4, 8)) + noise * rng.normal(size=(n, 8)) for noise in noises])
        lms.append(SimpleNamespace(label=f"lm{i}", features=(_Feats(L, f"lm{i}").f,)))
    return V, lms


def test_image_correlations_recover_a_planted_capability_order(tmp_path, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    V, lms = _planted(((0.3, 0.3), (1.0, 1.0), (3.0, 3.0)))  # model 0 aligns most: lowest bits per byte
    sets = SimpleNamespace(parent_ids=lambda ds: [0])
    bpb = {"lm0": 1.0, "lm1": 1.5, "lm2": 2.0}
    out = image_correlations(sets, {"v": (_Feats(V, "v").f,)}, lms, bpb, dataset="toy", k=5, clip_q=None,
                             n_splits=2, n_boot=12)
    assert list(out["method"]) == ["pearson", "spearman"]
    sp = out[out["method"] == "spearman"].iloc[0]
    assert sp["r"] == pytest.approx(-1.0) and sp["r (capability)"] == pytest.approx(1.0)
    assert -1 <= sp["ci low"] <= sp["ci high"] <= -0.4  # every resample keeps the order (or nearly)
    assert (out["low (capability)"] <= out["high (capability)"]).all()
    # centred half-sampling intervals hold their estimate and stay in r's range (a percentile interval need not)
    assert ((out["ci low"] <= out["r"] + 1e-12) & (out["r"] <= out["ci high"] + 1e-12)).all()
    assert ((out["ci low"] >= -1) & (out["ci high"] <= 1) & (out["peak − final low"] >= -2)).all()
    assert (out["images"] == V.shape[1]).all()
    two = image_correlations(sets, {"v": (_Feats(V, "v").f,)}, lms[:2], bpb, dataset="toy", k=5, clip_q=None)
    assert two.empty  # fewer than three models: no correlation


@pytest.mark.parametrize("p", [0.01, 0.5])
def test_final_less_reads_the_paired_interval_of_peak_minus_final_over_images(p):
    def verdict(lo, hi, est):
        img = _img(0.3, 0.95).assign(**{"peak − final (capability)": est, "peak − final low": lo,
                                        "peak − final high": hi})
        rows = {r["id"]: r for r in capability.findings(_corr(p), main_dataset="toy", image_corr=img)}
        return rows["3.2/final-less"]

    significant = p < 0.05
    # _corr: peak r = -0.9, final r = -0.45 against bits per byte, so the peak predicts better over draws
    assert verdict(0.1, 0.6, 0.4)["verdict"] == ("reproduces in kind" if significant else "inconclusive")
    row = verdict(-0.1, 0.6, 0.4)  # over images the difference holds 0: never a reproduction
    assert row["verdict"] == "inconclusive" and "held-out peak − final layers" in row["note"]
    assert "[-0.100, 0.600]" in row["note"] and "+0.40 [+0.10" not in row["this build"]
    assert "v +0.40 [-0.10, +0.60]" in row["this build"]
    assert verdict(-0.6, -0.1, -0.2)["verdict"] == "differs"  # the final layers predict better over images
    assert verdict(-0.6, 0.1, -0.2)["verdict"] == "inconclusive"  # the interval reaches 0
    assert "interval over images of (peak − final)" in capability.RULES["3.2/final-less"]


@pytest.mark.parametrize("n", [3, 4])
def test_three_or_four_models_make_the_capability_claims_underpowered_with_the_reason_in_numbers(n):
    """No exact p over n ≤ 4 models is below 0.05 (Spearman's floor 2/n!): the rule "p < 0.05" cannot pass. The
    test ran, so the verdict is "inconclusive" (underpowered), with n, the floors and the models needed, never
    "not testable offline"; no interval over images is read for a correlation whose unit is the model."""
    from prh_lib.stats.correlation import exact_p_floor

    img = _img(0.3, 0.95).assign(**{"peak − final (capability)": 0.4, "peak − final low": 0.1,
                                    "peak − final high": 0.6})
    rows = {r["id"]: r for r in capability.findings(_corr(0.5, n=n), main_dataset="toy", image_corr=img)}
    for cid in ("3.2/capability-trend", "3.2/final-less"):
        r = rows[cid]
        assert r["verdict"] == "inconclusive" and f"n = {n} independent language models" in r["note"], r
        assert f"{exact_p_floor(n, 'spearman'):.3g} for Spearman" in r["note"] and "takes 16 models" in r["note"]
        assert "direction: " in r["note"] and r["this build"] != "–"
        assert "over images" not in r["this build"] and "over images" not in r["note"]
    assert "the paper's (alignment grows with capability)" in rows["3.2/capability-trend"]["note"]
    assert "final below peak for every vision model" in rows["3.2/final-less"]["note"]
    falls = {r["id"]: r for r in capability.findings(_corr(0.5, r=0.9, n=n), main_dataset="toy")}
    assert "not the paper's for v" in falls["3.2/capability-trend"]["note"]
    # five models: Spearman's floor 2/120 < 0.05, so the rule can pass and the verdict follows p
    five = {r["id"]: r for r in capability.findings(_corr(0.5, n=5), main_dataset="toy", image_corr=img)}
    assert five["3.2/capability-trend"]["verdict"] == "inconclusive"
    assert capability.too_few_models(5) == ""


def test_a_detectable_difference_beyond_the_range_of_r_is_said_to_be_none():
    """Over few models r's interval over images can span most of [-1, 1]; the difference it "detects" at 80 %
    power is then beyond r's range, and the note says so instead of printing a figure above 1."""
    row = {r["id"]: r for r in capability.findings(_corr(0.01), main_dataset="toy",
                                                   image_corr=_img(-0.9, 0.95))}["3.2/capability-trend"]
    assert row["verdict"] == "inconclusive"
    assert "no difference from 0 within the range of the statistic [-1, 1]" in row["note"], row["note"]
    assert "detects a difference from 0 of" not in row["note"]


def test_image_correlations_give_final_layer_correlations_and_their_paired_difference(tmp_path, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    # the peak's shared signal falls with bits per byte (first layers: 0.3, 1.0; lm2's final, 2.0), while the
    # final layers' rises: the final layers order the models the wrong way round
    V, lms = _planted(((0.3, 3.0), (1.0, 2.5), (3.0, 2.0)))
    sets = SimpleNamespace(parent_ids=lambda ds: [0])
    bpb = {"lm0": 1.0, "lm1": 1.5, "lm2": 2.0}
    out = image_correlations(sets, {"v": (_Feats(V, "v").f,)}, lms, bpb, dataset="toy", k=5, clip_q=None,
                             n_splits=2, n_boot=12)
    for _, r in out.iterrows():
        assert r["final ci low"] <= r["final ci high"] and r["peak − final low"] <= r["peak − final high"]
        # signed so that > 0 means "the peak predicts capability better"; direction -1 for bits per byte
        assert r["peak − final (capability)"] == pytest.approx(-(r["r"] - r["r final"]))
    pe = out[out["method"] == "pearson"].iloc[0]
    assert pe["r"] < -0.9 and pe["r final"] > 0.5  # peak: lower bits per byte aligns more; final: the reverse
    assert pe["peak − final (capability)"] > 1 and pe["peak − final low"] > 0
    shown = capability_intervals.image_display(out)
    assert any(c.startswith("r, final layers") for c in shown.columns) and not shown.isna().any().any()
