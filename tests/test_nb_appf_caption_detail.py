"""The caption-detail page (notebooks/appf_caption_detail.py), executed with the smoke profile.

The page's summary is checked against a recomputation from the results table, and the verdict against
the numbers.
"""

import json

import nbformat
import numpy as np
import pytest

from prh_lib import paths, results
from prh_lib.pages import report

CHAPTER = "appf_caption_detail"


@pytest.fixture(scope="module")
def executed(executed_notebook):
    return executed_notebook(CHAPTER)


@pytest.fixture(scope="module")
def rec(executed):
    return report.read_record(executed, CHAPTER)


@pytest.fixture(scope="module")
def table(rec):
    return results.load(chapter=CHAPTER, params_hash=rec["params_hash"], expand_extra=True)


def test_figures_present_and_page_clean(executed):
    nb = nbformat.read(str(executed), as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2  # raw and chance-corrected
    assert not [o for o in outputs if o.get("name") == "stderr" or o.get("output_type") == "error"]
    md = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "## The paper and this build" in md
    shown = "".join(str(o.get("data", {})) + o.get("text", "") for o in outputs)
    assert "/work/" not in shown and "/home/" not in shown
    # layers are named as the model names them: DINOv2's constant embedding-output CLS token is "embed", not 0
    if "Degenerate layers" in shown:
        assert "dinov2-small: embed" in shown and "dinov2-small: 0)" not in shown


def test_every_draw_is_in_the_results_table_and_the_summary_recomputes(rec, table):
    draws = {(d["dataset"], d["draw"]) for d in rec["draws"]}
    assert len({d for d, _ in draws}) == 2 and set(zip(table["dataset"], table["draw"])) == draws
    for s in rec["summary"]:
        sel = table[(table["dataset"] == s["dataset"]) & (table["model_x"] == s["vision model"])
                    & (table["model_y"] == s["language model"]) & (table["quantity"] == s["variant"])]
        scores = sel["score"].to_numpy(float)
        assert len(scores) == s["n_draws"] and s["peak"] == pytest.approx(scores.mean())
        if len(scores) > 1:
            assert s["peak std"] == pytest.approx(scores.std(ddof=1))
        assert s["chance"] == pytest.approx(5 / (s["n"] - 1))
        assert s["corrected peak"] == pytest.approx(np.mean((scores - s["chance"]) / (1 - s["chance"])))
    for (ds, lm), group in _by(rec["summary"]).items():
        tokens = {s["variant"]: s["tokens"] for s in group}
        assert tokens["concat-1"] < tokens["concat-2"] < tokens["concat-3"]  # more captions, longer texts
        assert tokens["truncation-0.1"] < tokens["truncation-0.5"] < tokens["truncation-1"]


def _by(summary):
    out = {}
    for s in summary:
        out.setdefault((s["dataset"], s["language model"]), []).append(s)
    return out


def test_caption_draws_differ_from_draw_to_draw(table):
    # the caption-draw dataset pairs the same images with other captions each draw: scores differ
    cap = table[(table["dataset"] == "coco-mini") & (table["quantity"] == "concat-1")]
    assert cap.groupby(["model_x", "model_y"])["score"].nunique().min() == 2


def test_summaries_shorter_cached_and_fallbacks_counted(rec):
    assert rec["summaries"], "the smoke profile summarises one draw per dataset"
    total = 0
    for key, rows in rec["summaries"].items():
        assert [s["fraction"] for s in rows] == [0.1, 0.25, 0.5, 0.75]
        for s in rows:
            total += s["fallbacks"]
            assert s["summary words"] < s["source words"] and 0 <= s["fallbacks"] <= s["rows"] == 8
            files = list(paths.cache_dir("summaries").rglob(s["cached file"]))
            assert len(files) == 1
            doc = json.loads(files[0].read_text())
            assert doc["model"] == rec["summary_model"] and doc["prompt"] == rec["prompt"]
            assert doc["fraction"] == s["fraction"] and len(doc["texts"]) == 8
            assert sum(bool(r) for r in doc["fallback"]) == s["fallbacks"]
    assert rec["fallbacks"] == total


def test_verdict_matches_the_numbers(rec):
    (row,) = [r for r in rec["claims"] if r["id"] == "F/detail"]
    summ = [s for s in rec["summary"] if s["control"] == "summary"]
    control = "summary" if summ and min(s["n_draws"] for s in summ) >= 2 else "truncation"
    assert row["this build"].startswith(control)
    lower = []
    for (ds, lm), group in _by([s for s in rec["summary"] if s["control"] == control]).items():
        for vm in {s["vision model"] for s in group}:
            g = sorted([s for s in group if s["vision model"] == vm], key=lambda s: s["level"])
            lower.append(g[-1]["peak"] > g[0]["peak"])  # the caption-draw std is not a margin
    # two language models, read over images by the paired margin (the interval test below): the order of the means
    # is one comparison, not a test, so no note calls it one
    iv = [r for r in rec["order_intervals"] if r["control"] == control]
    resolved = all(r["full_low"] > 0 or r["full_high"] < 0 for r in iv)
    if not all(lower) or (resolved and any(r["margin"] <= 0 for r in iv)):
        assert row["verdict"] == "differs"
    elif resolved and all(r["margin_low"] > 0 for r in iv):
        assert row["verdict"] == "reproduces in kind"
    else:
        assert row["verdict"] == "inconclusive"
        assert ("not resolved over images" in row["note"]) == (not resolved), row["note"]
    assert "Kendall τ" in row["rule"] and "margin" in row["rule"] and "single comparison" not in row["note"]


def test_the_order_has_an_interval_over_images_on_the_verdicts_control(rec):
    """Kendall τ of the held-out peaks (full text vs each shorter level) with its interval; the verdict reads it."""
    (row,) = [r for r in rec["claims"] if r["id"] == "F/detail"]
    iv = rec["order_intervals"]
    assert iv, "no interval over images on the page"
    control = row["this build"].split(":")[0]
    assert {r["control"] for r in iv} == {control}
    levels = sorted({s["level"] for s in rec["summary"] if s["control"] == control})
    assert sorted({r["level"] for r in iv}) == levels[:-1]  # every shorter level against the full text
    for r in iv:  # two language models: τ is ±1 on every half-sample, so the order is the paired margin
        assert r["n_lms"] == 2 and r["tau"] is None and (r["lm_a"], r["lm_b"]) == ("smollm2-135m", "minilm-l6")
        assert -1 <= r["full_low"] <= r["full_margin"] <= r["full_high"] <= 1
        assert -1 <= r["margin_low"] <= r["margin"] <= r["margin_high"] <= 1
    full = {(r["dataset"], r["vision model"], r["full_margin"], r["full_low"], r["full_high"]) for r in iv}
    assert len(full) == len({(r["dataset"], r["vision model"]) for r in iv})  # one full text per dataset and model
    assert "over images" in row["this build"] and "no interval over images" not in row["note"]
    assert "at the full text" in row["this build"] and "τ +1.00 [+1.00, +1.00]" not in row["this build"]
