"""The paper's claims registry and the verdicts computed from this build's numbers."""

import math

import numpy as np

import pytest

from prh_lib.pages import claims
from prh_lib import paths
from prh_lib.stats.decision import Test, combine, outcome


def test_every_claim_names_an_existing_chapter():
    notebooks = {p.stem for p in paths.notebooks_dir().glob("*.py")}
    assert {c.chapter for c in claims.CLAIMS.values()} <= notebooks


def test_the_paper_numbers_the_book_must_show_are_registered():
    shown = " ".join(c.paper for c in claims.CLAIMS.values())
    for number in ["0.143", "0.538", "0.317", "0.285", "0.445", "r = 0.66", "r = 0.73", "0.45 vs 0.31",
                   "0.73 vs 0.36", "0.31 vs 0.19"]:
        assert number in shown, number


@pytest.mark.parametrize("holds, value, interval, comparable, expected", [
    (None, 0.143, None, True, "not testable offline"),
    (False, 0.143, None, True, "differs"),
    (True, 0.150, None, True, "reproduces"),            # within the 0.02 tolerance
    (True, 0.170, None, True, "reproduces in kind"),    # outside it
    (True, 0.170, (0.140, 0.200), True, "reproduces"),  # the interval over images (half-width 0.03) widens it
    (True, 0.170, (math.nan, math.nan), True, "reproduces in kind"),  # no interval: no widening
    (True, 0.143, None, False, "reproduces in kind"),   # not the paper's setting: values never compare
    (True, None, None, True, "reproduces in kind"),
])
def test_verdict_rules(holds, value, interval, comparable, expected):
    assert claims.verdict("3.1/cross-modal-peak", holds=holds, value=value, interval=interval,
                          comparable=comparable) == expected


def test_a_verdict_takes_no_caption_draw_std_as_its_margin():
    # the spread over caption draws measures caption choice on fixed images: it is no margin (issue 24)
    with pytest.raises(TypeError):
        claims.verdict("3.1/cross-modal-peak", holds=True, value=0.17, std=0.015, comparable=True)
    with pytest.raises(TypeError):
        claims.finding("3.1/cross-modal-peak", this_build="x", holds=True, value=0.17, std=0.015)


def test_differs_is_never_given_with_an_interval_that_reaches_the_claims_side():
    rng = np.random.default_rng(0)
    for est, half, thr in rng.uniform([-1, 0, -0.5], [1, 0.5, 0.5], (2000, 3)):
        lo, hi = est - half, est + half
        for side in (">", "<"):
            o = outcome(est, lo, hi, thr, side=side)
            reaches = hi >= thr if side == ">" else lo <= thr
            if o == "differs":
                assert not reaches
            holds_side = lo > thr if side == ">" else hi < thr
            assert (o == "holds") == holds_side
            assert o == "differs" or o == "holds" or reaches


@pytest.mark.parametrize("estimate, low, high, threshold, side, expected", [
    (0.05, 0.01, 0.09, 0.0, ">", "holds"),
    (0.05, -0.01, 0.09, 0.0, ">", "inconclusive"),   # the interval reaches the threshold
    (-0.01, -0.05, 0.03, 0.0, ">", "inconclusive"),  # the estimate is off the claim's side, the interval is not
    (0.0, -0.01, 0.01, 0.0, ">", "inconclusive"),
    (-0.05, -0.08, -0.01, 0.0, ">", "differs"),      # the whole interval off the claim's side
    (-0.0002, -0.0048, 0.0051, 0.0, ">", "inconclusive"),  # 3.1/final-not-max, "differs" before the symmetric rule
    (0.30, 0.25, 0.35, 0.5, "<", "holds"),
    (0.45, 0.40, 0.55, 0.5, "<", "inconclusive"),
    (0.55, 0.50, 0.60, 0.5, "<", "inconclusive"),
    (0.309, 0.0, 0.794, 0.25, "<", "inconclusive"),  # G/fixed-ratio, "differs" before the symmetric rule
    (0.60, 0.55, 0.65, 0.5, "<", "differs"),
    (0.05, math.nan, math.nan, 0.0, ">", "inconclusive"),  # no interval: cannot decide
    (math.nan, 0.0, 0.1, 0.0, ">", "inconclusive"),
])
def test_three_way_outcome_of_a_test(estimate, low, high, threshold, side, expected):
    assert outcome(estimate, low, high, threshold, side=side) == expected
    assert Test("t", estimate, low, high, threshold, side).outcome == expected


