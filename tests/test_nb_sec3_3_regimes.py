"""The Section 3.3 notebook (four regimes and their control floors) on the smoke profile: what the page shows
must equal a recomputation from the results table, and each verdict must match the numbers."""

import nbformat
import numpy as np
import pytest

from prh_lib import analysis, extract, results
from prh_lib.pages import claims, report
from prh_lib.data import study
from prh_lib.metrics import mutual_knn_layerwise
from prh_lib.run.profiles import get_profile

CHAPTER = "sec3_3_regimes"
UNIMODAL = [f"{x} × {y}" for x, y in get_profile("smoke")["unimodal_pairs"]]


@pytest.fixture(scope="module")
def nb(executed_notebook):
    return executed_notebook(CHAPTER)  # the same run as the book test's


@pytest.fixture(scope="module")
def rec(nb):
    return report.read_record(nb, CHAPTER)


@pytest.fixture(scope="module")
def table(rec):
    df = results.load(chapter=CHAPTER, params_hash=rec["params_hash"], expand_extra=True)
    assert len(df), "the notebook wrote no rows"
    return df


def test_every_dataset_and_draw_of_the_smoke_profile_is_scored(rec, table):
    draws = {(d["dataset"], d["draw"]) for d in rec["draws"]}
    assert draws == {("coco-mini", 0), ("coco-mini", 1), ("coco-mini, 5 captions", 0), ("coco-mini, 5 captions", 1)}
    assert set(zip(table["dataset"], table["draw"])) == draws
    assert all(d["n"] == 48 for d in rec["draws"]) and (table["k"] == 5).all()
    labels = {c["label"]: c["regime"] for c in rec["comparisons"]}
    assert sorted(lb for lb, r in labels.items() if r == "unimodal") == sorted(UNIMODAL)
    assert sorted(lb for lb, r in labels.items() if r == "same-modality") == [
        "dinov2-small × efficientnet-lite0", "dinov2-small × efficientnet-lite2",
        "efficientnet-lite0 × efficientnet-lite2", "smollm2-135m × gemma3-270m", "smollm2-135m × minilm-l6"]
    assert rec["aligned_models"] == []


def test_the_page_aggregates_equal_a_recomputation_from_the_table(rec, table):
    peak = table[table["quantity"] == "peak"]
    assert len(rec["summary"]) == peak.groupby(["dataset", "comparison"]).ngroups
    for row in rec["summary"]:
        part = peak[(peak["dataset"] == row["dataset"]) & (peak["comparison"] == row["comparison"])]
        assert row["n_draws"] == len(part) == 2
        assert row["score_mean"] == pytest.approx(np.mean(part["score"]), abs=1e-12)
        assert row["score_std"] == pytest.approx(np.std(part["score"], ddof=1), abs=1e-12)
        assert row["calibrated_mean"] == pytest.approx(np.mean(part["calibrated"]), abs=1e-12)
        assert row["p_max"] == pytest.approx(np.max(part["p"]), abs=1e-12)
        assert row["chance"] == pytest.approx(5 / 47)
        assert 0 <= row["score_mean"] <= 1 and 0 <= row["calibrated_mean"] <= 1
    for row in rec["floors"]:
        part = table[(table["dataset"] == row["dataset"]) & (table["quantity"] == row["quantity"])
                     & (table["model_x"] == row["model_x"]) & (table["model_y"] == row["model_y"])]
        assert len(part) == 2 and row["score_mean"] == pytest.approx(np.mean(part["score"]), abs=1e-12)


def test_every_trained_pair_has_its_control_floors(rec):
    kinds = {}
    for f in rec["floors"]:
        kinds.setdefault(f["dataset"], set()).add(f["kind"])
    assert all(k == {"random-language", "random-vision", "tfidf", "tfidf-svd"} for k in kinds.values())
    for row in rec["summary"]:
        if row["regime"] in ("unimodal", "same-modality"):
            assert row["floor"] is not None and row["floor kind"] in {"random-language", "random-vision", "tfidf",
                                                                       "tfidf-svd"}
            ctrl = [f["score_mean"] for f in rec["floors"] if f["dataset"] == row["dataset"]
                    and (row["model_x"] in (f["model_x"], f["model_y"]) or row["model_y"] in (f["model_x"], f["model_y"]))]
            assert row["floor"] <= max(ctrl) + 1e-12


