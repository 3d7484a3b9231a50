"""The front page's generated parts (prh_lib.pages.front): findings from the numbers, the claims figure and its data."""

import csv
import io

import pytest

from prh_lib.pages import claims, front
from prh_lib.stats.decision import Test


def _rows():
    peak = claims.finding(
        "3.1/cross-modal-peak", this_build="long text", rule="r",
        tests=[Test("peak − chance", 0.089, 0.081, 0.101),
               Test("a × b − a × tfidf (tfidf floor)", 0.002, -0.002, 0.006, control=True)],
        headline={"estimate": 0.099, "low": 0.091, "high": 0.111, "label": "lite0 × minilm, 9.9× chance 0.010"})
    later = claims.finding("3.1/later-layers", this_build="no cross-modal pair beats its floors", holds=True,
                           conclusive=False)
    same = claims.finding("3.3/same-modality", this_build="x", tests=[
        Test("s − u", 0.2, 0.1, 0.3),
        Test("v × w − v@random-init:0 × w (random-vision floor)", -0.03, -0.05, -0.01, control=True)],
                          headline={"estimate": 0.269, "label": "lowest same-modality pair"})
    return {"sec3_1_layerwise": [peak, later], "sec3_3_regimes": [same]}


def test_findings_are_generated_from_the_rows_numbers_and_both_readings():
    text = front.findings_markdown(_rows())
    assert "0.099 [0.091, 0.111] (lite0 × minilm, 9.9× chance 0.010)" in text
    assert "the paper reports 0.143" in text  # the paper's value, from the claim
    # the paper's criterion holds; with the bag-of-words floor it cannot be decided, and the open test is named
    assert "By the paper's criterion (above chance, permutation p ≤ 0.05) the claim holds" in text
    assert "it cannot be decided: a × b is not clearly above its bag-of-words floor (margin 0.002 [-0.002, 0.006])" in text
    # a regime that fails with the controls says which pair falls below which floor, in words
    assert ("Same-modality pairs align at about 0.5 (paper); here 0.269 (lowest same-modality pair), reproduces in "
            "kind by the paper's criterion, differs with the controls: v × w is below its random-init floor (margin "
            "-0.030 [-0.050, -0.010])") in text
    assert "no peak is located" in text and "0.269" in text
    assert f"of {len(claims.CLAIMS)} claims" in text and "not run in this build" in text
    assert "CLIP-like models" in text  # what could not be tested, and why
    assert len(text.split()) <= front.MAX_FINDINGS_WORDS
    # nothing ran: said, not guessed
    assert "was not run in this build" in front.findings_markdown({})


def test_findings_over_budget_are_refused():
    rows = _rows()
    rows["sec3_1_layerwise"][0]["headline"] = {"estimate": 0.1, "label": "word " * 300}
    with pytest.raises(ValueError, match="more than 250"):
        front.findings_markdown(rows)


def test_claims_figure_data_holds_every_claim_with_the_colour_it_is_drawn_in():
    png, data = front.claims_figure(_rows())
    assert png.startswith(b"\x89PNG")
    table = list(csv.DictReader(io.StringIO(data)))
    assert [r["claim"] for r in table] == list(claims.CLAIMS)
    by = {r["claim"]: r for r in table}
    assert by["3.1/cross-modal-peak"]["paper's criterion"] == "reproduces in kind"
    assert by["3.1/cross-modal-peak"]["verdict"] == "inconclusive"
    assert by["3.3/unimodal"]["verdict"] == "not testable offline"  # sec3_3 ran; this claim has no row
    assert by["D/vision-vision"]["verdict"] == "not run in this build"
    assert set(front.COLOURS) == {*claims.VERDICTS, "not run in this build"}


def test_every_label_is_defined_once():
    text = front.labels_markdown()
    for label in claims.VERDICTS:
        assert text.count(f"- **{label}**:") == 1


def test_checklist_cells_are_whole_sentences():
    """Every claim and paper value fits its cell whole, or without its parentheses: no cell is cut with "…"."""
    text = claims.checklist_markdown({})
    assert text.count("| {doc}`") == len(claims.CLAIMS) and "…" not in text


def test_regime_reasons_give_way_to_the_word_budget():
    """Long reasons (a test run's pair names) are dropped before the paragraph goes over budget; the verdicts stay."""
    rows = _rows()
    long_name = " ".join(["word"] * 100)
    rows["sec3_3_regimes"][0] = claims.finding(
        "3.3/same-modality", this_build="x", tests=[
            Test(f"{long_name} − v@random-init:0 × w (random-vision floor)", -0.03, -0.05, -0.01, control=True)],
        headline={"estimate": 0.269, "label": "lowest same-modality pair"})
    text = front.findings_markdown(rows)
    assert len(text.split()) <= front.MAX_FINDINGS_WORDS and "differs" in text and long_name not in text


def test_robustness_lines_name_each_changed_finding_and_its_alternatives():
    changed = [{"finding": "regime order", "baseline": "holds",
                "alternatives": [["centred after clipping", "fails"], ["CKNNA", "undecided"], ["a", "fails"],
                                 ["b", "fails"]]}]
    text = front.robustness_markdown(changed)
    assert text.count("\n- ") == 1 and "*regime order* (holds under the book's protocol)" in text
    assert "fails with centred after clipping, a, b; undecided with CKNNA." in text  # grouped by verdict
    assert "keeps its verdict" in front.robustness_markdown([])
    assert front.robustness_markdown(None) == ""  # the page did not run: nothing said
    assert len(text.split()) <= front.MAX_FINDINGS_WORDS
