"""Extraction planned before scoring: ``prh-run`` extracts the feature files its chapters will read, then runs them.

:func:`plan_features` lists the files from each chapter's parameters (:func:`chapter_params`) through
:data:`CHAPTER_READS`, the one table of which models a chapter reads on which pairs; :func:`extract_planned` extracts
those not cached over the cores, calling :func:`prh_lib.extract.fill_cache` per model as a chapter's
own prefetch does (:func:`prh_lib.analysis.core.prefetch_features`), so the chapter finds the same files cached.

The plan covers the bulk: a chapter still extracts on a miss what it alone reads (``ch_concepts``'s prompts, App. F's
caption variants and summaries, Section 3.2's features, its language models loaded
anyway for bits per byte) and whatever a plan missed (:func:`report_misses`)."""

from __future__ import annotations

import ast
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from prh_lib import extract
from prh_lib.analysis import heldout, regimes
from prh_lib.analysis.controls import random_init_name
from prh_lib.analysis.core import model_names
from prh_lib.data.pairs import Pairs
from prh_lib.data.study import headline_dataset, study_draws
from prh_lib.data.text_only import is_text_only
from prh_lib.models import precision
from prh_lib.models.spec import token_pooling
from prh_lib.models.zoo import ModelNotAvailableError
from prh_lib.pages import sec3_1_layerwise
from prh_lib.pages.report import declared_defaults
from prh_lib.parallel import available_cores
from prh_lib.paths import display_path
from prh_lib.run.schedule import worker_signals

#: Control seed of the random-init twins the chapters' floors read (the notebooks' ``CONTROL_SEED``).
CONTROL_SEED = 0


@dataclass(frozen=True)
class Planned:
    """One planned file: ``model`` on ``pairs`` (of dataset ``group``) in ``dtype`` (resolved) on ``device``, at ``path``."""

    model: str
    group: str
    pairs: Pairs = field(repr=False)
    dtype: str
    device: str
    path: Path


def _draws(p):
    return study_draws(p["datasets"], n_draws=p["n_draws"])


def _pairs_of(*keys, twins=False, extra=()):
    """A chapter reading the models of its model-pair parameters ``keys`` (and ``extra`` lists) on every draw."""
    def reads(p):
        names = list(dict.fromkeys(model_names([pair for k in keys for pair in p[k]]) + [m for k in extra for m in p[k]]))
        names += [random_init_name(m, CONTROL_SEED) for m in names] if twins else []
        return [(names, [(d.dataset, d.pairs) for d in _draws(p)])]
    return reads


def _layerwise(p):
    """Section 3.1: the twins on the verdicts' dataset and on draw 0 of the others (sanity check, poolings) only; each
    vision × causal-LM pair's other token poolings and their twins on those draws 0
    (:func:`prh_lib.analysis.heldout.pooling_variants`)."""
    draws, names = _draws(p), model_names(p["comparisons"])
    main = p["heatmap_dataset"] or headline_dataset(draws)
    firsts = heldout.pooling_draws(draws)
    floors = [d for d in draws if d.dataset == main or d in firsts]
    lms = dict.fromkeys(y for _, y in sec3_1_layerwise.pooling_pairs(p["comparisons"]))
    pooled = [f"{y}@pool:{v}" for y in lms for v in (p["pooling_variants"] if p["heldout_boot"] else ())]
    return [(names, [(d.dataset, d.pairs) for d in draws]),
            ([random_init_name(m, CONTROL_SEED) for m in names], [(d.dataset, d.pairs) for d in floors]),
            (pooled + [random_init_name(m, CONTROL_SEED) for m in pooled], [(d.dataset, d.pairs) for d in firsts])]


def _regimes(p):
    """Section 3.3: every regime's models and the twins of the floors; a text-only draw, its language pairs only."""
    comps = regimes.regime_comparisons(unimodal=p["unimodal_pairs"], same_modality=p["same_modality_pairs"],
                                       random_init=p["random_init_pairs"], seeds=p["random_init_seeds"],
                                       aligned=p["aligned_models"])
    draws, out = _draws(p), []
    for text_only in (False, True):
        pairs = [(d.dataset, d.pairs) for d in draws if is_text_only(d.pairs) == text_only]
        group = (regimes.language_only(comps) if text_only else comps) if pairs else []
        if group:
            twins = [random_init_name(m, CONTROL_SEED) for m in model_names(regimes.control_pairs(group))]
            out.append((list(dict.fromkeys(model_names(group) + twins)), pairs))
    return out


#: ``chapter -> reads(params) -> [(model names, [(dataset, Pairs), ...]), ...]``: the files a chapter reads. Chapters
#: absent here read only inputs of their own making (``ch_concepts``, ``appf_caption_detail``) or load their models
#: anyway (``sec3_2_capability``: its language models for bits per byte; its two vision files are left to it too).
CHAPTER_READS = {
    "sec3_1_layerwise": _layerwise,
    "sec3_1b_pca": _pairs_of("comparisons"),
    "sec3_3_regimes": _regimes,
    "appg_k_n_ablation": _pairs_of("comparisons"),
    "ch_displacement": _pairs_of("displacement_comparisons", extra=("consensus_models",)),
    "robustness": _pairs_of("comparisons", twins=True),
}


def chapter_params(name: str, params: dict) -> dict:
    """The parameters notebook ``name`` runs with: its declared defaults updated with the keys of ``params`` it declares
    (as :func:`prh_lib.run.runner.run_notebook` passes them)."""
    declared = declared_defaults(name)
    return {**{k: ast.literal_eval(v) for k, v in declared.items()}, **{k: v for k, v in params.items() if k in declared}}


