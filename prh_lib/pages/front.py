"""The front page's generated parts: the findings paragraph, the claims figure and the verdict labels.

Everything here reads the claim rows the chapters recorded (:func:`prh_lib.pages.claims.finding`, through
:func:`prh_lib.pages.claims.checklist`); the book build writes the results into ``book/_generated/``
(``book/_ext/prh_book.py``). Nothing restates a number by hand."""

from __future__ import annotations

import csv
import re

from prh_lib.pages import claims

#: Colour of each label in the claims figure (colour-blind-safe, Okabe-Ito).
COLOURS = {"reproduces": "#009E73", "reproduces in kind": "#56B4E9", "inconclusive": "#F0E442",
           "differs": "#D55E00", "explained": "#CC79A7", "control failed": "#E69F00",
           "not testable offline": "#BBBBBB", "not run in this build": "#FFFFFF"}

#: The most words the findings paragraph may have (issue: "at most ~250 words").
MAX_FINDINGS_WORDS = 250

_READS = {"reproduces": "holds, at the paper's value", "reproduces in kind": "holds",
          "inconclusive": "cannot be decided", "differs": "does not hold", "explained": "is explained",
          "control failed": "has a failed control", "not testable offline": "is not testable offline",
          "not run in this build": "was not run"}


_FLOORS = {"tfidf": "bag-of-words", "tfidf-svd": "bag-of-words (SVD)", "random-vision": "random-init",
           "random-language": "random-init"}


def _first_open_test(note: str) -> str:
    """The first test a note lists as failing or undecided, in words ("" if none): a pair against one of its floors
    reads "A is below its random-init floor (margin −0.028 [−0.056, −0.010])", any other test as "name (needs > 0.5,
    got 0.417)"."""
    m = (re.search(r"(fails|cannot decide): ([^;]+?): needs ([^,;]+), got ([^;(]+)", note or "")
         or re.search(r"(fails|cannot decide): ([^:;]+):()()", note or ""))
    if not m:
        return ""
    name, needs, got = (g.strip() for g in m.group(2, 3, 4))
    f = re.fullmatch(r"(.+?) − .+ \(([\w-]+) floor\)", name)
    if not (f and f.group(2) in _FLOORS and got):
        return f"{name} (needs {needs}, got {got})" if got else name
    side = "is below" if m.group(1) == "fails" else "is not clearly above"
    return f"{f.group(1)} {side} its {_FLOORS[f.group(2)]} floor (margin {got})"


def findings_markdown(rows_by_chapter: dict[str, list[dict] | None], *, reasons: bool = True) -> str:
    """The findings paragraph (at most :data:`MAX_FINDINGS_WORDS` words), generated from the claim rows: how large
    cross-modal alignment is against chance and floors, where it emerges, the other regimes, and what could not
    be tested here and why. A claim whose chapter did not run is said to be missing, not guessed. Why a regime fails
    (``reasons``) is left to the checklist when saying it would pass the budget."""
    rows = {r["id"]: r for r in claims.checklist(rows_by_chapter)}

    def label(cid, key="verdict"):
        return claims.label_of(rows[cid][key])

    def both(cid):  # one word where the two readings agree
        p, v = label(cid, "paper reading"), label(cid)
        return v if p == v else f"{p} by the paper's criterion, {v} with the controls"

    out = []
    cm = rows["3.1/cross-modal-peak"]
    if label("3.1/cross-modal-peak") == "not run in this build":
        out.append("Section 3.1 was not run in this build, so the book has no cross-modal finding yet.")
    else:
        paper_r, ours = label("3.1/cross-modal-peak", "paper reading"), label("3.1/cross-modal-peak")
        why = _first_open_test(cm["note"])
        out.append(
            f"**How large.** The strongest cross-modal alignment here is {cm['headline']}, held out (layers chosen "
            f"on half the images, scored on the rest); the paper reports {cm['paper value']}. By the paper's "
            f"criterion (above chance, permutation p ≤ 0.05) the claim {_READS[paper_r]}; against this book's "
            f"floors (random-init twins, a bag-of-words text model) it {_READS[ours]}"
            + (f": {why}." if why and ours != "reproduces in kind" else "."))
        later = rows["3.1/later-layers"]
        out.append("**Where.** " + (
            "On Flickr8k, which the verdicts read, no cross-modal pair beats all its floors, so no peak is located "
            "(it would be noise); Section 3.1 shows the same pairs on the COCO images."
            if later["this build"].startswith("no cross-modal pair") else
            f"For the pairs that beat their floors, the claim that peaks sit in later layers "
            f"{_READS[label('3.1/later-layers')]}: {later['headline']}."))
    same = [rows[c] for c in ("3.1/vision-vision", "3.1/language-language", "3.3/same-modality")
            if label(c) not in ("not run in this build", "not testable offline")]
    if same:
        said = set()

        def reason(r):  # why a regime's claim does not hold, where a test says so; a reason given once
            why = _first_open_test(r["note"]) if reasons and label(r["id"]) != "reproduces in kind" else ""
            if not why or why in said:
                return ", for the same reason" if why else ""
            said.add(why)
            return f": {why}"

        out.append("**Other regimes.** " + "; ".join(
            f"{re.sub(r' [(][^)]*[)]', '', r['claim']).split(',')[0]} (paper); here {r['headline']}, "
            f"{both(r['id'])}{reason(r)}"
            for r in same) + ".")
    if label("3.3/random-init") not in ("not run in this build", "not testable offline"):
        out.append(f"Randomly initialised pairs score {rows['3.3/random-init']['headline']} "
                   f"({both('3.3/random-init')}).")
    tally = claims.tally(rows_by_chapter)
    short = {claims._NO_VLM: "CLIP-like models", claims._NO_BENCH: "published benchmark scores of the language "
             "models", claims._NO_DATA: "the paper's datasets"}
    untested = sorted({short.get(claims.CLAIMS[c].offline, claims.CLAIMS[c].offline.removeprefix("needs "))
                       for c in rows if label(c) == "not testable offline" and claims.CLAIMS[c].offline})
    out.append(f"**In all**, of {len(rows)} claims: " + ", ".join(f"{n} {v}" for v, n in tally.items()) + "."
               + (" Untestable offline for want of: " + "; ".join(untested) + "."
                  if untested else ""))
    text = "\n\n".join(out) + "\n"
    n_words = len(text.split())
    if n_words > MAX_FINDINGS_WORDS and reasons:
        return findings_markdown(rows_by_chapter, reasons=False)
    if n_words > MAX_FINDINGS_WORDS:
        raise ValueError(f"the findings paragraph has {n_words} words, more than {MAX_FINDINGS_WORDS}: shorten the "
                         "headlines the chapters record")
    return text