def test_a_claim_passes_only_when_every_test_holds():
    ok = Test("margin over floor", 0.05, 0.02, 0.08)
    overlap = Test("margin over random-init", 0.04, -0.01, 0.09)
    wrong = Test("vision-vision − random-init", -0.04, -0.08, -0.01)
    assert combine([ok])[:2] == (True, True)
    holds, conclusive, note = combine([ok, overlap])
    assert (holds, conclusive) == (True, False) and "margin over random-init" in note
    holds, conclusive, note = combine([ok, overlap, wrong])
    assert (holds, conclusive) == (False, True) and "vision-vision − random-init" in note
    # the undecided test is named after the failing one, with what it could detect
    assert note.index("fails: vision-vision") < note.index("; cannot decide: margin over random-init")
    assert "at 80 % power" in note.split("cannot decide")[1] and note.endswith("holds: 1 of 3 parts")
    row = claims.finding("3.1/vision-vision", this_build="x", tests=[ok, wrong], rule="r")
    assert row["verdict"] == "differs" and row["rule"] == "r"
    row = claims.finding("3.1/vision-vision", this_build="x", tests=[ok, overlap])
    assert row["verdict"] == "inconclusive"
    with pytest.raises(ValueError):
        combine([])
    with pytest.raises(ValueError):
        Test("t", 0, 0, 0, side="=")


def test_claim_without_number_never_reproduces_exactly():
    assert claims.verdict("3.1/final-not-max", holds=True, value=0.1, comparable=True) == "reproduces in kind"


def test_table_fills_untested_claims_with_their_reason():
    row = claims.finding("3.1/cross-modal-peak", this_build="0.167 [0.150, 0.185]", holds=True, value=0.167,
                         interval=(0.150, 0.185))
    table = claims.claims_table([row], chapter="sec3_1_layerwise")
    assert list(table.index) == [c.id for c in claims.claims_for("sec3_1_layerwise")]
    assert table.loc["3.1/cross-modal-peak", "verdict"] == "reproduces in kind"
    assert table.loc["3.1/later-layers", "verdict"].startswith("not testable offline (")
    assert "arXiv 2611.12869" in table.loc["3.1/cross-modal-peak", "paper"]


def test_offline_reason_is_shown():
    row = claims.finding("3.3/clip", this_build=None, holds=None)
    assert row["verdict"] == f"not testable offline ({claims.CLAIMS['3.3/clip'].offline})"


def test_bad_rows_are_rejected():
    row = claims.finding("3.1/cross-modal-peak", this_build="x", holds=True)
    with pytest.raises(ValueError, match="twice"):
        claims.claims_table([row, row])
    with pytest.raises(ValueError, match="unknown claim"):
        claims.claims_table([dict(row, id="nope")])
    with pytest.raises(ValueError, match="no claims for chapter"):
        claims.claims_for("nope")


def test_checklist_covers_every_claim_and_marks_chapters_not_run():
    row = claims.finding("3.1/cross-modal-peak", this_build="0.167", holds=True)
    table = {r["id"]: r for r in claims.checklist({"sec3_1_layerwise": [row]})}
    assert list(table) == list(claims.CLAIMS)
    assert table["3.1/cross-modal-peak"]["this build"] == "0.167"
    assert table["3.3/unimodal"]["verdict"] == "not run in this build"
    counts = claims.tally({"sec3_1_layerwise": [row], "sec3_3_regimes": [], "ch_displacement": None})
    n31, n33, nd = (len(claims.claims_for(c)) for c in ("sec3_1_layerwise", "sec3_3_regimes", "ch_displacement"))
    assert counts["reproduces in kind"] == 1 and counts["not testable offline"] == n31 - 1 + n33
    assert counts["not run in this build"] == len(claims.CLAIMS) - n31 - n33 and "differs" not in counts