def test_each_verdict_matches_the_held_out_numbers(rec, table):
    from fixtures.heldout_rows import VERDICT, paired, three_way
    from prh_lib.analysis import heldout

    by = {c["id"]: c for c in rec["claims"]}
    h = heldout.heldout_summary(table, dataset="coco-mini")
    comps = h[h["quantity"] == "heldout"].set_index("pair", drop=False)
    floors = h[h["quantity"] != "heldout"]
    chance = 5 / 47
    regime = {r["comparison"].replace(" (seed 0)", ""): r["regime"] for r in rec["summary"]
              if r["dataset"] == "coco-mini"}
    uni = comps[[regime.get(p) == "unimodal" for p in comps["pair"]]]
    same = comps[[regime.get(p) == "same-modality" for p in comps["pair"]]]
    rnd = comps[comps["pair"].str.contains("@random-init:")]
    assert set(uni["pair"]) == set(UNIMODAL) and len(same) and len(rnd)  # every Figure 5 peak has its held-out estimate

    def floor_tests(r):
        fl = [f for _, f in floors.iterrows() if r["pair"] in f["bounds"]]
        assert fl, f"{r['pair']} has no floor"
        return [(r["score"] - f["score"], *paired(r, f), 0.0, ">") for f in fl]

    # claims about unimodal language models read the causal LMs (MiniLM, trained on caption pairs, is beside them)
    causal = uni[~uni["pair"].str.contains("minilm")]
    uni = causal if len(causal) else uni
    tests = [t for _, r in uni.iterrows() for t in
             [(r["score"] - 2 * chance, r["ci_low"] - 2 * chance, r["ci_high"] - 2 * chance, 0.0, ">"),
              *floor_tests(r)]]
    assert by["3.3/unimodal"]["verdict"] == VERDICT[three_way(tests)], by["3.3/unimodal"]["note"]
    assert "is not applied to these small models at N = 48" in by["3.3/unimodal"]["note"]
    best_uni = uni.loc[uni["score"].idxmax()]
    tests = []
    for _, r in same.iterrows():  # above the best unimodal pair and each of its own floors (random-init twins)
        kinds = {f["kind"] for _, f in floors.iterrows() if r["pair"] in f["bounds"]}
        assert any(k.startswith("random-") for k in kinds)
        tests += [(r["score"] - best_uni["score"], *paired(r, best_uni), 0.0, ">"), *floor_tests(r)]
    assert by["3.3/same-modality"]["verdict"] == VERDICT[three_way(tests)], by["3.3/same-modality"]["note"]
    tests = [(r["score"], r["ci_low"], r["ci_high"], 2 * chance, "<") for _, r in rnd.iterrows()]
    assert by["3.3/random-init"]["verdict"] == VERDICT[three_way(tests)]
    for cid in ("3.3/unimodal", "3.3/same-modality", "3.3/random-init"):
        assert by[cid]["rule"] and "std" not in by[cid]["note"]
    for cid in ("3.3/clip", "3.3/siglip", "3.3/qwen3-vl", "3.3/projection"):
        assert cid not in by  # no aligned models offline: the claims table says why
    claims_table = claims.claims_table(rec["claims"], chapter=CHAPTER)
    assert all(claims_table.loc[c, "verdict"].startswith("not testable offline") for c in ("3.3/clip", "3.3/projection"))


def test_the_summary_counts_floors_beaten_from_the_held_out_margins(nb, table):
    """The page's count of comparisons above their floors is the held-out paired one, recomputed here."""
    from fixtures.heldout_rows import paired
    from prh_lib.analysis import heldout

    h = heldout.heldout_summary(table, dataset="coco-mini")
    comps, floors = h[h["quantity"] == "heldout"], h[h["quantity"] != "heldout"]
    with_floors = [r for _, r in comps.iterrows() if any(r["pair"] in f["bounds"] for _, f in floors.iterrows())]
    clear = [r for r in with_floors if all(paired(r, f)[0] > 0 for _, f in floors.iterrows() if r["pair"] in f["bounds"])]
    cells = nbformat.read(str(nb), as_version=4).cells
    text = "".join(o["data"].get("text/markdown", "") for c in cells if c.cell_type == "code"
                   for o in c.get("outputs", []) if "data" in o)
    assert f"Held out (the verdicts' numbers): {len(clear)} of {len(with_floors)} trained comparisons" in text
    # a vision pair that does not beat its random-init twin is explained on the page, and only then
    rv = [r["pair"] for r in with_floors for _, f in floors.iterrows()
          if r["pair"] in f["bounds"] and f["kind"] == "random-vision" and not paired(r, f)[0] > 0]
    assert ("random feature map of the pixels" in text) == bool(rv), rv


