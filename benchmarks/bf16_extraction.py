"""bf16 vs fp32 feature extraction on a CPU: the evidence behind ``prh_lib/resources/bf16_allowed.json``.

For each model (``--model``, repeatable) and each dataset (``--data``, several COCO caption folders): extract
its layer-wise pooled features on the same pairs in float32 and in bfloat16 (each dtype loaded once, no
cache, interleaved runs, best of ``--repeats`` timed), then print

- the speed ratio (fp32 seconds / bf16 seconds);
- the per-layer relative error of the pooled features, ``||F_bf16 - F_fp32||_F / ||F_fp32||_F`` per layer;
- the change of every headline score the model feeds, each computed as the chapters do (outlier clipping at
  q = 0.95 with one threshold per model's stack, :func:`prh_lib.analysis.clip_features`; mutual k-NN with
  k = 10), the model in fp32 vs in bf16, everything else in fp32:

  * ``knn``: the layer-wise mutual k-NN matrix against each partner (``--partner``, repeatable; default
    ``dinov2-small`` and ``efficientnet-lite0`` for a language model, ``smollm2-135m`` and ``minilm-l6`` for a
    vision model): its peak, its final-layer score and the largest change of any cell (which bounds the
    change of any peak picked from it, held-out peaks included);
  * ``random-init``: the same matrix for the model's random-init twin (``"<model>@random-init:0"``,
    :func:`prh_lib.models.random_init`) in fp32 vs bf16 against each partner (the random-init floor);
  * ``tfidf``: the model against the bag-of-words floor (TF-IDF of the captions,
    :func:`prh_lib.analysis.controls.tfidf_features`), an ``n_layers x 1`` matrix;
  * ``cross-model``: the displacement chapter's Cross-Model score
    (:func:`prh_lib.metrics.displacement.displacement_similarity`, r = 32, half of the pairs held out,
    10 000 sampled pairs, seed 0) at the final layers against the first partner;

- a summary table (one line per model x dataset x score: fp32 value, bf16 value, |change|, threshold, ok);
- the row for the table, per model: ``allowed`` only if the CPU has native bf16 and every change on every
  dataset is below *that score's* threshold ``half-width / 4`` (issue 42's rule; issue 25 capped it at
  0.005), the half-width
  being the score's own image-level 95 % interval from the float32 features (:func:`score_halfwidths`:
  ``--n-boot`` half-samples of the images; the held-out peak's interval for "peak" and "any cell", the final
  layers' for "final"); ``--no-per-score`` uses one ``--halfwidth`` per dataset instead (nothing allowed without one).
  ``max_score_change`` is the largest change and ``threshold`` that score's threshold, ``speed_ratio`` the
  smallest ratio and ``max_rel_error`` the largest per-layer error over the datasets; ``benchmark`` names the
  score closest to its threshold.

Score caching is off in this process unless ``PRH_SCORE_CACHE`` is set: every number is computed afresh and
nothing is written. Run it on both offline datasets at their full size before allowing a model::

    nice -n 10 python benchmarks/bf16_extraction.py --model minilm-l6 --model smollm2-135m \\
        --data coco-mini flickr8k-1k --threads 1

Needs the zoo models (``prh-zoo install``) and ``PRH_DATA_ROOT`` (default ``../shared/data/coco-mini``); a
bare ``--data`` name (``flickr8k-1k``) is a folder next to it, anything else a path.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

CLIP_Q = 0.95  # outlier clipping of model features, one threshold per model's stack (the chapters' default)
SEED = 0  # pair draw, random-init twin, displacement split and sampled pairs
DTYPES = ("float32", "bfloat16")
DEFAULT_PARTNERS = {"language": ("dinov2-small", "efficientnet-lite0"), "vision": ("smollm2-135m", "minilm-l6")}


@dataclass
class Dataset:
    name: str
    pairs: object  # prh_lib.data.Pairs
    halfwidth: float | None
    threshold: float


def resolve_data(arg: str | None) -> Path | None:
    """A ``--data`` entry as a folder: None is ``PRH_DATA_ROOT``, a bare name a folder next to it, else a path."""
    from prh_lib.paths import sibling_dataset

    if arg is None:
        return None
    sibling = sibling_dataset(arg)
    if sibling is not None:
        return sibling
    path = Path(arg).expanduser()
    if not path.is_dir():
        raise SystemExit(f"--data {arg!r}: neither a folder next to PRH_DATA_ROOT nor an existing folder")
    return path


def parse_halfwidths(items: list[str]) -> dict[str | None, float]:
    """``["flickr8k-1k=0.017", "0.03"]`` -> ``{"flickr8k-1k": 0.017, None: 0.03}`` (None: every other dataset)."""
    out: dict[str | None, float] = {}
    for item in items:
        name, _, value = item.rpartition("=")
        try:
            hw = float(value)
        except ValueError:
            raise SystemExit(f"--halfwidth {item!r}: expected DATASET=FLOAT or FLOAT") from None
        if not hw > 0:
            raise SystemExit(f"--halfwidth {item!r}: a half-width must be positive")
        out[name or None] = hw
    return out


def threshold_of(halfwidth: float | None) -> float:
    """A quarter of the score's own half-width (issue 42's rule: no absolute cap); no or an undefined interval
    allows nothing."""
    if halfwidth is None or not np.isfinite(halfwidth):
        return 0.0
    return halfwidth / 4


def relative_errors(ref: torch.Tensor, test: torch.Tensor) -> np.ndarray:
    """Per-layer relative Frobenius error, shape (n_layers,), of stacked features (n_layers, n, d)."""
    num = torch.linalg.vector_norm((test.double() - ref.double()).flatten(1), dim=1)
    den = torch.linalg.vector_norm(ref.double().flatten(1), dim=1).clamp_min(1e-300)
    return (num / den).numpy()


def abs_change(a, b) -> np.ndarray:
    """``|b - a|`` elementwise; 0 where both are NaN (an undefined cell stays undefined), inf where one is."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    both = np.isnan(a) & np.isnan(b)
    diff = np.abs(b - a)
    return np.where(both, 0.0, np.where(np.isnan(diff), np.inf, diff))


