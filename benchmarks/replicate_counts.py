"""How far do the held-out intervals move with fewer half-sample replicates? (prints figures)

Issue 42 lets a chapter's replicate count (``heldout_boot``) be lowered only where the page's intervals move by
less than a tenth of their width. :func:`prh_lib.stats.selection.resampled_halves` draws replicate ``b`` from one
seeded stream, so a run with ``n_boot = B`` has exactly the first ``B`` replicates of a run with more: every
interval at ``B`` is recomputed here from the stored replicates of a finished main job, nothing is re-scored.

For each chapter whose held-out rows carry replicates, and each ``B``, the script recomputes every interval the
verdicts read (:func:`prh_lib.analysis.heldout.heldout_summary`): the held-out peak, the final layers, late minus
early and the two depths of each row, and each pair's paired margin over each of its floors
(:func:`prh_lib.analysis.heldout.floor_margins`). It prints the move of each end against the full count's width
(median, 90th percentile, largest) and the intervals whose side of the line a verdict reads (0 for margins and
late minus early, the chance level for a held-out peak) changes.

Usage::

    PRH_CACHE_DIR=/path/to/.cache python benchmarks/replicate_counts.py            # after prh-run
    PRH_CACHE_DIR=... python benchmarks/replicate_counts.py --counts 25 50 75 --chapters sec3_3_regimes

Measured: see ``benchmarks/README.md`` (the replicate counts section).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from prh_lib import results
from prh_lib.analysis.heldout import heldout_summary
from prh_lib.stats.intervals import bootstrap_interval, paired_interval

QUANTITIES = {"heldout peak": ("score", "reps", None), "final layers": ("final_half", "final_reps", None),
              "late − early": ("late_minus_early", "lme_reps", (-1.0, 1.0)),
              "depth x": ("depth_x", "depth_x_reps", (0.0, 1.0)), "depth y": ("depth_y", "depth_y_reps", (0.0, 1.0))}


def intervals(summary: pd.DataFrame, count: int | None) -> list[dict]:
    """Every interval the verdicts read, from the first ``count`` replicates (None: all)."""
    cut = slice(None, count)
    out = []
    for _, r in summary.iterrows():
        for name, (point, reps, bounds) in QUANTITIES.items():
            lo, hi = bootstrap_interval(float(r[point]), r[reps][cut], bounds=bounds)
            line = float(r["chance"]) if name == "heldout peak" else 0.0 if name == "late − early" else np.nan
            out.append({"what": name, "row": r["pair"], "low": lo, "high": hi, "line": line})
        if r["kind"]:
            continue
        for _, f in summary[[r["pair"] in b for b in summary["bounds"]]].iterrows():
            lo, hi = paired_interval(r["reps"][cut], f["reps"][cut], estimates=(r["score"], f["score"]))
            out.append({"what": "margin over a floor", "row": f"{r['pair']} − {f['pair']}", "low": lo, "high": hi,
                        "line": 0.0})
    return out


def side(lo: float, hi: float, line: float) -> int:
    return 0 if not np.isfinite(line) else (1 if lo > line else -1 if hi < line else 0)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", type=int, nargs="+", default=[25, 50, 75])
    ap.add_argument("--chapters", nargs="+", default=None, help="default: every chapter with held-out replicates")
    args = ap.parse_args(argv)
    df = results.load()
    chapters = args.chapters or sorted(df.loc[df["quantity"].astype(str).str.startswith("heldout"), "chapter"].unique())
    print(f"{'chapter':<18} {'dataset':<12} {'B':>4} of {'full':<4} {'intervals':>9}  move / width: "
          f"{'median':>6} {'p90':>6} {'max':>6}  sides changed")
    for chapter in chapters:
        for dataset, part in df[df["chapter"] == chapter].groupby("dataset"):
            summary = heldout_summary(part)
            if summary.empty:
                continue
            full = int(summary["n_boot"].max())
            ref = intervals(summary, None)
            for count in (c for c in args.counts if c < full):
                moves, flips = [], []
                for a, b in zip(ref, intervals(summary, count)):
                    width = a["high"] - a["low"]
                    if np.isfinite(width) and width > 0:
                        moves.append(max(abs(b["low"] - a["low"]), abs(b["high"] - a["high"])) / width)
                    if side(a["low"], a["high"], a["line"]) != side(b["low"], b["high"], b["line"]):
                        flips.append(f"{a['what']} of {a['row']}")
                m = np.array(moves)
                print(f"{chapter:<18} {dataset:<12} {count:>4} of {full:<4} {len(m):>9}  {'':>13}"
                      f"{np.median(m):>6.3f} {np.quantile(m, 0.9):>6.3f} {m.max():>6.3f}  "
                      f"{len(flips)}{': ' + '; '.join(flips) if flips else ''}")


if __name__ == "__main__":
    main()
