"""The Section 3.2 notebook (capability versus alignment), executed on the smoke profile.

What the page shows is checked against a recomputation from the results table (numpy / SciPy), and each
verdict against the numbers it was computed from.
"""

import itertools
import math

import nbformat
import numpy as np
import pytest
from scipy import stats

from prh_lib.pages import report
from prh_lib import results
from prh_lib.data import benchmarks

CHAPTER = "sec3_2_capability"


@pytest.fixture(scope="module")
def nb(executed_notebook):
    return executed_notebook(CHAPTER)  # the same run as the book test's


@pytest.fixture(scope="module")
def rec(nb):
    return report.read_record(nb, CHAPTER)


@pytest.fixture(scope="module")
def table(rec):
    return results.load(chapter=CHAPTER, params_hash=rec["params_hash"], expand_extra=True)


def test_every_dataset_and_draw_was_run_and_written(rec, table):
    draws = {(d["dataset"], d["draw"]) for d in rec["draws"]}
    assert len({d for d, _ in draws}) >= 2 and all(d["what_varies"] for d in rec["draws"])
    align = table[table["quantity"].isin(["peak", "final"])]
    assert set(zip(align["dataset"], align["draw"])) == draws
    for _, r in align.iterrows():
        assert 0 <= r["score"] <= 1 and r["k"] == rec["k"] and r["metric"] == "mutual_knn"
        if r["family"] == "independent":
            assert 0 < r["p"] <= 1 and 0 <= r["calibrated"] <= 1
        else:
            assert math.isnan(r["p"])  # the ladder: no permutation test
    # bits per byte reads captions of images no draw aligns (the notebook's default heldout_text: COCO val2017)
    assert rec["heldout_source"] == "heldout-images" and 0 < rec["n_heldout"] <= 24


def test_summary_equals_a_recomputation_from_the_results_table(rec, table):
    for s in rec["summary"]:
        for q in ("peak", "final"):
            sel = table[(table["dataset"] == s["dataset"]) & (table["model_x"] == s["vision"])
                        & (table["model_y"] == s["language"]) & (table["quantity"] == q)
                        & (table["family"] == s["family"])]
            scores = sel.sort_values("draw")["score"].to_numpy(float)
            assert len(scores) == s["n_draws"]
            assert s[q] == pytest.approx(np.mean(scores))
            if len(scores) > 1:
                assert s[f"{q} std"] == pytest.approx(np.std(scores, ddof=1))
        assert s["chance"] == pytest.approx(rec["k"] / (s["n"] - 1))
        bpb = table[(table["quantity"] == "bpb") & (table["model_x"] == s["language"])]["score"]
        assert s["bpb"] == pytest.approx(float(bpb.iloc[0])) and s["bpb"] > 0


def _exact_p(x, y, rank):
    f = (lambda v: stats.rankdata(v)) if rank else (lambda v: np.asarray(v, float))
    obs = abs(np.corrcoef(f(x), f(y))[0, 1])
    y = np.asarray(y)
    hits = [abs(np.corrcoef(f(x), f(y[list(p)]))[0, 1]) >= obs - 1e-12 for p in itertools.permutations(range(len(y)))]
    return np.mean(hits)


def test_correlations_equal_a_recomputation_from_the_summary(rec):
    summary = rec["summary"]
    assert rec["correlations"] or len({s["language"] for s in summary if s["family"] == "independent"}) < 3
    for c in rec["correlations"]:
        pts = [s for s in summary if s["dataset"] == c["dataset"] and s["vision"] == c["vision"]
               and s["family"] == "independent"]
        x = [s[c["alignment"]] for s in pts]
        y = [s[c["capability"]] for s in pts]
        ref = (stats.pearsonr if c["method"] == "pearson" else stats.spearmanr)(x, y)
        assert c["n"] == len(pts) and c["r"] == pytest.approx(ref.statistic)
        assert c["p method"] == "exact" and c["p"] == pytest.approx(_exact_p(x, y, c["method"] == "spearman"))
    for c in rec["ladder"]:  # a control of dependent points: Spearman, no p-value
        assert c["method"] == "spearman" and c["p"] is None and c["ci low"] is None


