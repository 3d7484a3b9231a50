"""benchmarks/golden.py ``claims``: the claim-by-claim comparison of two builds finds what moved, and only that."""

import importlib.util
import json
from pathlib import Path

spec = importlib.util.spec_from_file_location("golden", Path(__file__).parents[1] / "benchmarks" / "golden.py")
golden = importlib.util.module_from_spec(spec)
spec.loader.exec_module(golden)

NOTE = ("a caveat; fails: a × b − a × tfidf (tfidf floor): needs > 0, got -0.028 [-0.056, -0.010]; cannot decide: "
        "c × d depth of c: needs > 0.5, got 0.417 [0.375, 0.544] (detects a difference from 0.5 of 0.1 at 80 % "
        "power); holds: 2 of 4 parts")


def _claim(verdict="differs", note=NOTE, estimate=0.06):
    return {"id": "3.1/x", "verdict": verdict, "paper reading": verdict, "note": note,
            "headline": {"estimate": estimate, "low": estimate - 0.01, "high": estimate + 0.01}}


def _folder(tmp_path, name, claim, finding="undecided"):
    d = tmp_path / name
    d.mkdir()
    (d / "sec3_1_layerwise.json").write_text(json.dumps({"claims": [claim]}))
    (d / "robustness.json").write_text(json.dumps({"robustness": [
        {"finding": "regime order", "baseline": finding, "alternatives": [["unbiased linear CKA", finding]]}]}))
    return d


def test_open_tests_reads_each_failing_and_undecided_test_with_its_interval():
    assert golden.open_tests(NOTE) == {
        "a × b − a × tfidf (tfidf floor)": ("fails", "-0.028 [-0.056, -0.010]"),
        "c × d depth of c": ("cannot decide", "0.417 [0.375, 0.544]")}
    assert golden.open_tests("every test holds; holds: 3 of 3 parts") == {}


def test_claims_reports_no_move_when_only_numbers_move(tmp_path, capsys):
    a = _folder(tmp_path, "a", _claim())
    b = _folder(tmp_path, "b", _claim(estimate=0.065, note=NOTE.replace("-0.028", "-0.027")))
    assert golden.claims(a, b) == 0
    out = capsys.readouterr().out
    assert "+0.50 of its half-width" in out and "no verdict, reading or test status moved" in out


def test_claims_reports_a_verdict_a_test_and_a_finding_that_moved(tmp_path, capsys):
    a = _folder(tmp_path, "a", _claim())
    moved_note = NOTE.replace("cannot decide: c × d depth of c: needs > 0.5, got 0.417 [0.375, 0.544] (detects a "
                              "difference from 0.5 of 0.1 at 80 % power); holds: 2", "holds: 3")
    b = _folder(tmp_path, "b", _claim(verdict="inconclusive", note=moved_note), finding="holds")
    assert golden.claims(a, b) == 1
    out = capsys.readouterr().out
    assert "verdict 'differs' -> 'inconclusive'" in out
    assert "test 'c × d depth of c': cannot decide 0.417 [0.375, 0.544] -> holds" in out
    assert "robustness/regime order" in out and "unbiased linear CKA: undecided -> holds" in out
    assert "2 moved" in out


def test_an_alternative_no_longer_listed_keeps_the_protocols_verdict(tmp_path, capsys):
    a, b = _folder(tmp_path, "a", _claim(), finding="fails"), _folder(tmp_path, "b", _claim(), finding="fails")
    (a / "robustness.json").write_text(json.dumps({"robustness": [
        {"finding": "regime order", "baseline": "fails", "alternatives": [["k = 42", "undecided"]]}]}))
    (b / "robustness.json").write_text(json.dumps({"robustness": [
        {"finding": "regime order", "baseline": "fails", "alternatives": []}]}))
    assert golden.claims(a, b) == 1
    assert "k = 42: undecided -> fails (as the protocol)" in capsys.readouterr().out
