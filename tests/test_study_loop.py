"""The one study loop (prh_lib.analysis.study.run_draws) writes what its per-draw scorer gives, draw by draw."""

import numpy as np
import pandas as pd
import pytest
import torch

from prh_lib import results
from prh_lib.analysis import study
from prh_lib.data.study import Draw
from prh_lib.extract import LayerFeatures
from prh_lib.metrics import mutual_knn

N = 24
DRAWS = [Draw("a", 0, 0, list(range(N)), True, "captions"), Draw("a", 1, 1, list(range(N)), True, "captions"),
         Draw("b", 0, 7, list(range(N)), False, "nothing")]
COMPARISONS = [("vit", "lm"), ("vit", "cnn")]


def _features(seed):
    rng = np.random.default_rng(seed)
    ids = tuple(f"s{i}" for i in range(N))
    return {m: LayerFeatures(torch.tensor(rng.standard_normal((2, N, 6)), dtype=torch.float32), ("embed", "layer.1"),
                             ids, {"model": m}) for m in ("vit", "lm", "cnn", "extra")}


FEATS = {d.seed: _features(d.seed) for d in DRAWS}


def score(d, feats):
    out = {f"{x} × {y}": float(mutual_knn(feats[x].layer(1), feats[y].layer(1), k=3)) for x, y in COMPARISONS}
    return out, [{"model_x": x, "model_y": y, "quantity": "final", "score": out[f"{x} × {y}"]} for x, y in COMPARISONS]


@pytest.mark.parametrize("workers", [None, 2])
def test_the_loop_writes_the_rows_of_the_scorer_called_directly(tmp_path, monkeypatch, workers):
    asked = []
    monkeypatch.setattr(study, "prefetch_features", lambda comparisons, draws, **kw: asked.append(list(draws)))

    def prepare(comparisons, pairs, *, models, **kw):  # the draw's features: the seed is found from the draw
        d = next(d for d in DRAWS if d.pairs is pairs)
        asked.append((d.dataset, d.draw, tuple(models)))
        return {m: f for m, f in FEATS[d.seed].items() if m in {*models, *(m for p in comparisons for m in p)}}

    monkeypatch.setattr(study, "prepare_features", prepare)
    out = study.run_draws(DRAWS, COMPARISONS, score, chapter="demo", params={"p": 1}, workers=workers,
                          models=lambda d: ("extra",) if d.dataset == "b" else (), root=tmp_path / "loop", k=3,
                          metric="mutual_knn")
    assert asked[0] == DRAWS and sorted(asked[1:]) == [("a", 0, ()), ("a", 1, ()), ("b", 0, ("extra",))]
    assert list(out) == [(d.dataset, d.draw) for d in DRAWS]
    for d in DRAWS:  # by hand: the scorer on the draw's features, written with the draw's columns
        res, rows = score(d, FEATS[d.seed])
        assert out[(d.dataset, d.draw)] == res
        results.write(rows, chapter="demo", params={"p": 1}, dataset=d.dataset, draw=d.draw, seed=d.seed, n=N, k=3,
                      metric="mutual_knn", root=tmp_path / "direct")
    loop, direct = (results.load(chapter="demo", params={"p": 1}, root=tmp_path / name).drop(columns=["created"])
                    for name in ("loop", "direct"))
    assert len(loop) == len(DRAWS) * len(COMPARISONS)
    pd.testing.assert_frame_equal(loop, direct)
