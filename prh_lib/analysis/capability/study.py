"""The computation of the capability chapter (Herbst et al., Section 3.2, App. D): scores, correlations, the study.

The study over datasets x draws (:func:`study_sets`, :func:`study_alignment`, :func:`capability_rows`). Re-exported
by :mod:`prh_lib.pages.sec3_2_capability`, which holds the page: summaries and correlations over draws, findings and
records.

References
----------
Herbst, Roschmann, Bouniot, Akata. "Where Does Alignment Emerge and What Does It Mean? A Closer Look at
the Platonic Representation Hypothesis", Section 3.2, Figures 3 and 4, Appendix D.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from prh_lib import data, extract, lm
from prh_lib.data.benchmarks import BENCHMARKS
from prh_lib.analysis.core import clip_features, score_pair


# -- the study: independently trained language models over datasets x draws, from the results table ------

#: Quantities this chapter writes to the results table (column ``quantity``).
QUANTITIES = ("peak", "final", "bpb", "next_token_accuracy")
#: Capability measures of the offline study (from bits_per_byte), and their direction: -1 = lower is better.
OFFLINE_CAPABILITY = {"bpb": -1, "next_token_accuracy": +1}
#: The paper's benchmarks (higher is better).
BENCHMARK_DIRECTION = {b: +1 for b in BENCHMARKS}


@dataclass(frozen=True)
class StudySets:
    """The pair sets that features are extracted on, and where each draw's pairs sit in them.

    Features are extracted once per *parent* set (every image of a dataset with the draw's caption
    choice) and each draw takes its rows, so seeded subsets share one cache entry instead of one per seed.

    Attributes
    ----------
    parents : tuple of Pairs
    cells : tuple of (Draw, int, tuple of int)
        Each draw, the index of its parent in ``parents`` and its rows there (in the draw's order).
    """

    parents: tuple
    cells: tuple

    def parent_ids(self, datasets: Sequence[str] | None = None) -> list[int]:
        """Indices of the parents used by the draws of ``datasets`` (default all), in order."""
        ids = [pid for d, pid, _ in self.cells if datasets is None or d.dataset in datasets]
        return list(dict.fromkeys(ids))


def study_sets(datasets, draws) -> StudySets:
    """:class:`StudySets` for the draws of :func:`prh_lib.data.study_draws`.

    The parent of a seeded draw is the whole dataset (only the images some draw uses, when that is fewer
    than half of them), with the spec's caption policy; of a caption draw, the same images with that draw's
    caption (``caption_policy="nth"``). A draw whose texts are not the
    parent's on its rows (e.g. ``caption_policy="random"``) is its own parent.

    Parameters
    ----------
    datasets : sequence of DatasetSpec, dict or str
        The specs the draws were made from.
    draws : sequence of Draw

    Raises
    ------
    ValueError
        If a draw names a dataset that is not in ``datasets``.
    """
    from prh_lib.data import study

    specs = {s.name: s for s in (study.DatasetSpec.coerce(d) for d in datasets)}
    parents: list = []
    keys: dict = {}
    cells = []
    used: dict[str, set] = {}
    for d in draws:
        used.setdefault(d.dataset, set()).update(d.pairs.sample_ids)
    for d in draws:
        if d.dataset not in specs:
            raise ValueError(f"draw of dataset {d.dataset!r}, which is not among the specs {sorted(specs)}")
        spec = specs[d.dataset]
        ds = study.load_spec_dataset(spec)
        if spec.draws == "captions":
            parent = data.sample_pairs(ds, n=None, caption_policy="nth", caption_index=d.seed - spec.first_seed)
        else:
            parent = data.sample_pairs(ds, n=None, caption_policy=spec.caption_policy, n_captions=spec.n_captions)
        if 2 * len(used[d.dataset]) < len(parent):  # few images used: extract only those (else the whole
            # set, whose features other chapters share)
            parent = parent.subset([i for i, sid in enumerate(parent.sample_ids) if sid in used[d.dataset]])
        row_of = {sid: i for i, sid in enumerate(parent.sample_ids)}
        rows = tuple(row_of.get(sid, -1) for sid in d.pairs.sample_ids)
        if -1 in rows or any(parent.texts[i] != t for i, t in zip(rows, d.pairs.texts)):
            parent, rows = d.pairs, tuple(range(len(d.pairs)))
        key = (parent.dataset, parent.text_fingerprint(), parent.image_fingerprint())
        if key not in keys:
            keys[key] = len(parents)
            parents.append(parent)
        cells.append((d, keys[key], rows))
    return StudySets(tuple(parents), tuple(cells))


def heldout_texts(datasets, draws, *, per_image: int = 1, max_texts: int | None = None,
                  text_dataset=None) -> tuple[list[str], str]:
    """Held-out text for bits per byte: captions that no draw of the study aligns.

    Without ``text_dataset``: :func:`prh_lib.lm.study_heldout` on the study's own datasets (unused captions,
    possibly of aligned images; ``"heldout"``, or ``"aligned"`` when every caption is used). With it (a dataset
    spec, e.g. the text-only COCO val2017 captions, ``{"name": "coco-val2017-captions", "source":
    "coco-captions-text"}``): captions of *images* that no draw aligns, ``per_image`` each in dataset order, at
    most ``max_texts`` (:func:`prh_lib.data.heldout_texts`); the source is ``"heldout-images"``. Images are
    matched by sample id (COCO image ids for COCO sources), so an aligned image never lends its captions.

    Raises
    ------
    ValueError
        As :func:`prh_lib.lm.study_heldout` / :func:`prh_lib.data.heldout_texts` (no image left, bad counts).
    """
    from prh_lib.data.text_only import heldout_texts as image_heldout
    from prh_lib.data import study

    if text_dataset is None:
        loaded = [study.load_spec_dataset(study.DatasetSpec.coerce(d)) for d in datasets]
        return lm.study_heldout(loaded, draws, per_image=per_image, max_texts=max_texts)
    source = study.load_spec_dataset(study.DatasetSpec.coerce({"n_pairs": None, **dict(text_dataset)})
                                     if isinstance(text_dataset, dict) else study.DatasetSpec.coerce(text_dataset))
    used = {str(s) for d in draws for s in d.pairs.sample_ids}
    texts = image_heldout(source, exclude=used & set(source.sample_ids), per_image=per_image, max_texts=max_texts)
    return texts, "heldout-images"


def paper_setting(datasets, language_models: Sequence[str], *, min_models: int = 15) -> bool:
    """Whether a run is in the paper's setting: DOCCI among the datasets at N = 1024, and at least
    ``min_models`` language models (the paper has 21), so that its r values compare with ours."""
    from prh_lib.data import study

    specs = [study.DatasetSpec.coerce(d) for d in datasets]
    return any(s.name == "docci" and s.n_pairs == 1024 for s in specs) and len(language_models) >= min_models


def vision_features(names: Sequence[str], sets: StudySets, **options) -> dict:
    """Features of each vision model on each parent set: ``{name: tuple of LayerFeatures}`` (cached, quiet).

    ``options`` go to :func:`prh_lib.extract.get_features` (``device``, ``dtype``, ``batch_size``).
    """
    with lm.quiet(not options.get("progress", False)):
        per_parent = [{m: extract.get_features(m, p, **options) for m in names} for p in sets.parents]
    return {name: tuple(f[name] for f in per_parent) for name in names}


class DegenerateLayers:
    """Collects the degenerate-layer warnings of scoring, to explain them in one sentence instead.

    A degenerate layer (every sample the same vector, e.g. a ViT's CLS token at its embedding output) has
    undefined scores (NaN) and is left out of the peak. ``with DegenerateLayers() as dl:`` records the
    :class:`RuntimeWarning` s that say so (other warnings pass through); ``dl.add_model(name)`` labels the
    ones recorded since the last call; :meth:`sentence` is the page's one line.
    """

    def __init__(self):
        self.found: dict[str, set] = {}
        self._cm = None

    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings(record=True)
        self._log = self._cm.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        import warnings

        log = list(self._log)
        self._cm.__exit__(*exc)
        for w in log:
            if not (issubclass(w.category, RuntimeWarning) and "degenerate" in str(w.message)):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return False

    def add_model(self, x: str, y: str, x_labels=(), y_labels=()) -> None:
        """Attribute the degenerate warnings recorded so far to the pair (x, y) (X is x, Y is y)."""
        import re

        for w in list(self._log):
            msg = str(w.message)
            if "degenerate" not in msg:
                continue
            who = x if ": X is" in msg else y if ": Y is" in msg else None
            labels = x_labels if who == x else y_labels
            idx = [int(i) for i in re.findall(r"\d+", msg.split("in layers", 1)[-1].split(";")[0])]
            if who is not None:
                self.found.setdefault(who, set()).update(labels[i] if i < len(labels) else str(i) for i in idx)
        self._log.clear()

    def sentence(self) -> str:
        """One Markdown sentence naming the degenerate layers (empty when there were none)."""
        if not self.found:
            return ""
        parts = "; ".join(f"{m}: {', '.join(sorted(ls))}" for m, ls in self.found.items())
        return (f"Degenerate layers ({parts}) give the same vector for every sample (e.g. a ViT's CLS token at "
                "its embedding output, before any attention), so their scores are undefined and left out of "
                "the peak.")


def _depth(i: int, n: int) -> float:
    return float(i) / (n - 1) if n > 1 else 1.0


def study_alignment(sets: StudySets, vision: dict, independent, *, ladder=(), ladder_parents: Sequence[int] = (),
                    k: int = 10, clip_q: float | None = 0.95, n_permutations: int = 200, alpha: float = 0.05,
                    seed: int = 0, device=None) -> pd.DataFrame:
    """Mutual k-NN of every vision model with every language model on every draw: rows for the results table.

    For each draw, the vision and language features are restricted to the draw's rows, clipped there
    (:func:`prh_lib.analysis.clip_features`) and scored over all layer pairs (:func:`score_pair`). The
    independently trained models get the selection-aware permutation null (calibrated peak, and the final
    pair against its own null); the ladder points (dependent points on one path in weight space) are
    scored raw only, since no p-value is claimed for them.

    Parameters
    ----------
    sets : StudySets
    vision : dict of str to tuple of LayerFeatures
        One per parent (:func:`vision_features`).
    independent : sequence of LanguageModelResult
        ``features`` a tuple over ``sets.parents`` (:func:`prh_lib.lm.pretrained_models` with
        ``pairs=list(sets.parents)``).
    ladder : sequence of LanguageModelResult
        ``features`` a tuple over ``ladder_parents``; only draws whose parent is among them are scored.
    k, clip_q, n_permutations, alpha, seed, device
        As in :func:`score_pair`; ``seed`` seeds the permutations of every draw alike.

    Returns
    -------
    DataFrame
        Two rows (``quantity`` ``"peak"`` and ``"final"``) per (draw, vision, language model) with the
        columns of :mod:`prh_lib.results` (``dataset``, ``draw``, ``seed``, ``n``, ``k``, ``metric``,
        ``model_x`` = vision, ``model_y`` = language, layers and relative depths, ``score``, ``calibrated``,
        ``tau``, ``p``, ``preprocessing``) plus ``family`` (``"independent"`` or ``"ladder"``) and
        ``fraction`` (the ladder's t; NaN otherwise).

    References
    ----------
    Herbst et al., Section 3.2; Gröger et al. (2026), Sec. 5 (calibration).
    """
    ladder_pos = {pid: i for i, pid in enumerate(ladder_parents)}
    prep = f"clip_outliers(q={clip_q})" if clip_q is not None else "none"
    rows = []
    degenerate = DegenerateLayers()
    with degenerate:
        _score_cells(sets, vision, independent, ladder, ladder_pos, rows, degenerate, k=k, clip_q=clip_q,
                     n_permutations=n_permutations, alpha=alpha, seed=seed, device=device, prep=prep)
    out = pd.DataFrame(rows)
    out.attrs["degenerate"] = degenerate.sentence()
    return out


def _score_cells(sets, vision, independent, ladder, ladder_pos, rows, degenerate, *, k, clip_q, n_permutations,
                 alpha, seed, device, prep):
    for d, pid, idx in sets.cells:
        entries = [(r, "independent", r.features[pid], n_permutations) for r in independent]
        if pid in ladder_pos:
            entries += [(r, "ladder", r.features[ladder_pos[pid]], 0) for r in ladder]
        vis = {v: clip_features(f[pid].rows(idx), q=clip_q) for v, f in vision.items()}
        for res, family, feats, n_perm in entries:
            lang = clip_features(feats.rows(idx), q=clip_q)
            for v_name, v in vis.items():
                scored = score_pair(v, lang, k=k, n_permutations=n_perm, alpha=alpha, n_boot=0, seed=seed,
                                    control=False, device=device)
                m, cal = scored.matrix, scored.calibration
                degenerate.add_model(v_name, res.label, m.x_labels, m.y_labels)
                i, j, best = m.peak
                nx, ny = len(m.x_labels), len(m.y_labels)
                common = {"dataset": d.dataset, "draw": d.draw, "seed": d.seed, "n": len(idx), "k": k,
                          "metric": "mutual_knn", "model_x": v_name, "model_y": res.label, "preprocessing": prep,
                          "family": family, "fraction": np.nan if res.fraction is None else float(res.fraction)}
                rows.append(common | {
                    "quantity": "peak", "layer_x": m.x_labels[i], "layer_y": m.y_labels[j],
                    "depth_x": _depth(i, nx), "depth_y": _depth(j, ny), "score": float(best),
                    "calibrated": cal.calibrated_max if cal else np.nan, "tau": cal.threshold_max if cal else np.nan,
                    "p": cal.p_max if cal else np.nan})
                rows.append(common | {
                    "quantity": "final", "layer_x": m.x_labels[-1], "layer_y": m.y_labels[-1], "depth_x": 1.0,
                    "depth_y": 1.0, "score": float(m.final),
                    "calibrated": float(cal.calibrated[-1, -1]) if cal else np.nan,
                    "tau": float(cal.threshold[-1, -1]) if cal else np.nan,
                    "p": float(cal.p_value[-1, -1]) if cal else np.nan})


def capability_rows(language, *, texts: str, dataset: str = "held-out captions") -> pd.DataFrame:
    """Bits per byte and next-token accuracy of each language model: rows for the results table.

    Parameters
    ----------
    language : sequence of LanguageModelResult
    texts : str
        Which texts were scored (``"heldout"`` or ``"aligned"``), stored with each row.
    dataset : str
        The ``dataset`` label of the rows (one "draw": the capability texts are fixed).

    Returns
    -------
    DataFrame
        Per model two rows, ``quantity`` ``"bpb"`` (metric ``bits_per_byte``) and ``"next_token_accuracy"``, ``model_x``
        the model, ``n`` the texts scored, ``draw`` 0, ``family``, ``fraction``, ``texts``, ``bytes``, ``tokens``.
    """
    rows = []
    for r in language:
        family = "ladder" if r.fraction is not None else "independent"
        common = {"dataset": dataset, "draw": 0, "model_x": r.label, "n": len(r.bpb.n_bytes), "family": family,
                  "fraction": np.nan if r.fraction is None else float(r.fraction), "texts": texts,
                  "bytes": int(r.bpb.n_bytes.sum()), "tokens": int(r.bpb.n_tokens)}
        rows.append(common | {"quantity": "bpb", "metric": "bits_per_byte", "score": float(r.bpb.bpb)})
        rows.append(common | {"quantity": "next_token_accuracy", "metric": "next_token_accuracy",
                              "score": float(r.bpb.accuracy)})
    return pd.DataFrame(rows)

