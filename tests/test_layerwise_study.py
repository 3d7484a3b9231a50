"""Section 3.1 over draws: rows into the results table, aggregation and verdicts, on hand-made matrices."""

import numpy as np
import pandas as pd
import pytest

from fixtures.heldout_rows import summary_from_stacks
from prh_lib import results
from prh_lib.pages import sec3_1_layerwise as layerwise
from prh_lib.analysis import layerwise as analysis_layerwise
from prh_lib.analysis.core import AlignmentMatrix, PairResult


def _result(scores, x="vis", y="lang"):
    scores = np.asarray(scores, dtype=float)
    m = AlignmentMatrix(scores, tuple(f"l{i}" for i in range(scores.shape[0])),
                        tuple(f"m{j}" for j in range(scores.shape[1])), x, y, "mutual_knn", {"k": 2, "n": 11})
    ctrl = AlignmentMatrix(np.full_like(scores, 0.2), m.x_labels, m.y_labels, x, y, "mutual_knn")
    return PairResult(f"{x} × {y}", m, ctrl, None, None)


def _write(tmp_path, draws):
    for d, mats in enumerate(draws):
        rows = [row for (x, y, mod_x, mod_y), s in mats for row in
                analysis_layerwise.pair_rows(_result(s, x, y), x_modality=mod_x, y_modality=mod_y)]
        results.write(rows, chapter="t31", params={"a": 1}, dataset="toy", draw=d, seed=d, n=11, k=2,
                      metric="mutual_knn", preprocessing="clip(stack, q=0.95)", root=tmp_path)
    return results.load(root=tmp_path, chapter="t31", expand_extra=True)


def test_rows_aggregate_and_verdicts(tmp_path):
    cross = ("vis", "lang", "vision", "language")
    vv = ("vis", "vis2", "vision", "vision")
    df = _write(tmp_path, [
        [(cross, [[0.1, 0.2, 0.3], [0.2, 0.4, 0.3]]), (vv, [[0.5, 0.6], [0.9, 0.7]])],
        [(cross, [[0.1, 0.2, 0.3], [0.2, 0.2, 0.6]]), (vv, [[0.5, 0.6], [0.8, 0.7]])],
    ])
    assert set(df["quantity"]) == set(analysis_layerwise.QUANTITIES)
    assert (df["quantity"] == "layer_pair").sum() == 2 * (6 + 4)
    agg = analysis_layerwise.aggregate_peaks(df)
    c = agg[agg["pair"] == "vis × lang"].iloc[0]
    assert c["regime"] == "cross-modal" and c["n_draws"] == 2
    assert c["peak_mean"] == pytest.approx(0.5) and c["peak_std"] == pytest.approx(np.std([0.4, 0.6], ddof=1))
    assert c["final_mean"] == pytest.approx(0.45) and c["final_is_peak"] == 1  # draw 1 peaks at the final pair
    assert c["chance"] == pytest.approx(2 / 10) and c["shuffled_max_mean"] == pytest.approx(0.2)
    assert c["depth_x_mean"] == pytest.approx(1.0) and c["depth_y_mean"] == pytest.approx(0.75)
    v = agg[agg["pair"] == "vis × vis2"].iloc[0]
    assert v["regime"] == "vision-vision" and v["peak_layers"] == "l1 × m0" and v["peak_layers_draws"] == 2
    rows = {r["id"]: r for r in layerwise.findings(agg, pd.DataFrame(), dataset="toy")}
    # no held-out estimates: no verdict rests on the in-sample peaks alone
    assert all(r["verdict"].startswith("not testable") and "held-out" in r["verdict"] for r in rows.values())
    text = layerwise.describe_findings(agg, list(rows.values()), dataset="toy")
    assert "Verdicts here: not testable offline: " in text and "3.1/final-not-max" in text
    assert "chance-corrected (s − c)/(1 − c) 0.375" in text  # (0.5 − 0.2) / (1 − 0.2)
    table = layerwise.headline_table(agg)
    assert table.loc[("toy", "vis × lang"), "peak"] == "0.500 ± 0.141"


