"""The verdicts' held-out estimates under alternative feature and metric choices (computation only).

The book's protocol clips at the 0.95 quantile (per stack), does not centre, and scores mutual k-NN at k = 10
(cosine neighbourhoods: L2 normalisation is the metric's ranking). Each :class:`Alternative` changes one choice,
as a named step (:func:`centred`, :func:`centred_then_clipped`, the metric, ``k``, the clipping), and
:func:`robustness_study` reruns :func:`prh_lib.analysis.heldout.heldout_study` under each, floors treated alike.

References
----------
Herbst et al. (arXiv 2611.12869), Sec. 2 and App. G; Huh et al. (2024), App. A (clipping, normalisation);
Bangachev et al. (arXiv 2605.28870, 2026): centring and normalisation raise cross-model alignment.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Mapping

import pandas as pd

from prh_lib.analysis.controls import TFIDF
from prh_lib.analysis.core import clip_features, prepare_features
from prh_lib.analysis.heldout import QUANTITY, heldout_study, heldout_summary
from prh_lib.metrics.preprocess import center
from prh_lib.stats.selection import half_k, subsample_size

#: The book's protocol: clipping quantile and scope, metric and k of every verdict.
BASELINE = "baseline (the book's protocol)"


def centred(f):
    """``f`` with every layer centred (the mean over samples subtracted; :func:`prh_lib.metrics.center`)."""
    return dataclasses.replace(f, values=center(f.values), meta={**f.meta, "centred": True})


def clipped(f, *, clip: str = "stack", q: float = 0.95):
    """``f`` clipped as :func:`prh_lib.analysis.core.clip_features` clips (``clip``: per stack or per layer); a bag of
    words is returned as it is (the book never clips it)."""
    return f if f.name.startswith(TFIDF) else clip_features(f, q=q, clip=clip)


def centred_then_clipped(f):
    """``f`` centred, then clipped (:func:`clipped`, per stack)."""
    return clipped(centred(f))


@dataclasses.dataclass(frozen=True)
class Alternative:
    """One change to the book's protocol: ``clip_q`` (the clipping of :func:`~prh_lib.analysis.core.prepare_features`,
    per stack, of models and random-init floors; None: none), then ``preprocess`` (``LayerFeatures ->
    LayerFeatures``, on every stack), ``metric`` (any that :func:`~prh_lib.stats.selection.crossfit_peak` takes),
    ``k`` and ``dataset`` (None: the verdicts')."""

    preprocess: Callable | None = None
    clip_q: float | None = 0.95
    metric: str = "mutual_knn"
    k: int = 10
    dataset: str | None = None


#: Every alternative by its name on the page (an explicit registry: the notebook picks names from it).
ALTERNATIVES: dict[str, Alternative] = {
    BASELINE: Alternative(),
    "centred after clipping": Alternative(preprocess=centred),
    "centred before clipping": Alternative(preprocess=centred_then_clipped, clip_q=None),
    "not normalised (inner-product neighbours)": Alternative(metric="mutual_knn_dot"),
    "clipping off": Alternative(clip_q=None),
    "clipping per layer": Alternative(preprocess=functools.partial(clipped, clip="layer"), clip_q=None),
    "CKNNA": Alternative(metric="cknna"),
    "cycle k-NN": Alternative(metric="cycle_knn"),
    "unbiased linear CKA": Alternative(metric="cka_linear_unbiased"),
    "k = 42 (k/N of coco-mini at k = 10)": Alternative(k=42),
    "coco-mini, k = 2 (k/N of flickr8k-1k at k = 10)": Alternative(k=2, dataset="coco-mini"),
}


def robustness_study(draws, comparisons, *, alternatives: Mapping[str, Alternative], dataset: str, chapter: str,
                     params: Mapping, n_splits: int = 10, n_boot: int = 100, seed: int = 0, write: bool = True,
                     root=None, **options) -> pd.DataFrame:
    """:func:`~prh_lib.analysis.heldout.heldout_study` of ``comparisons`` and their floors under each alternative.

    Parameters
    ----------
    draws : sequence of prh_lib.data.study.Draw
        Draws of ``dataset`` and of every other dataset an alternative names.
    comparisons : sequence of (str, str)
    alternatives : mapping of str to Alternative
    dataset : str
        The verdicts' dataset (read by an alternative with ``dataset=None``).
    chapter, params, write, root
        Where the rows go (:func:`prh_lib.results.write`), one part for all alternatives.
    n_splits, n_boot, seed, **options
        As in :func:`~prh_lib.analysis.heldout.heldout_study`, the same for every alternative.

    Returns
    -------
    DataFrame
        :func:`~prh_lib.analysis.heldout.heldout_summary` rows of every alternative, with ``alternative`` and
        ``metric`` columns; none for an alternative whose ``k`` is too large for the halves of its dataset's N.

    Raises
    ------
    ValueError
        If an alternative's dataset has no draws.
    """
    from prh_lib import results as results_table

    frames = []
    for name, a in alternatives.items():
        ds = a.dataset or dataset
        mine = [d for d in draws if d.dataset == ds]
        if not mine:
            raise ValueError(f"alternative {name!r} reads {ds!r}, which has no draws; have "
                             f"{sorted({d.dataset for d in draws})}")
        n = len(mine[0].pairs)
        if half_k(a.k, n, n - n // 2) > min(n // 2 - 1, subsample_size(n) // 2 - 2):
            continue  # k too large for the halves of this N: the page shows the alternative as not run
        frames.append(heldout_study(mine, comparisons, chapter=chapter, params=params, k=a.k, n_splits=n_splits,
                                    n_boot=n_boot, seed=seed, clip_q=a.clip_q, metric=a.metric,
                                    preprocess=a.preprocess, write=False, **options).assign(alternative=name))
    if not frames:  # every k too large for these N (a rehearsal's tiny datasets): nothing to read
        return pd.DataFrame(columns=["alternative", "metric", "quantity", "regime"])
    out = pd.concat(frames, ignore_index=True)
    if write:
        results_table.write(out, chapter=chapter, params=params, draw=0, seed=seed, root=root)
    return heldout_summary(out).assign(alternative=out["alternative"].to_numpy(), metric=out["metric"].to_numpy())


#: The PCA claims' spaces (:func:`prh_lib.analysis.compression.study.pca_sweep`): the book's, and centred.
PCA_SPACES = {BASELINE: "original", "centred after clipping": "pca"}


def pca_study(draw, held: pd.DataFrame, *, k: int = 10, n_boot: int = 100, seed: int = 0, **options) -> pd.DataFrame:
    """The PCA claims' relative scores of each cross-modal pair at its held-out peak layer pair, in each of
    :data:`PCA_SPACES`: :func:`~prh_lib.analysis.compression.study.relative_intervals` of the language side
    compressed (40 % of its variance, the paper's share of rank, 8 dimensions), with paired intervals over images.

    Parameters
    ----------
    draw : prh_lib.data.study.Draw
        A draw of the verdicts' dataset.
    held : DataFrame
        :func:`robustness_study` rows under :data:`BASELINE` (their modal held-out layer pairs are compressed).
    k, n_boot, seed, **options
        As in :func:`~prh_lib.analysis.compression.study.relative_intervals`; the features' ``device``, ``dtype``...

    Returns
    -------
    DataFrame
        One row per pair, space and probe: ``pair``, ``alternative``, ``space``, ``probe``, ``n_components``,
        ``relative``, ``low``, ``high``.
    """
    from prh_lib.analysis.compression.study import _cached_intervals  # the PCA page's cached intervals

    cross = held[(held["quantity"] == QUANTITY) & (held["regime"] == "cross-modal")] if len(held) else held
    if cross.empty:
        return pd.DataFrame(columns=["pair", "alternative", "space", "probe", "n_components", "relative", "low",
                                     "high"])
    feats = prepare_features(list(zip(cross["model_x"], cross["model_y"])), draw.pairs, **options)
    rows = []
    for _, r in cross.iterrows():
        fx, fy = feats[r["model_x"]], feats[r["model_y"]]
        side = "y" if fy.meta.get("modality") == "language" else "x"
        for alt, space in PCA_SPACES.items():
            rows += [{"pair": r["pair"], "alternative": alt, "space": space, **v} for v in _cached_intervals(
                fx.layer(r["layer_x"]), fy.layer(r["layer_y"]), side, k, n_boot, seed, space)]
    return pd.DataFrame(rows)