@pytest.mark.filterwarnings("ignore:.*degenerate")  # the ViT embedding-output CLS token (see Section 3.1)
def test_random_init_numbers_equal_a_recomputation_from_the_feature_cache(table):
    spec = study.DatasetSpec(name="coco-mini", source="coco-folder", n_pairs=48, repetitions=2, draws="captions")
    pairs = study.study_pairs(spec, 1)  # draw 1: every image with its second caption
    vision, language = get_profile("smoke")["unimodal_pairs"][0]
    x, y = (analysis.clip_features(extract.get_features(f"{m}@random-init:0", pairs, batch_size=16, dtype="auto",
                                                        progress=False), q=0.95)
            for m in (vision, language))
    assert x.meta["revision"].startswith("random-init:seed=0:")
    expected = np.nanmax(mutual_knn_layerwise(x.values, y.values, k=5))
    row = table[(table["quantity"] == "peak") & (table["dataset"] == "coco-mini") & (table["draw"] == 1)
                & (table["comparison"] == f"{vision} × {language} (seed 0)")]
    assert row["score"].item() == pytest.approx(expected, abs=1e-12)


def test_the_page_is_clean_and_shows_its_figure_floors_and_claims(nb):
    cells = nbformat.read(str(nb), as_version=4).cells
    outputs = [o for c in cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert not [o for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stderr"
                and o.get("text", "").strip()]
    assert not [o for o in outputs if o.get("output_type") == "stream" and o.get("text", "").strip()]  # no logs
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 1
    md = "".join(c.source for c in cells if c.cell_type == "markdown")
    assert "## The paper and this build" in md and "0.317 ± 0.005" in md and "2611.12869" in md
    text = "".join(o["data"].get("text/markdown", "") for o in outputs if "data" in o)
    assert "needs the paper profile" in text and "× chance" in text and "trained-vision × random-LM floor" in text
    assert "What the offline models can tell" in text and "cannot tell" in text
    html = "".join(o["data"].get("text/html", "") for o in outputs if "data" in o)
    assert "/work/" not in html + text  # no machine paths


def test_a_text_only_dataset_scores_the_language_pairs_and_their_floors_only(executed_notebook):
    """The page with the COCO val2017 captions (text only, disjoint draws) beside coco-mini: its rows are the
    language × language pairs and their floors, its empty slots say why, and the verdicts read coco-mini."""
    text = {"name": "val2017 text", "source": "coco-captions-text", "n_pairs": 48, "repetitions": 2,
            "draws": "disjoint"}
    coco = get_profile("smoke")["datasets"][0]
    path = executed_notebook(CHAPTER, datasets=[text, coco])
    rec = report.read_record(path, CHAPTER)
    df = results.load(chapter=CHAPTER, params_hash=rec["params_hash"], expand_extra=True)
    on_text = df[df["dataset"] == "val2017 text"]
    assert sorted(set(on_text["draw"])) == [0, 1]
    peaks = on_text[on_text["quantity"] == "peak"]
    assert sorted(set(peaks["comparison"])) == ["smollm2-135m × gemma3-270m", "smollm2-135m × minilm-l6"]
    vision = ("dinov2", "efficientnet")
    assert not any(v in str(m) for m in set(on_text["model_x"]) | set(on_text["model_y"]) for v in vision)
    assert set(on_text["n"]) == {48}
    page = "\n".join(str(o.get("data", {}).get("text/markdown", "")) for c in nbformat.read(str(path), 4).cells
                     for o in c.get("outputs", []))
    assert "text only: no images" in page
    # the verdicts' held-out numbers are of the dataset with images
    held = results.load(chapter=CHAPTER, params_hash=rec["params_hash"])
    held = held[held["quantity"].astype(str).str.startswith("heldout")]
    assert set(held["dataset"]) == {"coco-mini"}


def test_the_page_runs_the_sanity_check_of_its_trained_models(table):
    san = table[table["quantity"] == "sanity"]
    assert {"dinov2-small", "efficientnet-lite2", "smollm2-135m"} <= set(san["model_x"])
    assert not san["model_x"].str.contains("@random-init").any()
    assert (san["model_y"] == san["model_x"] + "@random-init:0").all()