def test_pairs_scored_with_and_without_a_bootstrap_share_the_null_and_only_one_has_an_interval(tmp_path, monkeypatch):
    import torch

    from prh_lib.analysis import core
    from prh_lib.extract.features import LayerFeatures

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    g = torch.Generator().manual_seed(0)
    ids = tuple(f"s{i}" for i in range(30))
    x = LayerFeatures(torch.randn(2, 30, 6, generator=g), ("a", "b"), ids, {"model": "x"})
    y = LayerFeatures(x.values + 0.3 * torch.randn(2, 30, 6, generator=g), ("c", "d"), ids, {"model": "y"})
    with_ci, without = (core.score_pair(x, y, k=3, n_permutations=19, n_boot=b, seed=1, label=f"boot {b}")
                        for b in (10, 0))
    assert with_ci.peak_ci is not None and without.peak_ci is None
    assert with_ci.calibration.calibrated_max == without.calibration.calibrated_max  # the same null, served


def _stack(rng, Z, strengths, d=12):
    """(L, n, d): a latent Z read at each layer with the given strength, plus unit noise."""
    return np.stack([s * Z @ rng.normal(size=(Z.shape[1], d)) + rng.normal(size=(Z.shape[0], d))
                     for s in strengths]).astype(np.float32)


@pytest.mark.parametrize("floor_strength", [0.0, None])
def test_vision_vision_verdict_needs_its_random_init_floor_beaten_by_a_paired_interval(tmp_path, floor_strength):
    """A vision-vision claim passes only when the random-init floor's paired interval excludes 0."""
    rng = np.random.default_rng(0)
    n = 160
    Z = rng.normal(size=(n, 6))
    vis = _stack(rng, Z, [0, .5, 2, 4])
    vis2 = vis + 0.3 * rng.normal(size=vis.shape).astype(np.float32)
    lang = _stack(rng, Z, [0, .2, .5, .3])
    tfidf = _stack(rng, Z, [0.1])
    # the floor: unrelated to the images (0.0), or as aligned as the trained twin (None: vis2 plus a little noise)
    rand = (_stack(rng, Z, [floor_strength] * 4) if floor_strength is not None
            else vis2 + 0.05 * rng.normal(size=vis2.shape).astype(np.float32))
    cross, vv = {"regime": "cross-modal"}, {"regime": "vision-vision"}
    summary = summary_from_stacks(tmp_path, [
        ("vis", "lang", vis, lang, "heldout", cross, []),
        ("vis", "vis2", vis, vis2, "heldout", vv, []),
        ("vis", "tfidf", vis, tfidf, "heldout:control:tfidf", {"kind": "tfidf"}, ["vis × lang"]),
        ("vis", "vis2@random-init", vis, rand, "heldout:control:random_init", {"kind": "random-init"},
         ["vis × vis2"]),
    ])
    df = _write(tmp_path, [[(("vis", "lang", "vision", "language"), [[0.1, 0.2], [0.2, 0.3]]),
                            (("vis", "vis2", "vision", "vision"), [[0.5, 0.6], [0.6, 0.9]])]])
    rows = {r["id"]: r for r in layerwise.findings(analysis_layerwise.aggregate_peaks(df), summary, dataset="toy")}
    r = rows["3.1/vision-vision"]
    assert "random-init" in r["rule"] and "vis2@random-init" in r["this build"]
    if floor_strength == 0.0:
        assert r["verdict"] == "reproduces in kind", r["note"]
    else:  # the floor's paired margin is ~0: the claim cannot pass, and the note names the floor
        assert r["verdict"] in ("inconclusive", "differs") and "vis2@random-init" in r["note"]
    # every detectable-difference figure is attached to the test it belongs to: the widest interval's, named
    # (when that test is decided), or an undecided test's own, right after its name; never a bare, generic one
    assert ("smallest difference from 0 this build detects at 80 % power, on its widest interval (" in r["note"]
            or "(detects a difference from 0 of" in r["note"])
    assert "smallest difference this build detects at 80 % power:" not in r["note"]
    # the cross-modal peak is tested against its bag-of-words floor, with the margin named
    c = rows["3.1/cross-modal-peak"]
    assert "vis × tfidf" in c["this build"] or "tfidf" in c["note"] or "tfidf" in c["this build"]
    later = rows["3.1/later-layers"]
    assert "modal held-out pair" in later["this build"] and "late-third minus early-third share" in later["this build"]
    assert "late third of both models" in later["rule"]


def _peak_at(i, j, shape=(2, 3)):
    """A score matrix whose single maximum is at (i, j)."""
    s = np.full(shape, 0.3)
    s[i, j] = 0.6
    return s


