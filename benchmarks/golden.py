"""Golden copy of a build's numbers and verdicts, and a diff of two copies (issue 40: moves change no number).

    python benchmarks/golden.py save DEST [--book book] [--cache .cache] [--since TIME]  # a build's records, rows
    python benchmarks/golden.py diff OLD NEW                               # exit 1 when a number or verdict moved
    python benchmarks/golden.py claims OLD NEW                             # the verdicts of two builds, claim by claim

``save`` writes, for every executed notebook in the book folder, every record the notebook glued (its numbers,
claims and verdicts) as sorted JSON, and the results table (latest run per chapter, params and draw; the
provenance columns that name a run or a commit dropped) as CSV sorted on every remaining column. It reads the
notebooks and the Parquet parts directly, so it works on a checkout before and after the library moves.
``diff`` compares two such folders: records exactly (floats to 1e-12 relative), tables cell by cell.
``claims`` compares what two builds *say* (e.g. bfloat16 against ``-p dtype=float32``, whose numbers all move): per
claim its verdict and paper reading, its headline's move against its interval's half-width, and every test of its
rule that fails or cannot decide in either build (a test that holds is not listed in a note, only counted), and the
robustness page's findings; it exits 1 when a verdict, reading, test status or finding moved.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import sys
from pathlib import Path

import nbformat
import pandas as pd

#: columns that name a run, a time, a commit or the library's version, not a number of the study
VOLATILE = ("run_id", "created", "commit", "lib_version")
#: record keys whose values are provenance (paths, times, commit), not numbers of the study
VOLATILE_KEYS = {"commit", "run_id", "created", "lib_version", "elapsed_s", "seconds", "started", "finished"}


def records(ipynb: Path) -> dict:
    nb = nbformat.read(str(ipynb), as_version=4)
    found = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            scrap = out.get("metadata", {}).get("scrapbook", {})
            if "name" in scrap:
                found[scrap["name"]] = json.loads(ast.literal_eval(
                    out["data"][scrap.get("mime_prefix", "") + "text/plain"]))
    return found


def latest_rows(cache: Path, since: str | None = None) -> pd.DataFrame:
    """The rows of the latest run (``run_id``) per (chapter, params_hash): every row that run wrote, whatever
    the write it came in (a page's main scores and its clipping variants are separate writes of one run); with
    ``since`` (an ISO time), only rows written since then (the run being saved, not older ones)."""
    parts = sorted((cache / "results").rglob("*.parquet"))
    df = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True) if parts else pd.DataFrame()
    if df.empty:
        return df
    if since is not None:
        df = df[df["created"] >= pd.Timestamp(since, tz="UTC")]
    started = df.groupby("run_id")["created"].transform("min")
    last = started.groupby([df["chapter"], df["params_hash"]], dropna=False).transform("max")
    df = df[started == last].drop(columns=[c for c in VOLATILE if c in df])
    df = df.astype({c: "string" for c in df.columns if df[c].dtype == object})
    return df.sort_values(list(df.columns), kind="stable", na_position="last").reset_index(drop=True)


def save(dest: Path, book: Path, cache: Path, since: str | None = None) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for ipynb in sorted(book.glob("*.ipynb")):
        rec = records(ipynb)
        if rec:
            (dest / f"{ipynb.stem}.json").write_text(json.dumps(rec, sort_keys=True, indent=1))
    latest_rows(cache, since).to_csv(dest / "results.csv", index=False)
    print(f"saved {len(list(dest.glob('*.json')))} notebooks' records and the results table to {dest}")


def _walk(a, b, where: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key in VOLATILE_KEYS:
                continue
            if key not in a or key not in b:
                out.append(f"{where}/{key}: only in {'new' if key in b else 'old'}")
            else:
                _walk(a[key], b[key], f"{where}/{key}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{where}[{i}]", out)
    elif isinstance(a, float) and isinstance(b, float):
        if not (a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)):
            out.append(f"{where}: {a!r} -> {b!r}")
    elif a != b:
        out.append(f"{where}: {str(a)[:120]!r} -> {str(b)[:120]!r}")


def diff(old: Path, new: Path) -> int:
    out: list[str] = []
    names = sorted({p.name for p in old.glob("*.json")} | {p.name for p in new.glob("*.json")})
    n_values = 0
    for name in names:
        if not (old / name).exists() or not (new / name).exists():
            out.append(f"{name}: only in {'new' if (new / name).exists() else 'old'}")
            continue
        a, b = json.loads((old / name).read_text()), json.loads((new / name).read_text())
        n_values += len(json.dumps(a))
        _walk(a, b, name, out)
    ta, tb = pd.read_csv(old / "results.csv"), pd.read_csv(new / "results.csv")
    # a cache may also hold other parameter sets' runs (tests, sweeps): compare the (chapter, params) in both
    both = set(map(tuple, ta[["chapter", "params_hash"]].values)) & set(map(tuple, tb[["chapter", "params_hash"]].values))
    ta, tb = (t[[tuple(r) in both for r in t[["chapter", "params_hash"]].values]].reset_index(drop=True)
              for t in (ta, tb))
    print(f"results.csv: {len(both)} (chapter, parameter set) runs in both copies")
    if list(ta.columns) != list(tb.columns) or len(ta) != len(tb):
        out.append(f"results.csv: {len(ta)} rows x {ta.shape[1]} -> {len(tb)} rows x {tb.shape[1]}")
    else:
        neq = ~((ta == tb) | (ta.isna() & tb.isna()))
        for col in ta.columns[neq.any()]:
            out.append(f"results.csv/{col}: {int(neq[col].sum())} of {len(ta)} cells differ")
    for line in out[:200]:
        print(line)
    print(f"{len(names)} notebooks' records, {len(ta)} result rows compared: "
          f"{'identical' if not out else f'{len(out)} differences'}")
    return 1 if out else 0


_STATUS = re.compile(r"(fails|cannot decide|holds): ")
_TEST = re.compile(r"(?:^|; )([^;]+?): needs ([^,]+), got ([-+\d.]+) \[([-+\d.]+), ([-+\d.]+)\]")


def open_tests(note: str) -> dict[str, tuple[str, str]]:
    """``{test: (status, "got EST [LO, HI]")}`` of the tests a claim's note lists as failing or undecided."""
    out, parts = {}, _STATUS.split(note or "")
    for status, text in zip(parts[1::2], parts[2::2]):
        if status != "holds":
            for name, _, est, lo, hi in _TEST.findall(text):
                out[name.strip()] = (status, f"{est} [{lo}, {hi}]")
    return out


def _claims(folder: Path) -> dict[str, dict]:
    found = {}
    for path in sorted(folder.glob("*.json")):
        rec = json.loads(path.read_text())
        found.update({c["id"]: c for c in rec.get("claims") or []})
        for f in rec.get("robustness") or []:
            found[f"robustness/{f['finding']}"] = {"verdict": f["baseline"], "paper reading": "",
                                                   "alternatives": dict(f["alternatives"])}
    return found


def claims(old: Path, new: Path) -> int:
    a, b = _claims(old), _claims(new)
    moved, lines = 0, []
    for cid in sorted(set(a) | set(b)):
        if cid not in a or cid not in b:
            lines.append(f"{cid}: only in {'new' if cid in b else 'old'}")
            moved += 1
            continue
        x, y, notes = a[cid], b[cid], []
        for key in ("verdict", "paper reading"):
            if x.get(key) != y.get(key):
                notes.append(f"{key} {x.get(key)!r} -> {y.get(key)!r}")
        for alt in sorted(set(x.get("alternatives", {})) | set(y.get("alternatives", {}))):
            # a finding lists only the alternatives that change its verdict: one not listed keeps the protocol's
            va, vb = (c.get("alternatives", {}).get(alt, f"{c['verdict']} (as the protocol)") for c in (x, y))
            if va != vb:
                notes.append(f"{alt}: {va} -> {vb}")
        ta, tb = open_tests(x.get("note", "")), open_tests(y.get("note", ""))
        for test in sorted(set(ta) | set(tb)):
            sa, sb = ta.get(test, ("holds", "")), tb.get(test, ("holds", ""))
            if sa[0] != sb[0]:
                notes.append(f"test {test!r}: {sa[0]} {sa[1]} -> {sb[0]} {sb[1]}".replace("  ", " "))
        moved += bool(notes)
        h, g = x.get("headline") or {}, y.get("headline") or {}
        shift = ""
        if all(isinstance(d.get(f), (int, float)) for d in (h, g) for f in ("estimate", "low", "high")):
            half = (h["high"] - h["low"]) / 2
            shift = (f"headline {h['estimate']:.4f} -> {g['estimate']:.4f}"
                     + (f" ({(g['estimate'] - h['estimate']) / half:+.2f} of its half-width)" if half > 0 else ""))
        lines.append(f"{cid}: {x.get('verdict')!r}" + (f"; {shift}" if shift else "")
                     + ("".join(f"\n    MOVED {n}" for n in notes) if notes else "; unchanged"))
    print("\n".join(lines))
    print(f"{len(set(a) | set(b))} claims and findings compared: "
          f"{'no verdict, reading or test status moved' if not moved else f'{moved} moved'}")
    return 1 if moved else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("dest", type=Path)
    s.add_argument("--book", type=Path, default=Path("book"))
    s.add_argument("--cache", type=Path, default=Path(".cache"))
    s.add_argument("--since", default=None, help="only rows written since this UTC time (e.g. 2026-12-05T08:55)")
    d = sub.add_parser("diff")
    d.add_argument("old", type=Path)
    d.add_argument("new", type=Path)
    c = sub.add_parser("claims")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "save":
        save(args.dest, args.book, args.cache, args.since)
        return 0
    return claims(args.old, args.new) if args.cmd == "claims" else diff(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
