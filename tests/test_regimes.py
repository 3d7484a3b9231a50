"""The four regimes (Section 3.3): comparison specs, the score table against an independent computation,
summaries, the figure, and random initialisation reproducible from its seed (tiny models in folders)."""

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from fixtures import tiny_models  # noqa: E402
from prh_lib import extract, figures
from prh_lib.analysis import regimes
from prh_lib.data import Pairs
from prh_lib.extract import LayerFeatures
from prh_lib.metrics import mutual_knn_layerwise
from prh_lib.models import load_model, random_init, resolve_identity

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
        regimes.Comparison("noise-v", "noise-l", "random-init", "noise (seed 0)", 0),
        regimes.Comparison("vis", "lang", "unimodal", "vis × lang"),
        regimes.Comparison("clip:vision", "clip:text", "aligned", "clip (vision × text)"),
        regimes.Comparison("vis", "vis2", "same-modality", "vis × vis2"),
    ]


@pytest.fixture(scope="module")
def table(feats):
    return regimes.regime_table(feats, _comparisons(), k=K, n_permutations=99, alpha=0.05, n_boot=50, seed=0)


# ----------------------------------------------------------------------------------------------- comparisons


def test_regime_comparisons_build_names_labels_and_order():
    cs = regimes.regime_comparisons(unimodal=[["v", "l"], ["v", "m"]], same_modality=[["v", "w"]], seeds=[0, 2],
                                    aligned=["org/clip"])
    assert [c.regime for c in cs] == ["random-init"] * 4 + ["unimodal"] * 2 + ["aligned", "same-modality"]
    assert (cs[0].x, cs[0].y, cs[0].seed, cs[0].label) == ("v@random-init:0", "l@random-init:0", 0, "v × l (seed 0)")
    assert (cs[1].x, cs[1].seed) == ("v@random-init:2", 2)
    assert (cs[6].x, cs[6].y) == ("org/clip:vision", "org/clip:text")
    assert len({c.label for c in cs}) == len(cs)
    only = regimes.regime_comparisons(unimodal=[["v", "l"]], random_init=[["v", "m"]], seeds=[1])
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
        regimes.regime_comparisons(**kwargs)


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
    proj = regimes.projection_table(table)
    assert list(proj.index) == ["clip (vision × text)"]
    assert proj["projection / max"].iloc[0] == pytest.approx(row["projection"] / row["max"])
    assert proj["projection / max"].iloc[0] <= 1


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
        regimes.regime_table(feats, [regimes.Comparison("vis", "lang", "multimodal", "x")], k=K)
    with pytest.raises(ValueError, match="no comparisons"):
        regimes.regime_table(feats, [], k=K)
    with pytest.raises(KeyError, match="missing-model"):
        regimes.regime_table(feats, [regimes.Comparison("vis", "missing-model", "unimodal", "x")], k=K)


# -------------------------------------------------------------------------------------------- summaries, plots


def test_summary_aggregates_per_regime_and_keeps_empty_regimes():
    table = pd.DataFrame({
        "regime": ["unimodal", "unimodal", "random-init", "same-modality"],
        "max": [0.2, 0.4, 0.1, 0.6], "final": [0.1, 0.3, 0.1, 0.5], "calibrated": [0.1, 0.3, 0.0, 0.5],
        "max low": [0.1, 0.3, 0.05, 0.5], "max high": [0.3, 0.5, 0.15, 0.7],
        "calibrated low": [0.0, 0.2, 0.0, 0.4], "calibrated high": [0.2, 0.4, 0.0, 0.6],
    }, index=["a", "b", "c", "d"])
    s = regimes.regime_summary(table)
    assert list(s.index) == list(regimes.REGIMES)
    assert s.loc["unimodal", "n"] == 2 and s.loc["unimodal", "max (mean)"] == pytest.approx(0.3)
    assert (s.loc["unimodal", "max (min)"], s.loc["unimodal", "max (max)"]) == (0.2, 0.4)
    assert s.loc["unimodal", "final (mean)"] == pytest.approx(0.2)
    assert s.loc["aligned", "n"] == 0 and np.isnan(s.loc["aligned", "max (mean)"])
    text = regimes.describe_regimes(s, chance=0.1, missing_note="needs the paper profile")
    assert "0.300" in text and "3.0× chance" in text and "needs the paper profile" in text
    assert "random init (0.100) < unimodal (vision × language) (0.300) < same modality (0.600)" in text
    assert "reach 50% of the same-modality mean" in text and "Every unimodal pair scores above" in text
    assert "Aligned" not in text  # not measured, so not compared

    raw, cal = regimes.regime_groups(table)
    assert list(raw) == [regimes.REGIME_LABELS[r] for r in regimes.REGIMES]
    assert raw[regimes.REGIME_LABELS["aligned"]] == {}
    assert raw[regimes.REGIME_LABELS["unimodal"]]["b"] == (0.4, 0.3, 0.5)
    assert cal[regimes.REGIME_LABELS["unimodal"]]["b"] == (0.3, 0.2, 0.4)

    fig = figures.regime_figure(raw, cal, chance=0.1, missing_note="needs the paper profile")
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert sum(len(c.lines) > 0 for c in ax.containers if hasattr(c, "lines")) == 4  # one errorbar per comparison
        assert any(p.get_hatch() == "//" for p in ax.patches)  # the empty aligned slot
        assert any(t.get_text() == "needs the paper profile" for t in ax.texts)
        assert [t.get_text() for t in ax.get_xticklabels()][2].startswith("aligned")
    assert any(line.get_ydata()[0] == 0.1 for line in fig.axes[0].lines)  # chance line on the raw panel


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


def test_description_compares_aligned_models_only_when_measured():
    table = pd.DataFrame({"regime": ["unimodal", "aligned"], "max": [0.2, 0.35], "final": [0.1, 0.3],
                          "calibrated": [0.1, 0.3]}, index=["u", "a"])
    text = regimes.describe_regimes(regimes.regime_summary(table))
    assert "Aligned vision-language models score above the unimodal mean (0.350 against 0.200)" in text
    assert "**random init**: not run with these parameters" in text
