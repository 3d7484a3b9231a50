"""The four regimes (Section 3.3): comparison specs, the score table against an independent computation,
summaries, the figure, and random initialisation reproducible from its seed (tiny models in folders)."""

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from fixtures import tiny_models  # noqa: E402
from fixtures.heldout_rows import summary_from_stacks
from prh_lib import extract
from prh_lib.pages import figures
from prh_lib.pages import sec3_3_regimes as regimes
from prh_lib.analysis import heldout as analysis_heldout
from prh_lib.analysis import regimes as analysis_regimes
from prh_lib.data import Pairs
from prh_lib.extract import LayerFeatures
from prh_lib.metrics import mutual_knn_layerwise
from prh_lib.models import load_model, random_init, resolve_identity
from prh_lib import formatting

N, K = 60, 5


def _features(name, layers, labels=None):
    values, dims = extract.stack_layers([torch.as_tensor(x, dtype=torch.float32) for x in layers])
    labels = labels or tuple(f"layer.{i}" for i in range(len(layers)))
    return LayerFeatures(values, tuple(labels), tuple(f"s{i}" for i in range(N)), {"model": name}, dims)


@pytest.fixture(scope="module")
def feats():
    """A shared latent drives "vis", "lang", "vis2" and the two towers; "noise-*" are unrelated."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(N, 6))

    def view(noise, d=12):
        return z @ rng.normal(size=(6, d)) + noise * rng.normal(size=(N, d))

    def noise(d=12):
        return rng.normal(size=(N, d))

    return {
        "vis": _features("vis", [noise(), view(2.0), view(0.5)]),
        "lang": _features("lang", [noise(), view(1.0), view(1.5), view(3.0)]),
        "vis2": _features("vis2", [view(0.3), view(1.0)]),
        "noise-v": _features("noise-v", [noise(), noise(), noise()]),
        "noise-l": _features("noise-l", [noise(), noise()]),
        "clip:vision": _features("clip:vision", [noise(), view(1.0), view(0.2, d=8)],
                                 ("embed", "layer.1", "projection")),
        "clip:text": _features("clip:text", [noise(), view(0.2, d=8)], ("embed", "projection")),
    }


def _comparisons():
    return [
        analysis_regimes.Comparison("noise-v", "noise-l", "random-init", "noise (seed 0)", 0),
        analysis_regimes.Comparison("vis", "lang", "unimodal", "vis × lang"),
        analysis_regimes.Comparison("clip:vision", "clip:text", "aligned", "clip (vision × text)"),
        analysis_regimes.Comparison("vis", "vis2", "same-modality", "vis × vis2"),
    ]


@pytest.fixture(scope="module")
def table(feats):
    return analysis_regimes.regime_table(feats, _comparisons(), k=K, n_permutations=99, alpha=0.05, n_boot=50, seed=0)


# ----------------------------------------------------------------------------------------------- comparisons


def test_regime_comparisons_build_names_labels_and_order():
    cs = analysis_regimes.regime_comparisons(unimodal=[["v", "l"], ["v", "m"]], same_modality=[["v", "w"]], seeds=[0, 2],
                                             aligned=["org/clip"])
    assert [c.regime for c in cs] == ["random-init"] * 4 + ["unimodal"] * 2 + ["aligned", "same-modality"]
    assert (cs[0].x, cs[0].y, cs[0].seed, cs[0].label) == ("v@random-init:0", "l@random-init:0", 0, "v × l (seed 0)")
    assert (cs[1].x, cs[1].seed) == ("v@random-init:2", 2)
    assert (cs[6].x, cs[6].y) == ("org/clip:vision", "org/clip:text")
    assert len({c.label for c in cs}) == len(cs)
    only = analysis_regimes.regime_comparisons(unimodal=[["v", "l"]], random_init=[["v", "m"]], seeds=[1])
    assert [(c.x, c.y) for c in only] == [("v@random-init:1", "m@random-init:1"), ("v", "l")]


@pytest.mark.parametrize("kwargs, match", [
    ({"unimodal": []}, "at least one"),
    ({"unimodal": [["v", "v"]]}, "itself"),
    ({"unimodal": [["v"]]}, "pairs of model names"),
    ({"unimodal": ["vl"]}, "pairs of model names"),
    ({"unimodal": [["v", "l"]], "seeds": [0, 0]}, "distinct"),
    ({"unimodal": [["v", "l"]], "seeds": [-1]}, "non-negative"),
    ({"unimodal": [["v", "l"]], "aligned": ["org/clip:text"]}, "tower suffix"),
])
def test_regime_comparisons_reject_bad_specs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        analysis_regimes.regime_comparisons(**kwargs)


# --------------------------------------------------------------------------------------------------- scoring


def test_table_matches_an_independent_layerwise_computation(feats, table):
    for c in _comparisons():
        row = table.loc[c.label]
        scores = mutual_knn_layerwise(feats[c.x].values, feats[c.y].values, k=K)
        i, j = np.unravel_index(np.nanargmax(scores), scores.shape)
        assert row["max"] == pytest.approx(scores[i, j], abs=1e-12)
        assert (row["max layer x"], row["max layer y"]) == (feats[c.x].layer_labels[i], feats[c.y].layer_labels[j])
        assert row["final"] == pytest.approx(scores[-1, -1], abs=1e-12)
        assert row["regime"] == c.regime
        assert 0 <= row["calibrated"] <= 1 and 0 < row["p"] <= 1
        assert row["calibrated low"] <= row["calibrated high"]
        tau = row["threshold"]
        for end in ("low", "high"):
            expected = 0.0 if tau >= 1 else float(np.clip((row[f"max {end}"] - tau) / (1 - tau), 0, 1))
            assert row[f"calibrated {end}"] == pytest.approx(expected, abs=1e-12)


def test_projection_score_only_where_both_models_end_in_the_joint_space(table):
    assert table["projection"].notna().tolist() == [False, False, True, False]
    row = table.loc["clip (vision × text)"]
    assert row["projection"] == row["final"]
    assert row["projection"] <= row["max"]


def test_structure_beats_unrelated_features_and_chance(table):
    chance = K / (N - 1)
    noise, shared = table.loc["noise (seed 0)"], table.loc["vis × lang"]
    assert shared["max"] > noise["max"] and shared["calibrated"] > 0 and shared["p"] <= 0.05
    assert shared["max low"] > chance
    # the maximum over 6 unrelated layer pairs is selected upwards, yet stays near chance
    assert noise["max"] < 3 * chance and noise["calibrated"] < 0.2
    assert table.loc["vis × vis2", "max"] > shared["max"]  # the less noisy views agree more


def test_table_errors(feats):
    with pytest.raises(ValueError, match="unknown regimes"):
        analysis_regimes.regime_table(feats, [analysis_regimes.Comparison("vis", "lang", "multimodal", "x")], k=K)
    with pytest.raises(ValueError, match="no comparisons"):
        analysis_regimes.regime_table(feats, [], k=K)
    missing = analysis_regimes.Comparison("vis", "missing-model", "unimodal", "x")
    with pytest.raises(KeyError, match="missing-model"):
        analysis_regimes.regime_table(feats, [missing], k=K)


# -------------------------------------------------------------------------------------------- summaries, plots


@pytest.fixture(scope="module")
def study(feats, tmp_path_factory):
    """Three draws of the fixture's comparisons written to a results table and read back."""
    from prh_lib import results

    root = tmp_path_factory.mktemp("results")
    tables = []
    for draw in range(3):
        t = analysis_regimes.regime_table(feats, _comparisons(), k=K, n_permutations=19, n_boot=10, seed=draw)
        results.write(analysis_regimes.regime_rows(t, k=K, n=N, clip_q=0.95), chapter="regimes_test", params={"t": 1},
                      dataset="toy", draw=draw, seed=draw, root=root)
        tables.append(t)
    df = results.load(root=root, chapter="regimes_test", params={"t": 1}, expand_extra=True)
    return tables, df


