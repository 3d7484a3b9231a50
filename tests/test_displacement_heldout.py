"""Displacement's best layer pair selected on one half of the images and read on the other."""

import numpy as np
import pytest

from prh_lib.analysis.displacement.heldout import heldout_best_pair, heldout_table
from prh_lib.metrics.displacement import displacement_layerwise
from prh_lib.stats.selection import split_halves

OPTS = {"n_components": 6, "test_fraction": 0.5, "n_pairs": 400, "seed": 3}


def _stacks(rng, n=64, L=3, d=10, shared_at=2):
    """X (L, n, d), Y (L, n, d): only layers ``shared_at`` of both share a latent signal."""
    Z = rng.normal(size=(n, 4))
    X = rng.normal(size=(L, n, d))
    Y = rng.normal(size=(L, n, d))
    X[shared_at] += 2 * Z @ rng.normal(size=(4, d))
    Y[shared_at] += 2 * Z @ rng.normal(size=(4, d))
    return X, Y


def test_point_estimate_equals_a_plain_loop_over_splits_and_directions():
    rng = np.random.default_rng(0)
    X, Y = _stacks(rng)
    r = heldout_best_pair(X, Y, n_splits=2, n_boot=0, **OPTS)
    held, ins = [], []
    for A, B in split_halves(X.shape[1], n_splits=2, seed=OPTS["seed"]):
        MA, MB = displacement_layerwise(X[:, A], Y[:, A], **OPTS), displacement_layerwise(X[:, B], Y[:, B], **OPTS)
        for sel, on in ((MA, MB), (MB, MA)):
            i, j = np.unravel_index(np.nanargmax(sel["cross_model"]), sel["cross_model"].shape)
            held.append((on["cross_model"][i, j], on["pointwise"][i, j]))
            ins.append(np.nanmax(on["cross_model"]))
    held = np.array(held)
    assert r.heldout["cross_model"] == pytest.approx(held[:, 0].mean())
    assert r.heldout["pointwise"] == pytest.approx(held[:, 1].mean())
    assert r.insample_half == pytest.approx(np.mean(ins))
    assert r.selected.sum() == 4 and r.selected[2, 2] == 4  # the planted pair is found on every half
    assert all(np.isnan(v) for v in r.interval())  # no replicates, no interval


def test_unrelated_layers_are_held_out_near_zero_and_selection_inflates_the_in_sample_maximum():
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(4, 80, 10)), rng.normal(size=(5, 80, 10))
    r = heldout_best_pair(X, Y, n_splits=4, n_boot=0, **OPTS)
    assert abs(r.heldout["cross_model"]) < 0.05
    assert r.insample_half > r.heldout["cross_model"] + 0.02


def test_bootstrap_interval_covers_the_planted_value_and_the_gap_is_paired():
    rng = np.random.default_rng(2)
    X, Y = _stacks(rng, n=72)
    r = heldout_best_pair(X, Y, n_splits=2, n_boot=8, n_candidates=3, **OPTS)
    assert r.reps["cross_model"].shape == (8,) and np.isfinite(r.reps["cross_model"]).all()
    lo, hi = r.interval("cross_model")
    assert lo > 0.2 and lo < r.heldout["cross_model"] < hi  # a planted shared signal: well above 0
    gap = r.heldout["cross_model"] - r.heldout["pointwise"]
    d = r.reps["cross_model"] - r.reps["pointwise"]  # paired: the difference of the same replicates
    q_lo, q_hi = np.quantile(d - np.median(d), [0.025, 0.975])  # subsampling: spread around the median, rescaled
    s = np.sqrt(r.subsample_ratio)
    assert r.subsample_ratio == pytest.approx(0.5)
    assert r.gap_interval() == pytest.approx((gap - s * q_hi, gap - s * q_lo))


def test_table_labels_the_in_sample_value_and_shows_the_held_out_one(tmp_path):
    import pandas as pd

    rng = np.random.default_rng(0)
    X, Y = _stacks(rng)
    r = heldout_best_pair(X, Y, n_splits=1, n_boot=4, n_candidates=2, **OPTS)

    class F:  # the one attribute the table reads
        layer_labels = ["embed", "layer.1", "layer.2"]

    ins = pd.DataFrame({"Cross-Model": [0.5], "Pointwise": [0.1]}, index=["x × y"])
    t = heldout_table({"x × y": r}, {"x": F, "y": F}, insample=ins)
    assert t.loc["x × y", "Cross-Model, in-sample (all images)"] == "0.500"
    assert t.loc["x × y", "Cross-Model, held out [95 % CI]"].startswith(f"{r.heldout['cross_model']:.3f} [")
    assert t.loc["x × y", "held-out layer pair (share)"] == "layer.2 × layer.2 (100%)"


def test_a_draw_too_small_for_a_held_out_pair_says_so_in_words_not_an_error():
    """A draw below MIN_SAMPLES (the rehearsal's 20 images) gets a row that says why, next to estimated rows."""
    from prh_lib.analysis.displacement.heldout import MIN_SAMPLES, heldout_best_pairs

    class Feat:
        def __init__(self, values):
            self.values, self.layer_labels = values, ["embed", "layer.1", "layer.2"]

    rng = np.random.default_rng(0)
    small = {"a": Feat(rng.normal(size=(3, MIN_SAMPLES - 12, 4))), "b": Feat(rng.normal(size=(3, MIN_SAMPLES - 12, 4)))}
    out = heldout_best_pairs([("a", "b")], small, n_splits=1, n_boot=2, n_candidates=2, **OPTS)
    assert out == {"a × b": MIN_SAMPLES - 12}
    X, Y = _stacks(rng)
    full = heldout_best_pair(X, Y, n_splits=1, n_boot=4, n_candidates=2, **OPTS)
    t = heldout_table({"x × y": full, "a × b": out["a × b"]}, {"x": Feat(X), "y": Feat(Y), **small})
    assert not t.isna().any().any()
    assert "held out" not in t.columns
    assert t.loc["a × b"].str.contains(f"has {MIN_SAMPLES - 12} images.*at least {MIN_SAMPLES}").all()
    assert t.loc["x × y", "Cross-Model, held out [95 % CI]"].startswith(f"{full.heldout['cross_model']:.3f} [")
    only = heldout_table({"a × b": out["a × b"]}, small)
    assert list(only.columns) == ["held out"]


def test_bad_input_is_refused():
    X = np.zeros((2, 20, 3))
    with pytest.raises(ValueError, match="at least 32"):
        heldout_best_pair(X, X)
    with pytest.raises(ValueError, match="same samples"):
        heldout_best_pair(np.zeros((2, 40, 3)), np.zeros((2, 41, 3)))


def test_subsamples_hold_no_image_twice_so_the_interval_covers_the_estimate():
    """Bootstrap copies of an image on both sides of a measure's whitening split inflate it; subsamples do not."""
    rng = np.random.default_rng(5)
    X, Y = _stacks(rng, n=96)
    r = heldout_best_pair(X, Y, n_splits=2, n_boot=10, n_candidates=2, **OPTS)
    for m in ("cross_model", "pointwise"):
        lo, hi = r.interval(m)
        assert lo < r.heldout[m] < hi
        assert abs(np.nanmedian(r.reps[m]) - r.heldout[m]) < 0.15  # no leak: replicates near the estimate
