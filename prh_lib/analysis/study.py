"""The one study loop of every chapter: datasets x draws x comparisons -> features -> scores -> results rows.

:func:`run_draws` extracts every model on every draw first (:func:`~prh_lib.analysis.core.prefetch_features`),
then per draw reads the clipped features (:func:`~prh_lib.analysis.core.prepare_features`), calls the chapter's
scorer and writes the rows it returns (:func:`prh_lib.results.write`). Each chapter's ``run_study`` is that call
with its own scorer.
"""

from __future__ import annotations

import threading

from prh_lib.analysis.core import prefetch_features, prepare_features
from prh_lib.extract import torch_threads
from prh_lib.parallel import map_threads


def run_draws(draws, comparisons, score, *, chapter: str, params: dict, clip_q: float | None = 0.95,
              clip: str | None = "stack", device: str = "cpu", dtype: str = "float32", batch_size: int = 32,
              models=(), prefetch: bool = True, workers: int | None = None, num_threads: int | None = None,
              write: bool = True, n_from_draw: bool = True, root=None, **columns) -> dict:
    """Score every draw with ``score`` and write each draw's rows to the results table.

    Parameters
    ----------
    draws : sequence of prh_lib.data.study.Draw
        From :func:`prh_lib.data.study.study_draws`.
    comparisons : sequence of (str, str) or of objects with ``x`` and ``y``, or callable
        The model pairs of every draw, or a function of a draw giving that draw's (then ``prefetch=False``:
        the caller extracts).
    score : callable
        ``score(draw, features) -> (result, rows)``: one draw's scores from its features (model name ->
        LayerFeatures) and their results-table rows.
    chapter, params : str, dict
        As in :func:`prh_lib.results.write`.
    clip_q, clip, device, dtype, batch_size
        As in :func:`~prh_lib.analysis.core.prepare_features`.
    models : sequence of str or callable
        Further models of every draw (or a function of a draw giving them), read but not prefetched.
    prefetch : bool
        Extract every model of ``comparisons`` on every draw before the loop (False: the caller has).
    workers : int, optional
        Draws scored side by side (:func:`prh_lib.parallel.map_threads`: the same results, warnings and
        errors), one draw's features read at a time, and the rows written once every draw is scored, so a
        failing draw leaves no rows of this run. None: one draw after another, each draw's rows written as
        it is scored.
    num_threads : int, optional
        Torch intra-op threads while the loop runs (:func:`prh_lib.extract.torch_threads`); None: unchanged.
    write : bool
        Write the rows; False only for tests.
    n_from_draw : bool
        Write ``n`` = the draw's number of pairs on every row (False where the rows carry their own ``n``).
    root : path, optional
        Results table folder (tests).
    **columns
        Further columns with one value for every row (``k``, ``metric``, ``preprocessing``).

    Returns
    -------
    dict
        ``(dataset, draw) -> result``, in draw order.
    """
    from prh_lib import results

    if prefetch:
        prefetch_features(comparisons, draws, device=device, dtype=dtype, batch_size=batch_size)
    reading = threading.Lock()
    out = {}

    def one(d):
        with reading:  # one draw's features at a time: caption draws share files (a bad one is re-extracted once)
            feats = prepare_features(comparisons(d) if callable(comparisons) else comparisons, d.pairs,
                                     models=models(d) if callable(models) else models, clip_q=clip_q, clip=clip,
                                     device=device, dtype=dtype, batch_size=batch_size)
        return score(d, feats)

    def finish(d, scored):
        out[(d.dataset, d.draw)], rows = scored
        if write:
            results.write(rows, chapter=chapter, params=params, dataset=d.dataset, draw=d.draw, seed=d.seed,
                          root=root, **({"n": len(d.pairs)} if n_from_draw else {}), **columns)

    with torch_threads(num_threads):
        if workers is None:
            for d in draws:
                finish(d, one(d))
        else:
            for d, scored in zip(draws, map_threads(one, draws, workers=workers)):
                finish(d, scored)
    return out
