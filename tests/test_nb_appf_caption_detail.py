"""The caption-detail page (notebooks/appf_caption_detail.py), executed with the smoke profile."""

import json

import nbformat
import pytest

from prh_lib import paths, report


@pytest.fixture(scope="module")
def executed(executed_notebook):
    return executed_notebook("appf_caption_detail")


def test_figures_present(executed):
    nb = nbformat.read(str(executed), as_version=4)
    n = sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))
    assert n == 2  # raw and chance-corrected


def test_recorded_numbers(executed):
    rec = report.read_record(executed, "appf_caption_detail")
    assert rec["n_more"] == 48 and rec["n_less"] == 8 and rec["k"] == 5  # smoke: summary_pairs = 8
    table = rec["table"]
    variants = {r["variant"] for r in table}
    assert {"concat-1", "concat-2", "concat-3", "summary-0.1", "truncation-0.75", "summary-1"} <= variants
    for r in table:
        assert 0 <= r["peak"] <= 1 and r["chance"] == pytest.approx(5 / (r["n"] - 1))
        assert r["corrected peak"] == pytest.approx((r["peak"] - r["chance"]) / (1 - r["chance"]))
    for lm in {r["language model"] for r in table}:
        tokens = {r["variant"]: r["tokens"] for r in table if r["language model"] == lm}
        assert tokens["concat-1"] < tokens["concat-2"] < tokens["concat-3"]  # more captions, longer texts
        assert tokens["truncation-0.1"] < tokens["truncation-0.5"] < tokens["truncation-1"]
        for f in ("0.1", "0.25", "0.5", "0.75"):
            assert tokens[f"summary-{f}"] < tokens["summary-1"]  # summaries are shorter than their source


def test_summaries_shorter_cached_and_fallbacks_counted(executed):
    rec = report.read_record(executed, "appf_caption_detail")
    assert [s["fraction"] for s in rec["summaries"]] == [0.1, 0.25, 0.5, 0.75]
    assert rec["fallbacks"] == sum(s["fallbacks"] for s in rec["summaries"])
    for s in rec["summaries"]:
        assert s["summary words"] < s["source words"]
        assert 0 <= s["fallbacks"] <= s["rows"] == 8
        # the cache file exists and records the prompt and the model
        files = list(paths.cache_dir("summaries").rglob(s["cached file"]))
        assert len(files) == 1
        doc = json.loads(files[0].read_text())
        assert doc["model"] == rec["summary_model"] and doc["prompt"] == rec["prompt"]
        assert doc["fraction"] == s["fraction"] and len(doc["texts"]) == 8
        assert sum(bool(r) for r in doc["fallback"]) == s["fallbacks"]
