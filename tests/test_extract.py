"""Extraction: pooling, batch-size and padding invariance on the real zoo LMs, the feature cache."""

import json

import numpy as np
import pytest
import torch

from prh_lib import data, extract, paths
from prh_lib.extract import forward
from prh_lib.extract import LayerFeatures


# ----------------------------------------------------------------------------------------------- pooling


def test_mean_pool_ignores_padding_even_when_it_holds_nan():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [float("nan"), float("inf")]],
                           [[5.0, 6.0], [float("nan"), 0.0], [7.0, 8.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    pooled = extract.mean_pool(hidden, mask)
    torch.testing.assert_close(pooled, torch.tensor([[2.0, 3.0], [6.0, 7.0]]))


#: one hand-built token sequence per row: hidden[b, t] = [10 b + t, -t]; under right padding row 0 has 3 real tokens
#: (t = 0, 1, 2) and row 1 four (t = 0..3); under left padding the same tokens sit at the end (one pad before row 0)
SEQ = torch.tensor([[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [float("nan"), float("inf")]],
                    [[10.0, 0.0], [11.0, -1.0], [12.0, -2.0], [13.0, -3.0]]])
EXPECTED = {"mean": [[1.0, -1.0], [11.5, -1.5]], "mean-nofirst": [[1.5, -1.5], [12.0, -2.0]],
            "last": [[2.0, -2.0], [13.0, -3.0]]}  # by hand: means of t = 0..2 and 0..3, of t >= 1, the last t


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("pooling", sorted(EXPECTED))
def test_token_poolings_of_a_hand_built_sequence_under_either_padding(pooling, side):
    hidden, mask = SEQ.clone(), torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    if side == "left":  # row 0's three tokens moved right behind one (non-finite) pad
        hidden[0] = SEQ[0, [3, 0, 1, 2]]
        mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    torch.testing.assert_close(extract.mean_pool(hidden, mask, pooling), torch.tensor(EXPECTED[pooling]))


def test_a_pooling_name_keys_its_own_cache_and_keeps_its_random_init_twin():
    from prh_lib import models

    spec = models.parse_model_name("smollm2-135m@pool:last@random-init:0")
    assert (spec.base, spec.pooling, spec.seed, spec.trained.name) == ("smollm2-135m", "last", 0, "smollm2-135m@pool:last")
    assert spec.trained.mean_pooled.name == "smollm2-135m" and models.parse_model_name("smollm2-135m").pooling is None
    pairs = data.Pairs("hand", ("a", "b"), (None, None), ("a dog", "two cats"))
    keys = {}
    for name in ("smollm2-135m", "smollm2-135m@pool:mean-nofirst", "smollm2-135m@pool:last",
                 "smollm2-135m@pool:last@random-init:0"):
        ident = models.resolve_identity(name)
        assert ident["pooling"] == (name.split("@pool:")[1].split("@")[0] if "@pool:" in name else "mean")
        keys[name] = extract.features_path(name, pairs, identity=ident)
    assert len(set(keys.values())) == 4
    for bad in ("smollm2-135m@pool:first", "smollm2-135m@random-init:0@pool:last", "smollm2-135m@pool:last@pool:mean"):
        with pytest.raises(ValueError, match="@pool"):
            models.parse_model_name(bad)
    with pytest.raises(ValueError, match="language model"):
        models.resolve_identity("efficientnet-lite0@pool:last")


def test_cls_and_gap_pool():
    h = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    torch.testing.assert_close(extract.cls_pool(h), h[:, 0])
    fmap = torch.arange(2 * 3 * 2 * 2, dtype=torch.bfloat16).reshape(2, 3, 2, 2)
    out = extract.gap_pool(fmap)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, fmap.float().mean(dim=(2, 3)))
    with pytest.raises(ValueError, match="shape"):
        extract.gap_pool(torch.zeros(3))


# ----------------------------------------------------------------------------------------------- cache


def _features(n=6, layers=3, d=4, seed=0, ids=None):
    g = torch.Generator().manual_seed(seed)
    ids = ids or tuple(str(i) for i in range(n))
    return LayerFeatures(torch.randn(layers, n, d, generator=g), ("embed", "layer.1", "layer.2"), ids,
                         {"model": "m", "pooling": "mean"})


def test_save_load_roundtrip_keeps_rows_labels_and_provenance(tmp_path):
    f = _features()
    path = extract.save_features(f, tmp_path / "sub" / "f.safetensors")
    g = extract.load_features(path, expected_sample_ids=f.sample_ids)
    torch.testing.assert_close(g.values, f.values, rtol=0, atol=0)
    assert g.layer_labels == f.layer_labels and g.sample_ids == f.sample_ids
    assert g.meta["model"] == "m" and g.meta["pooling"] == "mean"
    with pytest.raises(extract.FeatureMismatchError, match="other rows"):
        extract.load_features(path, expected_sample_ids=tuple(reversed(f.sample_ids)))
    with pytest.raises(FileNotFoundError, match="no feature file"):
        extract.load_features(tmp_path / "missing.safetensors")


def test_interrupted_write_leaves_no_cache_entry(tmp_path):
    final = tmp_path / "f.safetensors"
    with pytest.raises(RuntimeError):
        with paths.atomic_path(final) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("killed")
    assert not final.exists()
    assert list(tmp_path.iterdir()) == []


def test_check_aligned_names_the_problem():
    a = _features()
    extract.check_aligned(a, _features(seed=1))
    with pytest.raises(extract.FeatureMismatchError, match="different row order"):
        extract.check_aligned(a, a.rows([1, 0, 2, 3, 4, 5]))
    with pytest.raises(extract.FeatureMismatchError, match="different samples"):
        extract.check_aligned(a, _features(ids=tuple("abcdef")))
    with pytest.raises(ValueError, match="do not match"):
        LayerFeatures(torch.zeros(2, 3, 4), ("a",), ("x", "y", "z"))


def test_cache_key_covers_every_option_that_changes_the_numbers(monkeypatch, tmp_path):
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    ds = data.load_dataset()
    p = data.sample_pairs(ds, n=20, seed=0)
    base = extract.features_cache_path("m", "rev1", "language", p, dtype="float32")
    variants = [
        extract.features_cache_path("m2", "rev1", "language", p, dtype="float32"),
        extract.features_cache_path("m", "rev2", "language", p, dtype="float32"),
        extract.features_cache_path("m", "rev1", "language", p, dtype="bfloat16"),
        extract.features_cache_path("m", "rev1", "language", p, dtype="float32", max_length=16),
        extract.features_cache_path("m", "rev1", "language", data.sample_pairs(ds, n=20, seed=1), dtype="float32"),
        extract.features_cache_path("m", "rev1", "language",
                                    data.sample_pairs(ds, n=20, seed=0, caption_policy="random"), dtype="float32"),
    ]
    assert len({base, *variants}) == len(variants) + 1
    assert base == extract.features_cache_path("m", "rev1", "language", data.sample_pairs(ds, n=20, seed=0),
                                               dtype="float32")
    # images do not depend on the caption policy
    vis = extract.features_cache_path("v", "r", "vision", p, dtype="float32")
    assert vis == extract.features_cache_path("v", "r", "vision", data.sample_pairs(ds, n=20, seed=0,
                                              caption_policy="random"), dtype="float32")
    assert str(base).startswith(str(tmp_path))


def test_cache_key_of_a_model_folder_covers_its_config_and_preprocessing_files(monkeypatch, tmp_path):
    """A folder's revision hashes its weights; an edited image processor or config must key apart too."""
    import json as _json

    from fixtures.tiny_models import tiny_dinov2

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    folder = tiny_dinov2(tmp_path / "tiny-dinov2")
    pairs = data.sample_pairs(data.load_dataset(), n=4, seed=0)
    before = extract.features_path(str(folder), pairs)
    assert extract.features_path(str(folder), pairs) == before
    config = folder / "preprocessor_config.json"
    cfg = _json.loads(config.read_text())
    cfg["image_mean"] = [0.0, 0.0, 0.0]  # other normalisation, same weights: other features
    config.write_text(_json.dumps(cfg))
    assert extract.features_path(str(folder), pairs) != before


# ----------------------------------------------------------------------------------------------- real models


@pytest.fixture(scope="module")
def captions():
    ds = data.load_dataset()
    # 40 captions of varied length, including two identical ones
    texts = list(data.sample_pairs(ds, n=39, seed=5, caption_policy="concat", n_captions=1).texts)
    texts[7] = " ".join(ds.captions[0][:3])  # a long one
    texts.append(texts[3])
    return data.Pairs("t", tuple(str(i) for i in range(40)), tuple([None] * 40), tuple(texts))


@pytest.mark.parametrize("model_name", ["smollm2-135m", "minilm-l6"])
def test_same_caption_same_vector_whatever_batch_size_and_padding(model_name, captions, zoo_model):
    model = zoo_model(model_name)
    ref = extract.extract_features(model, captions, batch_size=1, progress=False).values
    assert torch.isfinite(ref).all()
    assert ref.shape[0] == len(model.layer_labels) and model.layer_labels[0] == "embed"
    torch.testing.assert_close(ref[:, 3], ref[:, 39], rtol=0, atol=1e-5)
    for bs in (7, 32):
        for side in ("right", "left"):
            out = extract.extract_features(model, captions, batch_size=bs, padding_side=side, progress=False).values
            torch.testing.assert_close(out, ref, rtol=1e-4, atol=2e-4 * float(ref.abs().max()),
                                       msg=f"{model_name} batch_size={bs} padding={side}")


SHORT = "a cat on a mat"
LONG = " ".join(["the long caption of a brown dog running in a green park"] * 8)


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_padding_tokens_never_reach_the_mean(padding_side, tmp_path):
    """A caption batched with a much longer one (so padded by ~90 tokens) gives its unbatched vector, to 1e-5.

    Runs on a tiny random Llama built offline, so it runs everywhere (the zoo test above skips without the
    zoo packages). A pooling that averages over padded positions too (e.g. ``mean_pool(h, ones_like(mask))``
    in ``_extract_text``, or dividing by the padded length in ``mean_pool``) moves the short caption's
    vector by far more than 1e-5 and fails here.
    """
    from fixtures.tiny_models import tiny_llama
    from prh_lib import models

    model = models.load_model(str(tiny_llama(tmp_path / "tiny-llama", [SHORT, LONG])))
    pairs = data.Pairs("t", ("short", "long", "short-again"), (None,) * 3, (SHORT, LONG, SHORT))
    alone = extract.extract_features(model, pairs.subset([0]), batch_size=1, progress=False).values[:, 0]
    batched = extract.extract_features(model, pairs, batch_size=3, padding_side=padding_side, progress=False).values
    assert len(model.tokenizer(LONG)["input_ids"]) > 8 * len(model.tokenizer(SHORT)["input_ids"])
    for row in (0, 2):
        torch.testing.assert_close(batched[:, row], alone, rtol=0, atol=1e-5,
                                   msg=f"short caption next to a long one, padding {padding_side}")


def test_get_features_caches_and_reuses(monkeypatch, tmp_path):
    from prh_lib import models

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    ds = data.load_dataset()
    pairs = data.sample_pairs(ds, n=12, seed=2)
    first = extract.get_features("efficientnet-lite0", pairs, batch_size=5, progress=False)
    files = list((tmp_path / "features").rglob("*.safetensors"))
    assert len(files) == 1
    meta = extract.load_features(files[0]).meta
    assert meta["model"] == "efficientnet-lite0" and meta["pooling"] == "gap" and meta["dtype"] == "float32"
    assert json.loads(json.dumps(meta))  # plain strings

    def fail(*a, **k):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(models, "load_model", fail)
    again = extract.get_features("efficientnet-lite0", pairs, batch_size=3, progress=False)
    torch.testing.assert_close(again.values, first.values, rtol=0, atol=0)
    assert again.sample_ids == pairs.sample_ids and again.layer_dims == first.layer_dims
    assert np.isfinite(first.values.numpy()).all()
    # CNN stages have different widths: stored zero-padded, sliced back by layer()
    assert first.layer_dims == (32, 16, 24, 40, 80, 112, 192, 320, 1280)
    assert first.layer("stage.1").shape == (12, 16)
    assert float(first.values[1, :, 16:].abs().max()) == 0.0


def test_zero_padding_leaves_knn_and_cka_scores_unchanged():
    from prh_lib.metrics import cka_linear, mutual_knn, mutual_knn_layerwise

    rng = np.random.default_rng(0)
    layers = [torch.tensor(rng.normal(size=(50, d)), dtype=torch.float32) for d in (3, 8, 20)]
    stacked, dims = extract.stack_layers(layers)
    assert dims == (3, 8, 20) and stacked.shape == (3, 50, 20)
    y = torch.tensor(rng.normal(size=(2, 50, 6)), dtype=torch.float32)
    M = mutual_knn_layerwise(stacked, y, k=5)
    for i, layer in enumerate(layers):
        for j in range(2):
            assert M[i, j] == pytest.approx(mutual_knn(layer, y[j], k=5), abs=1e-12)
            assert cka_linear(stacked[i], y[j]) == pytest.approx(cka_linear(layer, y[j]), rel=1e-5)


def test_prefix_servers_point_every_prefix_at_a_sequence_that_extends_it():
    seqs = [[1, 2], [1, 2, 3], [1], [2], [1, 2], [1, 3], [], [2, 1]]
    server = extract.prefix_servers(seqs)
    for i, s in enumerate(seqs):
        longer = seqs[server[i]]
        assert longer[:len(s)] == s  # served by a sequence that starts with it
        assert not any(t != longer and t[:len(longer)] == longer for t in seqs)  # which nothing extends
    assert server[3] == 7 and server[1] == 1 and server[0] == server[4] == 1


def _caption_sets(caps):
    """Each image's first caption, and its two captions joined (the first a token prefix of the second)."""
    first = data.Pairs("t", tuple(f"s{i}" for i in range(len(caps))), (None,) * len(caps), tuple(c[0] for c in caps),
                       caption_policy="first")
    return first, first.with_texts([f"{a} {b}" for a, b in caps], policy="concat-2")


def test_shared_prefix_extraction_equals_each_set_extracted_on_its_own(tmp_path, monkeypatch):
    """Captions, the same captions with a second appended, and truncations: one forward pass per longest text,
    the same features (to float32 round-off) as extracting each set alone, written to each set's own cache file."""
    from fixtures.tiny_models import tiny_llama
    from prh_lib import models

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    caps = [("a dog runs on the grass", "the dog is brown"), ("two cats sleep", "a cat on a sofa"),
            ("a red bus in the street", "a bus stops"), ("a man rides a horse", "a horse and a man")]
    first, both = _caption_sets(caps)
    short = first.with_texts([" ".join(a.split()[:2]) for a, _ in caps], policy="truncate")
    folder = tiny_llama(tmp_path / "tiny-llama", [t for c in caps for t in c])
    model = models.load_model(str(folder))
    assert extract.shares_prefixes(model)
    sets = [first, both, short]
    alone = [extract.extract_features(model, p, batch_size=2, progress=False) for p in sets]

    calls = []
    forward = model.layer_outputs
    monkeypatch.setattr(model, "layer_outputs", lambda **kw: calls.append(kw["input_ids"].shape[0]) or forward(**kw))
    shared = extract.features_for_pairs(model, sets, batch_size=2, progress=False)
    # 4 longest texts run (+ 1 text for the causality check), not 12
    assert sum(calls) == 4 + 1
    for a, b in zip(alone, shared):
        assert b.sample_ids == a.sample_ids and b.meta["shared_prefixes"]
        torch.testing.assert_close(b.values, a.values, rtol=1e-5, atol=1e-5)
    cached = extract.features_for_pairs(str(folder), sets, progress=False)  # each set has its own cache file
    for a, b in zip(shared, cached):
        torch.testing.assert_close(b.values, a.values, rtol=0, atol=0)
    off = extract.features_for_pairs(model, sets, batch_size=2, progress=False, cache=False, share_prefixes=False)
    for a, b in zip(alone, off):
        assert "shared_prefixes" not in b.meta
        torch.testing.assert_close(b.values, a.values, rtol=1e-6, atol=1e-6)


def test_other_token_poolings_are_read_off_the_same_forward_passes(tmp_path, monkeypatch):
    """``poolings``: the mean, mean-without-first and last-token features of caption sets (prefixes of longer texts
    among them, and a one-token text) from one pass over the distinct texts equal each ``<model>@pool:<pooling>``
    extracted on its own (float32 round-off), and are cached under those names."""
    from fixtures.tiny_models import tiny_llama
    from prh_lib import models

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    caps = [("a dog runs on the grass", "the dog is brown"), ("two cats sleep", "a cat on a sofa"),
            ("a red bus in the street", "a bus stops"), ("horse", "a horse and a man")]
    first, both = _caption_sets(caps)
    folder = str(tiny_llama(tmp_path / "tiny-llama", [t for c in caps for t in c]))
    model = models.load_model(folder)
    calls = []
    forward = model.layer_outputs
    monkeypatch.setattr(model, "layer_outputs", lambda **kw: calls.append(kw["input_ids"].shape[0]) or forward(**kw))
    sets = [both, first, first, first, both]
    pools = ["mean", "mean", "last", "mean-nofirst", "last"]
    got = extract.features_for_pairs(model, sets, poolings=pools, batch_size=2, progress=False)
    assert sum(calls) == 4 + 1  # the 4 longest texts (+ 1 for the causality check), not 20
    for pairs, p, feats in zip(sets, pools, got):
        name = models.spec.with_pooling(folder, p)
        alone = extract.extract_features(models.load_model(name), pairs, batch_size=1, progress=False)
        assert feats.meta["model"] == name and feats.meta["pooling"] == p
        torch.testing.assert_close(feats.values, alone.values, rtol=1e-5, atol=1e-5)
        cached = extract.get_features(name, pairs, progress=False)  # read from its own file, nothing extracted
        torch.testing.assert_close(cached.values, feats.values, rtol=0, atol=0)
    # "horse" is one token (no BOS here), read off "horse a horse and a man": no token but the first, zeros
    assert len(model.tokenizer("horse")["input_ids"]) == 1 and not got[3].values[:, 3].any()
    with pytest.raises(ValueError, match="token poolings for 2 sets"):
        extract.features_for_pairs(model, [first, both], poolings=["mean"], progress=False)


def test_fill_cache_keeps_each_model_its_own_pooling_and_shares_a_language_models_passes(tmp_path, monkeypatch):
    """fill_cache: a ViT keeps its CLS token, a causal LM its mean, ``@pool:last`` (and its twin's) the last token;
    the LM and its pooled name are loaded once together for both datasets, the twin and its pooled name once; each
    dataset's files are those of a call on that dataset alone (to float32 round-off: a model used again after another
    dataset's passes may round differently, ~1e-7 relative on the real causal LMs); nothing is loaded when cached."""
    import dataclasses

    from fixtures.tiny_models import tiny_dinov2, tiny_llama
    from prh_lib import models

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    pairs = data.sample_pairs(data.load_dataset(), n=6, seed=0)
    other = dataclasses.replace(data.sample_pairs(data.load_dataset(), n=5, seed=1), dataset="other")
    vit = str(tiny_dinov2(tmp_path / "tiny-dinov2"))
    lm = str(tiny_llama(tmp_path / "tiny-llama", list(pairs.texts + other.texts)))
    names = [vit, lm, f"{lm}@pool:last", f"{lm}@pool:last@random-init:0", f"{lm}@random-init:0"]
    loads = []
    load = models.load_model
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loads.append(a[0]) or load(*a, **k))
    extract.fill_cache([(name, p) for name in names for p in (pairs, other)])
    assert sorted(loads) == sorted([vit, lm, f"{lm}@random-init:0"])
    own = {vit: "cls", lm: "mean", f"{lm}@pool:last": "last", f"{lm}@pool:last@random-init:0": "last",
           f"{lm}@random-init:0": "mean"}
    together = {(name, p.dataset): extract.load_features(extract.features_path(name, p))
                for name in names for p in (pairs, other)}
    for (name, _), f in together.items():
        assert (f.meta["model"], f.meta["pooling"]) == (name, own[name])
    loads.clear()
    extract.fill_cache([(name, p) for name in names for p in (pairs, other)])
    assert loads == []
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "alone"))
    for p in (pairs, other):
        extract.fill_cache([(name, p) for name in names])
        for name in names:
            np.testing.assert_allclose(extract.load_features(extract.features_path(name, p)).values,
                                       together[name, p.dataset].values, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="token poolings .* are a language model's"):
        extract.features_for_pairs(models.load_model(vit), [pairs], poolings=["last"], cache=False, progress=False)