def test_study_summary_equals_a_recomputation_from_the_draws(study):
    tables, df = study
    s = regimes.study_summary(df)
    assert list(s["regime"]) == ["random-init", "unimodal", "aligned", "same-modality"]  # Figure 5 order
    for _, r in s.iterrows():
        vals = np.array([t.loc[r["comparison"], "max"] for t in tables])
        cal = np.array([t.loc[r["comparison"], "calibrated"] for t in tables])
        assert r["score_mean"] == pytest.approx(vals.mean()) and r["score_std"] == pytest.approx(vals.std(ddof=1))
        assert r["calibrated_mean"] == pytest.approx(cal.mean())
        assert r["p_max"] == pytest.approx(max(t.loc[r["comparison"], "p"] for t in tables))
        assert r["n_draws"] == 3 and r["chance"] == pytest.approx(K / (N - 1))
    proj = regimes.study_summary(df, quantity="projection")
    assert list(proj["comparison"]) == ["clip (vision × text)"]
    groups = regimes.regime_groups_over_draws(s)
    raw, cal = groups["toy"]
    assert list(raw) == [analysis_regimes.REGIME_LABELS[r] for r in analysis_regimes.REGIMES]
    v, lo, hi = raw[analysis_regimes.REGIME_LABELS["unimodal"]]["vis × lang"]
    row = s[s["comparison"] == "vis × lang"].iloc[0]
    assert (v, hi - v) == pytest.approx((row["score_mean"], row["score_std"]))


