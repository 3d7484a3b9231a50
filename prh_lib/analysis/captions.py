"""Caption detail as a control (Section 3.2's caption argument; Appendices F and H).

If cross-modal alignment reflects shared *content*, it should grow when a caption says more about its image
and shrink when it says less, with the images unchanged. Two controls over the same images:

- **more detail**: concatenate the first 1 to 5 COCO captions of each image
  (:func:`prh_lib.data.sample_pairs` with ``caption_policy="concat"``);
- **less detail**: start from a detailed text (the 5 captions concatenated) and shorten it to a fraction of
  its words, by a causal language model (:func:`prh_lib.lm.summarize_texts`) or by keeping the first words
  (:func:`prh_lib.lm.truncate_texts`, the deterministic baseline).

:func:`detail_variants` builds the caption variants, :func:`detail_alignment` scores them; figures are in
:func:`prh_lib.figures.plot_detail`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .. import data, extract, lm
from ..lm import DEFAULT_FRACTIONS, Summaries, target_words, token_counts, truncate_texts, word_count
from .ablation_study import chance_corrected, subsample_rows
from .core import clip_features, layerwise_alignment

__all__ = ["detail_variants", "detail_alignment", "summary_report", "detail_summary", "describe", "example_texts",
           "to_record", "study_variants", "study_alignment", "study_summary", "findings", "describe_study",
           "study_record"]


def detail_variants(dataset, *, n: int | None = None, seed: int = 0, max_captions: int = 5,
                    fractions: Sequence[float] = DEFAULT_FRACTIONS, summary_model: str | None = "smollm2-135m",
                    summary_rows: Sequence[int] | None = None, summary_pairs: int | None = None,
                    **summary_options) -> tuple[dict, dict]:
    """The caption variants of both controls, as :class:`~prh_lib.data.Pairs` over the same images.

    Parameters
    ----------
    dataset : ImageCaptionDataset
    n, seed
        Pairs as in :func:`prh_lib.data.sample_pairs`.
    max_captions : int
        "More detail": 1 to ``max_captions`` captions concatenated; the "less detail" source is the
        concatenation of ``max_captions`` captions.
    fractions : sequence of float in (0, 1)
        Target lengths of the "less detail" control.
    summary_model : str or None
        Generator of the summaries (None: truncation only).
    summary_rows : sequence of int, optional
        Rows of the pairs used by the "less detail" control (default all); summaries cost a generation each.
        When given, the "more detail" variants are repeated on these rows (control ``"more detail (subset)"``),
        so that all controls can also be compared on the same images.
    summary_pairs : int, optional
        Instead of ``summary_rows``: that many rows drawn with ``seed`` (:func:`prh_lib.analysis.ablation.
        subsample_rows`); all rows when it is at least the number of pairs.
    **summary_options
        Passed to :func:`prh_lib.lm.summarize_texts` (``device``, ``batch_size``, ``prompt``, ...).

    Returns
    -------
    variants : dict of str to dict
        Name -> ``{"control", "level", "pairs"}``: ``"more detail"`` with ``level`` = captions concatenated,
        ``"truncation"`` and ``"summary"`` with ``level`` = fraction (1.0 = the full source).
    summaries : dict of float to Summaries
        The summaries per fraction (with their fallback counts).

    Raises
    ------
    ValueError
        If both ``summary_rows`` and ``summary_pairs`` are given.
    """
    if summary_pairs is not None:
        if summary_rows is not None:
            raise ValueError("pass summary_rows or summary_pairs, not both")
        n_total = len(dataset) if n is None else n
        summary_rows = None if summary_pairs >= n_total else subsample_rows(n_total, summary_pairs, seed=seed)
    variants: dict[str, dict] = {}
    for j in range(1, max_captions + 1):
        p = data.sample_pairs(dataset, n=n, seed=seed, caption_policy="concat", n_captions=j)
        variants[f"concat-{j}"] = {"control": "more detail", "level": float(j), "pairs": p}
    source = variants[f"concat-{max_captions}"]["pairs"]
    if summary_rows is not None:
        source = source.subset(summary_rows)
        for j in range(1, max_captions + 1):  # the "more detail" texts on the same images as "less detail"
            variants[f"concat-{j} (subset)"] = {"control": "more detail (subset)", "level": float(j),
                                                "pairs": variants[f"concat-{j}"]["pairs"].subset(summary_rows)}
    for control in ("truncation", "summary"):
        variants[f"{control}-1"] = {"control": control, "level": 1.0, "pairs": source}
    for f in fractions:
        variants[f"truncation-{f:g}"] = {"control": "truncation", "level": float(f),
                                         "pairs": source.with_texts(truncate_texts(source.texts, f),
                                                                    policy=f"truncate-{f:g}")}
    summaries: dict[float, Summaries] = {}
    if summary_model is not None:
        summaries = lm.summarize_texts(source.texts, fractions=fractions, model=summary_model,
                                    generator=_lazy_generator(summary_model, summary_options), **summary_options)
        for f, s in summaries.items():
            variants[f"summary-{f:g}"] = {"control": "summary", "level": float(f),
                                          "pairs": source.with_texts(s.texts, policy=f"summary-{f:g}")}
    return variants, summaries


def _lazy_generator(model: str, options: dict):
    """A zero-argument callable that loads the generator on first use and then returns the same one."""
    held = []

    def get():
        if not held:
            with lm.quiet(not options.get("progress", False)):
                held.append(lm.load_generator(model, device=options.get("device", "cpu"),
                                              dtype=options.get("dtype", "float32")))
        return held[0]

    return get


def detail_alignment(vision: dict, variants: dict, language_models: Sequence[str], *, k: int = 10,
                     clip_q: float | None = 0.95, tokenizers: dict | None = None, num_threads: int | None = None,
                     skip: Sequence[str] = (), **feature_options) -> pd.DataFrame:
    """Mutual k-NN of a vision model with each language model on every caption variant.

    For each language model and variant, features of the variant's texts are extracted (cached; the cache key
    includes the texts) or, when every (sample, text) of the variant occurs in a variant extracted before, taken
    from its rows (features are computed text by text, so this is the same); the vision features are restricted
    to the variant's rows, both are clipped per layer (:func:`prh_lib.analysis.clip_features`, on those rows)
    and all layer pairs are scored.

    Parameters
    ----------
    vision : dict of str to LayerFeatures
        Vision model name -> features on a superset of every variant's images.
    variants : dict of str to dict
        From :func:`detail_variants`.
    language_models : sequence of str
    k : int
        Neighbours (the paper: 10).
    clip_q : float or None
        Outlier clipping quantile (None: off).
    tokenizers : dict of str to tokenizer, optional
        Tokenizer per language model for the token counts (default :func:`prh_lib.lm.load_tokenizer`).
    num_threads : int, optional
        Torch intra-op threads while extracting features (:func:`prh_lib.extract.torch_threads`, restored afterwards).
    skip : sequence of str
        Variants whose features are extracted (so that others take their rows) but that are not scored.
    **feature_options
        Passed to :func:`prh_lib.extract.features_for_pairs` (``device``, ``dtype``, ``batch_size``, ``progress``);
        each language model is loaded at most once, and only if a variant is not cached.

    Returns
    -------
    DataFrame
        One row per (vision model, language model, variant): ``vision model``, ``language model``, ``variant``,
        ``control``, ``level``, ``n``,
        ``words`` and ``tokens`` (mean per text), ``peak`` (max over layer pairs; NaN, with ``peak layers``
        "undefined", when every layer pair is degenerate, e.g. every summary of a variant is the same text),
        ``peak layers``, ``final``,
        ``chance`` (``k/(n-1)``), ``corrected peak`` and ``corrected final``
        (:func:`prh_lib.analysis.ablation.chance_corrected`).

    References
    ----------
    Herbst et al., Section 3.2, Appendices F and H.
    """
    tokenizers = dict(tokenizers or {})

    def covers(source, pairs) -> bool:
        text_of = dict(zip(source.sample_ids, source.texts))
        return all(text_of.get(sid) == t for sid, t in zip(pairs.sample_ids, pairs.texts))

    def language_features(model) -> dict:
        # Features are computed text by text, so a variant whose (sample, text) pairs all occur in a variant
        # extracted before takes that variant's rows; the others are extracted (or read from the cache),
        # loading the model at most once and only if some variant is not cached.
        source_of, todo = {}, []
        for name, v in variants.items():
            source_of[name] = next((t for t in todo if covers(variants[t]["pairs"], v["pairs"])), None)
            if source_of[name] is None:
                todo.append(name)
        with lm.quiet(not feature_options.get("progress", False)):
            got = dict(zip(todo, extract.features_for_pairs(model, [variants[t]["pairs"] for t in todo],
                                                             num_threads=num_threads, **feature_options)))
        out = {}
        for name, v in variants.items():
            if source_of[name] is None:
                out[name] = got[name]
            else:
                feats = got[source_of[name]]
                row_of = {sid: i for i, sid in enumerate(feats.sample_ids)}
                out[name] = feats.rows([row_of[sid] for sid in v["pairs"].sample_ids])
        return out

    rows = []
    skip = set(skip)
    for lm_name in language_models:
        with lm.quiet():
            tok = tokenizers.get(lm_name) or lm.load_tokenizer(lm_name)
        features = language_features(lm_name)
        for name, v in variants.items():
            if name in skip:
                continue
            pairs = v["pairs"]
            lang = clip_features(features[name], q=clip_q)
            n_tokens = float(np.mean(token_counts(pairs.texts, tok)))
            for vname, vfeat in vision.items():
                row_of = {sid: i for i, sid in enumerate(vfeat.sample_ids)}
                missing = [s for s in pairs.sample_ids if s not in row_of]
                if missing:
                    raise ValueError(f"variant {name!r} has {len(missing)} samples without {vname} features, "
                                     f"e.g. {missing[:3]}")
                vis = clip_features(vfeat.rows([row_of[s] for s in pairs.sample_ids]), q=clip_q)
                m = layerwise_alignment(vis, lang, k=k)
                if np.isnan(m.scores).all():  # e.g. every summary the same text: no neighbourhoods, no score
                    peak, where = float("nan"), "undefined (every layer degenerate)"
                else:
                    i, j, peak = m.peak
                    where = f"{m.x_labels[i]} × {m.y_labels[j]}"
                n = len(pairs)
                rows.append({"vision model": vname, "language model": lm_name, "variant": name, "control": v["control"],
                             "level": v["level"], "n": n,
                             "words": float(np.mean([word_count(t) for t in pairs.texts])), "tokens": n_tokens,
                             "peak": peak, "peak layers": where, "final": m.final,
                             "chance": k / (n - 1), "corrected peak": chance_corrected(peak, n, k),
                             "corrected final": chance_corrected(m.final, n, k)})
    return pd.DataFrame(rows)


def summary_report(summaries: dict, sources: Sequence[str]) -> pd.DataFrame:
    """How the summaries came out, per fraction: lengths reached, and fallbacks to truncation with reasons.

    Parameters
    ----------
    summaries : dict of float to Summaries
        From :func:`detail_variants`.
    sources : sequence of str
        The source texts (same rows as the summaries).

    Returns
    -------
    DataFrame
        Indexed by ``fraction``: ``rows``, ``source words``, ``target words``, ``summary words`` (means),
        ``achieved fraction`` (mean of summary words / source words), ``fallbacks`` (count) and ``reasons``,
        ``model``, ``cached file``.
    """
    src_words = np.array([word_count(t) for t in sources], dtype=float)
    rows = []
    for f, s in sorted(summaries.items()):
        if len(s.texts) != len(sources):
            raise ValueError(f"summaries at fraction {f} have {len(s.texts)} rows, sources {len(sources)}")
        words = np.array([word_count(t) for t in s.texts], dtype=float)
        rows.append({"fraction": f, "rows": len(s.texts), "source words": src_words.mean(),
                     "target words": float(np.mean([target_words(t, f) for t in sources])),
                     "summary words": words.mean(), "achieved fraction": float(np.mean(words / src_words)),
                     "fallbacks": s.n_fallback, "reasons": ", ".join(f"{k}: {v}" for k, v in s.fallback_counts.items()),
                     "model": s.model, "cached file": s.path.name if s.path else ""})
    return pd.DataFrame(rows).set_index("fraction")


def detail_summary(table: pd.DataFrame, *, score: str = "peak") -> pd.DataFrame:
    """Per (vision model, language model, control): the score at the shortest and the longest captions and the
    rank correlation of score with caption length.

    Returns
    -------
    DataFrame
        Columns ``n``, ``tokens short``/``long``, ``{score} short``/``long``, ``corrected short``/``long``,
        ``spearman`` (Spearman rank correlation of score and tokens over the control's levels).
    """
    from scipy.stats import spearmanr

    corrected = "corrected " + score if not score.startswith("corrected") else score
    rows = []
    for (vm, lm_name, control), sub in table.groupby(["vision model", "language model", "control"], sort=False):
        sub = sub.drop_duplicates("level").sort_values("tokens")
        lo, hi = sub.iloc[0], sub.iloc[-1]
        rho = float(spearmanr(sub["tokens"], sub[score]).statistic) if len(sub) > 2 else np.nan
        rows.append({"vision model": vm, "language model": lm_name, "control": control, "n": int(lo["n"]),
                     "tokens short": lo["tokens"], "tokens long": hi["tokens"],
                     f"{score} short": lo[score], f"{score} long": hi[score],
                     "corrected short": lo[corrected], "corrected long": hi[corrected], "spearman": rho})
    return pd.DataFrame(rows).set_index(["vision model", "language model", "control"])


def describe(summary: pd.DataFrame, *, score: str = "peak") -> str:
    """A Markdown line per row of :func:`detail_summary`, in figures."""
    lines = []
    for (vm, lm_name, control), r in summary.iterrows():
        lines.append(f"- **{vm} × {lm_name}**, {control} (N = {int(r['n'])}): {r['tokens short']:.0f} → "
                     f"{r['tokens long']:.0f} tokens, {score} {r[f'{score} short']:.3f} → {r[f'{score} long']:.3f} "
                     f"(chance-corrected "
                     f"{r['corrected short']:.3f} → {r['corrected long']:.3f}; Spearman ρ = {r['spearman']:.2f}).")
    return "\n".join(lines)


def example_texts(variants: dict, *, row: int = 0) -> pd.DataFrame:
    """The text of every variant for one image (row ``row`` of the "less detail" source), one row per variant."""
    sid = variants["summary-1"]["pairs"].sample_ids[row]
    return pd.DataFrame({name: [v["pairs"].texts[v["pairs"].sample_ids.index(sid)]]
                         for name, v in variants.items() if sid in v["pairs"].sample_ids}, index=[sid]).T.rename(columns=str)


def to_record(variants: dict, summary_table: pd.DataFrame, table: pd.DataFrame, detail: pd.DataFrame, *, k: int,
              summary_model: str | None, prompt: str) -> dict:
    """What the Appendix F page records for the book and the tests (:func:`prh_lib.report.record`)."""
    return {
        "k": k, "n_more": len(variants["concat-1"]["pairs"]), "n_less": len(variants["summary-1"]["pairs"]),
        "summary_model": summary_model, "prompt": prompt,
        "summaries": summary_table.reset_index().to_dict(orient="records"),
        "fallbacks": int(summary_table["fallbacks"].sum()) if len(summary_table) else 0,
        "table": table.to_dict(orient="records"),
        "detail": [{"vision": v, "language": lang, "control": c, **row}
                   for (v, lang, c), row in detail.to_dict(orient="index").items()],
    }


# --------------------------------------------------------------------------------------------------------
# the study: caption variants on every draw of every dataset


def _concat(caps: Sequence[str], j: int, offset: int) -> str:
    return " ".join(caps[(offset + i) % len(caps)] for i in range(j))


def _draw_offset(draw) -> int:
    """First caption of a draw's concatenations: r for caption draws (draw r starts at caption r), else 0."""
    return int(draw.draw) if str(draw.what_varies).startswith("caption choice") else 0


def study_variants(datasets, draws, *, max_captions: int = 5, fractions: Sequence[float] = DEFAULT_FRACTIONS,
                   summary_model: str | None = "smollm2-135m", summary_pairs: int | None = None,
                   summary_draws: int = 1, seed: int = 0, **summary_options) -> tuple[dict, dict]:
    """The caption variants of both controls on every draw, and the summaries where they were made.

    For each draw (its images; the draw's own caption policy is not used), the *more detail* control
    concatenates 1 to ``max_captions`` captions of each image (at most as many as every image has; a caption
    draw r starts at caption r, cyclically, so its variants differ from draw to draw) and the *truncation*
    control keeps the first words of the longest concatenation (fractions and 1.0). On the first
    ``summary_draws`` draws of each dataset, ``summary_pairs`` images of the draw (seeded with ``seed``; all
    when None) also get the *summary* control (:func:`prh_lib.lm.summarize_texts`) and, on the same images,
    ``truncation (subset)``, so that summary and truncation compare on one set of images. Texts of every
    variant are also built over all images that the dataset's draws use (``score: False``), so that
    :func:`detail_alignment` extracts each text once per dataset and the draws take their rows.

    Parameters
    ----------
    datasets : sequence of DatasetSpec, dict or str
    draws : sequence of Draw
        From :func:`prh_lib.data.study_draws` on ``datasets``.
    max_captions : int >= 1
    fractions : sequence of float in (0, 1)
    summary_model : str or None
        None: no summaries (truncation only).
    summary_pairs : int, optional
    summary_draws : int >= 0
        Draws per dataset that get summaries (each costs a generation per image and fraction).
    seed : int
        Seeds the choice of the summary images.
    **summary_options
        Passed to :func:`prh_lib.lm.summarize_texts`.

    Returns
    -------
    variants : dict of str to dict
        ``"<dataset>/<draw>/<variant>"`` -> ``{"dataset", "draw", "seed", "control", "level", "variant",
        "pairs", "score"}``, with ``draw`` None and ``score`` False for the all-images texts.
    summaries : dict of (str, int) to dict of float to Summaries
        Per (dataset, draw) that got summaries.

    Raises
    ------
    ValueError
        If ``max_captions`` or ``summary_draws`` is out of range.
    """
    from ..data import study

    if int(max_captions) < 1 or int(summary_draws) < 0:
        raise ValueError(f"need max_captions >= 1 and summary_draws >= 0; got {max_captions}, {summary_draws}")
    specs = {s.name: s for s in (study.DatasetSpec.coerce(d) for d in datasets)}
    variants: dict[str, dict] = {}
    summaries: dict = {}
    made_all: set = set()
    done_summaries: dict[str, int] = {}
    used: dict[str, set] = {}
    for d in draws:
        used.setdefault(d.dataset, set()).update(d.pairs.sample_ids)
    for d in draws:
        ds = study.load_spec_dataset(specs[d.dataset])
        n_caps = min(int(max_captions), min(len(c) for c in ds.captions))
        offset = _draw_offset(d)
        # the images any draw of this dataset uses, in dataset order: each text is extracted once
        keep = [i for i, sid in enumerate(ds.sample_ids) if sid in used[d.dataset] or 2 * len(used[d.dataset])
                >= len(ds.sample_ids)]  # few images used: only those; else the whole set, shared with others
        caps = [ds.captions[i] for i in keep]
        base = data.sample_pairs(ds, n=None, caption_policy="first").subset(keep)
        row_of = {sid: i for i, sid in enumerate(base.sample_ids)}
        full = {j: base.with_texts([_concat(c, j, offset) for c in caps], policy=f"concat-{j}@{offset}")
                for j in range(1, n_caps + 1)}
        full_trunc = {f: full[n_caps].with_texts(truncate_texts(full[n_caps].texts, f), policy=f"truncate-{f:g}@{offset}")
                      for f in fractions}
        if (d.dataset, offset) not in made_all:
            made_all.add((d.dataset, offset))
            for j, p in full.items():
                variants[f"{d.dataset}/all@{offset}/concat-{j}"] = {
                    "dataset": d.dataset, "draw": None, "seed": None, "control": "more detail", "level": float(j),
                    "variant": f"concat-{j}", "pairs": p, "score": False}
            for f, p in full_trunc.items():
                variants[f"{d.dataset}/all@{offset}/truncation-{f:g}"] = {
                    "dataset": d.dataset, "draw": None, "seed": None, "control": "truncation", "level": float(f),
                    "variant": f"truncation-{f:g}", "pairs": p, "score": False}
        rows = [row_of[sid] for sid in d.pairs.sample_ids]

        def add(control, level, name, pairs):
            variants[f"{d.dataset}/{d.draw}/{name}"] = {"dataset": d.dataset, "draw": d.draw, "seed": d.seed,
                                                       "control": control, "level": float(level), "variant": name,
                                                       "pairs": pairs, "score": True}

        for j, p in full.items():
            add("more detail", j, f"concat-{j}", p.subset(rows))
        source = full[n_caps].subset(rows)
        add("truncation", 1.0, "truncation-1", source)
        for f, p in full_trunc.items():
            add("truncation", f, f"truncation-{f:g}", p.subset(rows))
        if summary_model is None or done_summaries.get(d.dataset, 0) >= int(summary_draws):
            continue
        done_summaries[d.dataset] = done_summaries.get(d.dataset, 0) + 1
        sub = (list(range(len(rows))) if summary_pairs is None or summary_pairs >= len(rows)
               else subsample_rows(len(rows), int(summary_pairs), seed=seed))
        src = source.subset(sub)
        made = lm.summarize_texts(src.texts, fractions=fractions, model=summary_model,
                                  generator=_lazy_generator(summary_model, summary_options), **summary_options)
        summaries[(d.dataset, d.draw)] = made
        add("summary", 1.0, "summary-1", src)
        add("truncation (subset)", 1.0, "truncation (subset)-1", src)
        for f, s in made.items():
            add("summary", f, f"summary-{f:g}", src.with_texts(s.texts, policy=f"summary-{f:g}"))
            add("truncation (subset)", f, f"truncation (subset)-{f:g}",
                src.with_texts(truncate_texts(src.texts, f), policy=f"truncate-{f:g}"))
    return variants, summaries


def study_alignment(vision: dict, variants: dict, language_models: Sequence[str], *, k: int = 10,
                    clip_q: float | None = 0.95, num_threads: int | None = None, **feature_options) -> pd.DataFrame:
    """:func:`detail_alignment` over the variants of :func:`study_variants`: rows for the results table.

    The all-images texts are extracted (once per language model and text; cached) and not scored; every
    draw's variant takes its rows from them (summaries are extracted on their own).

    Returns
    -------
    DataFrame
        The columns of :func:`detail_alignment` plus ``dataset``, ``draw``, ``seed``, and the results-table
        columns ``model_x`` (vision), ``model_y`` (language), ``metric``, ``k``, ``score`` (= ``peak``),
        ``quantity`` (the variant name), ``preprocessing``.
    """
    from .capability import DegenerateLayers

    degenerate = DegenerateLayers()
    with degenerate:
        table = detail_alignment(vision, variants, language_models, k=k, clip_q=clip_q, num_threads=num_threads,
                                 skip=[name for name, v in variants.items() if not v["score"]], **feature_options)
        degenerate.add_model(", ".join(vision), "a language model")
    meta = pd.DataFrame([{"variant": name, "dataset": v["dataset"], "draw": v["draw"], "seed": v["seed"],
                          "name": v["variant"]} for name, v in variants.items() if v["score"]])
    table = table.merge(meta, on="variant", how="left")
    table["variant"] = table.pop("name")
    table["model_x"], table["model_y"] = table["vision model"], table["language model"]
    table["metric"], table["k"], table["score"], table["quantity"] = "mutual_knn", k, table["peak"], table["variant"]
    table["preprocessing"] = f"clip_outliers(q={clip_q})" if clip_q is not None else "none"
    table.attrs["degenerate"] = degenerate.sentence()
    return table


def study_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std over draws of every (dataset, vision, language, control, level) from the results table.

    Parameters
    ----------
    df : DataFrame
        The chapter's rows (``results.load(..., expand_extra=True)``; columns ``control``, ``level``,
        ``tokens``, ``chance``, ``corrected peak``, ``final``).

    Returns
    -------
    DataFrame
        Columns ``dataset``, ``vision model``, ``language model``, ``control``, ``level``, ``variant``, ``n``,
        ``n_draws``, ``tokens``, ``chance``, ``peak``, ``peak std``, ``corrected peak``, ``corrected peak std``.
    """
    from .. import results

    by = ["dataset", "model_x", "model_y", "control", "level", "quantity"]
    agg = results.aggregate(df, by=by, values=["score", "corrected peak", "tokens", "chance", "n"])
    out = pd.DataFrame({
        "dataset": agg["dataset"], "vision model": agg["model_x"], "language model": agg["model_y"],
        "control": agg["control"], "level": agg["level"].astype(float), "variant": agg["quantity"],
        "n": agg["n_mean"].round().astype(int), "n_draws": agg["n_draws"], "tokens": agg["tokens_mean"],
        "chance": agg["chance_mean"], "peak": agg["score_mean"], "peak std": agg["score_std"],
        "corrected peak": agg["corrected peak_mean"], "corrected peak std": agg["corrected peak_std"]})
    order = {d: i for i, d in enumerate(dict.fromkeys(df["dataset"]))}
    return out.sort_values(["dataset", "vision model", "language model", "control", "level"],
                           key=lambda c: c.map(order) if c.name == "dataset" else c, kind="stable").reset_index(drop=True)


def findings(summary: pd.DataFrame, *, paper_setting: bool = False) -> list[dict]:
    """The row of "The paper and this build" for ``F/detail``, computed from :func:`study_summary`.

    The claim (App. F): shorter captions lower alignment but keep the order of the models. Tested on the
    ``summary`` control when it ran on at least two draws, else on ``truncation`` (every draw). *Lower*: for
    every (dataset, vision, language), the mean peak at the shortest level is below the full text's by more
    than twice the std over draws (any drop with one draw). *Keeps the order*: no pair of language models
    swaps rank at any level by more than twice their combined std (a swap within the noise is not a
    change). The claim holds when both do. Comparable only in the paper's setting (DOCCI, Qwen3-8B).
    """
    from .. import claims

    def n_draws(c):
        sel = summary[summary["control"] == c]
        return int(sel["n_draws"].min()) if len(sel) and "n_draws" in sel else 0

    control = "summary" if n_draws("summary") >= 2 else "truncation"
    sub = summary[summary["control"] == control]
    if sub.empty:
        return [claims.finding("F/detail", this_build=None, holds=None, note="no shortening control ran")]
    std_of = (lambda r: float(r["peak std"]) if "peak std" in r and np.isfinite(r["peak std"]) else 0.0)
    lower, swaps, parts = [], [], []
    for (ds, vm), g in sub.groupby(["dataset", "vision model"], sort=False):
        for lm_name, h in g.groupby("language model", sort=False):
            h = h.sort_values("level")
            lo, hi = h.iloc[0], h.iloc[-1]
            lower.append(bool(hi["peak"] - lo["peak"] > 2 * max(std_of(lo), std_of(hi))))
            parts.append(f"{ds}, {vm} × {lm_name}: {hi['peak']:.3f} → {lo['peak']:.3f} at {lo['level']:g}")
        names = list(dict.fromkeys(g["language model"]))
        ref = g[g["level"] == g["level"].max()].set_index("language model")
        for level, lv in g.groupby("level"):
            lv = lv.set_index("language model")
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    if a not in lv.index or b not in lv.index:
                        continue
                    before = np.sign(ref.loc[a, "peak"] - ref.loc[b, "peak"])
                    diff = lv.loc[a, "peak"] - lv.loc[b, "peak"]
                    noise = 2 * np.hypot(std_of(lv.loc[a]), std_of(lv.loc[b]))
                    if np.sign(diff) == -before and abs(diff) > noise:
                        swaps.append(f"{a} and {b} swap at {level:g}")
    multi = sub["language model"].nunique() > 1
    holds = all(lower) and not swaps
    why = "" if control == "summary" else "summaries ran on fewer than 2 draws, so truncation (every draw) is used"
    note = "; ".join(x for x in [why, "" if multi else "one language model: the order cannot be checked"] if x)
    order = (f"; order of models kept at every level (beyond 2 std): {not swaps}" + (f" ({'; '.join(swaps)})"
             if swaps else "")) if multi else ""
    return [claims.finding("F/detail", this_build=f"{control}: " + "; ".join(parts) + order, holds=holds,
                           comparable=paper_setting, note=note)]


def describe_study(summary: pd.DataFrame) -> str:
    """Markdown lines, generated from :func:`study_summary`: per (dataset, model pair, control) the score at
    the shortest and the longest texts (mean ± std over draws) and the Spearman ρ of score with length."""
    from scipy.stats import spearmanr

    from .. import results

    def fmt(mean, std, n):
        # a control run on fewer draws (the summaries: generation is costly) is one draw by choice, not a set
        # that cannot be repeated
        return results.format_mean_std(mean, std, n) if n > 1 else f"{mean:.3f} (one draw)"

    lines = []
    for (ds, vm, lm_name, control), g in summary.groupby(["dataset", "vision model", "language model", "control"],
                                                      sort=False):
        g = g.sort_values("tokens")
        lo, hi = g.iloc[0], g.iloc[-1]
        varies = len(g) > 2 and g["tokens"].nunique() > 1 and g["peak"].nunique() > 1
        rho = float(spearmanr(g["tokens"], g["peak"]).statistic) if varies else float("nan")  # else undefined
        lines.append(f"- **{ds}, {vm} × {lm_name}**, {control} (N = {int(lo['n'])}): {lo['tokens']:.0f} → "
                     f"{hi['tokens']:.0f} tokens, peak {fmt(lo['peak'], lo['peak std'], int(lo['n_draws']))}"
                     f" → {fmt(hi['peak'], hi['peak std'], int(hi['n_draws']))}; "
                     f"chance-corrected {lo['corrected peak']:.3f} → {hi['corrected peak']:.3f}; Spearman ρ with "
                     f"length = {rho:.2f}.")
    return "\n".join(lines)


def study_record(summary: pd.DataFrame, summary_tables: dict, claims_rows: list, draws, *, k: int,
                 summary_model: str | None, prompt: str) -> dict:
    """What the Appendix F page records for the book and the tests (:func:`prh_lib.report.record`)."""
    return {
        "k": k, "summary_model": summary_model, "prompt": prompt, "summary": summary.to_dict(orient="records"),
        "summaries": {f"{ds}/{dr}": t.reset_index().to_dict(orient="records") for (ds, dr), t in summary_tables.items()},
        "fallbacks": int(sum(t["fallbacks"].sum() for t in summary_tables.values())) if summary_tables else 0,
        "claims": list(claims_rows),
        "draws": [{"dataset": d.dataset, "draw": d.draw, "seed": d.seed, "n": len(d.pairs),
                   "what_varies": d.what_varies} for d in draws],
    }
