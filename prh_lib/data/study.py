"""The study's shape: datasets, and the repeated draws of pairs from each.

The paper never reports a single draw: every score is a mean ± std over 5 independent draws of N = 1024 pairs per
dataset, except WIT-1024, one fixed set of 1024 pairs (one run; Herbst et al., Sec. 2 and 3.2). A :class:`DatasetSpec`
says where a dataset comes from and how its draws are made; :func:`study_draws` returns every :class:`Draw` (its pairs,
seed and whether it is a real repetition).

Three kinds of draw (``DatasetSpec.draws``):

``"seeds"``
    Draw r samples ``n_pairs`` images with seed ``first_seed + r`` (the paper's protocol). When ``n_pairs`` is None or
    equals the dataset size every seed gives the same pairs, so only one draw is made and it is marked not repeatable.
``"captions"``
    The same images in every draw (sampled once with ``first_seed``); draw r pairs every image with its r-th human
    caption (``caption_policy="nth"``), so the variance over draws is over caption choice with the images fixed.
``"disjoint"``
    Pairwise disjoint draws: one permutation with ``first_seed``, draw r is its r-th block of ``n_pairs`` images
    (:func:`prh_lib.data.text_only.disjoint_pairs`); ``n_pairs * repetitions`` must fit in the dataset, and the images
    left over are in no draw (held-out text).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from prh_lib.data.pairs import ImageCaptionDataset, Pairs, sample_pairs
from prh_lib.data.sources import SOURCES, load_dataset
from prh_lib.data.text_only import check_disjoint, disjoint_pairs

DRAW_KINDS = ("seeds", "captions", "disjoint")


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset of the study: where it comes from and which pairs are drawn from it.

    Attributes
    ----------
    name : str
        Label in plans, tables and figures (e.g. ``"coco"``, ``"coco-mini, 5 captions"``).
    source : str
        A name in :data:`prh_lib.data.SOURCES`.
    location : str, optional
        Hub id or local path handed to the source (None: the source's default).
    options : tuple of (str, value)
        Extra keyword options of the source, sorted by name.
    n_pairs : int, optional
        Pairs per draw (None: every image in dataset order).
    repetitions : int
        Number of draws, >= 1.
    first_seed : int
        Draw r uses seed ``first_seed + r``.
    caption_policy, n_captions
        As in :func:`prh_lib.data.sample_pairs` (with ``draws="seeds"``).
    draws : {"seeds", "captions", "disjoint"}
        What varies between draws (module docstring).
    """

    name: str
    source: str = "coco-folder"
    location: str | None = None
    options: tuple = ()
    n_pairs: int | None = 1024
    repetitions: int = 1
    first_seed: int = 0
    caption_policy: str = "first"
    n_captions: int = 1
    draws: str = "seeds"

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"dataset {self.name!r}: unknown source {self.source!r}; known: {sorted(SOURCES)}")
        if int(self.repetitions) < 1:
            raise ValueError(f"dataset {self.name!r}: repetitions must be >= 1, got {self.repetitions}")
        if self.draws not in DRAW_KINDS:
            raise ValueError(f"dataset {self.name!r}: unknown draws {self.draws!r}; use one of {DRAW_KINDS}")
        if self.draws == "disjoint" and self.n_pairs is None:
            raise ValueError(f"dataset {self.name!r}: draws='disjoint' needs n_pairs (images per draw)")
        if self.draws == "captions" and self.caption_policy not in ("first", "nth"):
            raise ValueError(f"dataset {self.name!r}: draws='captions' pairs each image with one caption per draw; "
                             f"caption_policy={self.caption_policy!r} does not apply")

    @property
    def seeds(self) -> tuple[int, ...]:
        """The seeds of the draws, ``first_seed + r`` for r < repetitions."""
        return tuple(range(self.first_seed, self.first_seed + int(self.repetitions)))

    @classmethod
    def coerce(cls, spec: "DatasetSpec | dict | str") -> "DatasetSpec":
        """A spec from a :class:`DatasetSpec`, a dict (as in :data:`prh_lib.data.paper.DATASETS`) or a paper dataset name.

        Raises
        ------
        ValueError
            If a dict carries a key that is not a field (the message lists the valid ones; ``notes`` is
            ignored), or the spec is invalid.
        TypeError
            If ``spec`` is none of the three.
        """
        if isinstance(spec, DatasetSpec):
            return spec
        if isinstance(spec, str):
            from prh_lib.data import paper

            spec = paper.dataset_info(spec)
        if not isinstance(spec, dict):
            raise TypeError(f"a dataset spec is a DatasetSpec, dict or name, got {type(spec).__name__}")
        unknown = sorted(set(spec) - set(cls.__dataclass_fields__) - {"notes"})
        if unknown:
            raise ValueError(f"dataset spec {spec.get('name', spec)!r}: unknown keys {unknown}; valid keys: "
                             f"{sorted(cls.__dataclass_fields__)}")
        fields = {k: v for k, v in spec.items() if k in cls.__dataclass_fields__}
        opts = fields.get("options") or {}
        fields["options"] = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in dict(opts).items()))
        if fields.get("location") is not None:
            fields["location"] = str(fields["location"])
        return cls(**fields)