def _floors(unimodal_floor):
    return pd.DataFrame({
        "dataset": "toy", "n": N, "k": K, "kind": ["random-language", "random-vision", "tfidf"],
        "quantity": ["control:random-language", "control:random-vision", "control:tfidf"],
        "model_x": ["vis", "vis@random-init:0", "vis"], "model_y": ["lang@random-init:0", "lang", "tfidf"],
        "score_mean": [unimodal_floor, 0.09, 0.11], "score_std": [0.01, 0.01, 0.01],
        "calibrated_mean": [0.05, 0.0, 0.02], "calibrated_std": [0.0, 0.0, 0.0], "p_max": [0.05, 0.5, 0.2],
        "n_draws": 3, "single_draw": False})


MODALITY = {"vis": "vision", "lang": "language", "vis2": "vision", "noise-v": "vision", "noise-l": "language"}


@pytest.mark.parametrize("floor, above", [(0.1, True), (0.99, False)])
def test_floors_decide_whether_a_score_is_read_as_alignment(study, floor, above):
    _, df = study
    s = regimes.with_floors(regimes.study_summary(df), _floors(floor), MODALITY)
    uni = s[s["regime"] == "unimodal"].iloc[0]
    assert uni["floor"] == pytest.approx(max(floor, 0.11)) and uni["above floors"] is above
    assert s[s["regime"] == "random-init"]["above floors"].isna().all()
    bands = regimes.floor_bands(_floors(floor), MODALITY)
    assert bands["toy"]["random-language"] == pytest.approx((floor, floor, floor))
    text = regimes.describe_study(s, bands, missing_note="needs the paper profile")
    ratio = floor / (K / (N - 1))
    assert f"The trained-vision × random-LM floor is {ratio:.1f}× chance" in text
    assert f"In-sample, {int(above)} of 1 trained comparisons lie above" in text and "it is not the test" in text
    fig = figures.regime_figure(regimes.regime_groups_over_draws(s), chance={"toy": K / (N - 1)}, floors=bands,
                                missing_note="needs the paper profile")
    raw_ax = fig.axes[0]
    assert any(line.get_ydata()[0] == pytest.approx(K / (N - 1)) for line in raw_ax.lines)  # chance
    assert any(line.get_ydata()[0] == pytest.approx(floor) for line in raw_ax.lines)  # the random-LM floor
    assert fig.legends and fig.dpi >= 150
    # Figure 5 draws every regime's own floor, same-modality included (its random-init twins)
    s.loc[s["regime"] == "same-modality", ["floor", "floor kind"]] = [0.42, "random-vision"]
    marks = regimes.regime_floor_marks(s)
    assert marks["toy"][analysis_regimes.REGIME_LABELS["same-modality"]] == (0.42, "random-vision")
    # a random-init comparison is a floor itself
    assert analysis_regimes.REGIME_LABELS["random-init"] not in marks["toy"]
    fig = figures.regime_figure(regimes.regime_groups_over_draws(s), chance={"toy": K / (N - 1)}, floors=bands,
                                regime_floors=marks)
    slot = list(regimes.regime_groups_over_draws(s)["toy"][0]).index(analysis_regimes.REGIME_LABELS["same-modality"])
    segs = [seg for c in fig.axes[0].collections if hasattr(c, "get_segments") for seg in c.get_segments()]
    assert any(np.allclose(seg[:, 1], 0.42) and seg[0, 0] < slot < seg[1, 0] for seg in segs)
    # the floor's kind is named under the figure, not written over the points
    assert "random-vision" not in [t.get_text() for t in fig.axes[0].texts]
    assert any("Highest floor of a regime's own pairs" in t.get_text() and "random-vision" in t.get_text()
               for t in fig.texts)
    # every point is numbered and the key under the figure names its comparison
    n_points = sum(len(p) for p in regimes.regime_groups_over_draws(s)["toy"][0].values())
    assert {str(i) for i in range(1, n_points + 1)} <= {t.get_text() for t in fig.axes[0].texts}
    key = " ".join(t.get_text() for t in fig.texts)
    assert key.startswith("Points: 1 ") and all(c in key for c in s["comparison"])


