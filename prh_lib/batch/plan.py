"""The study's plan: every (model, dataset, seed) job and the feature file it produces.

A :class:`Job` is one model on one set of pairs (dataset, N, seed, caption policy) and produces one feature file in the
extraction cache, the very file :func:`prh_lib.extract.get_features` reads when a notebook later runs with the same
parameters. :func:`plan_study` lists the jobs with their files; :func:`study_from_profile`
reads the study from a notebook parameter set."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from prh_lib import data, extract
from prh_lib.data import paper
from prh_lib.extract.features import CorruptFeatureFileError, check_feature_file
from prh_lib.data.study import DatasetSpec, study_draws, study_pairs
from prh_lib.models.loaded import DTYPES


@dataclass(frozen=True)
class Job:
    """One model on one set of pairs; produces one file in the feature cache.

    ``cache_file`` is computed when the job is planned (the path :func:`prh_lib.extract.get_features` will write); it is
    None when the model could not be resolved then (``note`` says why), and the worker extracts anyway."""

    model: str
    dataset: DatasetSpec
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 32
    max_length: int | None = None
    cache_file: str | None = None
    note: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        return f"{self.model} | {self.dataset.name} seed={self.seed}"

    def pairs(self) -> data.Pairs:
        """The job's pairs (the dataset is loaded once per process)."""
        return study_pairs(self.dataset, self.seed)

    def is_done(self) -> bool:
        """Whether the job's feature file exists and its header is sound (safetensors header, metadata, shape).

        Files are written atomically, so an interrupted write leaves no file; a damaged one (truncated, garbage, without
        metadata, a shape that contradicts it) counts as not done, and the worker's ``get_features`` moves it aside and
        recomputes it. Only the header is read, so planning stays cheap; damaged tensor bytes (checked against the
        metadata's SHA-256) are caught when ``get_features`` reads the file."""
        if self.cache_file is None or not Path(self.cache_file).is_file():
            return False
        try:
            check_feature_file(self.cache_file)
        except (CorruptFeatureFileError, FileNotFoundError):
            return False
        return True

    def status(self) -> str:
        """``"cached"``, ``"left"`` or ``"unknown"`` (cache path not resolvable at planning time)."""
        if self.cache_file is None:
            return "unknown"
        return "cached" if self.is_done() else "left"


def plan_study(
    models: Sequence[str],
    datasets: Sequence["DatasetSpec | dict | str"],
    *,
    n_pairs: int | None = None,
    repetitions: int | None = None,
    seeds: Sequence[int] | None = None,
    caption_policy: str | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    batch_size: int = 32,
    max_length: int | None = None,
) -> list[Job]:
    """Every (model, dataset, seed) job of a study, model by model, with its cache file.

    Parameters
    ----------
    models : sequence of str
        Model names as understood by :func:`prh_lib.models.load_model`; a paper VLM named without a tower
        (``"openai/clip-vit-large-patch14"``, or its stand-in) plans both towers.
    datasets : sequence of DatasetSpec, dict or str
        Dataset specs; a string names one of :data:`prh_lib.data.paper.DATASETS`.
    n_pairs, repetitions, caption_policy : optional
        Override every dataset's value.
    seeds : sequence of int, optional
        Explicit seeds for every dataset (overrides repetitions).
    device, dtype, batch_size, max_length
        Extraction options (``batch_size`` is the first try; it is halved on CUDA out-of-memory).

    Returns
    -------
    list of Job
        Ordered by model, then dataset, then seed. Loading each dataset once is part of planning: the
        cache key hashes the sampled pairs.

    Raises
    ------
    ValueError
        If no model or dataset is given, or a dataset spec is invalid.
    prh_lib.data.DataError
        If a dataset cannot be loaded (the message says how to provide it).
    """
    if not models:
        raise ValueError("plan_study needs at least one model")
    if not datasets:
        raise ValueError("plan_study needs at least one dataset")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    specs = []
    for d in datasets:
        s = DatasetSpec.coerce(d)
        over = {}
        if n_pairs is not None:
            over["n_pairs"] = n_pairs
        if repetitions is not None:
            over["repetitions"] = repetitions
        if caption_policy is not None:
            over["caption_policy"] = caption_policy
        specs.append(replace(s, **over) if over else s)
    # the draws the notebooks will read (one draw only where the dataset allows no other, e.g. WIT-1024)
    seed_lists = {s: tuple(seeds) if seeds is not None else tuple(d.seed for d in study_draws([s])) for s in specs}
    idents: dict[str, str] = {}
    jobs = []
    for model in dict.fromkeys(t for m in models for t in paper.expand_towers(m)):
        for spec in specs:
            for seed in seed_lists[spec]:
                pairs = study_pairs(spec, seed)
                cache_file, note = None, idents.get(model, "")
                if not note:
                    try:
                        cache_file = str(extract.features_path(model, pairs, dtype=dtype, max_length=max_length))
                    except Exception as err:  # unresolvable model: plan it anyway, the worker reports the error
                        note = idents[model] = f"{type(err).__name__}: {err}"
                jobs.append(Job(model, spec, seed, device=device, dtype=dtype, batch_size=batch_size,
                                max_length=max_length, cache_file=cache_file, note=note))
    return jobs


