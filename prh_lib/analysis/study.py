"""The one study loop of every chapter: datasets x draws x comparisons -> features -> scores -> results rows.

Each chapter's ``run_study`` is a call of :func:`run_draws` with the chapter's scorer of one draw.
"""

from __future__ import annotations

import threading

from prh_lib import results
from prh_lib.analysis.core import prefetch_features, prepare_features
from prh_lib.extract import torch_threads
from prh_lib.metrics._parallel import map_threads


def run_draws(draws, comparisons, score, *, chapter: str, params: dict, clip_q: float | None = 0.95,
              clip: str | None = "stack", device: str = "cpu", dtype: str = "float32", batch_size: int = 32,
              models=(), prefetch: bool = True, workers: int | None = None, num_threads: int | None = None,
              then=None, write: bool = True, n_from_draw: bool = True, root=None, **columns) -> dict:
    """Score every draw with ``score`` and write each draw's rows to the results table.

    Parameters
    ----------
    draws : sequence of prh_lib.data.study.Draw
        From :func:`prh_lib.data.study.study_draws`.
    comparisons : sequence of (str, str) or of objects with ``x`` and ``y``, or callable
        The model pairs of every draw, or a function of a draw giving that draw's (then the caller extracts:
        ``prefetch=False``).
    score : callable
        ``score(draw, features) -> (result, rows)``: one draw's scores from its features (model name ->
        LayerFeatures) and their results-table rows.
    chapter, params, root
        As in :func:`prh_lib.results.write` (``root``: tests); ``write=False`` writes nothing (tests).
    clip_q, clip, device, dtype, batch_size
        As in :func:`~prh_lib.analysis.core.prepare_features`.
    models : sequence of str or callable
        Further models read on every draw (or a function of a draw giving them), not prefetched.
    prefetch : bool
        Extract every model of ``comparisons`` on every draw first (:func:`~prh_lib.analysis.core.prefetch_features`).
    workers : int, optional
        Draws scored side by side (:func:`prh_lib.metrics._parallel.map_threads`: the same results, warnings and errors), one
        draw's features read at a time, the rows written once every draw is scored (a failing draw leaves no rows of
        this run). None: one draw after another, each draw's rows written as it is scored.
    num_threads : int, optional
        Torch intra-op threads while the loop runs (:func:`prh_lib.extract.torch_threads`); None: unchanged.
    then : callable, optional
        ``then(draw, features)`` after the draw's rows are written (with ``workers``, ``features`` is None).
    n_from_draw, **columns
        Columns of every row: ``n`` = the draw's number of pairs (unless False: the rows carry their own),
        and e.g. ``k``, ``metric``, ``preprocessing``.

    Returns
    -------
    dict
        ``(dataset, draw) -> result``, in draw order.
    """
    if prefetch:
        prefetch_features(comparisons, draws, device=device, dtype=dtype, batch_size=batch_size)
    reading = threading.Lock()
    out = {}

    def read(d):
        with reading:  # one draw's features at a time: caption draws share files (a bad one is re-extracted once)
            return prepare_features(comparisons(d) if callable(comparisons) else comparisons, d.pairs,
                                    models=models(d) if callable(models) else models, clip_q=clip_q, clip=clip,
                                    device=device, dtype=dtype, batch_size=batch_size)

    def finish(d, scored, feats=None):
        out[(d.dataset, d.draw)], rows = scored
        if write:
            results.write(rows, chapter=chapter, params=params, dataset=d.dataset, draw=d.draw, seed=d.seed,
                          root=root, **({"n": len(d.pairs)} if n_from_draw else {}), **columns)
        if then is not None:
            then(d, feats)

    with torch_threads(num_threads):
        if workers is None:
            for d in draws:
                feats = read(d)
                finish(d, score(d, feats), feats)
        else:
            for d, scored in zip(draws, map_threads(lambda d: score(d, read(d)), draws, workers=workers)):
                finish(d, scored)
    return out