def _heldout(feats, tmp_path, rand_init_floor):
    """Held-out rows of the fixture's comparisons; the same-modality pair's random-init floor is unrelated noise
    or (``"twin"``) as aligned as the trained pair."""
    v = {m: f.values.numpy() for m, f in feats.items()}
    rng = np.random.default_rng(1)
    floor = (rng.normal(size=v["vis2"].shape) if rand_init_floor == "noise"
             else v["vis2"] + 0.02 * rng.normal(size=v["vis2"].shape))
    return summary_from_stacks(tmp_path, [
        ("noise-v@random-init:0", "noise-l@random-init:0", v["noise-v"], v["noise-l"], "heldout",
         {"regime": "cross-modal"}, []),
        ("vis", "lang", v["vis"], v["lang"], "heldout", {"regime": "cross-modal"}, []),
        ("vis", "vis2", v["vis"], v["vis2"], "heldout", {"regime": "vision-vision"}, []),
        ("vis", "tfidf", v["vis"], rng.normal(size=(1, N, 20)), "heldout:control:tfidf", {"kind": "tfidf"},
         ["vis × lang"]),
        ("vis", "vis2@random-init:0", v["vis"], floor, "heldout:control:random_init", {"kind": "random-init"},
         ["vis × vis2"]),
    ], k=K)


@pytest.mark.parametrize("rand_init_floor", ["noise", "twin"])
def test_claims_are_computed_from_held_out_numbers_and_floors(study, feats, tmp_path, rand_init_floor):
    from prh_lib.pages import claims

    _, df = study
    s = regimes.with_floors(regimes.study_summary(df), _floors(0.1), MODALITY)
    proj = regimes.study_summary(df, quantity="projection")
    # without held-out estimates no Figure 5 claim is tested: in-sample maxima alone decide nothing
    bare = {r["id"]: r for r in regimes.regime_claims(s, proj)}
    for cid in ("3.3/unimodal", "3.3/same-modality", "3.3/random-init"):
        assert bare[cid]["verdict"].startswith("not testable") and "held-out" in bare[cid]["verdict"]
    h = _heldout(feats, tmp_path, rand_init_floor)
    rows = {r["id"]: r for r in regimes.regime_claims(s, proj, heldout=h)}
    chance = K / (N - 1)
    uni = h[h["pair"] == "vis × lang"].iloc[0]
    tf = h[h["pair"] == "vis × tfidf"].iloc[0]
    expect_uni = uni["ci_low"] > 2 * chance and analysis_heldout.floor_margins(h, "vis × lang")["low"].min() > 0
    assert rows["3.3/unimodal"]["verdict"] == ("reproduces in kind" if expect_uni else "inconclusive"), rows[
        "3.3/unimodal"]["note"]
    assert "is not applied to these small models at N = 60" in rows["3.3/unimodal"]["note"]
    assert f"{tf['score']:.3f} (tfidf)" in rows["3.3/unimodal"]["this build"]  # the floor is named, with its value
    same = rows["3.3/same-modality"]
    assert "random-init" in same["rule"]
    if rand_init_floor == "noise":  # the floor is beaten (its test passes); the pair-vs-unimodal test decides alone
        assert "vis × vis2@random-init:0 (random-init floor): needs" not in same["note"]  # not listed as undecided
        diff = analysis_heldout.margin(h, "vis × vis2", "vis × lang")
        assert same["verdict"] == ("reproduces in kind" if diff["low"] > 0 else
                                   "inconclusive" if diff["estimate"] > 0 else "differs"), same["note"]
    else:  # the random-init twin aligns as well as the trained pair: the paired margin's interval holds 0
        m = analysis_heldout.floor_margins(h, "vis × vis2").iloc[0]
        assert m["low"] <= 0 <= m["high"] or m["high"] < 0
        assert same["verdict"] in ("inconclusive", "differs") and "vis2@random-init:0" in same["note"]
    rnd = h[h["pair"].str.contains("@random-init")].iloc[0]
    assert rows["3.3/random-init"]["verdict"] == ("reproduces in kind" if rnd["ci_high"] < 2 * chance else
                                                  "inconclusive" if rnd["score"] < 2 * chance else "differs")
    # its scope is named (both models random-init, vision × language), and the row points to the other random-init
    # comparisons, a random-init vision model against a trained one, with the highest such floor and its score
    r = rows["3.3/random-init"]
    assert "both models random-init, vision × language" in r["claim"]
    assert "both models random-init, vision × language" in r["rule"]
    fl = analysis_heldout.floor_margins(h, "vis × vis2").iloc[0]
    assert f"highest here: vis × vis2@random-init:0 {fl['floor_score']:.3f}" in r["note"], r["note"]
    assert "tested in 3.1/vision-vision and 3.3/same-modality" in r["note"]
    assert "3.3/clip" not in rows  # the fixture's "clip" is no CLIP ViT-L/14 on COCO
    table = claims.claims_table(list(rows.values()), chapter="sec3_3_regimes")
    assert table.loc["3.3/siglip", "verdict"].startswith("not testable offline")
    assert "paired" in table.loc["3.3/same-modality", "test"]


