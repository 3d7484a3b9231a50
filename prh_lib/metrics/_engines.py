"""Two-stage form of every metric, shared by the permutation null and the bootstrap (private).

Each metric is split into

``prepare(XL, **opts) -> state``
    the expensive per-layer part, one layer at a time: neighbourhoods with their tie structure
    (k-NN family) or centred Gram matrices (kernel family);
``gram(XL) -> (G, valid)`` and ``state(G, valid, groups=None) -> state``
    the same in two steps, for the bootstrap, which resamples ``G`` (``groups`` marks positions that
    hold the same sample);
``scores(sx, sy, perms=None) -> (P, L_x, L_y)`` float64 array
    all layer-pair scores for every re-pairing ``Y[perm]`` (rows of ``perms``). A permutation only
    relabels the positions looked up (k-NN family) or permutes Gram rows and columns (kernel family);
    nothing is recomputed from features, and the result equals recomputation on ``Y[perm]``.

The registry ``ENGINES`` is an explicit dict keyed by the public metric names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from prh_lib.metrics import kernel as _ker
from prh_lib.metrics import knn as _knn
from prh_lib.metrics._neighbours import subsample_candidates

__all__: list[str] = []


@dataclass(frozen=True)
class Engine:
    prepare: Callable  # (XL, *, name, source=None, **opts) -> state (bounded memory: chunks of layers);
    # source: the caller's tensor XL was made from, which lets the k-NN family memoise neighbourhoods
    gram: Callable  # (XL) -> (G, valid): similarity / Gram stack (bootstrap)
    state: Callable  # (G, valid, *, groups=None, **opts) -> state (bootstrap)
    scores: Callable  # (sx, sy, perms=None) -> ndarray (P, L_x, L_y) float64; P = 1 without perms
    valid: Callable  # state -> (L,) NumPy bool
    options: tuple[str, ...]  # keyword options the metric takes (besides device)
    min_n: int = 2
    needs_k: bool = False
    check_finite: bool = True  # False: prepare/gram check finiteness on the Gram diagonal
    # (G (1, N, N), valid (1,), draws (B, m), **opts) -> state whose B "layers" are the resamples
    # G[d][:, d]; ``scores`` of two such states holds replicate b's score at [0, b, b], so the
    # bootstrap scores a stack of replicates at once. None: one at a time
    resample_state: Callable | None = None
    # (G (L, N, N), T) -> candidates of every row; (G, valid, candidates, idx (m,), *, k) -> the state of the
    # subsample G[:, idx][:, :, idx] of distinct samples, the same bits as ``state`` of it. None: use ``state``
    subsample_candidates: Callable | None = None
    subsample_state: Callable | None = None

    def score(self, sx, sy, perm=None) -> np.ndarray:
        """Scores ``(L_x, L_y)`` for one re-pairing ``Y[perm]`` (or the observed pairing)."""
        return self.scores(sx, sy, None if perm is None else np.asarray(perm)[None])[0]


def _knn_engine(metric, min_n=2):
    kind = _knn._KIND[metric]

    def prepare(XL, *, k, name="X", source=None):
        return _knn._prepare(XL, k=k, metric=metric, name=name, source=source)

    def state(G, valid, *, k, groups=None):
        return _knn._state(G, valid, k=k, metric=metric, groups=groups)

    def scores(sx, sy, perms=None):
        return _knn._scores(metric, sx, sy, perms)

    def resample_state(G, valid, draws, *, k):
        return _knn._resample_state(G, valid, draws, k=k)

    def subsample_state(G, valid, cands, idx, *, k):
        return _knn._subsample_state(G, valid, cands, idx, k=k)

    # CKNNA scores every layer pair in float64 gathers, so a stack of B replicates would cost B^2 of them
    plain = metric != "cknna"  # CKNNA's state also holds the sub-Gram: the subsample path does not apply
    return Engine(prepare, lambda XL: _knn._gram(XL, kind), state, scores, _knn._valid, ("k",),
                  min_n=min_n, needs_k=True, check_finite=False,
                  resample_state=resample_state if plain else None,
                  subsample_candidates=subsample_candidates if plain else None,
                  subsample_state=subsample_state if plain else None)


def _kernel_engine(kind, unbiased):
    def state(G, valid, *, groups=None, sigma=1.0, bandwidth="median", unbiased=unbiased, k=None):  # k: unused
        return _ker._state(G, valid, kind=kind, unbiased=unbiased, sigma=sigma, bandwidth=bandwidth,
                           groups=groups)

    def prepare(XL, *, name="X", source=None, **opts):
        G, valid = _ker._gram(XL, kind)
        return state(G, valid, **opts)

    def scores(sx, sy, perms=None):
        plist = [None] if perms is None else torch.as_tensor(np.asarray(perms)).to(sx.C.device)
        return np.stack([_ker._score(sx, sy, p).cpu().numpy() for p in plist])

    opts = ("sigma", "bandwidth", "unbiased") if kind == "rbf" else ()
    return Engine(prepare, lambda XL: _ker._gram(XL, kind), state, scores,
                  lambda s: s.valid.cpu().numpy(), opts, min_n=4 if unbiased else 3)


ENGINES: dict[str, Engine] = {
    "mutual_knn": _knn_engine("mutual_knn"),
    "mutual_knn_dot": _knn_engine("mutual_knn_dot"),
    "jaccard_knn": _knn_engine("jaccard_knn"),
    "cycle_knn": _knn_engine("cycle_knn"),
    "cknna": _knn_engine("cknna", min_n=4),
    "cka_linear": _kernel_engine("linear", False),
    "cka_linear_unbiased": _kernel_engine("linear", True),
    "cka_rbf": _kernel_engine("rbf", False),
}


def get_engine(name: str) -> Engine:
    if not isinstance(name, str) or name not in ENGINES:
        raise ValueError(f"unknown metric {name!r}; valid names: {sorted(ENGINES)}")
    return ENGINES[name]


def check_options(name: str, engine: Engine, opts: dict) -> dict:
    """Reject keyword options the metric does not take, naming the ones it does."""
    extra = set(opts) - set(engine.options)
    if extra:
        raise TypeError(
            f"metric {name!r} does not take option(s) {sorted(extra)}; it takes {list(engine.options)}"
        )
    return opts


def resolve(metric: str, X, Y, *, ndim: int, k, device, options: dict):
    """Validate data and options for ``metric``; return ``(engine, X, Y, opts)`` with ``k`` in opts."""
    from prh_lib.metrics import _validation as V
    from prh_lib.metrics.kernel import _check_rbf_options

    engine = get_engine(metric)
    opts = dict(check_options(metric, engine, options))
    dev = V.resolve_device(device, X, Y)
    X = V.to_tensor(X, "X", ndim=ndim, device=dev, check_finite=engine.check_finite)
    Y = V.to_tensor(Y, "Y", ndim=ndim, device=dev, check_finite=engine.check_finite)
    n = V.check_same_samples(X, Y)
    min_n = 4 if opts.get("unbiased") else engine.min_n
    V.check_min_samples(n, min_n, metric)
    if engine.needs_k:
        opts["k"] = V.check_informative_k(V.check_k(10 if k is None else k, n), n, metric)
    elif k is not None:
        raise TypeError(f"metric {metric!r} does not take k (it is not a k-NN metric); got k={k!r}")
    if metric == "cka_rbf":
        opts["sigma"] = _check_rbf_options(opts.get("sigma", 1.0), opts.get("bandwidth", "median"))
    return engine, X, Y, opts