def test_a_model_that_is_not_causal_is_caught_by_the_prefix_check(tmp_path, monkeypatch):
    from fixtures.tiny_models import tiny_llama
    from prh_lib import models

    texts = ["a dog runs", "a dog runs on the grass"]
    model = models.load_model(str(tiny_llama(tmp_path / "tiny-llama", texts)))
    real = model.layer_outputs

    def leaky(**kw):  # every position sees the mean of the whole sequence: not causal
        hs = real(**kw)
        return [h + h.mean(dim=1, keepdim=True) for h in hs]

    monkeypatch.setattr(model, "layer_outputs", leaky)
    with pytest.raises(RuntimeError, match="not causal"):
        forward._extract_text_shared(model, texts, batch_size=2, max_length=None, progress=False)


def test_repeated_sets_of_pairs_are_extracted_once_and_prefetch_fills_the_cache(tmp_path, monkeypatch):
    """The images of five caption draws are one cache file: one extraction, five equal results; prefetching a
    study's draws loads the model once and leaves every draw cached."""
    from fixtures.tiny_models import tiny_llama
    from prh_lib import models
    from prh_lib.analysis import core
    from prh_lib.data.study import Draw

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    texts = ["a dog runs", "two cats sleep", "a red bus", "a man rides a horse"]
    folder = str(tiny_llama(tmp_path / "tiny-llama", texts + ["on the grass"]))
    ids = tuple(f"s{i}" for i in range(4))
    first = data.Pairs("t", ids, (None,) * 4, tuple(texts))
    longer = first.with_texts([t + " on the grass" for t in texts], policy="longer")
    loads, extracted = [], []
    load = models.load_model
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loads.append(a[0]) or load(*a, **k))
    real = extract.extract_features
    monkeypatch.setattr(extract, "extract_features", lambda m, p, **k: extracted.append(p.caption_policy) or real(m, p, **k))

    out = extract.features_for_pairs(folder, [first, first, first], progress=False)
    assert extracted == ["first"] and out[0] is out[1] is out[2]
    assert len(list((tmp_path / "cache" / "features").rglob("*.safetensors"))) == 1

    draws = [Draw("t", r, r, p, True, "test") for r, p in enumerate([first, longer, first])]
    loads.clear()
    core.prefetch_features([(folder, folder)], draws)
    assert loads == [folder]  # once for all draws; `first` was cached already, so only `longer` ran
    assert extract.features_path(folder, longer, dtype="float32").is_file()
    loads.clear()
    core.prefetch_features([(folder, folder)], draws)
    assert loads == []  # everything cached: nothing loaded