@pytest.mark.parametrize("rand_init_floor", ["noise", "twin"])
def test_the_summary_counts_floors_beaten_from_the_held_out_paired_margins(study, feats, tmp_path, rand_init_floor):
    _, df = study
    s = regimes.with_floors(regimes.study_summary(df), _floors(0.1), MODALITY)
    h = _heldout(feats, tmp_path, rand_init_floor)
    # independent count: a comparison clears its floors when every paired interval's lower end is above 0
    expect = [p for p in ("vis × lang", "vis × vis2") if (analysis_heldout.floor_margins(h, p)["low"] > 0).all()]
    text = regimes.describe_study(s.assign(dataset="toy"), {}, heldout=h)
    assert f"Held out (the verdicts' numbers): {len(expect)} of 2 trained comparisons" in text
    assert "In-sample" not in text  # the in-sample count of means is no longer the page's count
    if rand_init_floor == "twin":  # the twin's margin holds 0: named with its interval
        m = analysis_heldout.floor_margins(h, "vis × vis2").iloc[0]
        assert "vis × vis2 − vis × vis2@random-init:0 (random-init): " + formatting.format_interval(
            m["margin"], m["low"], m["high"]) in text
    # without held-out rows for the dataset, the in-sample count stays, labelled as not the test
    bare = regimes.describe_study(s.assign(dataset="toy"), {})
    assert "Held out" not in bare and ("it is not the test" in bare or "In-sample" not in bare)


# ------------------------------------------------------------------------------------------------ random init


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import timm
    from timm.models import save_for_hf

    root = tmp_path_factory.mktemp("tiny-random")
    torch.manual_seed(0)
    save_for_hf(timm.create_model("resnet10t", pretrained=False, num_classes=10), str(root / "resnet"),
                safe_serialization=True)
    return {
        "llama": tiny_models.tiny_llama(root / "llama", ["a man riding a horse", "two zebras on the grass"]),
        "dinov2": tiny_models.tiny_dinov2(root / "dinov2"),
        "resnet": root / "resnet",
    }


def _floats(model):
    return {k: v for k, v in model.module.state_dict().items() if v.is_floating_point()}


