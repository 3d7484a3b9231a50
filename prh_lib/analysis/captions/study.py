"""The computation of the caption-detail chapter (Section 3.2, Appendices F and H): variants and their scores.

:func:`detail_variants` builds more-detail (concatenated captions) and less-detail (summaries, truncations)
variants of one dataset's pairs and :func:`detail_alignment` scores them against the vision models;
:func:`study_variants` and :func:`study_alignment` do the same on every draw of every dataset, writing the
results table. Re-exported by :mod:`prh_lib.pages.appf_caption_detail`, which holds the page.

References
----------
Herbst, Roschmann, Bouniot, Akata. "Where Does Alignment Emerge and What Does It Mean? A Closer Look at
the Platonic Representation Hypothesis", Section 3.2, Appendices F and H.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import pandas as pd

from prh_lib import data, extract, lm
from prh_lib.results import score_cache
from prh_lib.lm.summaries import DEFAULT_FRACTIONS, Summaries, token_counts, truncate_texts, word_count
from prh_lib.analysis.ablation.study import chance_corrected, subsample_rows
from prh_lib.analysis.core import clip_features, layerwise_alignment


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
        Instead of ``summary_rows``: that many rows drawn with ``seed`` (:func:`prh_lib.pages.appg_k_n_ablation.
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


def _mean_tokens(lm_name: str, texts, tokenizer=None) -> float:
    """Mean token count of ``texts`` under ``lm_name``'s tokenizer (or the one given), cached by the model's
    identity (name and revision) and the texts, so a warm run loads no tokenizer."""
    if tokenizer is not None:
        return float(np.mean(token_counts(texts, tokenizer)))
    return _cached_mean_tokens(extract.model_identity(lm_name), list(texts))


@score_cache.memoize("mean_token_count", code=(lm.summaries,))  # token_counts lives there
def _cached_mean_tokens(identity: dict, texts: list) -> float:
    return float(np.mean(token_counts(texts, _tokenizer(identity["name"]))))


@functools.lru_cache(maxsize=8)
def _tokenizer(name: str):
    with lm.quiet():
        return lm.load_tokenizer(name)


def variant_features(model: str, variants: dict, *, num_threads: int | None = None, **feature_options) -> dict:
    """Features of one language model on every variant's texts: ``{variant name: LayerFeatures}``.

    Features are computed text by text, so a variant whose (sample, text) pairs all occur in a variant extracted
    before takes that variant's rows; the others are extracted (or read from the cache), loading the model at
    most once and only if some variant is not cached. ``feature_options`` as in
    :func:`prh_lib.extract.features_for_pairs`.
    """
    def covers(source, pairs) -> bool:
        text_of = dict(zip(source.sample_ids, source.texts))
        return all(text_of.get(sid) == t for sid, t in zip(pairs.sample_ids, pairs.texts))

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


def detail_alignment(vision: dict, variants: dict, language_models: Sequence[str], *, k: int = 10,
                     clip_q: float | None = 0.95, tokenizers: dict | None = None, num_threads: int | None = None,
                     skip: Sequence[str] = (), **feature_options) -> pd.DataFrame:
    """Mutual k-NN of a vision model with each language model on every caption variant.

    For each language model and variant, features of the variant's texts are extracted (cached; the cache key
    includes the texts) or, when every (sample, text) of the variant occurs in a variant extracted before, taken
    from its rows (features are computed text by text, so this is the same); the vision features are restricted
    to the variant's rows, both are clipped with one threshold per model's stack of layers (:func:`prh_lib.analysis.clip_features`, on those rows)
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
        ``control``, ``level``, ``n``, ``words`` and ``tokens`` (mean per text), ``peak`` (max over layer pairs; NaN,
        with ``peak layers`` "undefined", when every layer pair is degenerate, e.g. every summary of a variant is the
        same text), ``peak layers``, ``final``, ``chance`` (``k/(n-1)``), ``corrected peak`` and ``corrected final``
        (:func:`prh_lib.pages.appg_k_n_ablation.chance_corrected`).

    References
    ----------
    Herbst et al., Section 3.2, Appendices F and H.
    """
    tokenizers = dict(tokenizers or {})

    def language_features(model) -> dict:
        return variant_features(model, variants, num_threads=num_threads, **feature_options)

    rows = []
    skip = set(skip)
    for lm_name in language_models:
        features = language_features(lm_name)
        for name, v in variants.items():
            if name in skip:
                continue
            pairs = v["pairs"]
            lang = clip_features(features[name], q=clip_q)
            n_tokens = _mean_tokens(lm_name, pairs.texts, tokenizers.get(lm_name))
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


# -- the study: caption variants on every draw of every dataset ------------------------------------------


def study_variants(datasets, draws, *, max_captions: int = 5, fractions: Sequence[float] = DEFAULT_FRACTIONS,
                   summary_model: str | None = "smollm2-135m", summary_pairs: int | None = None,
                   summary_draws: int = 1, summary_datasets: Sequence[str] | None = None, seed: int = 0,
                   **summary_options) -> tuple[dict, dict]:
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
    summary_datasets : sequence of str, optional
        The datasets (by name) whose draws get summaries; None: every dataset. Offline App. F summarises
        ``coco-mini`` only, and ``flickr8k-1k`` gets the other two controls.
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
        If ``max_captions`` or ``summary_draws`` is out of range, or ``summary_datasets`` names a dataset that
        is not in ``draws``.
    """
    from prh_lib.data import study

    if int(max_captions) < 1 or int(summary_draws) < 0:
        raise ValueError(f"need max_captions >= 1 and summary_draws >= 0; got {max_captions}, {summary_draws}")
    specs = {s.name: s for s in (study.DatasetSpec.coerce(d) for d in datasets)}
    in_draws = list(dict.fromkeys(d.dataset for d in draws))
    if summary_datasets is not None:
        unknown = sorted(set(summary_datasets) - set(in_draws))
        if unknown:
            raise ValueError(f"summary_datasets names {unknown}, not datasets of the study; its datasets: {in_draws}")
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
        # first caption of the draw's concatenations: r for caption draws (draw r starts at caption r), else 0
        offset = int(d.draw) if str(d.what_varies).startswith("caption choice") else 0
        # the images any draw of this dataset uses, in dataset order: each text is extracted once
        keep = [i for i, sid in enumerate(ds.sample_ids) if sid in used[d.dataset] or 2 * len(used[d.dataset])
                >= len(ds.sample_ids)]  # few images used: only those; else the whole set, shared with others
        caps = [ds.captions[i] for i in keep]
        base = data.sample_pairs(ds, n=None, caption_policy="first").subset(keep)
        row_of = {sid: i for i, sid in enumerate(base.sample_ids)}
        full = {j: base.with_texts([" ".join(c[(offset + i) % len(c)] for i in range(j)) for c in caps],
                                   policy=f"concat-{j}@{offset}") for j in range(1, n_caps + 1)}
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
        if (summary_model is None or done_summaries.get(d.dataset, 0) >= int(summary_draws)
                or (summary_datasets is not None and d.dataset not in summary_datasets)):
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
    from prh_lib.analysis.capability.study import DegenerateLayers

    degenerate = DegenerateLayers()
    with degenerate:
        table = detail_alignment(vision, variants, language_models, k=k, clip_q=clip_q, num_threads=num_threads,
                                 skip=[name for name, v in variants.items() if not v["score"]], **feature_options)
        # layers named as the model names them ("embed", ...), not by index; one label set per vision model
        names = list(vision)
        labels = getattr(vision[names[0]], "layer_labels", ()) if len(names) == 1 and hasattr(vision, "get") else ()
        degenerate.add_model(", ".join(names), "a language model", x_labels=labels)
    meta = pd.DataFrame([{"variant": name, "dataset": v["dataset"], "draw": v["draw"], "seed": v["seed"],
                          "name": v["variant"]} for name, v in variants.items() if v["score"]])
    table = table.merge(meta, on="variant", how="left")
    table["variant"] = table.pop("name")
    table["model_x"], table["model_y"] = table["vision model"], table["language model"]
    table["metric"], table["k"], table["score"], table["quantity"] = "mutual_knn", k, table["peak"], table["variant"]
    table["preprocessing"] = f"clip_outliers(q={clip_q})" if clip_q is not None else "none"
    table.attrs["degenerate"] = degenerate.sentence()
    return table


def score_study(draws, variants: dict, vision_models: Sequence[str], language_models: Sequence[str], *, chapter: str,
                params: dict, device: str = "cpu", dtype: str = "float32", batch_size: int = 32,
                **options) -> tuple[dict, list[pd.DataFrame]]:
    """:func:`study_alignment` on every dataset of ``draws`` (``options`` passed on), its rows written to the
    results table; returns the vision features per dataset and the per-dataset frames."""
    from prh_lib import results

    vision = {}
    with lm.quiet():
        for ds in dict.fromkeys(d.dataset for d in draws):
            parent = next(v["pairs"] for v in variants.values() if v["dataset"] == ds and not v["score"])
            vision[ds] = {m: extract.get_features(m, parent, device=device, dtype=dtype, batch_size=batch_size,
                                                  progress=False) for m in vision_models}
    parts = [study_alignment(vision[ds], {n: v for n, v in variants.items() if v["dataset"] == ds}, language_models,
                             device=device, dtype=dtype, batch_size=batch_size, progress=False, **options)
             for ds in vision]
    rows = pd.concat(parts, ignore_index=True)
    results.write(rows.drop(columns=["vision model", "language model", "variant", "peak"]), chapter=chapter,
                  params=params)
    return vision, parts
