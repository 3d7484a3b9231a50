"""Concept sets, classifier rows, and the two procedures on a planted synthetic pair."""

import numpy as np
import pytest

from prh_lib.analysis.concepts import prompts as CO
from prh_lib.analysis.displacement.reference import predicted_measures, reference_procedure, synthetic_pair
from prh_lib.metrics import displacement as D


def test_imagenet_concepts_in_class_order():
    c = CO.imagenet_concepts()
    assert len(c) == 1000 and c.synset.is_unique
    assert c.synset.iloc[0] == "n01440764" and c.lemma.iloc[0] == "tench"
    assert c.lemma.iloc[1] == "goldfish"
    assert CO.concept_prompts(c.iloc[:1]) == ["a photo of a tench"]
    ix = CO.subsample(1000, 600, seed=0)
    assert len(ix) == 600 and np.all(np.diff(ix) > 0)
    assert len(CO.subsample(10, None)) == 10


def test_classifier_rows_missing_model_names_it(tmp_path, monkeypatch):
    from prh_lib.extract import classifier_rows

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        classifier_rows("no-such-model")


@pytest.mark.parametrize("offset", [0.0, 3.0])
def test_two_procedures_on_planted_pair(offset):
    # planted: 16 of 32 latent coordinates shared with correlation 0.9 -> rho = 0.45; mean offsets of
    # norm ~ offset in whitened units. Ours (centred) gives rho for Pointwise and Cross-Model and ~0
    # Cross-Object at any offset; the reference adds the means back: Cross-Model stays rho, Pointwise
    # and Cross-Object follow predicted_measures.
    r, n = 32, 4000
    X, Y, rho = synthetic_pair(n, r=r, n_shared=16, correlation=0.9, offset_a=offset, offset_b=offset, seed=0)
    assert rho == pytest.approx(0.45)
    ours = D.displacement_similarity(X, Y, n_components=r, seed=0)
    assert ours.pointwise == pytest.approx(rho, abs=0.03)
    assert ours.cross_model == pytest.approx(rho, abs=0.03)
    assert ours.cross_object == pytest.approx(0.0, abs=0.03)
    ref = reference_procedure(X, Y, n_components=r, train_size=n // 2, seed=0)
    m = ref.measures()
    pred = predicted_measures(rho, ref.mean_a, ref.mean_b, norm2_a=r)
    assert m["cross_model"] == pytest.approx(rho, abs=0.04)
    assert m["pointwise"] == pytest.approx(pred["pointwise"], abs=0.04)
    assert m["cross_object"] == pytest.approx(pred["cross_object"], abs=0.04)
    if offset == 0.0:
        assert m["pointwise"] == pytest.approx(m["cross_model"], abs=0.04)
    else:  # means added back: the reference's Cross-Object departs from 0
        assert m["cross_object"] > 0.1


def test_half_sample_spread_is_the_standard_error_at_the_full_set():
    # the mean of n = 400 standard normals: SE 0.05, so the 95 % interval is +-1.96 * 0.05 = +-0.098. Halves drawn
    # without replacement vary by sqrt(1/200 - 1/400) = 0.05 around the full mean: the finite-population factor
    # sqrt(f / (1 - f)) = 1 at f = 1/2 (sqrt(f) alone would give +-0.069, too narrow)
    from prh_lib.pages.ch_concepts import _subsample_interval

    x = np.random.default_rng(0).normal(size=400)
    rng = np.random.default_rng(1)
    reps = [x[rng.choice(400, 200, replace=False)].mean() for _ in range(4000)]
    lo, hi = _subsample_interval(float(x.mean()), reps, 0.5)
    assert (hi - lo) / 2 == pytest.approx(1.96 * np.sqrt(1 / 200 - 1 / 400), rel=0.05)
    assert (hi - lo) / 2 == pytest.approx(1.96 * x.std() / 20, rel=0.06)
    assert lo < x.mean() < hi


def test_concept_subsamples_give_intervals_over_concepts_with_a_paired_control():
    from prh_lib.pages import ch_concepts as cp
    from prh_lib.analysis.displacement import procedures as displacement_procedures

    r, n = 16, 400
    X, Y, rho = synthetic_pair(n, r=r, n_shared=8, correlation=0.9, seed=0)
    pairs = {"V-V: a x b": (X, Y)}
    table = cp.measures_with_controls(pairs, n_components=r, seeds=(0, 1))
    sub = cp.concept_subsamples(pairs, n_components=r, seeds=(0, 1), n_sub=12)
    assert len(sub) == 12 * 2 and set(sub["rep"]) == set(range(12)) and sub.attrs["fraction"] == 0.5
    s = cp.summarise_measures(table, sub)
    assert set(s["interval"]) == {"concepts"}
    splits = cp.summarise_measures(table)
    assert set(splits["interval"]) == {"splits"}
    for _, row in s.iterrows():
        for m in ("pointwise", "cross_model", "gap", "control_margin"):
            assert row[m + "_low"] <= row[m] <= row[m + "_high"], (row["procedure"], m)
        # the paired margin over the shuffled control is the measure minus the control, and clearly above 0
        assert row["control_margin"] == pytest.approx(row["cross_model"] - row["cross_model_shuffled"])
        assert row["control_margin_low"] > 0.2
    ours = s[s["procedure"] == displacement_procedures.OURS].iloc[0]
    assert ours["pointwise_low"] < rho < ours["pointwise_high"]
    # the claim reads the interval over concepts and says so
    rows = cp.claim_rows(s, None, None, min_gap=0.05)
    vv = next(r for r in rows if r["id"] == "C/vision-vision")
    assert "interval over concepts" in vv["rule"] and vv["verdict"] == "differs"  # gap ~ 0 < 0.05
    with pytest.raises(ValueError, match="same concepts"):
        cp.concept_subsamples({"a": (X, Y), "b": (X[:10], Y[:10])}, n_sub=2)
    with pytest.raises(ValueError, match="fraction"):
        cp.concept_subsamples(pairs, fraction=1.0)
