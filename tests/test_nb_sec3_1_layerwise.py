"""The Section 3.1 notebook, executed on the smoke profile: what it shows must equal a recomputation."""

import numpy as np
import pytest

from prh_lib import analysis, extract, results
from prh_lib.run import profiles
from prh_lib.pages import report
from prh_lib.data.study import study_draws
from prh_lib.metrics import mutual_knn_layerwise

LAYERS = {"dinov2-small": 13, "smollm2-135m": 31, "minilm-l6": 7, "efficientnet-lite0": 9, "gemma3-270m": 19}
PAIRS = {"dinov2-small × smollm2-135m", "dinov2-small × minilm-l6", "efficientnet-lite0 × smollm2-135m",
         "efficientnet-lite0 × minilm-l6", "dinov2-small × gemma3-270m", "dinov2-small × efficientnet-lite0",
         "smollm2-135m × minilm-l6"}


@pytest.fixture(scope="module")
def nb(executed_notebook):
    return executed_notebook("sec3_1_layerwise")


@pytest.fixture(scope="module")
def rec(nb):
    return report.read_record(nb, "sec3_1_layerwise")


@pytest.fixture(scope="module")
def table(rec):
    df = results.load(chapter="sec3_1_layerwise", params_hash=rec["params_hash"], expand_extra=True)
    assert not df.empty
    return df


def test_reports_the_requested_setting(rec):
    assert rec["n_pairs"] == 48 and rec["k"] == 5 and rec["clip"] == "stack"
    assert rec["chance"] == pytest.approx(5 / 47)
    assert rec["heatmap_dataset"] == "coco-mini" and rec["heatmap_draw"] == 0
    assert set(rec["matrices"]) == PAIRS
    assert {(r["dataset"], r["pair"]) for r in rec["summary"]} == {(d, p) for d in ("coco-mini", "coco-mini, 5 captions")
                                                                  for p in PAIRS}


def test_heatmaps_cover_every_layer_pair_with_valid_scores(rec):
    for label, m in rec["matrices"].items():
        x, y = label.split(" × ")
        scores = np.array(m["scores"], dtype=float)  # None (NaN) -> nan
        assert scores.shape == (LAYERS[x], LAYERS[y]) == (len(m["x_labels"]), len(m["y_labels"]))
        finite = np.isfinite(scores)
        assert ((scores[finite] >= 0) & (scores[finite] <= 1)).all()
        # exactly a ViT's embedding-output CLS token (constant over images) is undefined
        expected_nan = np.zeros_like(finite)
        expected_nan[0, :] |= x == "dinov2-small"
        expected_nan[:, 0] |= y == "dinov2-small"
        np.testing.assert_array_equal(~finite, expected_nan)


def test_summary_equals_a_recomputation_from_the_results_table(rec, table):
    main = table[table["preprocessing"] == "clip(stack, q=0.95)"]
    for row in rec["summary"]:
        sel = (main["dataset"] == row["dataset"]) & (main["model_x"] == row["model_x"]) & (main["model_y"] == row["model_y"])
        peak = main[sel & (main["quantity"] == "peak")].sort_values("draw")
        final = main[sel & (main["quantity"] == "final")]
        ctrl = main[sel & (main["quantity"] == "control:shuffled-max")]
        assert len(peak) == row["n_draws"] == 2 and sorted(peak["draw"]) == [0, 1]
        s = peak["score"].to_numpy(float)
        assert row["peak_mean"] == pytest.approx(np.mean(s))
        assert row["peak_std"] == pytest.approx(np.std(s, ddof=1))
        assert row["final_mean"] == pytest.approx(np.mean(final["score"].to_numpy(float)))
        assert row["shuffled_max_mean"] == pytest.approx(np.mean(ctrl["score"].to_numpy(float)))
        assert row["calibrated_mean"] == pytest.approx(np.mean(peak["calibrated"].to_numpy(float)))
        assert row["p_largest"] == pytest.approx(np.max(peak["p"].to_numpy(float)))
        assert row["chance"] == pytest.approx(row["k"] / (row["n"] - 1))
        # each draw's peak is the maximum of its layer-pair rows
        for d in (0, 1):
            lp = main[sel & (main["quantity"] == "layer_pair") & (main["draw"] == d)]["score"].to_numpy(float)
            assert float(peak[peak["draw"] == d]["score"].iloc[0]) == pytest.approx(np.nanmax(lp))
        assert row["peak_mean"] >= row["final_mean"]
        assert 0 <= row["calibrated_mean"] <= 1 and 0 < row["p_largest"] <= 1


