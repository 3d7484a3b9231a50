"""The PCA compression page (notebooks/sec3_1b_pca.py), executed with the smoke profile."""

import nbformat
import numpy as np
import pytest

from prh_lib.pages import report
from prh_lib import results


@pytest.fixture(scope="module")
def executed(executed_notebook):
    return executed_notebook("sec3_1b_pca")


@pytest.fixture(scope="module")
def rec(executed):
    return report.read_record(executed, "sec3_1b_pca")


def _images(ipynb):
    nb = nbformat.read(str(ipynb), as_version=4)
    return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


def test_figures_present_and_page_clean(executed):
    assert _images(executed) == 2  # against variance retained, against components kept
    nb = nbformat.read(str(executed), as_version=4)
    outs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not [o for o in outs if o.get("output_type") == "error" or o.get("name") == "stdout"]
    assert "## The paper and this build" in "".join(c.source for c in nb.cells if c.cell_type == "markdown")


def test_recorded_numbers(rec):
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
        assert 0 <= r["uncompressed"] <= 1
        if r["layers"] == "peak":  # the best layer pair beats chance; a final-layer pair at N = 48 need not
            assert r["uncompressed"] > rec["chance"]  # (the paper's point: alignment peaks before the last layers)
    by_pair = {}
    for r in rows:
        by_pair.setdefault(r["pair"], {})[r["layers"]] = r["uncompressed"]
    assert all(v["peak"] >= v["final"] for v in by_pair.values())  # the peak is the maximum over layer pairs


def test_study_table_equals_a_recomputation_from_the_results_table(rec):
    df = results.load(chapter="sec3_1b_pca", params_hash=rec["params_hash"], expand_extra=True)
    assert set(df["dataset"]) == {"coco-mini", "coco-mini, 5 captions"} and set(df["draw"]) == {0, 1}
    for row in rec["study"]:
        x, y = row["pair"].split(" × ")
        side = "x" if row["compressed"] == x else "y"
        sel = ((df["dataset"] == row["dataset"]) & (df["model_x"] == x) & (df["model_y"] == y)
               & (df["role"] == row["layers"]) & (df["compress"] == side))
        ref = df[sel & (df["quantity"] == "pca:reference")]["score"].to_numpy(float)
        assert len(ref) == row["n_draws"] == 2
        assert row["reference"] == pytest.approx(ref.mean())
        v40 = df[sel & (df["quantity"] == "pca:variance") & np.isclose(df["target_variance"].astype(float), 0.4)]
        rel = (v40.sort_values("draw")["score"].to_numpy(float) / df[sel & (df["quantity"] == "pca:reference")]
               .sort_values("draw")["score"].to_numpy(float))
        assert row["rel_var"] == pytest.approx(rel.mean())
        low = df[sel & (df["quantity"] == "pca:dims") & (df["n_components"] == 8)]["relative"].to_numpy(float)
        assert row["rel_low"] == pytest.approx(low.mean())


def test_verdicts_follow_the_numbers(rec):
    import re

    rows = {r["id"]: r for r in rec["claims"]}
    t = [r for r in rec["study"] if r["dataset"] == "coco-mini" and r["layers"] == "peak"]
    lang = [r for r in t if re.search("smollm|minilm|gemma", r["compressed"])]  # the claims are about language sides
    assert lang and len(lang) < len(t)  # vision-side rows exist and are not counted
    for r in lang:  # every relative score the claims read has its paired interval over images
        for col in ("ci_var", "ci_share", "ci_low"):
            rel, lo, hi, m = r[col]
            assert lo <= rel + 1e-9 and rel <= hi + 1e-9 and m >= 1, (col, r[col])
        # the paper's 100 of 1,023 as a share of this rank
        assert r["ci_share"][3] == max(1, round(100 / 1023 * r["max_dims"]))

    def verdict(col, thr, side):  # independent, symmetric reading: a majority of whole intervals on each side
        clear = sum((r[col][1] > thr) if side == ">" else (r[col][2] < thr) for r in lang)
        off = sum((r[col][2] < thr) if side == ">" else (r[col][1] > thr) for r in lang)
        if clear > len(lang) / 2:
            return "reproduces in kind"
        return "differs" if len(lang) - off <= len(lang) / 2 else "inconclusive"

    assert rows["3.1/pca-40"]["verdict"] == verdict("ci_var", 0.95, ">")
    assert rows["3.1/pca-100"]["verdict"] == verdict("ci_share", 0.9, ">")
    assert rows["3.1/pca-strong"]["verdict"] == verdict("ci_low", 0.8, "<")
    assert "dims for 90 %" in rows["3.1/pca-100"]["this build"] and "mean sweep" in rows["3.1/pca-100"]["this build"]
    # power, stated: the widest interval's detectable difference from each claim's threshold
    from prh_lib.stats.intervals import detectable_difference

    for cid, col, thr in (("3.1/pca-40", "ci_var", "95 %"), ("3.1/pca-100", "ci_share", "90 %"),
                          ("3.1/pca-strong", "ci_low", "80 %")):
        widest = max(detectable_difference(r[col][1], r[col][2]) for r in lang)
        assert f"smallest difference from {thr} this build detects at 80 % power, on its widest interval: " \
               f"{100 * widest:.0f} percentage points" in rows[cid]["note"], rows[cid]["note"]
    assert all(rows[c]["rule"] and "interval" in rows[c]["rule"] for c in ("3.1/pca-40", "3.1/pca-100", "3.1/pca-strong"))