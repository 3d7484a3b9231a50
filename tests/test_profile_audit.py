"""The paper profile audited against the paper's protocol (arXiv 2611.12869, Sec. 2-3): computed, not written."""

import pytest

from prh_lib.run import profile_audit, profiles


def _rows():
    return {r["setting"]: r for r in profile_audit.audit_rows()}


def test_the_settings_the_paper_fixes_agree():
    rows = _rows()
    for setting in ("vision models", "language models", "same-modality pairs", "datasets", "N, k", "pooling"):
        assert rows[setting]["agrees"], (setting, rows[setting])
    assert set(rows) == set(profile_audit.PAPER)


def test_every_difference_says_why():
    for r in profile_audit.audit_rows():
        assert r["agrees"] or len(r["difference"]) > 40, r
    md = profile_audit.audit_markdown()
    assert md.count("\n| ") == len(profile_audit.PAPER) + 2  # header, rule, one row per setting
    assert "NV-Embed-v2 × Qwen3-Embedding-8B" in md


def test_a_profile_change_away_from_the_paper_shows_up(monkeypatch):
    paper = dict(profiles.PROFILES["paper"])
    paper["same_modality_pairs"] = [["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B"]]
    paper["k"] = 5
    monkeypatch.setitem(profiles.PROFILES, "paper", paper)
    rows = _rows()
    assert not rows["same-modality pairs"]["agrees"] and not rows["N, k"]["agrees"]


def test_the_capability_row_counts_the_committed_table():
    from prh_lib.data import benchmarks

    table = benchmarks.load_capability_table().reindex(profiles.get_profile("paper")["language_models"])
    row = _rows()["capability"]
    assert f"MMLU {int(table['mmlu_5shot'].notna().sum())}/21" in row["profile"]
    assert row["agrees"] is (bool(table[list(benchmarks.BENCHMARKS)].notna().all().all())
                             and set(table["arc_shots"].dropna()) == {4})