def test_heatmaps_equal_the_table_and_a_recomputation_from_the_feature_cache(rec, table):
    draw0 = study_draws(profiles.get_profile("smoke")["datasets"])[0]
    assert draw0.dataset == "coco-mini" and draw0.draw == 0
    # the notebook's dtype = "auto": each model's bf16 row decides (dinov2-small runs in bfloat16 where allowed)
    x, y = (analysis.clip_features(extract.get_features(m, draw0.pairs, batch_size=16, progress=False, dtype="auto"),
                                   q=0.95) for m in ("dinov2-small", "minilm-l6"))
    expected = mutual_knn_layerwise(x.values, y.values, k=5)
    got = np.array(rec["matrices"]["dinov2-small × minilm-l6"]["scores"], dtype=float)
    np.testing.assert_allclose(got, expected, atol=1e-12, equal_nan=True)
    lp = table[(table["quantity"] == "layer_pair") & (table["dataset"] == "coco-mini") & (table["draw"] == 0)
               & (table["model_x"] == "dinov2-small") & (table["model_y"] == "minilm-l6")]
    np.testing.assert_allclose(lp["score"].to_numpy(float), got.ravel(), atol=1e-12, equal_nan=True)


def test_clipping_choices_are_in_the_table(rec, table):
    labels = set(table.loc[(table["dataset"] == "coco-mini") & (table["quantity"] == "peak"), "preprocessing"])
    assert labels == {"clip(stack, q=0.95)", "clip(layer, q=0.95)", "none"}
    assert set(rec["clip_effect"]) == PAIRS


def test_verdicts_follow_the_held_out_numbers(rec, table):
    from fixtures.heldout_rows import VERDICT, paired, three_way
    from prh_lib.analysis import heldout

    rows = {r["id"]: r for r in rec["claims"]}
    assert set(rows) == {"3.1/cross-modal-peak", "3.1/later-layers", "3.1/final-not-max", "3.1/vision-vision",
                         "3.1/language-language"}
    h = heldout.heldout_summary(table, dataset="coco-mini")
    comps = h[h["quantity"] == "heldout"].set_index("pair", drop=False)
    assert set(comps["pair"]) == PAIRS  # no peak is reported without its held-out estimate
    assert (comps["n_splits"] == 2).all() and (comps["n_boot"] == 10).all()
    assert ((comps["ci_low"] <= comps["score"]) & (comps["score"] <= comps["ci_high"])).all()
    chance = 5 / 47
    assert np.allclose(comps["chance"], chance)
    floors = h[h["quantity"] != "heldout"]

    def floors_of(pair):
        return [f for _, f in floors.iterrows() if pair in f["bounds"]]

    cross = comps[comps["regime"] == "cross-modal"]
    for p in cross["pair"]:  # every pair with a language side has its bag-of-words and random-init LM floors
        assert {"tfidf", "tfidf-svd", "random-language"} <= {f["kind"] for f in floors_of(p)}
    # claims about unimodal language models read the causal LMs; MiniLM (trained on caption pairs) is beside them
    cross = cross[~cross["pair"].str.contains("minilm")]
    assert len(cross) == 3
    # 3.1/later-layers and 3.1/final-not-max, recomputed from the rows
    def centred(d, est):  # the half-sampling interval: the replicates' spread placed on the estimate
        d = d[np.isfinite(d)]
        q_lo, q_med, q_hi = np.quantile(d, [0.025, 0.5, 0.975])
        return est + q_lo - q_med, est + q_hi - q_med

    # peaks are located only for pairs whose held-out peak beats chance and every floor (paired intervals)
    real = cross[[r["ci_low"] > r["chance"] and all(paired(r, f)[0] > 0 for f in floors_of(r["pair"]))
                  for _, r in cross.iterrows()]]
    later = [(r[f"depth_{s}"], r[f"depth_{s}_low"], r[f"depth_{s}_high"], 0.5, ">")
             for _, r in real.iterrows() for s in "xy"]
    # ... and the late third against the early third (a mean depth can average a late and an early choice)
    later += [(r["late_minus_early"], *np.clip(centred(r["lme_reps"], r["late_minus_early"]), -1, 1), 0.0, ">")
              for _, r in real.iterrows()]
    if len(real):
        assert rows["3.1/later-layers"]["verdict"] == VERDICT[three_way(later)]
        assert "late-third minus early-third share" in rows["3.1/later-layers"]["this build"]
    else:  # nothing to locate: never read from noise
        assert rows["3.1/later-layers"]["verdict"] == "inconclusive"
        assert rows["3.1/later-layers"]["this build"] == "no cross-modal pair beats its floors"


    final = [(r["score"] - r["final_half"], *centred(r["reps"] - r["final_reps"], r["score"] - r["final_half"]), 0.0,
              ">") for _, r in cross.iterrows()]
    assert rows["3.1/final-not-max"]["verdict"] == VERDICT[three_way(final)]
    # 3.1/vision-vision: ratio to the best cross-modal pair, every random-init floor beaten by a paired interval
    best = cross.loc[cross["score"].idxmax()]
    vv = comps[comps["regime"] == "vision-vision"]
    v = vv.loc[vv["score"].idxmax()]
    fl = floors_of(v["pair"])
    assert {f["kind"] for f in fl} == {"random-vision"} and len(fl) == 2  # each side replaced by its random-init twin
    tests = [(v["score"] / best["score"], *paired(v, best, ratio=True), 2.0, ">")]
    tests += [(v["score"] - f["score"], *paired(v, f), 0.0, ">") for f in fl]
    tests += [(v[f"depth_{s}"], v[f"depth_{s}_low"], v[f"depth_{s}_high"], 0.5, ">") for s in "xy"]
    assert rows["3.1/vision-vision"]["verdict"] == VERDICT[three_way(tests)]
    top = max(fl, key=lambda f: f["score"])  # the verdict text names the highest floor and the margin over it
    assert f"highest floor {top['pair']} {top['score']:.3f}" in rows["3.1/vision-vision"]["this build"]
    for r in rows.values():  # the test is stated, and the caption-draw std is never the margin
        assert r["rule"] and "std" not in r["rule"]