def plan_table(jobs: Sequence[Job]):
    """Cached / planned jobs per model (rows) and dataset (columns), as a ``pandas.DataFrame`` of strings.

    A cell reads ``"3/5"`` (3 of 5 repetitions cached); ``"?"`` marks jobs whose cache file is unknown."""
    import pandas as pd

    cells: dict[str, dict[str, list[int]]] = OrderedDict()
    unknown: dict[tuple[str, str], bool] = {}
    for job in jobs:
        row = cells.setdefault(job.model, OrderedDict())
        done_total = row.setdefault(job.dataset.name, [0, 0])
        status = job.status()
        done_total[0] += status == "cached"
        done_total[1] += 1
        if status == "unknown":
            unknown[(job.model, job.dataset.name)] = True
    table = pd.DataFrame({
        m: {d: f"{c}/{t}" + ("?" if unknown.get((m, d)) else "") for d, (c, t) in row.items()}
        for m, row in cells.items()
    }).T.fillna("-")
    table.index.name = "model"
    return table


def describe_plan(jobs: Sequence[Job]) -> str:
    """A printable summary: the table of :func:`plan_table` and the counts of cached and left jobs."""
    import pandas as pd

    counts = {s: sum(j.status() == s for j in jobs) for s in ("cached", "left", "unknown")}
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 60):
        text = plan_table(jobs).to_string()
    lines = [text, "", f"{len(jobs)} jobs: {counts['cached']} cached, {counts['left']} left"
             + (f", {counts['unknown']} unknown (model not resolvable now)" if counts["unknown"] else "")]
    notes = dict.fromkeys(f"  {j.model}: {j.note}" for j in jobs if j.note)
    if notes:
        lines += ["unresolved models:", *notes]
    return "\n".join(lines)


def study_from_profile(params: dict) -> tuple[list[str], list[DatasetSpec], dict]:
    """Models, dataset specs and extraction options of a notebook parameter set.

    Models: ``vision_models`` + ``language_models`` + ``embedding_models`` + ``vlm_models`` when present, else every
    model in ``comparisons``. Datasets: ``datasets`` (the notebooks' study parameter) or ``study_datasets`` when
    present, else the notebook's own dataset parameters (``dataset_source``, ``data_location``, ``n_pairs``, ``seed``,
    ``caption_policy``) as one dataset with one repetition, so the files are the ones the notebook will read."""
    models = [m for key in ("vision_models", "language_models", "embedding_models", "vlm_models")
              for m in params.get(key) or []]
    if not models:
        models = [m for pair in params.get("comparisons") or [] for m in pair]
    if params.get("datasets") or params.get("study_datasets"):
        specs = [DatasetSpec.coerce(d) for d in (params.get("datasets") or params["study_datasets"])]
        n_draws = params.get("n_draws")
        datasets = [replace(s, repetitions=int(n_draws)) if n_draws else s for s in specs]
    else:
        source = params.get("dataset_source", "coco-folder")
        datasets = [DatasetSpec(name=source, source=source, location=params.get("data_location"),
                                n_pairs=params.get("n_pairs"), repetitions=1, first_seed=int(params.get("seed", 0)),
                                caption_policy=params.get("caption_policy", "first"))]
    options = {k: params[k] for k in ("device", "dtype", "batch_size") if k in params}
    return list(dict.fromkeys(models)), datasets, options