def plan_features(chapters, params: dict) -> list[Planned]:
    """The feature files the ``chapters`` read with the run's ``params``, each once, chapter by chapter.

    Paths are :func:`prh_lib.extract.features_path`'s (the files ``get_features`` reads and writes), ``dtype="auto"``
    resolved for the model and the chapter's ``device``. Nothing is loaded or written; a model that cannot be resolved
    here is left to its chapter, which reports it.

    Returns
    -------
    list of Planned
        Each file once.
    """
    plan: dict[Path, Planned] = {}
    for name in chapters:
        if name not in CHAPTER_READS:
            continue
        p = chapter_params(name, params)
        device = str(p.get("device", "cpu"))
        for names, sets in CHAPTER_READS[name](p):
            for model in names:
                dtype = precision.feature_dtype(model, str(p.get("dtype", "float32")), device)
                try:
                    paths = [extract.features_path(model, pairs, dtype=dtype, device=device) for _, pairs in sets]
                except ModelNotAvailableError:
                    continue
                for (group, pairs), path in zip(sets, paths):
                    plan.setdefault(path, Planned(model, group, pairs, dtype, device, path))
    return list(plan.values())


def _extract_model(model: str, device: str, dtype: str, jobs: list, threads: int) -> str:
    """One model's files (``(name, pairs)`` each: the model and its token poolings, every dataset), as a chapter's
    prefetch extracts them (:func:`prh_lib.extract.fill_cache`); an error comes back as text."""
    try:
        extract.fill_cache(jobs, device=device, dtype=dtype, num_threads=threads)
    except Exception as err:  # the chapter meets it again and reports it where it belongs
        return f"{model}: {type(err).__name__}: {str(err).strip()[:200]}"
    return ""


def extract_planned(plan, *, cores: int | None = None) -> dict:
    """Extract the planned files not cached, a model per task (the most rows first; a language model's token poolings
    one task, pooled from the same forward passes), spread over the cores.

    On a CPU, one worker per core (at most one per model), with ``cores // workers`` threads each; on a GPU, one worker.
    Workers ignore Ctrl-C and are ended with the run (:func:`prh_lib.run.schedule.stopping_on_signals`).

    Parameters
    ----------
    plan : sequence of Planned
        From :func:`plan_features`.
    cores : int, optional
        Cores to use (default :func:`prh_lib.parallel.available_cores`).

    Returns
    -------
    dict
        ``planned``, ``cached`` (before), ``extracted``, ``failed`` (files still missing), ``workers`` and ``errors``
        (one line per model that failed).
    """
    todo = [f for f in plan if not f.path.is_file()]
    groups: dict[tuple, list] = {}
    for f in todo:
        groups.setdefault((token_pooling(f.model)[0], f.device, f.dtype), []).append((f.model, f.pairs))
    order = sorted(groups, key=lambda g: -sum(len(p) for _, p in groups[g]))
    cores = max(1, available_cores() if cores is None else int(cores))
    on_gpu = any(f.device != "cpu" for f in todo)
    workers = min(1 if on_gpu else cores, len(order))
    errors = []
    if order:
        threads = cores if on_gpu else max(1, cores // workers)
        print(f"[prh-run] extracting {len(todo)} of {len(plan)} planned feature files ({len(order)} models) over "
              f"{workers} worker(s) before the notebooks run", flush=True)
        # spawned, not forked: a child forked from a process whose torch threads have run can hang in its first one
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=worker_signals) as pool:
            futures = [pool.submit(_extract_model, *g, groups[g], threads) for g in order]
            errors = [e for e in (f.result() for f in futures) if e]
    failed = sum(not f.path.is_file() for f in todo)
    return {"planned": len(plan), "cached": len(plan) - len(todo), "extracted": len(todo) - failed, "failed": failed,
            "workers": workers, "errors": errors}


def extract_first(names, params: dict) -> float | None:
    """``prh-run``'s step before the notebooks ``names`` run: plan, extract, print one line; return the wall time (None,
    and nothing printed, when the notebooks read no planned file).

    A step that fails (a dataset not readable here, a worker killed) is reported in that line and left to the
    notebooks, which say what is wrong where it belongs."""
    t0 = time.perf_counter()
    try:
        done = extract_planned(plan_features(names, params))
    except Exception as err:  # noqa: BLE001 -- the notebooks meet it again
        print(f"[prh-run] extraction step failed ({type(err).__name__}: {err}); the notebooks extract what they read",
              flush=True)
        return time.perf_counter() - t0
    if not done["planned"]:
        return None
    print(f"[prh-run] extraction planned: {done['planned']} feature files, {done['cached']} cached, "
          f"{done['extracted']} extracted by {done['workers']} worker(s) in {time.perf_counter() - t0:.1f} s"
          + (f"; {done['failed']} left to the notebooks ({'; '.join(done['errors'])})" if done["failed"] else ""),
          flush=True)
    return time.perf_counter() - t0


def report_misses(log: Path) -> None:
    """Print one line naming the feature files computed while :data:`~prh_lib.extract.features.EXTRACTION_LOG` named ``log``
    (the notebooks extracted them themselves), if any."""
    if missed := (list(dict.fromkeys(Path(log).read_text().splitlines())) if Path(log).is_file() else []):
        print(f"[prh-run] the notebooks extracted {len(missed)} feature file(s) the plan did not: "
              + ", ".join(display_path(m) for m in missed[:3]) + (", ..." if len(missed) > 3 else ""), flush=True)