def test_token_poolings_have_one_row_per_dataset_causal_lm_pair_and_pooling(rec, table):
    from prh_lib.analysis import heldout
    from prh_lib.formatting import format_interval

    causal = {p for p in PAIRS if p.split(" × ")[0] in ("dinov2-small", "efficientnet-lite0")
              and p.split(" × ")[1] in ("smollm2-135m", "gemma3-270m")}
    rows = rec["pooling"]
    keys = [(r["dataset"], r["pair"], r["pooling"]) for r in rows]
    assert len(keys) == len(set(keys)) == 9  # the first draw of the one-caption dataset (not "5 captions")
    assert set(keys) == {("coco-mini", p, q) for p in causal for q in ("mean", "mean-nofirst", "last")}
    # mean pooling is the page's own model: its row is the held-out study of the same pairs on that first draw
    draw0 = [d for d in study_draws(profiles.get_profile("smoke")["datasets"]) if d.dataset == "coco-mini"][:1]
    comps = [tuple(p.split(" × ")) for p in sorted(causal)]
    smoke = profiles.get_profile("smoke")
    h = heldout.heldout_summary(heldout.heldout_study(
        draw0, comps, chapter="sec3_1_layerwise", params={}, k=rec["k"], n_splits=smoke["heldout_splits"],
        n_boot=smoke["heldout_boot"], clip_q=rec["clip_q"], clip=rec["clip"], dtype="auto", write=False)).set_index("pair")
    for r in rows:
        x, y = r["pair"].split(" × ")
        cell, loc = r["held-out peak [95 % CI]"], r["location (share)"]
        low, high = map(float, cell.split("[")[1].rstrip("]").split(", "))
        assert low <= float(cell.split()[0]) <= high
        assert loc.split(" (")[0].split(" × ")[1] in {f"layer.{i}" for i in range(LAYERS[y])} | {"embed"}
        assert r["margin over random-init twin [paired CI]"] != "–" and r["margin over bag of words [paired CI]"] != "–"
        if r["dataset"] == "coco-mini" and r["pooling"] == "mean":
            assert cell == format_interval(*h.loc[r["pair"], ["score", "ci_low", "ci_high"]])
    cells = {(r["dataset"], r["pair"], r["pooling"]): r["held-out peak [95 % CI]"] for r in rows}
    assert any(cells[(d, p, "last")] != cells[(d, p, "mean")] for d, p, _ in keys)  # another pooling, other numbers


