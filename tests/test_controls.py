"""Control floors (issue 15): the bag-of-words features against scikit-learn, which controls bound which
pair, scores equal to an independent computation, and rows that land in the results table."""

import numpy as np
import pandas as pd
import pytest
import torch

from prh_lib import extract, results
from prh_lib.analysis import controls
from prh_lib.data import Pairs
from prh_lib.extract import LayerFeatures
from prh_lib.metrics import mutual_knn_layerwise, mutual_knn_chance

N, K = 60, 5
WORDS = ["dog", "cat", "horse", "grass", "street", "car", "man", "woman", "red", "blue", "table", "pizza"]


def _pairs(n=N, seed=0):
    rng = np.random.default_rng(seed)
    texts = tuple(" ".join(rng.choice(WORDS, size=6)) for _ in range(n))
    return Pairs("toy", tuple(f"s{i}" for i in range(n)), tuple([None] * n), texts)


def _features(name, layers, modality, n=N):
    values, dims = extract.stack_layers([torch.as_tensor(x, dtype=torch.float32) for x in layers])
    return LayerFeatures(values, tuple(f"layer.{i}" for i in range(len(layers))), tuple(f"s{i}" for i in range(n)),
                         {"model": name, "modality": modality}, dims)


# --------------------------------------------------------------------------------------------- bag of words


def test_tfidf_features_equal_scikit_learn_and_keep_row_order():
    from sklearn.feature_extraction.text import TfidfVectorizer

    pairs = _pairs()
    f = controls.tfidf_features(pairs)
    expected = TfidfVectorizer().fit_transform(list(pairs.texts)).toarray()
    assert f.values.shape == (1, N, expected.shape[1]) and f.layer_labels == ("tfidf",)
    np.testing.assert_allclose(f.values[0].numpy(), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.linalg.norm(expected, axis=1), 1.0, rtol=1e-6)  # L2 rows
    assert f.sample_ids == pairs.sample_ids and f.meta["modality"] == "language"


@pytest.mark.parametrize("d", [3, 8])
def test_tfidf_svd_is_the_truncated_svd_and_is_capped(d):
    pairs = _pairs()
    f = controls.tfidf_features(pairs, svd_components=d, seed=0)
    assert f.values.shape == (1, N, d) and f.layer_labels == (f"tfidf-svd{d}",)
    big = controls.tfidf_features(pairs, svd_components=10_000)
    assert big.values.shape[-1] == len(WORDS) - 1  # min(n, vocabulary) - 1


@pytest.mark.parametrize("svd", [None, 5])
def test_tfidf_from_the_score_cache_equals_a_fresh_computation(svd, tmp_path, monkeypatch):
    """The bag of words is cached by its texts in row order and options: a cached read gives the same
    bytes and metadata as a computation with the cache off, and other captions or another seed are not
    answered from it."""
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    pairs = _pairs()
    monkeypatch.setenv("PRH_SCORE_CACHE", "0")
    fresh = controls.tfidf_features(pairs, svd_components=svd, seed=1)
    monkeypatch.setenv("PRH_SCORE_CACHE", "1")
    first, again = (controls.tfidf_features(pairs, svd_components=svd, seed=1) for _ in range(2))
    assert len(list((tmp_path / "scores").rglob("*.pkl"))) == 1  # computed once, then read
    for f in (first, again):
        assert torch.equal(f.values, fresh.values) and f.meta == fresh.meta and f.layer_labels == fresh.layer_labels
    entries = lambda: len(list((tmp_path / "scores").rglob("*.pkl")))  # noqa: E731
    reordered = controls.tfidf_features(Pairs("toy", pairs.sample_ids[::-1], pairs.images[::-1], pairs.texts[::-1]),
                                        svd_components=svd, seed=1)
    assert entries() == 2  # rows in another order: another entry
    if svd is None:  # each row depends on its caption and the (same) vocabulary only
        assert torch.equal(reordered.values[0], fresh.values[0].flip(0))
    other = controls.tfidf_features(_pairs(seed=1), svd_components=svd, seed=1)
    assert entries() == 3 and not torch.equal(other.values, fresh.values)
    if svd:
        controls.tfidf_features(pairs, svd_components=svd, seed=2)
        assert entries() == 4  # another seed: computed, not read from the first entry