def test_checklist_markdown_links_each_claim_to_its_page_and_tallies_verdicts():
    row = claims.finding("3.1/cross-modal-peak", this_build="0.167 | x", holds=True)
    text = claims.checklist_markdown({"sec3_1_layerwise": [row], "sec3_3_regimes": None})
    lines = [line for line in text.splitlines() if line.startswith("| {doc}")]
    assert len(lines) == len(claims.CLAIMS)
    assert "{doc}`3.1/cross-modal-peak Cross-modal alignment is real but small </sec3_1_layerwise>`" in lines[0]
    assert "0.167 \\| x" in lines[0]  # cell text is escaped
    assert text.startswith("This build: **1** reproduces in kind")
    n_31 = len(claims.claims_for("sec3_1_layerwise"))
    assert f"**{n_31 - 1}** not testable offline" in text  # sec3_1 ran; its other claims have no numbers
    assert f"**{len(claims.CLAIMS) - n_31}** not run in this build" in text  # absent or None: not run


def test_a_result_that_points_the_papers_way_but_cannot_be_told_from_chance_is_inconclusive():
    assert claims.verdict("3.2/capability-trend", holds=True, conclusive=False) == "inconclusive"
    assert claims.verdict("3.2/capability-trend", holds=False, conclusive=False) == "inconclusive"
    assert claims.verdict("3.2/capability-trend", holds=False) == "differs"
    row = claims.finding("3.2/capability-trend", this_build="r = 0.6, exact p = 0.67 (n = 3)", holds=True,
                         conclusive=False)
    assert row["verdict"] == "inconclusive"
    assert claims.label_of(row["verdict"]) == "inconclusive"


def test_an_undecided_test_says_what_difference_this_build_could_detect():
    # interval [-0.1, 0.1]: SE = 0.1 / 1.95996; detectable at 95 % / 80 % = (1.95996 + 0.84162) SE = 0.1429
    holds, conclusive, note = combine([Test("a × b − floor", 0.05, -0.1, 0.1),
                                       Test("c × d − floor", 0.2, 0.1, 0.3)])
    assert (holds, conclusive) == (True, False)
    assert "a × b − floor: needs > 0, got 0.050 [-0.100, 0.100] (detects a difference from 0 of 0.143 at 80 % power)" in note
    assert "c × d" not in note  # a test that holds is not listed
    # a wider interval detects only larger differences; no interval, no power statement
    _, _, wide = combine([Test("x", 0.05, -0.2, 0.2)])
    assert "of 0.286 at 80 % power" in wide
    _, _, none = combine([Test("x", 0.05, math.nan, math.nan)])
    assert "power" not in none and "(no interval)" in none
    # a failing test says how it fails, with no power statement (it was decided)
    _, _, fails = combine([Test("x", -0.15, -0.2, -0.1)])
    assert fails.startswith("fails: ") and "power" not in fails


def test_a_detectable_difference_beyond_the_statistics_range_is_reported_as_none():
    # interval [-0.9, 0.95] of a correlation: (1.95996 + 0.84162) * 1.85 / (2 * 1.95996) = 1.322 > 1 = the most
    # r can exceed 0 by, so no difference within r's range is detectable
    r = Test("r with capability", 0.2, -0.9, 0.95, bounds=(-1.0, 1.0))
    assert math.isinf(r.detectable())
    _, _, note = combine([r])
    assert "no difference from 0 within the range of the statistic [-1, 1]" in note and "1.322" not in note
    # the same interval without bounds (a score difference): the figure is printed
    assert "of 1.322 at 80 % power" in combine([Test("x", 0.2, -0.9, 0.95)])[2]
    # a narrow interval on a correlation: a figure within the range
    assert Test("r", 0.2, -0.05, 0.45, bounds=(-1.0, 1.0)).detectable() == pytest.approx(0.357, abs=1e-3)
    with pytest.raises(ValueError, match="bounds"):
        Test("r", 0.2, 0.1, 0.3, bounds=(1.0, -1.0))


def test_a_reason_makes_a_row_not_testable_and_keeps_its_note():
    row = claims.finding("3.2/capability-trend", this_build="r = 0.6 (n = 3)", holds=None,
                         reason="n = 3 models: the smallest exact p is 0.167", note="direction: the paper's")
    assert row["verdict"] == "not testable offline (n = 3 models: the smallest exact p is 0.167)"
    assert row["note"] == "direction: the paper's" and row["this build"] == "r = 0.6 (n = 3)"
    # without a reason the note is the reason, as before
    row = claims.finding("3.2/capability-trend", this_build=None, holds=None, note="too few models")
    assert row["verdict"] == "not testable offline (too few models)" and row["note"] == ""