def robustness_markdown(changed: list[dict] | None, *, link: bool = True) -> str:
    """One line per finding whose verdict changes under an alternative protocol, naming every alternative that
    changes it: what :func:`prh_lib.pages.robustness.changes` recorded on the robustness page ("" when it did not
    run). ``link``: name that page with a link (the front page; a notebook's output is not parsed for roles)."""
    if changed is None:
        return ""
    page = " of {doc}`the robustness page </robustness>`" if link else ""
    if not changed:
        return f"\n**Robustness.** Every finding keeps its verdict under every alternative protocol{page}.\n"
    lines = []
    for c in changed:
        by = {}
        for a, v in c["alternatives"]:
            by.setdefault(v, []).append(a)
        alts = "; ".join(f"{v} with {', '.join(a)}" for v, a in by.items())
        lines.append(f"- *{c['finding']}* ({c['baseline']} under the book's protocol): {alts}.")
    return f"\n**Robustness**: findings whose verdict changes under an alternative protocol{page}.\n\n" \
        + "\n".join(lines) + "\n"


def labels_markdown() -> str:
    """Each verdict label with its definition (:data:`prh_lib.pages.claims.LABELS`), once, as a list."""
    return "".join(f"- **{v}**: {d}.\n" for v, d in claims.LABELS.items())


def claims_figure(rows_by_chapter: dict[str, list[dict] | None]) -> tuple[bytes, str]:
    """The claims by chapter, one square per claim coloured by its verdict (with this book's controls): the PNG's
    bytes, and the figure's data (chapter, claim, both readings) as CSV text, written by the same loop."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = claims.checklist(rows_by_chapter)
    chapters = list(dict.fromkeys(r["page"] for r in rows))
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(chapters) + 1.6), dpi=110)
    drawn = []
    for y, ch in enumerate(chapters):
        for x, r in enumerate(r for r in rows if r["page"] == ch):
            v, pv = claims.label_of(r["verdict"]), claims.label_of(r["paper reading"])
            ax.add_patch(plt.Rectangle((x + 0.05, -y - 0.45), 0.9, 0.9, fc=COLOURS[v], ec="#555555", lw=0.6))
            if pv != v:  # the paper's own criterion reads otherwise: a strip on the left in its colour
                ax.add_patch(plt.Rectangle((x + 0.05, -y - 0.45), 0.2, 0.9, fc=COLOURS[pv], ec="#555555", lw=0.6))
            name = r["id"].split("/", 1)[1]
            ax.text(x + 0.55, -y, name.replace("-", "-\n", 1) if len(name) > 9 else name, ha="center",
                    va="center", fontsize=8, linespacing=0.9)
            drawn.append({"chapter": ch, "x": x, "claim": r["id"], "paper's criterion": pv, "verdict": v})
    width = max(x for x in (d["x"] for d in drawn)) + 1
    ax.set_xlim(0, width)
    ax.set_ylim(-len(chapters) + 0.4, 0.6)
    ax.set_yticks([-i for i in range(len(chapters))], chapters, fontsize=9)
    ax.set_xticks([])
    ax.spines[:].set_visible(False)
    used = {d[k] for d in drawn for k in ("verdict", "paper's criterion")}
    ax.legend(handles=[Patch(color=COLOURS[v], label=v) for v in COLOURS if v in used], ncol=4, fontsize=8.5,
              loc="upper center", bbox_to_anchor=(0.5, -0.02), frameon=False)
    ax.set_title("The paper's claims by chapter, coloured by this build's verdict with its controls\n(a strip on the "
                 "left: the paper's own criterion, where it reads otherwise)", fontsize=10)
    png = io.BytesIO()
    fig.savefig(png, format="png", bbox_inches="tight")
    plt.close(fig)
    text = io.StringIO()
    w = csv.DictWriter(text, fieldnames=["chapter", "claim", "paper's criterion", "verdict"], lineterminator="\n")
    w.writeheader()
    w.writerows({k: d[k] for k in w.fieldnames} for d in drawn)
    return png.getvalue(), text.getvalue()
