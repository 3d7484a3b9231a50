"""The per-model semantic sanity check (issue 44, item 1): precision@k of caption-word retrieval against the
random-init twin, on hand-worked and planted data."""

import numpy as np
import pandas as pd
import pytest

from prh_lib.analysis import sanity
from prh_lib.pages import verdicts as V


def test_salient_words_fold_plurals_need_two_captions_and_drop_words_too_common():
    caps = [["Two dogs run", "a dog on grass", "the cat sleeps"],
            ["a cat on a sofa", "cats sleeping", "a man and a cat"],
            ["a man rides", "man on a horse", "a horse jumps"]]
    s = sanity.salient_words(caps, max_share=1.0)
    assert s == [{"dog"}, {"cat"}, {"man", "horse"}]  # "dogs" folds onto "dog"; "grass" is in one caption only
    assert sanity.salient_words(caps, max_share=0.5) == [{"dog"}, {"cat"}, {"man", "horse"}]
    assert sanity.salient_words(caps + [["a man", "a man"]] * 3, max_share=0.5)[2] == {"horse"}  # "man": 4 of 6


def test_relevance_and_precision_at_k_by_hand():
    rel = sanity.relevance([{"a"}, {"a", "b"}, {"b"}, {"c"}])
    assert rel.tolist() == [[False, True, False, False], [True, False, True, False],
                            [False, True, False, False], [False, False, False, False]]
    X = np.array([[[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0]]])  # nearest: 0->1, 1->0, 2->1, 3->2
    assert sanity.precision_at_k(X, rel, k=1)[0].tolist() == [1.0, 1.0, 1.0, 0.0]
    same = np.ones((1, 4, 2))  # a layer that is the same for every image (a ViT's CLS at embed): undefined
    assert np.isnan(sanity.precision_at_k(same, rel, k=1)).all()
    with pytest.raises(ValueError, match="1 <= k < 4"):
        sanity.precision_at_k(X, rel, k=4)


def _planted(seed=0, n=300, classes=15, noise=2.0):
    rng = np.random.default_rng(seed)
    label = rng.integers(classes, size=n)
    fillers = ["red", "blue", "tall", "small", "wet", "old"]
    caps = [[f"a photo of kind{chr(97 + c)} {rng.choice(fillers)}" for _ in range(4)] for c in label]
    centres = rng.normal(size=(classes, 32))
    trained = np.stack([rng.normal(size=(n, 32)), centres[label] + noise * rng.normal(size=(n, 32))])  # 2 layers
    return caps, {"model": trained, "random": rng.normal(size=(2, n, 32)), "twin": rng.normal(size=(2, n, 32))}


def test_a_noisy_copy_of_the_labels_beats_its_twin_and_a_random_model_does_not():
    caps, feats = _planted()
    rel = sanity.relevance(sanity.salient_words(caps))  # the fillers (about 13 % of images each) are dropped
    df = sanity.sanity_check(feats, {"model": "twin", "random": "twin"}, rel,
                             layers={"model": ("embed", "layer.1")}).set_index("model")
    assert df.loc["model", "chance"] == pytest.approx(rel.sum() / (300 * 299))
    assert df.loc["model", "passes"] and df.loc["model", "low"] > 0.2 and df.loc["model", "layer"] == "layer.1"
    assert df.loc["model", "final margin"] == pytest.approx(df.loc["model", "margin"], abs=0.05)
    assert not df.loc["random", "passes"] and df.loc["random", "low"] < 0 < df.loc["random", "high"]
    assert abs(df.loc["random", "P@k"] - df.loc["random", "chance"]) < 0.03


def test_a_model_checked_again_is_read_from_the_score_cache_with_the_same_row(tmp_path, monkeypatch):
    """A model and its twin checked by two chapters are computed once: the second check reads the first's row."""
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    caps, feats = _planted()
    rel = sanity.relevance(sanity.salient_words(caps))
    calls = []
    margin = sanity._margin
    monkeypatch.setattr(sanity, "_margin", lambda *a, **k: calls.append(1) or margin(*a, **k))
    first = sanity.sanity_check(feats, {"model": "twin"}, rel, layers={"model": ("embed", "layer.1")})
    assert len(calls) == 2  # held-out layer and final layer
    again = sanity.sanity_check({"renamed": feats["model"], "twin": feats["twin"]}, {"renamed": "twin"}, rel,
                                layers={"renamed": ("embed", "layer.1")})
    assert len(calls) == 2 and again["model"].tolist() == ["renamed"]
    pd.testing.assert_frame_equal(again.drop(columns="model"), first.drop(columns="model"))
    monkeypatch.setenv("PRH_SCORE_CACHE", "0")
    pd.testing.assert_frame_equal(sanity.sanity_check(feats, {"model": "twin"}, rel,
                                                      layers={"model": ("embed", "layer.1")}), first)
    assert len(calls) == 4


def test_a_flagged_model_carries_no_verdict_and_is_named_in_the_notes():
    rows = pd.DataFrame({"pair": ["dinov2-small × smollm2-135m", "efficientnet-lite0 × smollm2-135m"]})
    flagged = {"dinov2-small": "dinov2-small fails the sanity check"}
    assert V.without_flagged(rows, flagged)["pair"].tolist() == ["efficientnet-lite0 × smollm2-135m"]
    assert len(V.without_flagged(rows.iloc[:1], flagged)) == 1  # every comparison flagged: shown, not dropped
    assert "fails the sanity check" in V.model_caveats("dinov2-small × smollm2-135m", flagged)
    assert "fails" not in V.model_caveats("efficientnet-lite0 × smollm2-135m", flagged)
    assert V.without_flagged(pd.DataFrame(), flagged).empty  # no held-out rows (heldout_boot = 0): nothing to drop


def test_the_sanity_paragraph_names_the_smallest_margin_and_weak_final_layers_over_datasets():
    t = pd.DataFrame({"dataset": ["a", "a", "b", "b"], "model": ["vit", "lm", "vit", "lm"],
                      "margin": [0.14, 0.12, 0.06, 0.05], "final margin": [0.06, 0.18, 0.02, 0.07],
                      "final low": [0.03, 0.15, 0.01, 0.05], "final high": [0.10, 0.2, 0.04, 0.08]})
    text = V.sanity_text(t, {})
    assert text.startswith("Every model beats its random-init twin on every dataset (smallest margin 0.050, lm on b)")
    assert text.count("keeps less than half") == 1 and "0.060 [0.030, 0.100] on a; 0.020 [0.010, 0.040] on b" in text
    assert V.sanity_text(t, {"lm": "lm fails the sanity check on b"}).startswith("**Models that fail it**: lm fails")