def test_tfidf_rejects_what_it_cannot_vectorise():
    with pytest.raises(ValueError, match="at least 2"):
        controls.tfidf_features(_pairs(n=1))
    with pytest.raises(ValueError, match="svd_components"):
        controls.tfidf_features(_pairs(), svd_components=0)
    empty = Pairs("toy", ("a", "b"), (None, None), ("", ""))
    with pytest.raises(ValueError, match="TF-IDF"):
        controls.tfidf_features(empty)


# --------------------------------------------------------------------------------------------- which controls

MOD = {"v": "vision", "w": "vision", "l": "language", "m": "language"}


def test_a_vision_language_pair_gets_both_random_controls_and_the_lexical_baseline():
    cs = controls.control_comparisons([("v", "l")], MOD, seed=3, svd_components=16)
    got = {(c.x, c.y): c.kind for c in cs}
    assert got == {("v@random-init:3", "l"): "random-vision", ("v", "l@random-init:3"): "random-language",
                   ("v", "tfidf"): "tfidf", ("v", "tfidf-svd16"): "tfidf-svd"}
    assert all(c.pair == ("v", "l") and c.quantity == f"control:{c.kind}" for c in cs)


def test_language_pairs_get_each_model_against_the_bag_of_words_and_vision_pairs_none():
    ll = {(c.x, c.y): c.kind for c in controls.control_comparisons([("l", "m")], MOD, svd_components=None)}
    assert ll == {("l@random-init:0", "m"): "random-language", ("l", "m@random-init:0"): "random-language",
                  ("l", "tfidf"): "tfidf", ("m", "tfidf"): "tfidf"}
    vv = {c.kind for c in controls.control_comparisons([("v", "w")], MOD)}
    assert vv == {"random-vision"}


def test_controls_shared_by_pairs_are_listed_once():
    cs = controls.control_comparisons([("v", "l"), ("v", "m")], MOD, svd_components=None)
    keys = [(c.x, c.y) for c in cs]
    assert len(keys) == len(set(keys)) and keys.count(("v", "tfidf")) == 1
    assert len(cs) == 2 + 2 + 1  # v@r×l, v×l@r, v@r×m, v×m@r, v×tfidf


@pytest.mark.parametrize("pairs, mod, match", [
    ([("v", "l")], {"v": "vision"}, "no modality"),
    ([("v", "l")], {"v": "vision", "l": "audio"}, "no modality"),
    ([("v@random-init:0", "l")], {"v@random-init:0": "vision", "l": "language"}, "already randomly"),
    ([("v", "v")], MOD, "with itself"),
])
def test_control_comparisons_reject_bad_input(pairs, mod, match):
    with pytest.raises(ValueError, match=match):
        controls.control_comparisons(pairs, mod)


def test_floors_of_pair_picks_the_pairs_controls_and_what_each_replaces():
    cs = controls.control_comparisons([("v", "l"), ("l", "m")], MOD, svd_components=None)
    table = pd.DataFrame({"model_x": [c.x for c in cs], "model_y": [c.y for c in cs], "quantity": [c.quantity for c in cs]})
    f = controls.floors_of_pair(table, "v", "l", MOD, svd_components=None)
    assert dict(zip(zip(f["model_x"], f["model_y"]), f["replaced"])) == {
        ("v@random-init:0", "l"): "v", ("v", "l@random-init:0"): "l", ("v", "tfidf"): "l"}
    # l × tfidf belongs to the language pair, not to the vision-language one
    g = controls.floors_of_pair(table, "l", "m", MOD, svd_components=None)
    assert ("l", "tfidf") in set(zip(g["model_x"], g["model_y"])) and len(g) == 4


# --------------------------------------------------------------------------------------------- scores, table


