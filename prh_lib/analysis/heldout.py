"""Selection-free estimates for the verdicts: held-out peaks, image-level intervals, paired floor margins.

The verdicts of Sections 3.1 and 3.3 are tests on estimates that were not selected on the data they report
(:func:`prh_lib.stats.selection.crossfit_peak`): for each comparison the peak layer pair is chosen on one half of the
images and scored on the other (10 random splits, both directions, every caption draw), and its 95 % interval comes from
half-samples of the *images* (without replacement) that re-select the peak in every replicate. The caption draws keep
the images fixed, so their spread (the ± on the pages) measures caption choice only; the image-level interval is the one
the verdicts use.

Every comparison is read against its floors, each scored the same way on the same splits and resamples, so
the difference between a comparison and its floor has a paired interval:

- a pair with a language side: the bag of words (TF-IDF of the caption, and its truncated SVD) in place of
  each language model (:mod:`prh_lib.analysis.controls`);
- a pair without a cross-modal side (vision-vision, language-language): each model replaced by its
  random-init twin (and, for language-language, the bag of words too).

:func:`heldout_study` scores the comparisons and their floors on one dataset's draws and writes one row per
comparison (``quantity="heldout"``) or floor (``"heldout:control:<kind>"``) to the results table, with the
replicates in the row (``extra``), so the page computes any paired difference or ratio from the table alone
(:func:`heldout_summary`, :func:`margin`, :func:`floor_margins`).

References
----------
Herbst et al. (arXiv 2611.12869), Sections 3.1 and 3.3; Efron & Tibshirani (1993), Ch. 13 and Sec. 8.4;
Kriegeskorte et al. (2009), Nature Neuroscience 12 (circular analysis).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from prh_lib.results import score_cache
from prh_lib.formatting import format_interval
from prh_lib.stats.intervals import detectable_difference, paired_interval
from prh_lib.stats.selection import crossfit_peak, crossfit_peaks
from prh_lib.progress import note
from prh_lib.analysis.controls import control_comparisons, control_features, random_init_name
from prh_lib.analysis.core import prefetch_features, prepare_features

#: ``quantity`` of a comparison's held-out row; a floor's is ``"heldout:control:<kind>"``.
QUANTITY = "heldout"


def verdict_controls(pairs_of_models: Sequence[Sequence[str]], modality: Mapping[str, str], *, seed: int = 0,
                     svd_components: int | None = 100) -> dict[tuple[str, str], list]:
    """The floors each trained pair's verdict is tested against, by pair.

    Parameters
    ----------
    pairs_of_models : sequence of (str, str)
    modality : mapping of str to {"vision", "language"}
    seed, svd_components
        As in :func:`prh_lib.analysis.controls.control_comparisons`.

    Returns
    -------
    dict
        ``(x, y) -> list of Control``: for a cross-modal pair, its language model replaced by its random-init
        twin and by the bag of words (TF-IDF and its SVD); for a vision-vision pair, each side replaced by its random-init twin; for a
        language-language pair, both: each side's random-init twin and the bag of words in place of each side;
        for a pair with a random-init member, none (it is a floor itself).

    Raises
    ------
    ValueError
        As :func:`~prh_lib.analysis.controls.control_comparisons` (unknown modality, random-init member, ...).
    """
    from prh_lib.analysis.layerwise import regime_of

    out = {}
    for x, y in pairs_of_models:
        if "@random-init:" in x or "@random-init:" in y:  # a random-init comparison is itself a floor
            out[(x, y)] = []
            continue
        regime = regime_of(modality.get(x, ""), modality.get(y, ""))
        cs = control_comparisons([(x, y)], modality, seed=seed, svd_components=svd_components)
        keep = ((lambda c: c.kind.startswith("tfidf") or c.kind == "random-language") if regime == "cross-modal"
                else (lambda c: True))
        out[(x, y)] = [c for c in cs if keep(c)]
    return out


def _crossfit_key(xs: list, ys: list, *, k: int, n_splits: int, n_boot: int, seed: int,
                  metric: str = "mutual_knn") -> dict:
    return {"x": [score_cache.features_key(f) for f in xs], "y": [score_cache.features_key(f) for f in ys],
            "metric": metric, "k": k, "n_splits": n_splits, "n_boot": n_boot, "seed": seed,
            "resampling": "subsample"}


def _crossfit_cached(xs: list, ys: list, *, k: int, n_splits: int, n_boot: int, seed: int, label: str,
                     computed=None, metric: str = "mutual_knn"):
    """The cached :func:`crossfit_peak` of one comparison; ``computed`` is its result when it was just computed
    together with others (:func:`_crossfit_batch`), stored instead of recomputing."""
    key = _crossfit_key(xs, ys, k=k, n_splits=n_splits, n_boot=n_boot, seed=seed, metric=metric)

    def compute():
        if computed is not None:
            return computed
        note(f"held-out peak of {label}: {n_splits} splits, {n_boot} image subsamples, {len(xs)} draws")
        return crossfit_peak([f.values for f in xs], [f.values for f in ys], metric=metric, k=k, n_splits=n_splits,
                             n_boot=n_boot, seed=seed)

    return score_cache.cached("crossfit_peak", key, compute)


def _crossfit_batch(feats: list, pairs: list, *, k: int, n_splits: int, n_boot: int, seed: int,
                    metric: str = "mutual_knn") -> dict:
    """Held-out peaks of every pair ``(x, y)`` not cached yet, computed together (:func:`crossfit_peaks`: each
    feature stack's neighbourhoods once per half, shared by every pair that holds it); ``{pair: result}``."""
    todo = [p for p in dict.fromkeys(pairs)
            if not score_cache.has("crossfit_peak", _crossfit_key([f[p[0]] for f in feats], [f[p[1]] for f in feats],
                                                                   k=k, n_splits=n_splits, n_boot=n_boot, seed=seed,
                                                                   metric=metric))]
    if len(todo) < 2:
        return {}
    note(f"held-out peaks of {len(todo)} comparisons together: {n_splits} splits, {n_boot} image subsamples, "
         f"{len(feats)} draws")
    done = crossfit_peaks([([f[x].values for f in feats], [f[y].values for f in feats]) for x, y in todo],
                          metric=metric, k=k, n_splits=n_splits, n_boot=n_boot, seed=seed)
    return dict(zip(todo, done))


def _row(r, x: str, y: str, labels_x, labels_y, quantity: str, **extra) -> dict:
    i, j = np.unravel_index(int(np.argmax(r.selected)), r.selected.shape)
    share = float(r.selected[i, j] / max(r.selected.sum(), 1))
    lo, hi = r.interval("heldout")
    f_lo, f_hi = r.interval("final")
    l_lo, l_hi = r.interval("late_minus_early")
    dx_lo, dx_hi = r.interval("depth_x")
    dy_lo, dy_hi = r.interval("depth_y")
    return {"model_x": x, "model_y": y, "layer_x": labels_x[i], "layer_y": labels_y[j],
            "depth_x": float(r.depth_x), "depth_y": float(r.depth_y), "score": float(r.heldout),
            "ci_low": lo, "ci_high": hi, "quantity": quantity,
            "insample_half": float(r.insample_half), "final_half": float(r.final), "final_low": f_lo,
            "final_high": f_hi, "late_minus_early": float(r.late_minus_early), "lme_low": l_lo, "lme_high": l_hi,
            "depth_x_low": dx_lo, "depth_x_high": dx_hi, "depth_y_low": dy_lo, "depth_y_high": dy_hi,
            "modal_share": share, "k_half": int(r.k_half), "n_half": int(r.n_half), "n_splits": int(r.n_splits),
            "n_boot": int(r.n_boot), "n_draws_pooled": int(r.n_draws),
            "reps": _reps(r.heldout_reps), "final_reps": _reps(r.final_reps),
            "lme_reps": _reps(r.late_minus_early_reps), "depth_x_reps": _reps(r.depth_x_reps),
            "depth_y_reps": _reps(r.depth_y_reps), **extra}


def _reps(a) -> list:
    return [None if not np.isfinite(v) else round(float(v), 6) for v in np.asarray(a, dtype=np.float64)]


def heldout_study(draws, comparisons, *, chapter: str, params: Mapping, k: int = 10, n_splits: int = 10,
                  n_boot: int = 100, seed: int = 0, floors: bool = True, svd_components: int | None = 100,
                  clip_q: float | None = 0.95, clip: str | None = "stack", device: str = "cpu",
                  dtype: str = "float32", batch_size: int = 32, write: bool = True, root=None,
                  metric: str = "mutual_knn", preprocess=None) -> pd.DataFrame:
    """Held-out peaks of ``comparisons`` and their floors on the draws of one dataset, written as rows.

    Parameters
    ----------
    draws : sequence of prh_lib.data.study.Draw
        Draws of one dataset. Draws that hold the same images (caption draws) are pooled into one
        cross-fitted estimate; draws of other images (seeded draws) are scored apart and their estimates and
        replicates averaged (independent samples).
    comparisons : sequence of (str, str)
    chapter, params
        Where the rows go (:func:`prh_lib.results.write`).
    k, n_splits, n_boot, seed
        As in :func:`prh_lib.stats.selection.crossfit_peak` (``seed`` also seeds the controls).
    floors : bool
        Score the floors of :func:`verdict_controls` too.
    svd_components, clip_q, clip, device, dtype, batch_size
        Features as in :func:`prh_lib.analysis.prepare_features` and the controls.
    write : bool
        Write the rows (False: tests).
    root : path, optional
        Results-table folder (tests).
    metric : str, default "mutual_knn"
        Any metric :func:`~prh_lib.stats.selection.crossfit_peak` takes.
    preprocess : callable, optional
        ``LayerFeatures -> LayerFeatures``, applied to every stack (comparisons and floors) after clipping: the
        caller's named preprocessing (e.g. centring, :mod:`prh_lib.analysis.robustness`).

    Returns
    -------
    DataFrame
        One row per comparison and floor (the rows written); columns as :func:`heldout_summary` reads them.

    Raises
    ------
    ValueError
        If ``draws`` is empty or spans several datasets.
    """
    from prh_lib import results as results_table
    from prh_lib.analysis.layerwise import regime_of

    draws = list(draws)
    if not draws or len({d.dataset for d in draws}) != 1:
        raise ValueError(f"heldout_study takes the draws of one dataset; got {sorted({d.dataset for d in draws})}")
    groups: "OrderedDict[tuple, list]" = OrderedDict()  # same images (sample ids in row order) pool together
    for d in draws:
        groups.setdefault(tuple(d.pairs.sample_ids), []).append(d)
    pairs_of_models = [tuple(c) for c in comparisons]
    per_group = []  # (features by draw, controls by pair)
    for group in groups.values():
        feats = [prepare_features(comparisons, d.pairs, clip_q=clip_q, clip=clip, device=device, dtype=dtype,
                                  batch_size=batch_size) for d in group]
        modality = {m: f.meta.get("modality", "") for m, f in feats[0].items()}
        ctrl = verdict_controls(pairs_of_models, modality, seed=seed, svd_components=svd_components) if floors else {}
        if ctrl:
            every = [c for cs in ctrl.values() for c in cs]
            feats = [control_features(d.pairs, every, features=f, clip_q=clip_q, svd_components=svd_components,
                                      seed=seed, device=device, dtype=dtype, batch_size=batch_size)
                     for d, f in zip(group, feats)]
        if preprocess is not None:
            feats = [{m: preprocess(f) for m, f in fd.items()} for fd in feats]
        per_group.append((feats, ctrl, modality))

    # every comparison and floor of a group of images, computed together where not cached
    wanted = [p for x, y in pairs_of_models for p in [(x, y)] + [(c.x, c.y) for c in per_group[0][1].get((x, y), [])]]
    batches = [_crossfit_batch(feats, wanted, k=k, n_splits=n_splits, n_boot=n_boot, seed=seed, metric=metric)
               for feats, _, _ in per_group]

    def score(x, y):
        rs = [_crossfit_cached([f[x] for f in feats], [f[y] for f in feats], k=k, n_splits=n_splits,
                               n_boot=n_boot, seed=seed, label=f"{x} × {y}", computed=batch.get((x, y)), metric=metric)
              for (feats, _, _), batch in zip(per_group, batches)]
        return rs[0] if len(rs) == 1 else _average(rs)

    feats0, ctrl0, modality0 = per_group[0]
    rows, done = [], {}
    for x, y in pairs_of_models:
        r = score(x, y)
        fx, fy = feats0[0][x], feats0[0][y]
        rows.append(_row(r, x, y, fx.layer_labels, fy.layer_labels, QUANTITY,
                         regime="random-init" if "@random-init:" in x + y else regime_of(modality0[x], modality0[y])))
        for c in ctrl0.get((x, y), []):
            if (c.x, c.y) not in done:
                done[(c.x, c.y)] = True
                rc = score(c.x, c.y)
                rows.append(_row(rc, c.x, c.y, feats0[0][c.x].layer_labels, feats0[0][c.y].layer_labels,
                                 f"{QUANTITY}:{c.quantity}", kind=c.kind))
    out = pd.DataFrame(rows)
    # which trained pairs each floor bounds (a floor can bound several)
    bounds = {}
    for (x, y), cs in ctrl0.items():
        for c in cs:
            bounds.setdefault((c.x, c.y), []).append(f"{x} × {y}")
    out["bounds"] = [json.dumps(bounds.get((a, b), [])) for a, b in zip(out["model_x"], out["model_y"])]
    d0 = draws[0]
    if write:
        results_table.write(out, chapter=chapter, params=params, dataset=d0.dataset, draw=d0.draw, seed=d0.seed,
                            n=len(d0.pairs), k=k, metric=metric, root=root)
    return out.assign(dataset=d0.dataset, n=len(d0.pairs), k=k, metric=metric)


def pooling_draws(draws) -> list:
    """Draw 0 of each one-caption dataset: the draws :func:`pooling_variants` scores."""
    return [d for d in draws if d.draw == 0 and d.pairs.caption_policy != "concat"]


def pooling_variants(draws, pairs, *, variants: Sequence[str], seed: int = 0, num_threads: int | None = None,
                     **options) -> pd.DataFrame:
    """:func:`heldout_study` (``options``; nothing written) of vision × causal-LM ``pairs`` on the first draw of each
    one-caption dataset of ``draws`` (a fifth of the extraction of all caption draws), the LM's tokens mean-pooled
    (the paper) and as ``"<LM>@pool:<variant>"`` for each of ``variants``, its random-init twin pooled alike; each
    model extracted first (:func:`~prh_lib.analysis.core.prefetch_features`).

    Returns
    -------
    DataFrame
        :func:`heldout_summary` of every dataset, with ``pooling`` ("" for a bag of words).
    """
    draws = pooling_draws(draws)
    comps = [(x, y if p == "mean" else f"{y}@pool:{p}") for p in ("mean", *variants) for x, y in pairs]
    extract = {k: options[k] for k in ("device", "dtype", "batch_size") if k in options}
    prefetch_features(comps, draws, models=[random_init_name(y, seed) for _, y in comps], num_threads=num_threads,
                      **extract)
    held = pd.concat([heldout_summary(heldout_study([d for d in draws if d.dataset == ds], comps, seed=seed,
                                                    write=False, **options))
                      for ds in dict.fromkeys(d.dataset for d in draws)], ignore_index=True)
    lms = {y for _, y in pairs}
    return held.assign(pooling=[(m.partition("@pool:")[2].partition("@")[0] or "mean") if m.split("@")[0] in lms
                                else "" for m in held["model_y"]])


def _average(rs):
    """The mean of cross-fitted results on independent image samples (their replicates averaged in order)."""
    import dataclasses

    first = rs[0]
    mean = {f: float(np.mean([getattr(r, f) for r in rs])) for f in
            ("heldout", "insample_half", "final", "depth_x", "depth_y", "late_minus_early")}
    reps = {f: np.mean([getattr(r, f) for r in rs], axis=0) for f in
            ("heldout_reps", "insample_reps", "final_reps", "late_minus_early_reps", "depth_x_reps", "depth_y_reps")}
    return dataclasses.replace(first, selected=sum(r.selected for r in rs), n_draws=sum(r.n_draws for r in rs),
                               **mean, **reps)


def heldout_summary(df: pd.DataFrame, *, dataset: str | None = None) -> pd.DataFrame:
    """The held-out rows of a chapter's results (comparisons and floors), one per feature pair.

    Parameters
    ----------
    df : DataFrame
        Rows from :func:`prh_lib.results.load` (extra columns expanded or not).
    dataset : str, optional
        Keep this dataset only.

    Returns
    -------
    DataFrame
        Columns ``dataset``, ``pair`` (``"x × y"``), ``model_x``, ``model_y``, ``quantity``, ``kind`` (``""`` for
        a comparison), ``regime``, ``score`` (held-out peak), ``ci_low``, ``ci_high``, ``insample_half``,
        ``final_half``, ``final_low``, ``final_high``, the depth columns, ``late_minus_early`` (+ interval),
        ``modal``, ``modal_share``, ``k``, ``k_half``, ``n``, ``n_half``, ``chance`` (k/(n-1)), ``bounds`` (list),
        and the replicate arrays ``reps``, ``final_reps``, ``lme_reps``, ``depth_x_reps``, ``depth_y_reps``.
        Empty when there are no held-out rows.
    """
    from prh_lib.results import expand_extra_columns

    if df.empty:
        return pd.DataFrame()
    sub = df[df["quantity"].astype(str).str.startswith(QUANTITY)]
    if dataset is not None:
        sub = sub[sub["dataset"] == dataset]
    if sub.empty:
        return pd.DataFrame()
    sub = expand_extra_columns(sub).copy()
    sub["pair"] = sub["model_x"] + " × " + sub["model_y"]
    sub["kind"] = sub.get("kind", pd.Series("", index=sub.index)).fillna("") if "kind" in sub else ""
    sub["regime"] = sub["regime"].fillna("") if "regime" in sub else ""
    sub["modal"] = sub["layer_x"].astype(str) + " × " + sub["layer_y"].astype(str)
    sub["chance"] = sub["k"] / (sub["n"] - 1)
    sub["bounds"] = [json.loads(b) if isinstance(b, str) else [] for b in sub["bounds"]]
    for c in ("reps", "final_reps", "lme_reps", "depth_x_reps", "depth_y_reps"):
        sub[c] = [np.array([np.nan if v is None else v for v in (r if isinstance(r, list) else [])], dtype=np.float64)
                  for r in sub[c]]
    return sub.reset_index(drop=True)


def margin(summary: pd.DataFrame, a: str, b: str, *, column: str = "reps", ratio: bool = False,
           ci: float = 0.95) -> dict:
    """The paired difference (or ratio) of two rows of :func:`heldout_summary` (by ``pair``), with its interval.

    Returns
    -------
    dict
        ``estimate`` (difference or ratio of the point estimates), ``low``, ``high`` (paired, centred
        interval over the shared image half-samples, :func:`prh_lib.stats.intervals.bootstrap_interval`), ``detectable`` (smallest difference this build detects at 80 %
        power, :func:`prh_lib.stats.intervals.detectable_difference`; NaN for a ratio).

    Raises
    ------
    KeyError
        If a pair is not in ``summary``.
    ValueError
        If their replicates cannot be paired (other resampling).
    """
    ra, rb = _one(summary, a), _one(summary, b)
    point = {"reps": "score", "final_reps": "final_half", "lme_reps": "late_minus_early"}[column]
    if int(ra["n"]) != int(rb["n"]) or int(ra["n_boot"]) != int(rb["n_boot"]):
        raise ValueError(f"{a!r} and {b!r} were resampled differently (n {ra['n']} vs {rb['n']}, "
                         f"n_boot {ra['n_boot']} vs {rb['n_boot']}); their replicates cannot be paired")
    lo, hi = paired_interval(ra[column], rb[column], ci=ci, ratio=ratio, estimates=(ra[point], rb[point]))
    est = ra[point] / rb[point] if ratio else ra[point] - rb[point]
    return {"estimate": float(est), "low": lo, "high": hi,
            "detectable": float("nan") if ratio else detectable_difference(lo, hi, ci=ci)}


def _one(summary: pd.DataFrame, pair: str) -> pd.Series:
    hit = summary[summary["pair"] == pair]
    if hit.empty:
        raise KeyError(f"no held-out row for {pair!r}; have {list(summary['pair'])}")
    return hit.iloc[0]


def floor_margins(summary: pd.DataFrame, pair: str) -> pd.DataFrame:
    """Each floor of ``pair`` with the paired margin ``pair − floor``, highest floor first.

    Returns
    -------
    DataFrame
        Columns ``floor`` (its pair label), ``kind``, ``floor_score`` (held-out), ``margin``, ``low``, ``high``,
        ``detectable``. Empty when ``pair`` has no floors in ``summary``.
    """
    fl = summary[[pair in b for b in summary["bounds"]]]
    rows = []
    for _, f in fl.iterrows():
        m = margin(summary, pair, f["pair"])
        rows.append({"floor": f["pair"], "kind": f["kind"], "floor_score": float(f["score"]),
                     "margin": m["estimate"], "low": m["low"], "high": m["high"], "detectable": m["detectable"]})
    out = pd.DataFrame(rows, columns=["floor", "kind", "floor_score", "margin", "low", "high", "detectable"])
    return out.sort_values("floor_score", ascending=False).reset_index(drop=True)


def heldout_table(summary: pd.DataFrame, agg: pd.DataFrame | None = None) -> pd.DataFrame:
    """The page's table of selection-free estimates: one row per trained comparison.

    Parameters
    ----------
    summary : DataFrame
        :func:`heldout_summary` of one dataset.
    agg : DataFrame, optional
        :func:`prh_lib.pages.sec3_1_layerwise.aggregate_peaks` of the same dataset, for the in-sample peak on all
        N (mean ± std over caption draws), labelled as such.

    Returns
    -------
    DataFrame
        Indexed by ``pair``; columns: regime, in-sample peak (all N; ± over caption draws), held-out peak
        [95 % CI over images], in-sample on the same halves, final layers [CI], chance, highest floor,
        margin over it [paired CI], held-out peak location (modal pair, share of selections), k on a half.
    """
    from prh_lib.formatting import format_mean_std

    comps = summary[summary["quantity"] == QUANTITY] if len(summary) else summary
    ins = agg.set_index("pair") if agg is not None and len(agg) else None
    rows = []
    for _, r in comps.iterrows():
        fm = floor_margins(summary, r["pair"])
        row = {"pair": r["pair"], "regime": r["regime"]}
        if ins is not None and r["pair"] in ins.index:
            a = ins.loc[r["pair"]]
            row["in-sample peak, all N (± caption draws)"] = format_mean_std(a["peak_mean"], a["peak_std"],
                                                                             int(a["n_draws"]), count=False)
        row |= {
            "held-out peak [95 % CI, images]": format_interval(r["score"], r["ci_low"], r["ci_high"]),
            "in-sample on the halves": f"{r['insample_half']:.3f}",
            "final layers [CI]": format_interval(r["final_half"], r["final_low"], r["final_high"]),
            "chance": f"{r['chance']:.3f}",
            "highest floor": (f"{fm.iloc[0]['floor_score']:.3f} ({fm.iloc[0]['kind']})" if len(fm)
                              else "none scored"),
            "margin over it [paired CI]": (format_interval(fm.iloc[0]["margin"], fm.iloc[0]["low"], fm.iloc[0]["high"])
                                           if len(fm) else "none scored"),
            "held-out location (share)": f"{r['modal']} ({r['modal_share']:.0%})",
            "k on a half": f"{int(r['k_half'])} of {int(r['n_half'])}",
        }
        rows.append(row)
    return pd.DataFrame(rows).set_index("pair") if rows else pd.DataFrame()


def floors_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Every floor with its held-out peak and each bounded pair's paired margin over it.

    Returns
    -------
    DataFrame
        One row per (pair, floor): columns pair, floor, kind, floor held-out [CI], margin [paired CI],
        smallest detectable margin (80 % power).
    """
    comps = summary[summary["quantity"] == QUANTITY] if len(summary) else summary
    rows = []
    for _, r in comps.iterrows():
        for _, f in floor_margins(summary, r["pair"]).iterrows():
            fr = summary[summary["pair"] == f["floor"]].iloc[0]
            rows.append({"pair": r["pair"], "floor": f["floor"], "kind": f["kind"],
                         "floor held-out [CI]": format_interval(fr["score"], fr["ci_low"], fr["ci_high"]),
                         "margin [paired CI]": format_interval(f["margin"], f["low"], f["high"]),
                         "detectable at 80 % power": f"{f['detectable']:.3f}"})
    return pd.DataFrame(rows).set_index(["pair", "floor"]) if rows else pd.DataFrame()