@dataclass(frozen=True)
class Draw:
    """One draw of pairs from one dataset.

    Attributes
    ----------
    dataset : str
        The spec's name.
    draw : int
        0-based index of the draw within its dataset.
    seed : int
    pairs : Pairs
    repeatable : bool
        False when the dataset allows only one distinct draw (a fixed set such as WIT-1024, or N equal to the whole set
        with ``draws="seeds"``); its std over draws is then undefined, not zero.
    what_varies : str
        In words, what differs between this dataset's draws.
    """

    dataset: str
    draw: int
    seed: int
    pairs: Pairs = field(repr=False)
    repeatable: bool = True
    what_varies: str = ""


@functools.lru_cache(maxsize=8)
def _load(source: str, location: str | None, options: tuple) -> ImageCaptionDataset:
    return load_dataset(source, location, **dict(options))


def load_spec_dataset(spec: DatasetSpec) -> ImageCaptionDataset:
    """The dataset of a spec (loaded once per process)."""
    return _load(spec.source, spec.location, spec.options)


@functools.lru_cache(maxsize=64)
def study_pairs(spec: DatasetSpec, seed: int) -> Pairs:
    """The pairs of the draw with ``seed`` (memoised; the same call ``prh-batch`` makes for its jobs).

    Raises
    ------
    DataError
        If the dataset cannot be read; ValueError if the draw does not exist (e.g. a caption index beyond
        the captions every image has).
    """
    dataset = load_spec_dataset(spec)
    if spec.draws == "disjoint":
        return disjoint_pairs(dataset, n=int(spec.n_pairs), draw=int(seed) - spec.first_seed,
                              n_draws=int(spec.repetitions), seed=spec.first_seed, caption_policy=spec.caption_policy)
    if spec.draws == "captions":
        return sample_pairs(dataset, n=spec.n_pairs, seed=spec.first_seed, caption_policy="nth",
                            caption_index=int(seed) - spec.first_seed)
    return sample_pairs(dataset, n=spec.n_pairs, seed=seed, caption_policy=spec.caption_policy,
                        n_captions=spec.n_captions)