def test_the_page_is_clean(nb):
    import nbformat

    cells = nbformat.read(str(nb), as_version=4).cells
    outputs = [o for c in cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2
    assert not [o for o in outputs if o.get("output_type") == "error"]
    # stderr (a first extraction's progress) is dropped by the book (nb_output_stderr: remove); stdout carries no logs
    assert not [o for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout"]
    md = "".join(c.source for c in cells if c.cell_type == "markdown")
    assert "## The paper and this build" in md and "### Token pooling of the causal language models" in md
    text = "".join(str(o.get("data", {}).get("text/markdown", "")) + str(o.get("data", {}).get("text/plain", ""))
                   for o in outputs)
    assert "1/21)" in text  # p at the permutation floor is written as a bound
    assert "p = 0.048" not in text and "/work/" not in text


def test_the_readme_pandas_recipe_runs_as_written(rec):
    """The README's recipe, executed as written on this cache's 3.1 rows (the page's clipping and the ones it
    compares, and every run the tests made with other parameters): its means are the page's."""
    import re

    from prh_lib import paths

    readme = (paths.repo_root() / "README.md").read_text()
    block = re.search(r"Read the results with pandas:\n\n```python\n(.*?)```", readme, re.S).group(1)
    namespace = {}
    exec(compile(block, "README.md", "exec"), namespace)
    summary = namespace["summary"]
    mine = summary[summary["params_hash"] == rec["params_hash"]].set_index(["dataset", "model_x", "model_y"])
    assert len(mine) == len(rec["summary"])
    for row in rec["summary"]:
        got = mine.loc[(row["dataset"], row["model_x"], row["model_y"])]
        assert got["score_mean"] == pytest.approx(row["peak_mean"]) and got["n_draws"] == row["n_draws"]


def test_a_sweeps_headline_is_the_pages_number(rec, table):
    """What `prh-run --sweep` prints for a run of this page (runner.sweep_scores) equals the page's peak means,
    although the run also wrote the peaks of the other clipping choices it compares."""
    from prh_lib.run import runner

    assert table["preprocessing"].nunique() > 1  # the other clipping choices are there to be left out
    run = table["run_id"].iloc[0]
    scores = runner.sweep_scores(table, {run: "this run"}).set_index(["dataset", "comparison"])
    assert set(scores["preprocessing"]) == {"clip(stack, q=0.95)"}
    assert len(scores) == len(rec["summary"])
    for row in rec["summary"]:
        got = scores.loc[(row["dataset"], f"{row['model_x']} × {row['model_y']}"), "this run"]
        assert got == pytest.approx(row["peak_mean"])


def test_every_model_has_a_sanity_row_equal_to_a_recomputation(nb, table, monkeypatch):
    from prh_lib.analysis import sanity

    monkeypatch.setenv("PRH_SCORE_CACHE", "0")  # recomputed, not read back from the page's cached rows

    san = table[table["quantity"] == "sanity"].set_index("model_x")
    assert set(san.index) == set(LAYERS) and set(san["dataset"]) == {"coco-mini"}  # the concat set has no draws
    draws = [d for d in study_draws(profiles.get_profile("smoke")["datasets"]) if d.dataset == "coco-mini"]
    twins = {m: f"{m}@random-init:0" for m in LAYERS}
    f = analysis.prepare_features([], draws[0].pairs, models=[*twins, *twins.values()], dtype="auto", batch_size=16)
    rel = sanity.relevance(sanity.salient_words([[t] for t in draws[1].pairs.texts], min_captions=1))
    got = sanity.sanity_check({m: f[m].values.numpy() for m in f}, twins, rel, k=5).set_index("model")
    np.testing.assert_allclose(san.loc[got.index, "score"].to_numpy(float), got["margin"].to_numpy(float), atol=1e-12)
    assert (san["P@k"] > san["chance"]).any() and "Sanity check" in nb.read_text()  # the page shows it