def test_verdicts_match_the_numbers(rec):
    rows = {r["id"]: r for r in rec["claims"]}
    main = rec["draws"][0]["dataset"]
    peak = [c for c in rec["correlations"] if c["dataset"] == main and c["alignment"] == "peak"
            and c["capability"] == "bpb"]
    trend = rows["3.2/capability-trend"]["verdict"]
    if not peak:
        assert trend.startswith("not testable offline")
        return
    grows = all(-c["r"] > 0 for c in peak)
    final = {c["vision"]: -c["r"] for c in rec["correlations"] if c["dataset"] == main and c["alignment"] == "final"
             and c["capability"] == "bpb" and c["method"] == "pearson" and c["r"] is not None}
    pk = {c["vision"]: -c["r"] for c in peak if c["method"] == "pearson"}
    less = all(final[v] < pk[v] for v in final)
    from prh_lib.stats.correlation import exact_p_floor

    n = min(c["n"] for c in peak)
    if max(exact_p_floor(n, c["method"]) for c in peak) >= 0.05:  # 3-4 models: no exact p can be below 0.05
        for cid, ok in (("3.2/capability-trend", grows), ("3.2/final-less", less)):
            assert rows[cid]["verdict"] == "inconclusive"  # ran, underpowered: the note says why in numbers
            assert f"n = {n} independent language models" in rows[cid]["note"] and "direction: " in rows[cid]["note"]
        return
    significant = all(c["p"] < 0.05 for c in peak)
    assert trend == (("reproduces in kind" if significant else "inconclusive") if grows else "differs")
    assert rows["3.2/final-less"]["verdict"] == (("reproduces in kind" if significant else "inconclusive")
                                                 if less else "differs")


def test_capability_table_and_its_gaps_are_reported(rec):
    table = benchmarks.load_capability_table()
    assert rec["n_capability_models"] == len(table)
    assert rec["capability_missing"] == benchmarks.missing_counts(table)


def test_the_page_is_clean_and_has_its_sections(nb):
    cells = nbformat.read(str(nb), as_version=4).cells
    outputs = [o for c in cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert not [o for o in outputs if o.get("name") == "stderr"], [o.get("text", "")[:200] for o in outputs
                                                                    if o.get("name") == "stderr"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2  # capability panels, ladder control
    md = "".join(c.source for c in cells if c.cell_type == "markdown")
    assert "## The paper and this build" in md
    shown = "".join(str(o.get("data", {})) + o.get("text", "") for o in outputs)
    assert "/work/" not in shown and "/home/" not in shown
    rec = report.read_record(nb, CHAPTER)
    if rec["correlations"]:
        assert "exact p" in shown
    if rec["ladder"]:
        assert "Spearman ρ(peak, bits per byte)" in shown
    for name in rec["missing"]:  # a missing model is named with how to install it
        assert f"prh-zoo install {name}" in shown


def _shown_text(nb) -> str:
    """Everything the page shows a reader: Markdown cells and the HTML / Markdown of cell outputs."""
    nb = nbformat.read(nb, as_version=4)
    parts = [c.source for c in nb.cells if c.cell_type == "markdown"]
    for c in nb.cells:
        for o in c.get("outputs", []):
            data = o.get("data", {})
            parts += [data.get("text/html", ""), data.get("text/markdown", "")]
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def test_page_names_capability_measures_in_words_and_states_both_p_floors(nb):
    text = _shown_text(nb)
    for ident in ("next_token_accuracy", "mmlu_5shot", "gsm8k_5shot", ">bpb<", " bpb,", "against bpb"):
        assert ident not in text, ident
    # the exact p floor differs by method: 1/n! for Pearson, 2/n! for Spearman (reversed ranks give -rho)
    assert "1/3! = 0.167 for Pearson" in text and "2/3! = 0.333 for Spearman" in text