def test_modal_peak_layers_are_each_models_most_frequent_and_name_every_tie(tmp_path):
    # five draws peak at l1 × m2, l1 × m2, l0 × m1, l0 × m1, l1 × m1: the language model's modal layer is m1
    # (3 of 5), the vision model's l1 (3 of 5), and two layer pairs tie at 2 of 5
    cross = ("vis", "lang", "vision", "language")
    cells = [(1, 2), (1, 2), (0, 1), (0, 1), (1, 1)]
    df = _write(tmp_path, [[(cross, _peak_at(i, j))] for i, j in cells])
    r = analysis_layerwise.aggregate_peaks(df).iloc[0]
    assert (r["peak_layer_y"], r["peak_layer_y_draws"]) == ("m1", 3)
    assert (r["peak_layer_x"], r["peak_layer_x_draws"]) == ("l1", 3)
    assert (r["peak_layers"], r["peak_layers_draws"], r["peak_layers_ties"]) == ("l1 × m2 and l0 × m1", 2, 2)
    text = layerwise.describe_findings(analysis_layerwise.aggregate_peaks(df), [], dataset="toy")
    assert "lang peaks at m1 (3 of 5 draws; mean depth" in text
    assert "with vis at l1 (3 of 5 draws; mean depth" in text
    assert "modal layer pairs l1 × m2 and l0 × m1, 2/5 each" in text
    assert "m2 in 2 of 5" not in text  # never one side of a tie
    table = layerwise.headline_table(analysis_layerwise.aggregate_peaks(df))
    assert table.loc[("toy", "vis × lang"), "peak layers"] == "l1 × m2 and l0 × m1 (2/5 each)"
    # one peak in every draw: its layers, no counts
    same = analysis_layerwise.aggregate_peaks(_write(tmp_path / "same", [[(cross, _peak_at(0, 1))]] * 2))
    assert "lang peaks at m1 (depth 0.50) with vis at its input embedding (l0)" in \
        layerwise.describe_findings(same, [], dataset="toy")
    assert layerwise.headline_table(same).iloc[0]["peak layers"] == "l0 × m1 (2/2)"


def test_depth_claims_read_and_print_the_depth_intervals(tmp_path):
    """3.1/language-language passes only when the upper end of the held-out peak's depth interval is below 0.6
    on both sides (the point estimate alone never decides), and the row prints both intervals."""
    from prh_lib.formatting import format_interval

    rng = np.random.default_rng(1)
    n = 120
    Z = rng.normal(size=(n, 6))
    vis = _stack(rng, Z, [0, .3, .6])
    lang = _stack(rng, Z, [0, .2, .4])
    gen = _stack(rng, Z, [2, 4, 1, .5, .2])  # generative model: signal early
    emb = _stack(rng, Z, [2, 4, 1, .5, .2])
    summary = summary_from_stacks(tmp_path, [
        ("vis", "lang", vis, lang, "heldout", {"regime": "cross-modal"}, []),
        ("gen", "emb", gen, emb, "heldout", {"regime": "language-language"}, []),
    ])
    df = _write(tmp_path, [[(("vis", "lang", "vision", "language"), [[0.1, 0.2], [0.2, 0.3]]),
                            (("gen", "emb", "language", "language"), [[0.5, 0.6], [0.6, 0.4]])]])
    agg = analysis_layerwise.aggregate_peaks(df)

    def row(s):
        return {r["id"]: r for r in layerwise.findings(agg, s, dataset="toy")}["3.1/language-language"]

    ll = summary["pair"] == "gen × emb"
    # point estimates below 0.6 on both sides, intervals too: passes, with the intervals printed
    early = summary.copy()
    early.loc[ll, ["depth_x", "depth_x_low", "depth_x_high", "depth_y", "depth_y_low", "depth_y_high"]] = \
        [0.25, 0.1, 0.4, 0.3, 0.2, 0.45]
    r = row(early)
    assert "depth 0.25 [0.10, 0.40] × 0.30 [0.20, 0.45]" in r["this build"]
    assert "upper end below 0.6" in r["rule"] and "depth of" not in r["note"]
    # the same point estimates, but one interval reaches past 0.6: never a pass on the point estimate
    late = early.copy()
    late.loc[ll, "depth_y_high"] = 0.75
    r = row(late)
    assert r["verdict"] in ("inconclusive", "differs") and "gen × emb depth of emb" in r["note"]
    assert "0.30 [0.20, 0.75]" in r["this build"]
    assert "about 0.5" not in r["claim"]  # the claim text says only what the rule tests