@pytest.fixture(scope="module")
def toy():
    """A vision model driven by the captions' words, a language model likewise, and their random twins."""
    pairs = _pairs()
    bow = controls.tfidf_features(pairs).values[0].numpy()
    rng = np.random.default_rng(1)
    feats = {
        "v": _features("v", [rng.normal(size=(N, 8)), bow @ rng.normal(size=(bow.shape[1], 10))], "vision"),
        "l": _features("l", [bow @ rng.normal(size=(bow.shape[1], 6)) + 0.1 * rng.normal(size=(N, 6))], "language"),
        "v@random-init:0": _features("v@random-init:0", [rng.normal(size=(N, 8))] * 2, "vision"),
        "l@random-init:0": _features("l@random-init:0", [rng.normal(size=(N, 6))], "language"),
    }
    return pairs, feats


def test_scores_equal_the_maximum_of_mutual_knn_over_layer_pairs(toy):
    pairs, feats = toy
    cs = controls.control_comparisons([("v", "l")], {"v": "vision", "l": "language"}, svd_components=5)
    all_feats = controls.control_features(pairs, cs, features=feats, svd_components=5)
    rows = controls.score_controls(all_feats, cs, k=K, n_permutations=49, seed=0)
    assert list(rows["quantity"]) == [c.quantity for c in cs]
    for c, (_, r) in zip(cs, rows.iterrows()):
        expected = np.nanmax(mutual_knn_layerwise(all_feats[c.x].values, all_feats[c.y].values, k=K))
        assert r["score"] == pytest.approx(expected, abs=1e-12)
        assert 0 <= r["calibrated"] <= 1 and 0 < r["p"] <= 1 and 0 <= r["depth_x"] <= 1
    by = dict(zip(rows["kind"], rows["score"]))
    chance = mutual_knn_chance(N, K)
    assert by["random-language"] < 3 * chance  # unrelated random features: near chance
    assert by["tfidf"] > 3 * chance  # the toy vision model is built from the words
    assert rows.loc[rows["kind"] == "tfidf", "preprocessing"].item().endswith("none (bag of words)")


def test_control_floors_write_rows_that_load_back(toy, tmp_path, monkeypatch):
    pairs, feats = toy
    params = {"k": K, "test": "controls"}
    rows = controls.control_floors(feats, [("v", "l")], pairs, chapter="ctl_test", params=params, dataset="toy",
                                   draw=0, draw_seed=0, k=K, n_permutations=19, svd_components=None, clip_q=None,
                                   root=tmp_path)
    back = results.load(root=tmp_path, chapter="ctl_test", params=params, expand_extra=True)
    assert len(back) == len(rows) == 3
    assert set(back["quantity"]) == {"control:random-vision", "control:random-language", "control:tfidf"}
    np.testing.assert_allclose(back.sort_values("quantity")["score"], rows.sort_values("quantity")["score"])
    assert set(back["pair_x"]) == {"v"} and (back["n"] == N).all() and (back["k"] == K).all()
    # a rerun (another run id) with the same parameters replaces its rows
    monkeypatch.setenv("PRH_RUN_ID", "rerun-1")
    controls.control_floors(feats, [("v", "l")], pairs, chapter="ctl_test", params=params, dataset="toy", draw=0,
                            k=K, n_permutations=19, svd_components=None, clip_q=None, root=tmp_path)
    assert len(results.load(root=tmp_path, chapter="ctl_test", params=params)) == 3


def test_missing_control_features_raise(toy):
    _, feats = toy
    cs = controls.control_comparisons([("v", "l")], {"v": "vision", "l": "language"})
    with pytest.raises(KeyError, match="tfidf"):
        controls.score_controls(feats, cs, k=K)


def test_cross_modal_floors_include_the_language_models_random_init_twin():
    """A cross-modal pair is read against its language model's random-init twin and the bag of words."""
    from prh_lib.analysis.heldout import verdict_controls

    modality = {"vis": "vision", "lm": "language", "vis2": "vision"}
    floors = verdict_controls([("vis", "lm"), ("vis", "vis2")], modality, svd_components=None)
    cross = {(c.x, c.y, c.kind) for c in floors[("vis", "lm")]}
    assert {k for *_, k in cross} == {"random-language", "tfidf"}
    assert ("vis", "lm@random-init:0", "random-language") in cross
    assert {c.kind for c in floors[("vis", "vis2")]} == {"random-vision"}
