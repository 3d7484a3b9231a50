"""Caption-detail controls (prh_lib.lm summaries, prh_lib.pages.appf_caption_detail): truncation, summaries with a cache and visible fallbacks."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from pathlib import Path

from prh_lib import data, extract
from prh_lib import lm as L
from prh_lib.pages import appf_caption_detail as captions
from prh_lib.analysis.captions import study as captions_study
from prh_lib.analysis.captions import intervals as captions_intervals
from prh_lib.stats.intervals import bootstrap_interval
from fixtures.tiny_models import tiny_llama

SOURCES = [
    "a man rides a red bike down a busy street next to parked cars and a bus",
    "two dogs play with a ball on the green grass in a sunny park near a lake",
    "a plate with a sandwich some fries and a glass of cold beer on a wooden table",
]


def test_truncation():
    t = "one two three four five six seven eight nine ten"
    assert L.target_words(t, 0.25) == 2  # round(2.5) -> 2 (banker's rounding)
    assert L.truncate_text(t, 0.5) == "one two three four five"
    assert L.truncate_text(t, 0.01) == "one"  # at least one word
    assert L.truncate_text(t, 1.0) == t
    assert [L.word_count(x) for x in L.truncate_texts(SOURCES, 0.1)] == [2, 2, 2]
    with pytest.raises(ValueError, match="fraction"):
        L.target_words(t, 0)


@pytest.mark.parametrize("raw, clean", [
    ("A dog on grass.", "A dog on grass."),
    ("Summary: A dog on grass.\n\nI hope this helps!", "A dog on grass."),
    ('  "A dog on grass."  ', "A dog on grass."),
    ("Shortened description: a dog", "a dog"),
    ("\n\n  ", ""),
])
def test_clean_generation(raw, clean):
    assert L.clean_generation(raw) == clean


def test_finalize_summaries_falls_back_visibly():
    src = ["a b c d e f g h", "a b c d e f g h", "a b c d e f g h"]
    texts, reasons = L.finalize_summaries(src, ["x y", "", "1 2 3 4 5 6 7 8 9"], 0.25)
    assert texts == ["x y", "a b", "a b"]
    assert reasons == ["", "empty", "not shorter"]
    with pytest.raises(ValueError, match="generations"):
        L.finalize_summaries(src, ["x"], 0.5)


def test_cache_key_covers_every_option():
    base = dict(prompt=L.DEFAULT_PROMPT, system="s", fraction=0.25, texts=SOURCES, decoding={"a": 1})
    p = L.summaries_path("m", "r1", **base)
    assert p == L.summaries_path("m", "r1", **base)
    changed = [L.summaries_path("m", "r2", **base), L.summaries_path("m2", "r1", **base)]
    for key, value in [("prompt", "{n_words} {text}"), ("system", ""), ("fraction", 0.5),
                       ("texts", SOURCES[::-1]), ("decoding", {"a": 2})]:
        changed.append(L.summaries_path("m", "r1", **{**base, key: value}))
    assert len({p, *changed}) == len(changed) + 1


@pytest.fixture(scope="module")
def tiny_generator(tmp_path_factory):
    folder = str(tiny_llama(tmp_path_factory.mktemp("tiny-llm"), SOURCES + [L.DEFAULT_PROMPT], hidden=16))
    return folder, L.load_generator(folder)


def test_summaries_are_shorter_cached_and_deterministic(tiny_generator, tmp_path, monkeypatch):
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    tiny, gen = tiny_generator
    out = L.summarize_texts(SOURCES, fractions=[0.25, 0.5], model=tiny, generator=gen, batch_size=2)
    assert list(out) == [0.25, 0.5]
    s = out[0.25]
    assert len(s.texts) == len(SOURCES) and s.fraction == 0.25
    for src, text, reason in zip(SOURCES, s.texts, s.fallback):
        assert 1 <= L.word_count(text) < L.word_count(src)
        if reason:
            assert text == L.truncate_text(src, 0.25)
    assert s.n_fallback == sum(bool(r) for r in s.fallback)
    assert s.meta["max_new_tokens"] == [L.max_new_tokens_for(L.target_words(t, 0.25)) for t in SOURCES]
    # one cache file per fraction, recording how the summaries were made
    assert s.path.is_file() and s.path.is_relative_to(tmp_path / "summaries") and out[0.5].path != s.path
    doc = json.loads(s.path.read_text())
    assert doc["prompt"] == L.DEFAULT_PROMPT and doc["model"] == tiny and doc["fraction"] == 0.25
    assert doc["revision"] == gen[2] and doc["sources"] == SOURCES and doc["raw"] == list(s.raw)

    def no_model():
        raise AssertionError("a cached result must not load the generator")

    again = L.summarize_texts(SOURCES, fractions=[0.5, 0.25], model=tiny, generator=no_model)
    assert list(again) == [0.5, 0.25]
    assert again[0.25].texts == s.texts and again[0.25].fallback == s.fallback and again[0.5].raw == out[0.5].raw
    # a fraction on its own, another batch size, no cache: the same greedy generations
    alone = L.summarize_texts(SOURCES, fractions=[0.5], model=tiny, generator=gen, batch_size=1, cache=False)
    assert alone[0.5].raw == out[0.5].raw and alone[0.5].path is None
    # only the missing fraction is generated and cached
    more = L.summarize_texts(SOURCES, fractions=[0.25, 0.75], model=tiny, generator=gen)
    assert more[0.25].raw == s.raw and more[0.75].meta["generated_with"] == [0.75]
    assert len(list((tmp_path / "summaries").rglob("*.json"))) == 3


def test_greedy_generate_equals_transformers_generate(tiny_generator):
    """The shared-prefix decoder gives, prompt by prompt, what ``generate`` gives on each prompt alone."""
    import torch

    _, (module, tok, _) = tiny_generator
    prompts = [[f"{t} shorten to {n} words" for n in (2, 5, 11)] for t in SOURCES]
    budgets = [[3, 6, 9], [1, 4, 12], [5, 5, 5]]
    got = L.greedy_generate(module, tok, prompts, budgets, batch_size=2, add_special_tokens=True)
    for row_p, row_b, row_g in zip(prompts, budgets, got):
        for p, b, g in zip(row_p, row_b, row_g):
            enc = tok(p, return_tensors="pt")
            with torch.inference_mode():
                ref = module.generate(**enc, max_new_tokens=b, do_sample=False, pad_token_id=tok.pad_token_id)
            assert g == tok.decode(ref[0, enc["input_ids"].shape[1]:], skip_special_tokens=True), p
    with pytest.raises(ValueError, match="rectangular"):
        L.greedy_generate(module, tok, [["a"], ["b", "c"]], [[1], [1, 1]])


@pytest.mark.parametrize("kwargs, match", [
    ({"fractions": [1.0]}, "fractions"),
    ({"fractions": [0.5, 0.5]}, "fractions"),
    ({"prompt": "no fields"}, "n_words"),
    ({"batch_size": 0}, "batch_size"),
])
def test_summarize_rejects_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        L.summarize_texts(SOURCES, generator=lambda: None, **kwargs)
    with pytest.raises(ValueError, match="non-empty"):
        L.summarize_texts(["a b", " "], generator=lambda: None)


def test_detail_variants_without_a_generator():
    ds = data.load_dataset("coco-folder")
    variants, summaries = captions_study.detail_variants(ds, n=12, seed=1, max_captions=3, fractions=[0.25, 0.5],
                                                         summary_model=None, summary_rows=[0, 3, 5])
    assert summaries == {}
    assert list(variants) == ["concat-1", "concat-2", "concat-3", "concat-1 (subset)", "concat-2 (subset)",
                              "concat-3 (subset)", "truncation-1", "summary-1", "truncation-0.25", "truncation-0.5"]
    assert variants["concat-2 (subset)"]["pairs"].texts == tuple(variants["concat-2"]["pairs"].texts[i]
                                                                 for i in (0, 3, 5))
    c1, c3 = variants["concat-1"]["pairs"], variants["concat-3"]["pairs"]
    assert c1.sample_ids == c3.sample_ids and len(c1) == 12
    assert all(b.startswith(a) and len(b) > len(a) for a, b in zip(c1.texts, c3.texts))
    src = variants["truncation-1"]["pairs"]
    assert src.sample_ids == tuple(c3.sample_ids[i] for i in (0, 3, 5)) and src.texts[1] == c3.texts[3]
    t = variants["truncation-0.25"]["pairs"]
    assert t.sample_ids == src.sample_ids and t.caption_policy == "truncate-0.25"
    assert all(L.word_count(a) < L.word_count(b) for a, b in zip(t.texts, src.texts))
    assert {v["control"] for v in variants.values()} == {"more detail", "more detail (subset)", "truncation",
                                                         "summary"}
    full, _ = captions_study.detail_variants(ds, n=12, seed=1, max_captions=2, fractions=[0.5], summary_model=None)
    assert list(full) == ["concat-1", "concat-2", "truncation-1", "summary-1", "truncation-0.5"]


def test_summary_report():
    s = L.Summaries(("x y", "a b"), ("x y", ""), ("", "empty"), 0.25, "m", "r", "p", "s")
    rep = captions.summary_report({0.25: s}, ["a b c d e f g h", "a b c d e f g h"])
    assert rep.loc[0.25, "fallbacks"] == 1 and rep.loc[0.25, "reasons"] == "empty: 1"
    assert rep.loc[0.25, "achieved fraction"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="rows"):
        captions.summary_report({0.25: s}, ["a"])


def _text_features(texts, ids, name):
    """Deterministic per-text stand-in features (2 layers), so that rows never depend on the batch."""
    import hashlib

    import torch

    from prh_lib.extract import LayerFeatures

    rows = [np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)).normal(size=(2, 6))
            for t in texts]
    values = torch.as_tensor(np.stack(rows, axis=1), dtype=torch.float32)
    return LayerFeatures(values, ("embed", "layer.1"), tuple(ids), {"model": name})


def test_detail_alignment_reuses_rows_and_scores_each_variant(monkeypatch):
    from prh_lib import extract, models
    from prh_lib.metrics import mutual_knn_layerwise

    calls, loads = [], []

    def fake_extract_features(model, pairs, **options):
        assert model == "loaded lang"
        calls.append(pairs.caption_policy)
        return _text_features(pairs.texts, pairs.sample_ids, "lang")

    monkeypatch.setattr(extract, "extract_features", fake_extract_features)
    monkeypatch.setattr(extract, "features_path",
                        lambda model, pairs, **k: Path(f"/nonexistent/{pairs.text_fingerprint()}.safetensors"))
    monkeypatch.setattr(extract, "save_features", lambda *a, **k: None)
    monkeypatch.setattr(models, "load_model", lambda name, **k: loads.append(name) or f"loaded {name}")
    ds = data.load_dataset("coco-folder")
    variants, _ = captions_study.detail_variants(ds, n=20, seed=2, max_captions=2, fractions=[0.5], summary_model=None,
                                                 summary_rows=list(range(0, 20, 2)))
    vision = {"vis": _text_features([s + "img" for s in variants["concat-1"]["pairs"].sample_ids],
                                    variants["concat-1"]["pairs"].sample_ids, "vis")}

    class Tok:
        def __call__(self, texts, add_special_tokens=False, verbose=True):
            return {"input_ids": [t.split() for t in texts]}

    table = captions_study.detail_alignment(vision, variants, ["lang"], k=3, clip_q=None, tokenizers={"lang": Tok()})
    # only texts not seen before are extracted: concat-1, concat-2, the truncation; subsets reuse rows
    assert calls == ["concat", "concat", "truncate-0.5"]
    assert loads == ["lang"]  # the language model is loaded once for every variant
    assert len(table) == len(variants)
    row = table.set_index("variant").loc["concat-2 (subset)"]
    pairs = variants["concat-2 (subset)"]["pairs"]
    direct = mutual_knn_layerwise(vision["vis"].rows(range(0, 20, 2)).values,
                                  _text_features(pairs.texts, pairs.sample_ids, "lang").values, k=3)
    assert row["peak"] == pytest.approx(np.nanmax(direct)) and row["n"] == 10
    assert row["tokens"] == pytest.approx(np.mean([L.word_count(t) for t in pairs.texts]))
    assert row["chance"] == pytest.approx(3 / 9)
    assert table.set_index("variant").loc["summary-1", "peak"] == table.set_index("variant").loc[
        "concat-2 (subset)", "peak"]  # the same texts on the same images
    bad = {"vis": vision["vis"].rows(range(5))}
    with pytest.raises(ValueError, match="without vis features"):
        captions_study.detail_alignment(bad, variants, ["lang"], k=3, clip_q=None, tokenizers={"lang": Tok()})

    # a variant whose every text is the same (a summariser that ignores its input) has no neighbourhoods: its
    # score is NaN and says so, and the other variants are still scored
    same = {name: {**v, "pairs": dataclasses.replace(v["pairs"], texts=("a photo",) * len(v["pairs"]))}
            if name == "truncation-0.5" else v for name, v in variants.items()}
    calls.clear()
    with pytest.warns(RuntimeWarning, match="degenerate"):
        t2 = captions_study.detail_alignment(vision, same, ["lang"], k=3, clip_q=None,
                                             tokenizers={"lang": Tok()}).set_index("variant")
    assert np.isnan(t2.loc["truncation-0.5", "peak"]) and t2.loc["truncation-0.5", "peak layers"].startswith("undefined")
    assert np.isnan(t2.loc["truncation-0.5", "corrected peak"])
    assert t2.drop(index="truncation-0.5")["peak"].notna().all()


def test_torch_threads_is_scoped():
    import torch

    before = torch.get_num_threads()
    with extract.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError):
        with extract.torch_threads(1):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before
    with extract.torch_threads(None):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        with extract.torch_threads(0):
            pass


def test_study_variants_over_draws_share_parents_and_rotate_caption_draws():
    specs = [{"name": "caps", "source": "coco-folder", "n_pairs": 10, "repetitions": 2, "draws": "captions"},
             {"name": "seeds", "source": "coco-folder", "n_pairs": 10, "repetitions": 2}]
    draws = data.study_draws(specs)
    variants, summaries = captions_study.study_variants(specs, draws, max_captions=3, fractions=[0.5],
                                                        summary_model=None)
    assert summaries == {}
    scored = {n: v for n, v in variants.items() if v["score"]}
    parents = {n: v for n, v in variants.items() if not v["score"]}
    # caption draw r starts its concatenations at caption r: draw 1's one-caption text is draw 0's second caption
    c0, c1 = scored["caps/0/concat-1"]["pairs"], scored["caps/1/concat-1"]["pairs"]
    assert c0.sample_ids == c1.sample_ids and c0.texts != c1.texts
    assert all(b in a for a, b in zip(scored["caps/0/concat-2"]["pairs"].texts, c1.texts))
    # seeded draws: other images, same caption order; every scored text occurs in a parent on its image
    s0, s1 = scored["seeds/0/concat-1"]["pairs"], scored["seeds/1/concat-1"]["pairs"]
    assert set(s0.sample_ids) != set(s1.sample_ids)
    for name, v in scored.items():
        offset = v["draw"] if v["dataset"] == "caps" else 0
        var = "concat-3" if v["variant"] == "truncation-1" else v["variant"]  # the source is the longest text
        (p,) = [p for key, p in parents.items() if key == f"{v['dataset']}/all@{offset}/{var}"]
        text_of = dict(zip(p["pairs"].sample_ids, p["pairs"].texts))
        assert all(text_of.get(sid) == t for sid, t in zip(v["pairs"].sample_ids, v["pairs"].texts)), name
    with pytest.raises(ValueError, match="max_captions"):
        captions_study.study_variants(specs, draws, max_captions=0, summary_model=None)


@pytest.mark.parametrize("models", [("a", "b"), ("a", "b", "c")])
def test_study_findings_follow_the_numbers(models):
    from scipy.stats import kendalltau

    rows = []
    for lm_name, base in zip(models, (0.3, 0.2, 0.1)):
        for level in (0.1, 0.5, 1.0):
            rows.append({"dataset": "d", "vision model": "v", "language model": lm_name, "control": "summary",
                         "level": level, "peak": base * (0.5 + level / 2), "peak std": 0.001, "n_draws": 5})
    (row,) = captions.findings(pd.DataFrame(rows))
    # two models give one comparison: the order cannot be decided; three can
    assert row["verdict"] == ("inconclusive" if len(models) == 2 else "reproduces in kind"), row["note"]
    assert "Kendall τ" in row["rule"]
    if len(models) == 2:  # τ of two values is ±1: the page says kept / swapped instead
        assert "d, v: kept at 0.1" in row["this build"] and "+1.00" not in row["this build"]
    else:
        assert "+1.00 at 0.1" in row["this build"]
    flipped = pd.DataFrame(rows)
    flipped.loc[(flipped["language model"] == "b") & (flipped["level"] == 0.1), "peak"] = 0.29
    row = captions.findings(flipped)[0]
    assert row["verdict"] == "differs"  # b's score rises as its text shortens (and the order changes)
    swapped = pd.DataFrame(rows)  # every score drops, but a falls to the bottom at the shortest level
    swapped.loc[(swapped["language model"] == "a") & (swapped["level"] == 0.1), "peak"] = 0.01  # τ < 0
    row2 = captions.findings(swapped)[0]
    # an order change fails the claim with three models; with two it is one comparison without an interval
    assert row2["verdict"] == ("inconclusive" if len(models) == 2 else "differs")
    tau = kendalltau([0.3, 0.2, 0.1][:len(models)], [0.165, 0.29, 0.055][:len(models)]).statistic
    # scipy's τ-b, reported as computed; with two models as what it means (-1: swapped)
    assert (f"{tau:+.2f} at 0.1" if len(models) > 2 else "swapped at 0.1") in row["this build"]
    rising = pd.DataFrame(rows).assign(peak=lambda t: 1 - t["peak"])
    assert captions.findings(rising)[0]["verdict"] == "differs"  # shorter texts align more


def test_the_order_verdict_uses_the_interval_over_images():
    rows = []
    for lm_name, base in zip(("a", "b", "c"), (0.3, 0.2, 0.1)):
        for level in (0.1, 0.5, 1.0):
            rows.append({"dataset": "d", "vision model": "v", "language model": lm_name, "control": "summary",
                         "level": level, "peak": base * (0.5 + level / 2), "peak std": 0.001, "n_draws": 5})
    summary = pd.DataFrame(rows)

    def iv(low):
        return pd.DataFrame([{"dataset": "d", "draw": 0, "vision model": "v", "control": "summary", "level": lv,
                              "tau": 1.0, "low": low, "high": 1.0, "n_lms": 3, "n": 40, "n_boot": 50}
                             for lv in (0.1, 0.5)])

    assert captions.findings(summary)[0]["verdict"] == "reproduces in kind"  # the means alone pass
    assert "no interval over images" in captions.findings(summary)[0]["note"]
    ok = captions.findings(summary, order_intervals=iv(0.33))[0]
    assert ok["verdict"] == "reproduces in kind" and "over images" in ok["this build"]
    open_ = captions.findings(summary, order_intervals=iv(-0.33))[0]  # the images can reverse the order
    assert open_["verdict"] == "inconclusive" and "over images, cannot decide" in open_["note"]
    # an interval of another control is not read
    assert captions.findings(summary, order_intervals=iv(-0.33).assign(control="truncation"))[0]["verdict"] == \
        "reproduces in kind"


def test_quiet_silences_library_logs_and_restores_them(capsys):
    import logging
    import warnings

    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    with L.quiet():
        logging.getLogger("transformers").warning("Loading weights")
        warnings.warn("a deprecation", FutureWarning)
        import sys

        print("stderr noise", file=sys.stderr)
    assert capsys.readouterr().err == ""
    assert hf_logging.get_verbosity() == before
    with pytest.raises(RuntimeError):
        with L.quiet():
            print("why it failed", file=__import__("sys").stderr)
            raise RuntimeError("boom")
    assert "why it failed" in capsys.readouterr().err


def _two_model_summary(levels=(0.1, 1.0)):
    """Means over draws of two language models whose peaks both drop with the text and keep their order."""
    return pd.DataFrame([{"dataset": "d", "vision model": "v", "language model": lm, "control": "summary",
                          "level": level, "peak": base * (0.5 + level / 2), "peak std": 0.001, "n_draws": 5}
                         for lm, base in (("a", 0.3), ("b", 0.2)) for level in levels])


def _margin_rows(full, margins):
    """order_intervals rows of two models: ``full`` = (d_full, low, high), ``margins`` = {level: (m, low, high)}."""
    return pd.DataFrame([{"dataset": "d", "draw": 0, "vision model": "v", "control": "summary", "level": lv,
                          "tau": np.nan, "low": np.nan, "high": np.nan, "lm_a": "a", "lm_b": "b",
                          "full_margin": full[0], "full_low": full[1], "full_high": full[2], "margin": m[0],
                          "margin_low": m[1], "margin_high": m[2], "n_lms": 2, "n": 40, "n_boot": 50}
                         for lv, m in margins.items()], columns=captions_intervals.COLUMNS)


def test_without_an_interval_over_images_two_language_models_leave_the_order_undecided():
    # the means of two models are one comparison: inconclusive whichever way they fall, never "differs" on the order
    summary = _two_model_summary()
    row = captions.findings(summary)[0]
    assert row["verdict"] == "inconclusive", row["note"]
    assert "single comparison" in row["note"] and "no interval over images" in row["note"]
    swapped = summary.copy()
    swapped.loc[(swapped["language model"] == "a") & (swapped["level"] == 0.1), "peak"] = 0.01
    assert captions.findings(swapped)[0]["verdict"] == "inconclusive"
    # a drop that fails still decides it: shorter texts that align more make the claim differ
    assert captions.findings(summary.assign(peak=lambda t: 1 - t["peak"]))[0]["verdict"] == "differs"


def test_two_language_models_read_the_order_as_a_paired_margin_over_images():
    summary = _two_model_summary(levels=(0.1, 0.5, 1.0))
    kept = _margin_rows((0.05, 0.03, 0.07), {0.1: (0.04, 0.02, 0.06), 0.5: (0.045, 0.03, 0.06)})
    row = captions.findings(summary, order_intervals=kept)[0]
    assert row["verdict"] == "reproduces in kind", row["note"]
    assert "single comparison" not in row["note"] and "τ is ±1" not in row["note"]
    assert "d = a − b = +0.050 [+0.030, +0.070] at the full text" in row["this build"]
    assert "margin of a +0.040 [+0.020, +0.060] at 0.1, +0.045 [+0.030, +0.060] at 0.5" in row["this build"]
    assert "Two:" in row["rule"] and "margin" in row["rule"]
    # the leader at the full text keeps its lead at 0.5 but loses it at 0.1, beyond the images' noise: differs
    lost = _margin_rows((0.05, 0.03, 0.07), {0.1: (-0.03, -0.05, -0.01), 0.5: (0.045, 0.03, 0.06)})
    row = captions.findings(summary, order_intervals=lost)[0]
    assert row["verdict"] == "differs" and "fails: d, v: margin of a over b at 0.1" in row["note"], row["note"]
    # b leads at the full text (d < 0): the margin is b's, and the note names it so
    b_leads = _margin_rows((-0.05, -0.07, -0.03), {0.1: (-0.03, -0.05, -0.01), 0.5: (0.045, 0.03, 0.06)})
    assert "margin of b over a at 0.1" in captions.findings(summary, order_intervals=b_leads)[0]["note"]
    # the margin points the right way but its interval holds 0: inconclusive, with what it could detect
    open_ = _margin_rows((0.05, 0.03, 0.07), {0.1: (0.01, -0.01, 0.03), 0.5: (0.045, 0.03, 0.06)})
    row = captions.findings(summary, order_intervals=open_)[0]
    assert row["verdict"] == "inconclusive" and "over images, cannot decide: d, v: margin of a over b at 0.1" in \
        row["note"] and "at 80 % power" in row["note"], row["note"]
    # no order at the full text to keep: inconclusive, whatever the shorter levels say, and the note says why
    unresolved = _margin_rows((0.004, -0.010, 0.018), {0.1: (-0.03, -0.05, -0.01), 0.5: (0.045, 0.03, 0.06)})
    row = captions.findings(summary, order_intervals=unresolved)[0]
    assert row["verdict"] == "inconclusive", row["note"]
    assert ("the two language models' order at the full text is not resolved over images: d = a − b = +0.004 "
            "[-0.010, +0.018]") in row["note"] and "fails" not in row["note"]
    # a drop that fails still decides it, margins or not
    rising = summary.assign(peak=lambda t: 1 - t["peak"])
    assert captions.findings(rising, order_intervals=kept)[0]["verdict"] == "differs"
    assert captions.findings(rising, order_intervals=unresolved)[0]["verdict"] == "differs"


class _Fit:
    """What order_intervals reads of a CrossFitPeak: the held-out peak and its replicates."""

    def __init__(self, heldout, reps):
        self.heldout, self.heldout_reps = float(heldout), np.asarray(reps, dtype=float)


def _order_intervals(monkeypatch, fits, *, levels=(0.1, 0.5, 1.0)):
    """order_intervals on fake features, ``fits[(model, level)]`` standing for every held-out peak."""
    from prh_lib.analysis import heldout

    ids = [f"s{i}" for i in range(40)]

    class Pairs:
        sample_ids = ids

        def __len__(self):
            return len(ids)

    class Vision:
        sample_ids = ids

        def rows(self, idx):
            return ("vision", len(idx))

    variants = {f"truncation-{lv:g}": {"score": True, "control": "truncation", "dataset": "d", "draw": 0,
                                        "level": lv, "pairs": Pairs()} for lv in levels}
    models = sorted({m for m, _ in fits})
    monkeypatch.setattr(captions_intervals, "variant_features",
                        lambda m, vs, **kw: {name: ("lang", m, v["level"]) for name, v in vs.items()})
    monkeypatch.setattr(captions_intervals, "clip_features", lambda f, q: f)
    seen = []

    def crossfit(xs, ys, *, label, **kw):
        seen.append(kw)
        _, m, lv = ys[0]
        return fits[(m, lv)]

    monkeypatch.setattr(heldout, "_crossfit_cached", crossfit)
    out = captions_intervals.order_intervals({"v": Vision()}, variants, models, control="truncation", dataset="d",
                                             draw=0, n_boot=50, seed=3)
    # every fit is asked with the same seed, splits and half-samples: its replicates are the same images
    assert len(seen) == len(fits) and all(kw == seen[0] for kw in seen)
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_order_intervals_of_two_models_are_paired_margins(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    n_boot = 50
    # the images move both models together (a shared term per half-sample, sd 0.05) and each a little on its own
    # (sd 0.002): a lead of 0.02 at the full text and 0.01 at the shorter levels is clear only when the replicates
    # are differenced half-sample by half-sample
    shared = {lv: rng.normal(0, 0.05, n_boot) for lv in (0.1, 0.5, 1.0)}
    peaks = {("a", 1.0): 0.30, ("b", 1.0): 0.28, ("a", 0.5): 0.25, ("b", 0.5): 0.24, ("a", 0.1): 0.20,
             ("b", 0.1): 0.19}
    fits = {(m, lv): _Fit(p, p + shared[lv] + rng.normal(0, 0.002, n_boot)) for (m, lv), p in peaks.items()}
    iv = _order_intervals(monkeypatch, fits)
    assert list(iv.columns) == captions_intervals.COLUMNS and sorted(iv["level"]) == [0.1, 0.5]
    assert iv["tau"].isna().all() and iv["low"].isna().all() and iv["high"].isna().all()
    assert (iv["lm_a"] == "a").all() and (iv["lm_b"] == "b").all() and (iv["n_lms"] == 2).all()
    assert iv["full_margin"].to_numpy() == pytest.approx(0.02)
    for _, r in iv.iterrows():
        assert r["margin"] == pytest.approx(0.01)  # s = +1: a leads at the full text
        assert 0 < r["margin_low"] <= r["margin"] <= r["margin_high"] < 0.02
        assert 0 < r["full_low"] <= r["full_margin"] <= r["full_high"]
        # the same replicates taken unpaired (each model's own interval, or a shuffled pairing) would hold 0
        a_lo, _ = bootstrap_interval(fits[("a", r["level"])].heldout, fits[("a", r["level"])].heldout_reps)
        _, b_hi = bootstrap_interval(fits[("b", r["level"])].heldout, fits[("b", r["level"])].heldout_reps)
        assert a_lo < b_hi
        shuffled = fits[("a", r["level"])].heldout_reps - rng.permutation(fits[("b", r["level"])].heldout_reps)
        assert bootstrap_interval(r["margin"], shuffled)[0] < 0
    summary = pd.DataFrame([{"dataset": "d", "vision model": "v", "language model": m, "control": "truncation",
                             "level": lv, "peak": p, "peak std": 0.001, "n_draws": 5} for (m, lv), p in peaks.items()])
    row = captions.findings(summary, order_intervals=iv)[0]
    assert row["verdict"] == "reproduces in kind", row["note"]
    table = captions_intervals.order_display(iv)
    col = "full-text leader's margin [95 % CI over images]"
    assert col in table.columns and "Kendall τ [95 % CI over images]" not in table
    assert table[col].str.startswith("a over b: +0.010 [").all()  # the leader named, the margin's sign its lead
    unresolved = iv.assign(full_low=-0.01)  # the full-text interval holds 0: no leader, the margins are not read
    shown = captions_intervals.order_display(unresolved)[col]
    assert shown.str.startswith("not read: no leader at the full text (a ahead").all()
    assert table["difference at the full text [95 % CI over images]"].str.startswith("a − b: +0.020 [").all()


def test_order_intervals_of_two_models_follow_the_full_text_leader(monkeypatch):
    # b leads at the full text and falls behind at 0.1: the margin is b's lead, negative at 0.1, and the claim differs
    reps = np.linspace(-0.004, 0.004, 50)
    peaks = {("a", 1.0): 0.28, ("b", 1.0): 0.30, ("a", 0.5): 0.24, ("b", 0.5): 0.25, ("a", 0.1): 0.20,
             ("b", 0.1): 0.17}
    fits = {(m, lv): _Fit(p, p + (reps if m == "a" else reps[::-1])) for (m, lv), p in peaks.items()}
    iv = _order_intervals(monkeypatch, fits).set_index("level")
    assert iv["full_margin"].to_numpy() == pytest.approx(-0.02) and (iv["full_high"] < 0).all()
    assert iv.loc[0.5, "margin"] == pytest.approx(0.01) and iv.loc[0.5, "margin_low"] > 0
    assert iv.loc[0.1, "margin"] == pytest.approx(-0.03) and iv.loc[0.1, "margin_high"] < 0
    summary = pd.DataFrame([{"dataset": "d", "vision model": "v", "language model": m, "control": "truncation",
                             "level": lv, "peak": p, "peak std": 0.001, "n_draws": 5} for (m, lv), p in peaks.items()])
    row = captions.findings(summary, order_intervals=iv.reset_index())[0]
    assert row["verdict"] == "differs" and "margin of b over a at 0.1" in row["note"], row["note"]
    # the same lead of b at the full text, but the images cannot tell the two models apart there: inconclusive
    wide = dict(fits)
    wide[("a", 1.0)] = _Fit(0.28, 0.28 + np.linspace(-0.2, 0.2, 50))
    iv = _order_intervals(monkeypatch, wide)
    assert (iv["full_low"] < 0).all() and (iv["full_high"] > 0).all()
    row = captions.findings(summary, order_intervals=iv)[0]
    assert row["verdict"] == "inconclusive" and "not resolved over images: d = a − b = -0.020 [" in row["note"]


def test_order_intervals_of_three_models_stay_kendall_tau(monkeypatch):
    rng = np.random.default_rng(0)
    peaks = {("a", 1.0): 0.30, ("b", 1.0): 0.20, ("c", 1.0): 0.10, ("a", 0.1): 0.25, ("b", 0.1): 0.15,
             ("c", 0.1): 0.05}
    fits = {(m, lv): _Fit(p, p + rng.normal(0, 0.005, 50)) for (m, lv), p in peaks.items()}
    iv = _order_intervals(monkeypatch, fits, levels=(0.1, 1.0))
    (r,) = iv.to_dict(orient="records")
    assert r["tau"] == 1.0 and r["low"] == 1.0 and r["high"] == 1.0 and r["n_lms"] == 3  # no replicate reorders them
    assert all(np.isnan(r[c]) for c in ("full_margin", "full_low", "full_high", "margin", "margin_low",
                                        "margin_high")) and r["lm_a"] == r["lm_b"] == ""
    table = captions_intervals.order_display(iv)
    assert list(table.columns[:1]) == ["Kendall τ [95 % CI over images]"] and "leader's margin" not in " ".join(table)
    # one replicate in three swaps b and c at the shorter level: τ stays +1, its interval reaches down
    for b in range(0, 50, 3):
        fits[("b", 0.1)].heldout_reps[b], fits[("c", 0.1)].heldout_reps[b] = 0.05, 0.15
    r = _order_intervals(monkeypatch, fits, levels=(0.1, 1.0)).iloc[0]
    assert r["tau"] == 1.0 and r["low"] < 1.0 and r["high"] == 1.0