def matrix_scores(kind: str, m32: np.ndarray, m16: np.ndarray) -> list[tuple[str, str, float, float, float]]:
    """(kind, part, fp32, bf16, |change|) of a layer-pair matrix's peak, final-layer cell and largest cell change.

    NaN cells (a degenerate layer: a CNN's constant stem, a ViT's CLS at ``embed``) are left out of the peak.
    """
    peak32, peak16 = float(np.nanmax(m32)), float(np.nanmax(m16))
    fin32, fin16 = float(m32[-1, -1]), float(m16[-1, -1])
    return [(kind, "peak", peak32, peak16, float(abs_change(peak32, peak16))),
            (kind, "final", fin32, fin16, float(abs_change(fin32, fin16))),
            (kind, "any cell", np.nan, np.nan, float(abs_change(m32, m16).max()))]


def timed_features(loaded: dict, pairs, *, repeats: int, batch_size: int) -> tuple[dict, dict]:
    """Features and best time per dtype; runs interleaved, so drifting machine load hits both dtypes alike."""
    from prh_lib import extract

    feats, secs = {}, {d: [] for d in loaded}
    for _ in range(repeats):
        for d, model in loaded.items():
            t0 = time.perf_counter()
            feats[d] = extract.get_features(model, pairs, batch_size=batch_size, progress=False, cache=False)
            secs[d].append(time.perf_counter() - t0)
    return feats, {d: min(s) for d, s in secs.items()}


def cross_model_final(x, y, *, r: int) -> float:
    """The displacement chapter's Cross-Model score of the final layers of two (clipped) stacks."""
    from prh_lib.metrics.displacement import displacement_similarity

    return float(displacement_similarity(x.layer(-1), y.layer(-1), n_components=r, seed=SEED).cross_model)


def score_changes(feats: dict, twin: dict, partners: dict, bow, *, k: int, r: int) -> list[tuple]:
    """Every headline score of one model on one dataset, fp32 vs bf16 (features already clipped): rows of
    :func:`matrix_scores`."""
    from prh_lib.metrics import mutual_knn_layerwise

    def knn(x, y):
        with warnings.catch_warnings():  # a constant layer (a ViT's CLS at embed) is NaN by design
            warnings.filterwarnings("ignore", message=".*degenerate.*", category=RuntimeWarning)
            return np.asarray(mutual_knn_layerwise(x.values, y.values, k=k), dtype=np.float64)

    rows = []
    for p, fp in partners.items():
        rows += matrix_scores(f"knn x {p}", *(knn(feats[d], fp) for d in DTYPES))
    for p, fp in partners.items():
        rows += matrix_scores(f"random-init x {p}", *(knn(twin[d], fp) for d in DTYPES))
    rows += matrix_scores("tfidf", *(knn(feats[d], bow) for d in DTYPES))
    first, fp = next(iter(partners.items()))
    c32, c16 = (cross_model_final(feats[d], fp, r=r) for d in DTYPES)
    rows.append((f"cross-model x {first}", "final", c32, c16, float(abs_change(c32, c16))))
    return rows


