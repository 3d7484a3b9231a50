"""The PCA compression page (notebooks/sec3_1b_pca.py), executed with the smoke profile."""

import nbformat
import pytest

from prh_lib import report


@pytest.fixture(scope="module")
def executed(executed_notebook):
    return executed_notebook("sec3_1b_pca")


def _images(ipynb):
    nb = nbformat.read(str(ipynb), as_version=4)
    return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


def test_figures_present(executed):
    assert _images(executed) == 2  # against variance retained, against components kept


def test_recorded_numbers(executed):
    rec = report.read_record(executed, "sec3_1b_pca")
    assert rec["n"] == 48 and rec["k"] == 5 and rec["chance"] == pytest.approx(5 / 47)
    # full-rank compression reproduces the uncompressed score exactly, for every sweep
    assert rec["full_rank_scores"] == rec["references"]
    rows = rec["rows"]
    assert len(rows) == 3 * 2 * 2  # comparisons x layer pairs x sides
    for r in rows:
        compressed = r["pair"].split(" × ")[0 if r["compress"] == "x" else 1]
        assert 1 <= r["max_dims"] <= 48  # min(N, d)
        if compressed != "efficientnet-lite0":  # transformer widths (384, 576) exceed N = 48
            assert r["max_dims"] == 48
        assert r["uncompressed"] > rec["chance"]
        if r["min_dims"] is not None:
            assert 1 <= r["min_dims"] <= r["max_dims"]
            assert 0 < r["variance_at_min_dims"] <= 1 + 1e-9
    assert {r["layers"] for r in rows} == {"peak", "final"}
    by_pair = {}
    for r in rows:
        by_pair.setdefault(r["pair"], {})[r["layers"]] = r["uncompressed"]
    assert all(v["peak"] >= v["final"] for v in by_pair.values())  # the peak is the maximum over layer pairs
