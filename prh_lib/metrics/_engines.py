"""Two-stage form of every metric, shared by the permutation null and the bootstrap (private).

Each metric is split into

``gram(XL) -> (G, valid)``
    the expensive per-layer part: an ``(L, N, N)`` similarity / Gram / squared-distance stack and a
    ``(L,)`` flag that is False for degenerate layers;
``state(G, valid, groups=None) -> state``
    per-layer neighbour lists or centred Gram matrices (``groups`` marks positions that hold the same
    sample, used by the bootstrap);
``score(sx, sy, perm=None) -> (L_x, L_y)`` float64 tensor
    all layer-pair scores, with ``Y`` rows re-paired as ``Y[perm]``. A permutation only relabels the
    positions looked up (k-NN family) or permutes Gram rows and columns (kernel family); nothing is
    recomputed from features.

The registry ``ENGINES`` is an explicit dict keyed by the public metric names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from . import kernel as _ker
from . import knn as _knn

__all__: list[str] = []


@dataclass(frozen=True)
class Engine:
    gram: Callable  # (XL) -> (G, valid)
    state: Callable  # (G, valid, *, groups=None, **opts) -> state
    score: Callable  # (sx, sy, perm=None) -> Tensor (L_x, L_y) float64
    options: tuple[str, ...]  # keyword options the metric takes (besides device)
    min_n: int = 2
    needs_k: bool = False

    def prepare(self, XL: torch.Tensor, **opts):
        G, valid = self.gram(XL)
        return self.state(G, valid, **opts)


def _knn_engine(kind, score, min_n=2):
    def gram(XL):
        return _knn._gram(XL, kind)

    def state(G, valid, *, k, groups=None):
        return _knn._state(G, valid, k=k, groups=groups, with_gram=(kind == "linear"),
                           return_by_identity=(score is _knn._score_cycle))

    return Engine(gram, state, score, ("k",), min_n=min_n, needs_k=True)


def _kernel_engine(kind, unbiased):
    def gram(XL):
        return _ker._gram(XL, kind)

    def state(G, valid, *, groups=None, sigma=1.0, bandwidth="median", unbiased=unbiased):
        return _ker._state(G, valid, kind=kind, unbiased=unbiased, sigma=sigma, bandwidth=bandwidth,
                           groups=groups)

    opts = ("sigma", "bandwidth", "unbiased") if kind == "rbf" else ()
    return Engine(gram, state, _ker._score, opts, min_n=4 if unbiased else 2)


ENGINES: dict[str, Engine] = {
    "mutual_knn": _knn_engine("cosine", _knn._score_mutual),
    "jaccard_knn": _knn_engine("cosine", _knn._score_jaccard),
    "cycle_knn": _knn_engine("cosine", _knn._score_cycle),
    "cknna": _knn_engine("linear", _knn._score_cknna, min_n=4),
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
    from . import _validation as V
    from .kernel import _check_rbf_options

    engine = get_engine(metric)
    opts = dict(check_options(metric, engine, options))
    dev = V.resolve_device(device, X, Y)
    X = V.to_tensor(X, "X", ndim=ndim, device=dev)
    Y = V.to_tensor(Y, "Y", ndim=ndim, device=dev)
    n = V.check_same_samples(X, Y)
    min_n = 4 if opts.get("unbiased") else engine.min_n
    V.check_min_samples(n, min_n, metric)
    if engine.needs_k:
        opts["k"] = V.check_k(10 if k is None else k, n)
    elif k is not None:
        raise TypeError(f"metric {metric!r} does not take k (it is not a k-NN metric); got k={k!r}")
    if metric == "cka_rbf":
        opts["sigma"] = _check_rbf_options(opts.get("sigma", 1.0), opts.get("bandwidth", "median"))
    return engine, X, Y, opts
