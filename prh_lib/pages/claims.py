"""The papers' claims, with their numbers, and verdicts computed from this build's numbers.

Every chapter page ends with a section "The paper and this build": one row per claim of the paper that
the chapter addresses, the paper's value, this build's value (mean ± std over draws, from the results
table) and a verdict computed from the numbers by :func:`verdict`. The front page collects the same rows
for the whole book (:func:`checklist_markdown`).

The paper's values are quoted from the papers' text as summarised in ``shared/papers/`` (Herbst et al.,
arXiv 2611.12869; for the displacement chapter, arXiv 2609.24209).

Verdicts
--------
Each label means one thing; the front page defines them once (:data:`LABELS`). A claim is read twice
(:func:`prh_lib.stats.decision.readings`): by the paper's own criterion, and with this book's added
controls (floors: random-init twins, a bag of words); ``verdict`` is the second reading, ``paper reading``
the first. Tests are symmetric (:func:`prh_lib.stats.decision.outcome`): a part holds when its 95 %
interval over images lies on the claim's side, differs when it lies off it, and is inconclusive otherwise.

This module imports nothing else from :mod:`prh_lib`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported where a table is built: the book build reads the checklist without it
    import pandas as pd

PAPER = "Herbst et al. 2026, arXiv 2611.12869"

VERDICTS = ("reproduces", "reproduces in kind", "inconclusive", "differs", "explained", "control failed",
            "not testable offline")

#: The definition of each verdict label, shown once on the front page.
LABELS = {
    "reproduces": "every part of the claim's test holds and this build ran in the paper's setting (its models, "
                  "data and N), with the value within tolerance of the paper's (the larger of the claim's "
                  "tolerance and the half-width of the value's interval over images)",
    "reproduces in kind": "every part holds, but the setting differs (small offline models, 1,000 Flickr8k and "
                          "239 COCO pairs), so the value is not compared with the paper's",
    "inconclusive": "the test ran but an interval over images reaches its threshold: the data cannot decide, and "
                    "the row gives the smallest difference this build could detect at 80 % power",
    "differs": "the interval of some part lies entirely on the wrong side of its threshold",
    "explained": "this build reproduces the paper's number with the paper's own procedure and traces it to a "
                 "cause the page derives (the claim as stated does not hold under the book's procedure)",
    "control failed": "the experiment's own control does not separate (a positive or shuffled control "
                      "fails), so the test is invalid here and says nothing about the claim",
    "not testable offline": "the weights or data it needs are not available offline (the row says which)",
}


@dataclass(frozen=True)
class Claim:
    """One claim of a paper.

    Attributes
    ----------
    id : str
        Stable key, e.g. ``"3.1/cross-modal-peak"``.
    chapter : str
        Notebook (page) that tests it.
    text : str
        The claim, in one line.
    paper : str
        The paper's value as displayed (with dataset and models).
    source : str
        Where in the paper (section, figure, table).
    value : float or None
        The paper's number, where the claim has one that this build's number can be compared with.
    tolerance : float
        Absolute tolerance for "reproduces" (see :func:`verdict`); widened to 2 std of this build's draws.
    offline : str
        Why the claim cannot be tested offline, when it cannot ("" if it can).
    """

    id: str
    chapter: str
    text: str
    paper: str
    source: str
    value: float | None = None
    tolerance: float = 0.02
    offline: str = ""
    arxiv: str = "2611.12869"


_NO_VLM = "no CLIP-like model installs offline; run the paper profile"
_NO_BENCH = ("the offline language models lack published MMLU/ARC/GSM8K scores (at most one of them has one, too few "
             "for a correlation); run the paper profile")
_NO_DATA = "the paper's datasets (WIT, COCO at N = 1024, DOCCI, CC3M) are not available offline; run the paper profile"

CLAIMS: dict[str, Claim] = {c.id: c for c in [
    # Section 3.1 (Fig. 1, WIT)
    Claim("3.1/cross-modal-peak", "sec3_1_layerwise", "Cross-modal alignment is real but small",
          "0.143 (WIT; DINOv3 layer 21 × Qwen3-8B layer 30)", "Sec. 3.1, Fig. 1a", value=0.143),
    Claim("3.1/later-layers", "sec3_1_layerwise", "Cross-modal peaks sit in later layers (relative depth ≥ 0.5 on both sides)",
          "later layers (DINOv3 21/24, Qwen3-8B 30/36)", "Sec. 3.1, Fig. 1a"),
    Claim("3.1/final-not-max", "sec3_1_layerwise", "The final-layer pair is never the maximum",
          "never the maximum, sometimes far from it", "Sec. 3.1"),
    Claim("3.1/vision-vision", "sec3_1_layerwise", "Vision-vision pairs align far more, in later layers",
          "up to 0.538; three blocks above 0.3", "Sec. 3.1, Fig. 1b", value=0.538, tolerance=0.05),
    Claim("3.1/language-language", "sec3_1_layerwise",
          "Language-language (generative × embedding) aligns more than cross-modal, at early-middle layers",
          "about 0.5 at early-middle layer pairs", "Sec. 3.1, Fig. 1c", value=0.5, tolerance=0.05),
    # PCA (Fig. 2, App. C)
    Claim("3.1/pca-40", "sec3_1b_pca", "Keeping 40 % of the variance keeps (or slightly raises) alignment for most models",
          "kept or slightly raised (WIT, DINOv2 × 6 LMs)", "Sec. 3.1, Fig. 2"),
    Claim("3.1/pca-100", "sec3_1b_pca", "About 100 dimensions keep cross-modal alignment",
          "~100 dims of 1,536-5,120", "Sec. 3.1, Fig. 2"),
    Claim("3.1/pca-strong", "sec3_1b_pca", "Stronger compression loses it", "lost below ~100 dims", "Sec. 3.1, Fig. 2"),
    Claim("3.1/pca-docci", "sec3_1b_pca", "On DOCCI more variance is needed; 100 language dims still mostly hold",
          "DOCCI needs more variance", "App. C, Fig. 8", offline=_NO_DATA),
    # Section 3.2 (Figs. 3-4, App. D)
    Claim("3.2/mmlu-docci", "sec3_2_capability", "Alignment with DINOv3 correlates with MMLU on DOCCI",
          "r = 0.66 (p = 0.001), same after calibration", "Sec. 3.2, Fig. 3", value=0.66, offline=_NO_BENCH),
    Claim("3.2/arc-docci", "sec3_2_capability", "... and with ARC-Challenge", "r = 0.73 (p = 0.0002)",
          "Sec. 3.2, Fig. 4", value=0.73, offline=_NO_BENCH),
    Claim("3.2/gsm8k", "sec3_2_capability", "GSM8K does not correlate", "not significant", "Sec. 3.2, App. D",
          offline=_NO_BENCH),
    Claim("3.2/datasets", "sec3_2_capability", "The trend weakens with noisier captions",
          "DOCCI-10 % r = 0.59 (p = 0.005); WIT 0.46 (p = 0.03); CC3M 0.26 (p = 0.25)", "Sec. 3.2, Fig. 3",
          offline=_NO_DATA),
    Claim("3.2/capability-trend", "sec3_2_capability",
          "More capable language models align more (offline: capability = lower bits per byte on held-out captions)",
          "r = 0.66 with MMLU (DOCCI)", "Sec. 3.2"),
    Claim("3.2/final-less", "sec3_2_capability", "Final-layer alignment predicts capability less than the maximum",
          "final layer less predictive", "App. D"),
    # Section 3.3 (Fig. 5, Table 1)
    Claim("3.3/unimodal", "sec3_3_regimes", "Unimodal vision × language pairs exceed 0.3 on COCO and DOCCI",
          "> 0.3 (COCO, DOCCI; N = 1024)", "Sec. 3.3, Fig. 5", value=0.3, tolerance=0.05),
    Claim("3.3/clip", "sec3_3_regimes", "... above CLIP ViT-L/14 (projection layer)", "COCO 0.317 ± 0.005",
          "Table 1", value=0.317, offline=_NO_VLM),
    Claim("3.3/siglip", "sec3_3_regimes", "... and SigLIP 2 So400M", "COCO 0.285 ± 0.004", "Table 1",
          value=0.285, offline=_NO_VLM),
    Claim("3.3/qwen3-vl", "sec3_3_regimes", "... below Qwen3-VL-Embedding-8B", "DOCCI 0.445 ± 0.003", "Table 1",
          value=0.445, offline=_NO_VLM),
    Claim("3.3/same-modality", "sec3_3_regimes", "Same-modality pairs align at about 0.5, far above cross-modal",
          "about 0.5", "Sec. 3.3, Fig. 5", value=0.5, tolerance=0.05),
    Claim("3.3/random-init", "sec3_3_regimes",
          "Randomly initialised models score near chance (both models random-init, vision × language)",
          "near chance (k/(N-1) = 0.0098 at N = 1024)", "Sec. 3.3, Fig. 5"),
    Claim("3.3/projection", "sec3_3_regimes", "A VLM's projection layer scores within 0.016 of its best layer pair",
          "≤ 0.016 (SigLIP 2, COCO); others ≤ 0.006", "App. E, Table 1", value=0.016, offline=_NO_VLM),
    # Appendix G, F
    Claim("G/k-order", "appg_k_n_ablation", "Larger k raises scores but keeps the order of the regimes",
          "k ∈ {1, 5, 10, 100} (DOCCI)", "App. G"),
    Claim("G/fixed-ratio", "appg_k_n_ablation", "At fixed k/N ≈ 0.01 scores are stable across N",
          "stable (DOCCI)", "App. G"),
    Claim("F/detail", "appf_caption_detail", "Less caption detail lowers alignment but keeps the order of models",
          "DOCCI summarised to 10-75 %: lower, same order", "App. F"),
    # Displacement geometry (companion paper, sample level, Flickr30k)
    Claim("D/vision-vision", "ch_displacement", "Cross-Model exceeds Pointwise (vision-vision)", "0.45 vs 0.31",
          "Table (sample level, Flickr30k)", value=0.45, arxiv="2609.24209"),
    Claim("D/language-language", "ch_displacement", "Cross-Model exceeds Pointwise (language-language)",
          "0.73 vs 0.36", "Table (sample level, Flickr30k)", value=0.73, arxiv="2609.24209"),
    Claim("D/cross-modal", "ch_displacement", "Cross-Model exceeds Pointwise (cross-modal)", "0.31 vs 0.19",
          "Table (sample level, Flickr30k)", value=0.31, arxiv="2609.24209"),
    # Displacement geometry (companion paper): concept level, hierarchy, controllability (ch_concepts)
    Claim("C/vision-vision", "ch_concepts", "Concept level: Cross-Model exceeds Pointwise (vision-vision)",
          "0.73 vs 0.41 (ImageNet-22k ∩ CommonWords79k)", "Table (concept level)", value=0.73, arxiv="2609.24209"),
    Claim("C/language-language", "ch_concepts", "Concept level: Cross-Model exceeds Pointwise (language-language)",
          "0.91 vs 0.36", "Table (concept level)", value=0.91, arxiv="2609.24209"),
    Claim("C/cross-modal", "ch_concepts", "Concept level: Cross-Model exceeds Pointwise (cross-modal)",
          "0.49 vs 0.25", "Table (concept level)", value=0.49, arxiv="2609.24209"),
    Claim("C/hierarchy", "ch_concepts", "A child's variation from its parent is orthogonal to the parent",
          "cos(v_c − v_p, v_p) ≈ 0; cos(v_c, v_p) ≈ 0.72", "Sec. Hierarchical orthogonality", value=0.72,
          arxiv="2609.24209"),
    Claim("C/siblings", "ch_concepts", "Siblings' variation vectors point apart", "≈ −0.30",
          "Sec. Hierarchical orthogonality", value=-0.30, arxiv="2609.24209"),
    Claim("C/relation-distillation", "ch_concepts",
          "Relation distillation raises Cross-Model and leaves Pointwise (positions and displacements independent)",
          "Pointwise 0.32 → 0.35, Cross-Model 0.32 → 0.74", "Ablation table (controllability)", arxiv="2609.24209"),
    Claim("C/shadowclip", "ch_concepts", "Shadow Casting (ShadowCLIP) beats CLIP without fine-tuning the backbone",
          "ViT-B IN-1k 70.2 % vs 67.0 %; MMVP 26.0 vs 19.3", "Main table (ShadowCLIP)", value=70.2,
          offline="needs CLIP, DINO, an LLM teacher and CC12M features", arxiv="2609.24209"),
]}


def claims_for(chapter: str) -> list[Claim]:
    """The claims a chapter tests, in the order listed in :data:`CLAIMS`.

    Raises
    ------
    ValueError
        If no claim names that chapter (the message lists the chapters that have claims).
    """
    found = [c for c in CLAIMS.values() if c.chapter == chapter]
    if not found:
        raise ValueError(f"no claims for chapter {chapter!r}; chapters: {sorted({c.chapter for c in CLAIMS.values()})}")
    return found


def verdict(claim: Claim | str, *, holds: bool | None, value: float | None = None,
            interval: tuple[float, float] | None = None, comparable: bool = False, conclusive: bool = True) -> str:
    """The verdict for one claim from this build's numbers.

    Parameters
    ----------
    claim : Claim or str
        The claim or its id.
    holds : bool or None
        Whether the claim's qualitative statement holds on this build's numbers (computed by the chapter
        from its results, e.g. ``peak > control``); None when this build has no numbers for it.
    value : float, optional
        This build's value, compared with ``claim.value`` only when ``comparable``.
    interval : (float, float), optional
        The value's 95 % interval over images; its half-width widens the tolerance. The spread over caption
        draws is not a margin and is not accepted here.
    comparable : bool
        Whether this build ran in the paper's setting (its models, dataset and N), so that values compare.
    conclusive : bool, default True
        False when the numbers cannot decide ``holds`` (then the verdict is "inconclusive", never a
        reproduction or a difference).

    Returns
    -------
    str
        One of :data:`VERDICTS`.

    Raises
    ------
    KeyError
        For an unknown claim id.
    """
    claim = CLAIMS[claim] if isinstance(claim, str) else claim
    if holds is None:
        return "not testable offline"
    if not conclusive:
        return "inconclusive"
    if not holds:
        return "differs"
    if comparable and claim.value is not None and value is not None and math.isfinite(value):
        lo, hi = interval if interval is not None else (math.nan, math.nan)
        spread = (hi - lo) / 2 if math.isfinite(lo) and math.isfinite(hi) else 0.0
        if abs(value - claim.value) <= max(claim.tolerance, spread):
            return "reproduces"
    return "reproduces in kind"


def finding(claim: Claim | str, *, this_build: str | None, holds: bool | None = None, value: float | None = None,
            interval: tuple[float, float] | None = None, comparable: bool = False, note: str = "",
            conclusive: bool = True, tests=None, rule: str = "", reason: str = "", explained: str = "",
            control_failed: str = "", headline: dict | None = None) -> dict:
    """One row of a chapter's "The paper and this build" table.

    ``this_build`` is the displayed value; with ``holds=None`` the verdict says why the claim is not testable
    offline: ``reason`` when given (then ``note`` stays a note), else ``note``, else the claim's ``offline``
    reason. With ``tests`` (a list of :class:`Test`), ``holds`` and ``conclusive`` come from
    :func:`prh_lib.stats.decision.readings`: ``verdict`` reads every test, ``paper reading`` only the paper's
    own (non-control) ones, and the parts that fail or cannot decide are added to the note. ``explained`` or
    ``control_failed`` (the reason, in words) set those labels instead (:data:`LABELS`). ``rule`` is the
    claim's test in one sentence; ``headline`` (``estimate``, ``low``, ``high`` and any context) is what the
    front page's findings read.
    """
    from prh_lib.stats.decision import readings

    claim = CLAIMS[claim] if isinstance(claim, str) else claim
    paper_v = None
    if tests is not None:
        read = readings(tests)
        holds, conclusive, why = read["controls"]
        note = "; ".join(t for t in (note, why) if t)
        if "paper" in read:
            ph, pc, _ = read["paper"]
            paper_v = verdict(claim, holds=ph, value=value, interval=interval, comparable=comparable, conclusive=pc)
    v = verdict(claim, holds=holds, value=value, interval=interval, comparable=comparable, conclusive=conclusive)
    if explained or control_failed:  # the same for both readings: a cause or an invalid experiment
        v = paper_v = "explained" if explained else "control failed"
        note = "; ".join(t for t in (explained or control_failed, note) if t)
    elif v == "not testable offline":
        why = reason or note or claim.offline or "this build has no numbers for it"
        v = f"not testable offline ({why})"
        note = note if reason else ""
    return {"id": claim.id, "chapter": claim.chapter, "claim": claim.text, "paper": claim.paper,
            "source": f"{claim.source}, arXiv {claim.arxiv}", "this build": this_build or "–", "verdict": v,
            "paper reading": paper_v or v, "note": note, "rule": rule, "headline": headline or {}}


def untested(chapter: str, done: list[dict]) -> list[dict]:
    """Rows for the chapter's claims that ``done`` does not cover (each 'not testable offline')."""
    have = {row["id"] for row in done}
    return [finding(c, this_build=None, holds=None) for c in claims_for(chapter) if c.id not in have]