def test_shared_prefixes_in_bfloat16_pass_the_check_within_its_round_off(tmp_path):
    """bfloat16 weights round differently for a prefix run alone and inside a longer text (other GEMM shapes):
    about 1e-3 relative, which is not the model being non-causal (forward.prefix_tolerance: 3.1e-2 there)."""
    from fixtures.tiny_models import tiny_llama
    from prh_lib import models

    texts = ["a dog runs", "a dog runs on the grass near a red bus", "two cats sleep", "two cats sleep on a sofa"]
    model = models.load_model(str(tiny_llama(tmp_path / "tiny-llama", texts, hidden=64)), dtype=torch.bfloat16)
    shared = forward._extract_text_shared(model, texts, batch_size=4, max_length=None, progress=False)[0]["mean"]
    alone, _ = forward._extract_text(model, texts, batch_size=1, padding_side="right", max_length=None, progress=False)
    rel = float((shared - alone).abs().max() / alone.abs().max())
    assert rel < forward.prefix_tolerance(torch.bfloat16)


def test_prefix_tolerance_is_round_off_of_the_weights_dtype():
    assert forward.prefix_tolerance(torch.float32) == 1e-3  # float32 round-off is ~1e-6: the floor
    assert forward.prefix_tolerance(torch.bfloat16) == pytest.approx(4 * 2 ** -7)
    assert forward.prefix_tolerance(torch.float16) == pytest.approx(4 * 2 ** -10)


