"""The Section 3.2 notebook (capability versus alignment), executed on small parameters."""

import math

import nbformat
import numpy as np
import pytest

from prh_lib import report
from prh_lib.analysis import capability
from prh_lib.data import benchmarks


@pytest.fixture(scope="module")
def nb(executed_notebook):
    return executed_notebook("sec3_2_capability")  # the same run as the book test's


@pytest.fixture(scope="module")
def rec(nb):
    return report.read_record(nb, "sec3_2_capability")


def test_reports_the_ladder_it_ran(rec):
    assert rec["n_pairs"] == 48 and rec["k"] == 5 and rec["chance"] == pytest.approx(5 / 47)
    fractions = rec["fractions"]
    assert len(fractions) >= 3 and fractions == sorted(fractions) and fractions[0] == 0 and fractions[-1] == 1
    assert rec["language"] == [f"t={t:g}" for t in fractions]
    assert 0 < rec["n_heldout"] <= 48 and rec["bpb_texts"] == "heldout"  # COCO has spare captions


def test_bits_per_byte_falls_from_chance_level_to_the_trained_model(rec):
    bpb = rec["bpb"]
    values = [bpb[label]["bpb"] for label in rec["language"]]
    assert rec["ladder_monotone"] is True and all(np.diff(values) < 0)
    # the random end is about as good as guessing uniformly over SmolLM2's 49152 tokens
    start = bpb[rec["language"][0]]
    uniform = start["tokens"] * math.log2(49152) / start["bytes"]
    assert start["bpb"] == pytest.approx(uniform, rel=0.15)
    assert values[-1] < 0.7 * values[0]
    for row in bpb.values():
        assert row["context"] == "bos" and row["bpb"] == pytest.approx(row["bits"] / row["bytes"])


def test_alignment_scores_are_valid(rec):
    rows = rec["alignment"]
    assert [r["language"] for r in rows] == rec["language"] and {r["vision"] for r in rows} == {"dinov2-small"}
    for r in rows:
        assert 0 <= r["final"] <= r["peak"] <= 1
        assert 0 <= r["calibrated (final)"] <= 1 and 0 <= r["calibrated (max)"] <= 1
        assert 0 < r["p (max)"] <= 1 and 0 < r["p (final)"] <= 1
        assert r["bpb"] == pytest.approx(rec["bpb"][r["language"]]["bpb"])
    # the trained model aligns far above chance, the random end near it
    assert rows[-1]["peak"] > 2 * rec["chance"] and rows[-1]["p (max)"] <= 0.05


def test_correlations_match_a_recomputation_from_the_table(rec):
    rows = rec["alignment"]
    n = len(rows)
    found = {(c["alignment"], c["capability"]): c for c in rec["correlations"]}
    assert {cap for _, cap in found} == {"bpb"}  # the ladder has no benchmark scores
    for (col, cap), c in found.items():
        res = capability.correlate([r[col] for r in rows], [r[cap] for r in rows], n_boot=0)
        assert c["n"] == n
        if c["r"] is None:  # constant column (e.g. every calibrated score 0): no r, no p
            assert math.isnan(res.r) and c["p"] is None
            continue
        assert c["r"] == pytest.approx(res.r) and c["p"] == pytest.approx(res.p_value)
        assert -1 <= c["ci low"] <= c["ci high"] <= 1
    # the offline ladder's central number: alignment grows as bits per byte falls
    assert found[("peak", "bpb")]["r"] < 0


def test_capability_table_and_its_gaps_are_reported(rec):
    table = benchmarks.load_capability_table()
    assert rec["n_capability_models"] == len(table)
    assert rec["capability_missing"] == benchmarks.missing_counts(table)


def test_the_page_shows_its_figures_and_no_errors(nb):
    cells = nbformat.read(str(nb), as_version=4).cells
    outputs = [o for c in cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2  # bpb along the ladder, scatter grid
    text = "".join(o["data"].get("text/markdown", "") for o in outputs if "data" in o)
    assert "alignment grows with capability" in text or "alignment falls" in text
    assert "Along the ladder, bits per byte" in text and "Missing values in the table" in text