@pytest.mark.parametrize("kind", ["llama", "dinov2", "resnet"])
def test_random_init_is_reproducible_from_its_seed(tiny, kind):
    folder = str(tiny[kind])
    trained = load_model(folder)
    rng_before = torch.get_rng_state()
    a, b, c = random_init(trained, seed=7), random_init(trained, seed=7), random_init(trained, seed=8)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the global RNG is left alone
    fa, fb, fc, ft = (_floats(m) for m in (a, b, c, trained))
    assert fa.keys() == ft.keys()
    assert all(torch.equal(fa[k], fb[k]) for k in fa)
    assert not all(torch.equal(fa[k], fc[k]) for k in fa)
    assert not all(torch.equal(fa[k], ft[k]) for k in fa)
    assert (a.layer_labels, a.pooling, a.modality) == (trained.layer_labels, trained.pooling, trained.modality)
    assert a.revision != trained.revision and a.revision != c.revision

    # by name: the same weights, an identity known without loading, a cache file apart from the trained one
    named = load_model(f"{folder}@random-init:7")
    assert all(torch.equal(fa[k], v) for k, v in _floats(named).items())
    ident = resolve_identity(f"{folder}@random-init:7")
    assert ident == {"name": named.name, "revision": named.revision, "modality": named.modality,
                     "family": named.family, "pooling": named.pooling}
    rng = np.random.default_rng(0)
    pairs = Pairs("tiny", ("s0", "s1", "s2"),
                  tuple(Image.fromarray(rng.integers(0, 255, (30, 30, 3), dtype=np.uint8)) for _ in range(3)),
                  ("a man riding a horse", "two zebras", "a horse on the grass"))
    assert extract.features_path(f"{folder}@random-init:7", pairs) != extract.features_path(folder, pairs)
    assert extract.features_path(f"{folder}@random-init:7", pairs) != \
        extract.features_path(f"{folder}@random-init:8", pairs)
    va, vn = (extract.extract_features(m, pairs, batch_size=2, progress=False).values for m in (a, named))
    assert torch.equal(va, vn)


def test_figure_5_point_labels_never_overlap_however_close_the_points():
    """Four points at nearly the same value in one slot (the random-init regime) and two pairs of near-equal
    same-modality scores: every label's box is disjoint from every other label's in the same panel."""
    import matplotlib
    from matplotlib.text import Text

    matplotlib.use("Agg")
    g = {"random init": {f"r{i} (seed 0)": (0.05 + 0.001 * i, 0.04, 0.06) for i in range(4)},
         "unimodal": {"a × b": (0.163, 0.15, 0.17), "c × d": (0.165, 0.15, 0.18), "e × f": (0.34, 0.33, 0.35)},
         "same modality": {"v1": (0.423, 0.41, 0.43), "v2": (0.426, 0.41, 0.44), "l1": (0.56, 0.55, 0.57),
                           "l2": (0.567, 0.56, 0.58), "l3": (0.70, 0.69, 0.71)}}
    fig = figures.regime_figure({"toy": (g, g)}, chance={"toy": 0.042})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        # the text's own box (an Annotation's extent would include its leader line)
        boxes = [Text.get_window_extent(t, renderer) for t in ax.texts if t.get_text().isdigit()]
        assert len(boxes) == 12
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                assert not boxes[i].overlaps(boxes[j]), (ax.get_title(), i, j)


def test_the_random_init_scope_sentence_stands_without_floors():
    """Without held-out random-init vision floors the pointer still names the scope and where those are tested."""
    text = regimes.random_vision_pointer(pd.DataFrame(), pd.DataFrame(), 0.1)
    assert "both models random-init only" in text and "3.1/vision-vision and 3.3/same-modality" in text
    assert "highest here" not in text


def test_figure_5_reads_the_verdicts_dataset_first_with_at_most_four_panels(study):
    """Three datasets: the one the verdicts read (largest N) comes first, two per figure (raw and calibrated:
    four panels at most)."""
    from types import SimpleNamespace

    import matplotlib.pyplot as plt

    _, df = study
    s = regimes.study_summary(df)
    three = pd.concat([s.assign(dataset=d) for d in ("small", "big", "other")], ignore_index=True)
    draws = [SimpleNamespace(dataset=d, pairs=[0] * n, text_only=False) for d, n in
             (("small", 239), ("big", 1000), ("other", 239))]
    figs = regimes.figure_groups(three, draws)
    assert [list(g) for g in figs] == [["big", "small"], ["other"]]
    for g in figs:
        fig = figures.regime_figure(g, chance={d: 0.01 for d in g})
        assert len([ax for ax in fig.axes if ax.get_visible()]) <= 4
        plt.close(fig)