def test_a_feature_file_another_process_is_extracting_is_waited_for_and_read_not_extracted_again(tmp_path, monkeypatch):
    """prh-run executes two notebooks side by side on one cache: when both need the same features, the second
    waits for the first's file (its extraction lock) and reads it, loading no model. A file whose holder gave up
    without writing it is extracted by the waiter."""
    import threading
    import time

    from fixtures.tiny_models import tiny_llama
    from prh_lib import models

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    texts = ["a dog runs", "two cats sleep", "a red bus", "a man rides a horse"]
    folder = str(tiny_llama(tmp_path / "tiny-llama", texts))
    pairs = data.Pairs("t", tuple(f"s{i}" for i in range(4)), (None,) * 4, tuple(texts))
    path = extract.features_path(folder, pairs, dtype="float32")
    reference = extract.features_for_pairs(folder, [pairs], progress=False, cache=False)[0]
    loads = []
    load = models.load_model
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loads.append(a[0]) or load(*a, **k))

    got = {}
    with extract.extraction_lock(path, wait=False) as held:  # "another process" (flock: another open file)
        assert held
        worker = threading.Thread(target=lambda: got.setdefault("f", extract.features_for_pairs(
            folder, [pairs], progress=False)[0]))
        worker.start()
        time.sleep(0.5)
        assert worker.is_alive() and not path.exists()  # it waits rather than extracting the same file
        extract.save_features(reference, path)  # the holder writes the file, then releases the lock
    worker.join(timeout=60)
    assert loads == []  # the waiter read the holder's file
    torch.testing.assert_close(got["f"].values, reference.values, rtol=0, atol=0)

    path.unlink()
    with extract.extraction_lock(path, wait=False):
        worker = threading.Thread(target=lambda: got.update(f=extract.features_for_pairs(folder, [pairs],
                                                                                         progress=False)[0]))
        worker.start()
        time.sleep(0.5)
    worker.join(timeout=60)  # the holder wrote nothing: the waiter extracts it
    assert loads == [folder] and path.is_file()
    torch.testing.assert_close(got["f"].values, reference.values, rtol=1e-6, atol=1e-6)