def claims_table(rows: list[dict], *, chapter: str | None = None) -> pd.DataFrame:
    """The table shown under "The paper and this build".

    With ``chapter``, claims of that chapter missing from ``rows`` are added as not testable, so every
    claim of the chapter appears. Columns: claim, paper (with source), this build, test, the verdict by the
    paper's criterion, and ``verdict`` (with this book's controls).

    Raises
    ------
    ValueError
        If a row names an unknown claim or the same claim twice.
    """
    ids = [r["id"] for r in rows]
    unknown = [i for i in ids if i not in CLAIMS]
    if unknown:
        raise ValueError(f"unknown claim ids {unknown}; valid ids: {sorted(CLAIMS)}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"a claim appears twice: {sorted(i for i in ids if ids.count(i) > 1)}")
    import pandas as pd

    rows = list(rows) + (untested(chapter, rows) if chapter else [])
    order = {cid: i for i, cid in enumerate(CLAIMS)}
    rows.sort(key=lambda r: order[r["id"]])
    frame = pd.DataFrame([{
        "claim": r["claim"] + (f" ({r['note']})" if r.get("note") else ""),
        "paper": f"{r['paper']} [{r['source']}]",
        "this build": r["this build"],
        "test": r.get("rule") or "none: no numbers here",
        "paper's criterion": r.get("paper reading", r["verdict"]),
        "verdict": r["verdict"],
    } for r in rows], index=pd.Index([r["id"] for r in rows], name="id"))
    return frame


def verdict_lines(rows: list[dict]) -> list[str]:
    """One Markdown bullet per verdict row (of :func:`verdict` / :func:`finding`): ``- `<id>`: <verdict> (<this build>).``

    The closing list of a chapter's generated prose, one line per claim, in the order of ``rows``.
    """
    return [f"- `{r['id']}`: {r['verdict']} ({r['this build']})." for r in rows]


def checklist(rows_by_chapter: dict[str, list[dict] | None]) -> list[dict]:
    """The front page's checklist: one row (a dict) per claim in :data:`CLAIMS` order. ``rows_by_chapter`` maps a
    chapter to the rows its page recorded, or None for a chapter not run (its claims: "not run in this build")."""
    rows = []
    for claim in CLAIMS.values():
        recorded = rows_by_chapter.get(claim.chapter)
        match = [r for r in (recorded or []) if r["id"] == claim.id]
        if recorded is None:
            row = finding(claim, this_build=None, holds=None) | {"verdict": "not run in this build"}
        else:
            row = match[0] if match else finding(claim, this_build=None, holds=None)
        rows.append({"id": row["id"], "page": claim.chapter, "claim": row["claim"],
                     "paper": f"{row['paper']} [{row['source']}]", "paper value": row["paper"],
                     "this build": row["this build"], "headline": headline_text(row),
                     "verdict": row["verdict"], "paper reading": row.get("paper reading", row["verdict"]),
                     "note": row.get("note", ""), "rule": row.get("rule", "")})
    return rows


def headline_text(row: dict, width: int = 64) -> str:
    """The short form of a row's value for the front page: its ``headline`` (``"0.099 [0.091, 0.111]"``, with
    its ``label``) when the chapter gave one, else the first clause of ``this build`` (:func:`short_cell`)."""
    h = row.get("headline") or {}
    if h.get("estimate") is not None:
        from prh_lib.formatting import format_interval

        text = format_interval(h["estimate"], h.get("low", math.nan), h.get("high", math.nan), h.get("digits", 3))
        return f"{text} ({h['label']})" if h.get("label") else text
    text, depth, end = str(row.get("this build") or "–"), 0, None
    for i, ch in enumerate(text):  # the first clause: up to a "; " outside parentheses
        depth += (ch in "([") - (ch in ")]")
        if depth == 0 and text.startswith("; ", i):
            end = i
            break
    return short_cell(text[:end], width)


def short_cell(text: str, width: int = 64) -> str:
    """``text`` for one line of a table: whole when it fits ``width``, else without its parentheses (the chapter page
    has them), and only when that is still over ``width + 8`` characters cut at a word with " …"."""
    text = text if len(text) <= width else re.sub(r" \([^)]*\)", "", text)
    return text if len(text) <= width + 8 else text[:width].rsplit(" ", 1)[0].rstrip(",;") + " …"


def label_of(verdict: str) -> str:
    """The label of a verdict cell (a "not testable offline (why)" cell is "not testable offline")."""
    return "not testable offline" if verdict.startswith("not testable") else verdict


#: Name under which each chapter records its "The paper and this build" rows (``report.record``).
RECORD_NAME = "claims"


def _md_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").replace("`", "'").replace("<", "‹")


def tally(rows_by_chapter: dict[str, list[dict] | None]) -> dict[str, int]:
    """How many claims have each label, by the reading with this book's controls (zeros left out)."""
    counts = dict.fromkeys([*VERDICTS, "not run in this build"], 0)
    for r in checklist(rows_by_chapter):
        counts[label_of(r["verdict"])] += 1
    return {v: n for v, n in counts.items() if n}


def checklist_markdown(rows_by_chapter: dict[str, list[dict] | None]) -> str:
    """The front page's checklist as a Markdown table, one short line per claim: the claim (linking to its
    chapter, where its test and notes are), the paper's value, this build's headline with its interval, and
    the verdict by the paper's criterion and with this book's controls (one word where they agree)."""
    rows = checklist(rows_by_chapter)
    counts = tally(rows_by_chapter)
    lines = ["This build: " + ", ".join(f"**{n}** {v}" for v, n in counts.items()) + f" (of {len(rows)} claims).",
             "", "| claim | paper | this build | verdict: paper's criterion / with controls |",
             "| --- | --- | --- | --- |"]
    for r in rows:
        paper_v, v = label_of(r["paper reading"]), label_of(r["verdict"])
        word = f"**{v}**" if paper_v == v else f"{paper_v} / **{v}**"
        lines.append(f"| {{doc}}`{r['id']} {_md_cell(short_cell(r['claim']))} </{r['page']}>` | "
                     f"{_md_cell(short_cell(r['paper value']))} | {_md_cell(r['headline'])} | {word} |")
    return "\n".join(lines) + "\n"