def test_a_peak_is_located_only_for_a_pair_that_beats_its_floors(tmp_path):
    """3.1/later-layers reads depths only of cross-modal pairs whose held-out peak beats every floor: a pair whose
    bag-of-words floor is as aligned as it (the floor is the language model itself plus a little noise) is not
    located, and with no pair left the claim is inconclusive, never read from noise."""
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(160, 6))
    vis, lang = _stack(rng, Z, [0, .5, 2, 4]), _stack(rng, Z, [0, .2, .5, .3])
    same = lang + 0.05 * rng.normal(size=lang.shape).astype(np.float32)
    summary = summary_from_stacks(tmp_path, [
        ("vis", "lang", vis, lang, "heldout", {"regime": "cross-modal"}, []),
        ("vis", "tfidf", vis, same, "heldout:control:tfidf", {"kind": "tfidf"}, ["vis × lang"]),
    ])
    df = _write(tmp_path, [[(("vis", "lang", "vision", "language"), [[0.1, 0.2], [0.2, 0.3]])]])
    rows = {r["id"]: r for r in layerwise.findings(analysis_layerwise.aggregate_peaks(df), summary, dataset="toy")}
    later = rows["3.1/later-layers"]
    assert later["verdict"] == "inconclusive" and later["this build"] == "no cross-modal pair beats its floors"
    assert "not located" in later["note"] and "vis × lang" in later["note"] and "depth of" not in later["note"]
    # the same pair against an unrelated floor is located, with its depths
    summary = summary_from_stacks(tmp_path / "b", [
        ("vis", "lang", vis, lang, "heldout", {"regime": "cross-modal"}, []),
        ("vis", "tfidf", vis, _stack(rng, Z, [0.0]), "heldout:control:tfidf", {"kind": "tfidf"}, ["vis × lang"]),
    ])
    later = {r["id"]: r for r in layerwise.findings(analysis_layerwise.aggregate_peaks(df), summary, dataset="toy")}[
        "3.1/later-layers"]
    assert "modal held-out pair" in later["this build"] and "not located" not in later["note"]


def test_claims_about_unimodal_language_models_rest_on_them_and_show_minilm_beside(tmp_path):
    """MiniLM-L6 was trained on COCO and Flickr30k caption pairs: the cross-modal claims read the causal LM even
    when MiniLM aligns more, and the row shows the MiniLM pair beside it, labelled."""
    from prh_lib.pages.verdicts import caption_trained, unimodal_first

    assert "Flickr30k" in caption_trained("dinov2-small × minilm-l6")
    assert caption_trained("dinov2-small × smollm2-135m") == caption_trained("x × minilm-l6@random-init:0") == ""
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(160, 6))
    vis = _stack(rng, Z, [0, .5, 2, 4])
    cross = {"regime": "cross-modal"}
    summary = summary_from_stacks(tmp_path, [
        ("vis", "smollm2-135m", vis, _stack(rng, Z, [0, .2, .4]), "heldout", cross, []),
        ("vis", "minilm-l6", vis, _stack(rng, Z, [0, 2, 4]), "heldout", cross, []),
    ])
    read, beside, note = unimodal_first(summary)
    assert list(read["pair"]) == ["vis × smollm2-135m"] and list(beside["pair"]) == ["vis × minilm-l6"] and not note
    df = _write(tmp_path, [[(("vis", "smollm2-135m", "vision", "language"), [[0.1, 0.2], [0.2, 0.3]]),
                            (("vis", "minilm-l6", "vision", "language"), [[0.1, 0.4], [0.2, 0.5]])]])
    row = {r["id"]: r for r in layerwise.findings(analysis_layerwise.aggregate_peaks(df), summary, dataset="toy")}[
        "3.1/cross-modal-peak"]
    assert row["this build"].startswith("best vis × smollm2-135m")
    assert "beside, with a text encoder trained on caption pairs (not a unimodal control): vis × minilm-l6" in \
        row["this build"]
    # only MiniLM ran: it is read, and the note says what it is
    read, _, note = unimodal_first(summary[summary["pair"] == "vis × minilm-l6"])
    assert len(read) == 1 and "COCO captions" in note