def test_the_power_note_names_the_test_its_figure_belongs_to():
    from prh_lib.pages import verdicts as V

    wide = Test("a × b − floor", 0.3, 0.1, 0.5)  # holds; the widest interval
    narrow = Test("a × b − c × d", 0.3, 0.25, 0.35)
    depth = Test("a × b depth", 0.3, 0.0, 0.9, 0.6, "<")  # other units: never the generic figure
    note = V.power_note([narrow, wide, depth])
    assert note == ("smallest difference from 0 this build detects at 80 % power, on its widest interval "
                    "(a × b − floor): 0.286")
    # the widest is undecided: combine's note already gives its figure next to its name, so no second one
    undecided = Test("a × b − floor", 0.1, -0.1, 0.3)
    assert V.power_note([narrow, undecided]) == ""
    assert "(detects a difference from 0 of 0.286 at 80 % power)" in combine([narrow, undecided])[2]
    assert V.power_note([depth]) == ""


def test_an_interval_end_that_would_print_as_the_threshold_gets_one_more_digit():
    # a lower end of 0.0004 (above 0: the test holds) or -0.0004 (below: it cannot decide) must not print as
    # "0.000", which reads as touching the threshold either way
    assert Test("m", 0.004, 0.0004, 0.008).describe() == "m: needs > 0, got 0.0040 [0.0004, 0.0080]"
    assert Test("m", 0.004, -0.0004, 0.008).describe() == "m: needs > 0, got 0.0040 [-0.0004, 0.0080]"
    assert Test("m", 0.04, 0.01, 0.08).describe() == "m: needs > 0, got 0.040 [0.010, 0.080]"
    assert Test("m", 0.04, 0.0, 0.08).describe() == "m: needs > 0, got 0.040 [0.000, 0.080]"  # exactly 0
    # an end still printing as the threshold gets digits until it does not (the robustness page's "[-0.0479, 0.0000]")
    assert Test("m", -0.0192, -0.0479, -0.00002).describe() == "m: needs > 0, got -0.01920 [-0.04790, -0.00002]"


def test_two_readings_a_claim_that_holds_by_the_papers_test_but_not_beyond_a_floor_says_so():
    paper_part = Test("peak − chance", 0.09, 0.08, 0.10)
    floor = Test("peak − TF-IDF (bag-of-words floor)", 0.002, -0.002, 0.006, control=True)
    row = claims.finding("3.1/cross-modal-peak", this_build="x", tests=[paper_part, floor])
    assert row["paper reading"] == "reproduces in kind" and row["verdict"] == "inconclusive"
    assert "TF-IDF" in row["note"] and "peak − chance" not in row["note"]
    table = claims.claims_table([row])
    assert table.loc["3.1/cross-modal-peak", "paper's criterion"] == "reproduces in kind"
    md = claims.checklist_markdown({"sec3_1_layerwise": [row]})
    assert "reproduces in kind / **inconclusive**" in md
    # every test a control: the paper reading is the same as the full one
    only = claims.finding("3.1/cross-modal-peak", this_build="x", tests=[floor])
    assert only["paper reading"] == only["verdict"] == "inconclusive"


def test_explained_and_control_failed_are_labels_of_their_own_defined_once():
    row = claims.finding("D/vision-vision", this_build="x", tests=[Test("gap", -0.01, -0.02, -0.005)],
                         explained="centring makes Cross-Model equal Pointwise")
    assert row["verdict"] == "explained" and row["note"].startswith("centring")
    row = claims.finding("C/hierarchy", this_build="x", holds=True, control_failed="the shuffled tree does too")
    assert row["verdict"] == "control failed"
    assert set(claims.LABELS) == set(claims.VERDICTS)


def test_the_front_pages_short_value_keeps_parentheses_whole():
    assert claims.headline_text({"this build": "-0.72 (shuffled tree -0.72; −1/(k−1) -0.74); more"}) == \
        "-0.72 (shuffled tree -0.72; −1/(k−1) -0.74)"
    assert claims.headline_text({"this build": "x", "headline": {"estimate": 0.1, "low": 0.05, "high": 0.15,
                                                                 "label": "a × b"}}) == "0.100 [0.050, 0.150] (a × b)"