def study_draws(datasets, *, n_draws: int | None = None) -> list[Draw]:
    """Every draw of every dataset, dataset by dataset.

    Parameters
    ----------
    datasets : sequence of DatasetSpec, dict or str
        The study's datasets (coerced with :meth:`DatasetSpec.coerce`); names must be unique.
    n_draws : int, optional
        Draws per dataset, overriding each spec's ``repetitions`` (a dataset that allows one draw still gets one).

    Returns
    -------
    list of Draw

    Raises
    ------
    ValueError
        If ``datasets`` is empty, two specs share a name, ``n_draws < 1``, or ``draws="captions"`` asks for more draws
        than every image has captions.
    DataError
        If a dataset cannot be read.
    """
    specs = [DatasetSpec.coerce(d) for d in (datasets or [])]
    if not specs:
        raise ValueError("no datasets given: pass a list of dataset specs (dicts with name, source, ...)")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"dataset names must be unique, got {names}")
    if n_draws is not None and int(n_draws) < 1:
        raise ValueError(f"n_draws must be >= 1, got {n_draws}")
    out = []
    for spec in specs:
        dataset = load_spec_dataset(spec)
        count = int(n_draws) if n_draws is not None else int(spec.repetitions)
        if spec.draws == "captions":
            rows = len(dataset) if spec.n_pairs is None else int(spec.n_pairs)
            min_caps = min(len(c) for c in dataset.captions)
            if count > min_caps:
                raise ValueError(f"dataset {spec.name!r}: {count} caption draws asked for, but some images have "
                                 f"only {min_caps} captions")
            varies = f"caption choice (draw r pairs each of the same {rows} images with its r-th caption)"
            repeatable = count > 1
        elif spec.draws == "disjoint":
            # the partition is fixed by `repetitions`; n_draws takes its first draws (never more)
            if count > int(spec.repetitions):
                raise ValueError(f"dataset {spec.name!r}: draws='disjoint' has repetitions={spec.repetitions} "
                                 f"disjoint draws; n_draws={n_draws} asks for more")
            check_disjoint(dataset, int(spec.n_pairs), int(spec.repetitions))
            varies = (f"the images (N = {spec.n_pairs} each, {count} disjoint draws of {len(dataset)} images, "
                      f"permutation seed {spec.first_seed})")
            repeatable = count > 1
        elif spec.draws == "seeds" and (spec.n_pairs is None or int(spec.n_pairs) >= len(dataset)):
            count, repeatable = 1, False
            varies = f"nothing: N = {len(dataset)} is the whole set, so every draw would be the same pairs"
        else:
            varies = f"the sample (N = {spec.n_pairs} of {len(dataset)} images, seeds {spec.first_seed}...)"
            repeatable = count > 1
        for r in range(count):
            seed = spec.first_seed + r
            out.append(Draw(spec.name, r, seed, study_pairs(spec, seed), repeatable, varies))
    return out


#: The paper's own dataset at N = 1024 whose verdicts the chapters read when it is in the study (Herbst et al., Sec. 3:
#: COCO is the dataset of every one-dataset figure).
PAPER_HEADLINE = "coco"


def headline_dataset(draws: "list[Draw]") -> str:
    """The dataset whose numbers a chapter's verdicts read.

    The paper's COCO when in the study; else the dataset with the most pairs per draw, so a claim about N = 1024 is read
    at the N closest to it (offline: ``flickr8k-1k``, N = 1,000, not ``coco-mini``, N = 239); ties go to the first
    listed. Text-only datasets are passed over while any dataset has images.

    Parameters
    ----------
    draws : list of Draw
        The study's draws (:func:`study_draws`), at least one.

    Raises
    ------
    ValueError
        If ``draws`` is empty.
    """
    if not draws:
        raise ValueError("headline_dataset needs at least one draw")
    from prh_lib.data.text_only import is_text_only

    with_images = [d for d in draws if not (hasattr(d.pairs, "images") and is_text_only(d.pairs))]
    draws = with_images or list(draws)  # a text-only dataset is never the headline while one has images
    names = list(dict.fromkeys(d.dataset for d in draws))
    if PAPER_HEADLINE in names:
        return PAPER_HEADLINE
    size = {name: max(len(d.pairs) for d in draws if d.dataset == name) for name in names}
    return max(names, key=lambda name: (size[name], -names.index(name)))