def score_halfwidths(feats32, twin32, partners: dict, bow, *, k: int, r: int, n_boot: int) -> dict:
    """Image-level 95 % interval half-width of every headline score, from the float32 features (clipped).

    Mutual k-NN scores: the held-out peak's and the final layers' centred intervals over ``n_boot`` image
    half-samples (:func:`prh_lib.stats.selection.crossfit_peaks`, 10 splits, as the chapters' verdicts read
    them); "peak" and "any cell" take the held-out peak's, since a held-out peak may land on any cell.
    Cross-Model: the centred interval of the score on ``n_boot`` half-samples of the images (seeded).

    Returns
    -------
    dict
        ``{(kind, part): half-width}`` for the kinds and parts of :func:`score_changes`.
    """
    from prh_lib.stats.intervals import bootstrap_interval
    from prh_lib.stats.selection import crossfit_peaks

    comps = [(f"knn x {p}", feats32, fp) for p, fp in partners.items()]
    comps += [(f"random-init x {p}", twin32, fp) for p, fp in partners.items()]
    comps += [("tfidf", feats32, bow)]
    with warnings.catch_warnings():  # a constant layer (a ViT's CLS at embed) is NaN by design
        warnings.filterwarnings("ignore", message=".*degenerate.*", category=RuntimeWarning)
        fits = crossfit_peaks([(x.values, y.values) for _, x, y in comps], k=k, n_splits=10, n_boot=n_boot,
                              seed=SEED)
    out = {}
    for (kind, _, _), fit in zip(comps, fits):
        lo, hi = fit.interval("heldout")
        out[(kind, "peak")] = out[(kind, "any cell")] = (hi - lo) / 2
        lo, hi = fit.interval("final")
        out[(kind, "final")] = (hi - lo) / 2
    first, fp = next(iter(partners.items()))
    n = feats32.values.shape[1]
    rng = np.random.default_rng([SEED, 2])
    reps = [cross_model_final(feats32.rows(S), fp.rows(S), r=r)
            for S in (np.sort(rng.choice(n, size=n // 2, replace=False)) for _ in range(n_boot))]
    lo, hi = bootstrap_interval(cross_model_final(feats32, fp, r=r), reps)
    out[(f"cross-model x {first}", "final")] = (hi - lo) / 2
    return out


class Partners:
    """Clipped float32 features of the partner models on every dataset, each partner loaded and extracted once."""

    def __init__(self, datasets: list[Dataset], *, batch_size: int):
        self.datasets, self.batch_size, self._feats = datasets, batch_size, {}

    def __call__(self, name: str, i: int):
        from prh_lib import extract

        if name not in self._feats:
            raw = extract.features_for_pairs(name, [d.pairs for d in self.datasets], dtype="float32",
                                             batch_size=self.batch_size, progress=False, cache=False)
            self._feats[name] = [clipped(f) for f in raw]
        return self._feats[name][i]


def clipped(features):
    """The chapters' outlier clipping: q = 0.95, one threshold for the model's whole stack of layers."""
    from prh_lib.analysis import clip_features

    return clip_features(features, q=CLIP_Q, clip="stack")


def load_datasets(data_args: list, n: int | None, halfwidths: dict) -> list[Dataset]:
    from prh_lib import data

    datasets = []
    for arg in dict.fromkeys(data_args):
        ds = data.load_dataset("coco-folder", resolve_data(arg))
        hw = halfwidths.get(ds.name, halfwidths.get(None))
        datasets.append(Dataset(ds.name, data.sample_pairs(ds, n=n, seed=SEED), hw, threshold_of(hw)))
    unknown = set(halfwidths) - {None} - {d.name for d in datasets}
    if unknown:
        raise SystemExit(f"--halfwidth names datasets not in --data: {sorted(unknown)}")
    return datasets


def bench_model(name: str, datasets: list[Dataset], partner: Partners, bows: list, args, *,
                native: bool) -> tuple[list[dict], dict]:
    """One model on every dataset: prints its blocks; returns its summary-table lines and its row for the table."""
    from prh_lib import extract, models

    loaded = {d: models.load_model(name, dtype=models.torch_dtype(d)) for d in DTYPES}
    modality = loaded["float32"].modality
    partners = list(dict.fromkeys(args.partner or DEFAULT_PARTNERS[modality]))
    timed = [timed_features(loaded, d.pairs, repeats=args.repeats, batch_size=args.batch_size) for d in datasets]
    twin = {}
    for d in DTYPES:  # each trained model is dropped as its twin replaces it: at most two modules held at once
        fresh = models.random_init(loaded.pop(d), seed=SEED)
        twin[d] = extract.features_for_pairs(fresh, [x.pairs for x in datasets], batch_size=args.batch_size,
                                             progress=False, cache=False)
        del fresh
        gc.collect()
    lines, ratios, rel_errors = [], [], []
    for i, (ds, (feats, secs)) in enumerate(zip(datasets, timed)):
        k = min(args.k, len(ds.pairs.sample_ids) - 1)
        errors = relative_errors(feats["float32"].values, feats["bfloat16"].values)
        twin_errors = relative_errors(twin["float32"][i].values, twin["bfloat16"][i].values)
        ratios.append(secs["float32"] / secs["bfloat16"])
        rel_errors.append(float(errors.max()))
        print(f"\n== {name} ({modality}) on {ds.name}: N = {len(ds.pairs.sample_ids)}, k = {k}, "
              + ("thresholds per score" if args.per_score else f"threshold {ds.threshold:.4f}"))
        print(f"speed: fp32 {secs['float32']:.2f} s, bf16 {secs['bfloat16']:.2f} s, ratio {ratios[-1]:.2f}x "
              f"(best of {args.repeats}, interleaved)")
        print("relative error per layer: " + ", ".join(f"{lab} {e:.4f}" for lab, e in
                                                       zip(feats["float32"].layer_labels, errors)))
        print(f"random-init twin: largest relative error per layer {twin_errors.max():.4f}")
        mine, twins = {d: clipped(feats[d]) for d in DTYPES}, {d: clipped(twin[d][i]) for d in DTYPES}
        their = {p: partner(p, i) for p in partners}
        changes = score_changes(mine, twins, their, bows[i], k=k, r=args.r)
        if args.per_score:
            hws = score_halfwidths(mine["float32"], twins["float32"], their, bows[i], k=k, r=args.r,
                                   n_boot=args.n_boot)
        else:
            hws = {(kind, part): ds.halfwidth for kind, part, *_ in changes}
        for kind in dict.fromkeys(kind for kind, *_ in changes):
            print(f"{kind} (fp32 -> bf16): " + ", ".join(
                f"{part} {v32:.4f} -> {v16:.4f}" if np.isfinite(v32) else f"{part} change {c:.4f}"
                for kind_, part, v32, v16, c in changes if kind_ == kind))
        for kind, part, v32, v16, c in changes:
            hw = hws[(kind, part)]
            th = threshold_of(hw)
            lines.append({"model": name, "dataset": ds.name, "score": f"{kind} {part}", "fp32": v32, "bf16": v16,
                          "|change|": c, "half-width": np.nan if hw is None else hw, "threshold": th,
                          "ok": "yes" if c < th else "NO"})
    every_ok = all(line["ok"] == "yes" for line in lines)
    # the row: the largest change, with its own score's threshold, and the score closest to its threshold
    largest = max(lines, key=lambda line: line["|change|"])
    worst, threshold = largest["|change|"], largest["threshold"]
    tightest = max(lines, key=lambda line: line["|change|"] / line["threshold"] if line["threshold"] > 0 else np.inf)
    benchmark = ("benchmarks/bf16_extraction.py on "
                 + ", ".join(f"{d.name} (N = {len(d.pairs.sample_ids)})" for d in datasets)
                 + f"; partners {', '.join(partners)} (fp32); k = {args.k}, clip q = {CLIP_Q} per stack; scores: "
                 "mutual k-NN peak/final/any cell vs each partner, the same for the random-init twin and against "
                 f"TF-IDF, Cross-Model (r = {args.r}) of the final layers vs {partners[0]}; thresholds "
                 + (f"per score, half-width / 4 with each score's image-level 95 % interval "
                    f"({args.n_boot} half-samples of the images)" if args.per_score else
                    "per dataset (--halfwidth)")
                 + f"; closest to its threshold: {tightest['score']} on {tightest['dataset']}, change "
                   f"{tightest['|change|']:.5f} against {tightest['threshold']:.5f}")
    row = {"allowed": bool(native and every_ok and worst < threshold), "speed_ratio": round(min(ratios), 3),
           "max_rel_error": round(max(rel_errors), 5),
           "max_score_change": round(worst, 5) if np.isfinite(worst) else None, "threshold": threshold,
           "benchmark": benchmark}
    return lines, row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", default=None,
                        help="model to test (repeatable; default minilm-l6)")
    parser.add_argument("--partner", action="append", default=None,
                        help="model scored against, always float32 (repeatable; default by modality: "
                             "dinov2-small, efficientnet-lite0 for a language model, smollm2-135m, minilm-l6 "
                             "for a vision model); the first is also the displacement partner")
    parser.add_argument("--data", nargs="+", default=[None],
                        help="COCO caption folders, paths or names next to PRH_DATA_ROOT (default PRH_DATA_ROOT)")
    parser.add_argument("--n", type=int, default=None, help="pairs per dataset (seed 0); default every image")
    parser.add_argument("--k", type=int, default=10, help="mutual k-NN neighbours")
    parser.add_argument("--r", type=int, default=32, help="whitened dimension of the Cross-Model score")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per dtype (best is kept)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--no-per-score", dest="per_score", action="store_false",
                        help="thresholds from --halfwidth per dataset instead of each score's own image-level "
                             "interval (the default, the issue's rule: a quarter of that score's half-width)")
    parser.add_argument("--n-boot", type=int, default=100,
                        help="image half-samples of each score's interval (default 100, as the chapters)")
    parser.add_argument("--halfwidth", nargs="+", default=[], metavar="[DATASET=]HW",
                        help="image-level interval half-width of the headline scores, per dataset "
                             "(e.g. flickr8k-1k=0.017 coco-mini=0.035; a bare number: every other dataset); "
                             "threshold HW / 4, nothing allowed without one")
    args = parser.parse_args()
    os.environ.setdefault("PRH_SCORE_CACHE", "0")  # fresh numbers, no cache entries written
    torch.set_num_threads(args.threads)

    import pandas as pd

    from prh_lib.analysis.controls import tfidf_features
    from prh_lib.models.precision import cpu_has_native_bf16, read_bf16_table

    datasets = load_datasets(args.data, args.n, parse_halfwidths(args.halfwidth))
    native = cpu_has_native_bf16()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, native bf16: {native}, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for d in datasets:
        print(f"data: {d.name}, N = {len(d.pairs.sample_ids)} pairs (first caption, seed {SEED}), half-width "
              f"{'none' if d.halfwidth is None else d.halfwidth}, threshold {d.threshold:.4f}")

    partner = Partners(datasets, batch_size=args.batch_size)
    bows = [tfidf_features(d.pairs) for d in datasets]  # never clipped (mostly zeros), as in the chapters
    table, rows = [], {}
    for name in dict.fromkeys(args.model or ["minilm-l6"]):
        lines, rows[name] = bench_model(name, datasets, partner, bows, args, native=native)
        table += lines
        gc.collect()

    def fmt(v):
        return "-" if np.isnan(v) else f"{v:.4f}"

    print("\nsummary ('-': the largest change of any cell has no single fp32 / bf16 value):")
    print(pd.DataFrame(table).to_string(index=False, na_rep="-", formatters=dict.fromkeys(
        ["fp32", "bf16", "|change|", "half-width", "threshold"], fmt)))
    with tempfile.TemporaryDirectory() as tmp:  # the rows must pass the committed table's own check
        path = Path(tmp) / "rows.json"
        path.write_text(json.dumps({"models": rows}))
        read_bf16_table(path)
    for name, row in rows.items():
        print(f"row for prh_lib/resources/bf16_allowed.json ({name}): {json.dumps(row)}")
        if not row["allowed"]:
            why = [] if native else ["no native bf16 on this CPU"]
            if any(line["ok"] != "yes" for line in table if line["model"] == name):
                why.append("a score change is not below its threshold")
            elif row["max_score_change"] is None or row["max_score_change"] >= row["threshold"]:
                why.append("the largest change is not below the smallest threshold (the table's own check)")
            print(f"  not allowed: {'; '.join(why)}")
    if len(datasets) < 2 or args.n is not None:
        print("note: allow a model only after a run on both offline datasets at their full size (no --n)")


if __name__ == "__main__":
    main()
