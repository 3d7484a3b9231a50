"""Neighbour sets of every layer of a stack, with their exact tie structure (private).

Similarity
----------
``kind="cosine"`` ranks the samples ``j`` of row ``i`` by ``s_ij = <z_i, z_j> / ||z_j||``: the cosine
similarity up to the factor ``1 / ||z_i||``, which is the same for the whole row and does not change
its order (all-zero rows have similarity 0 to every sample). The Gram matrix ``Z Z^T`` of the raw rows
is the only ``O(N^2 d)`` step; no normalised copy of the features is made. ``kind="linear"`` ranks by
the raw inner product (CKNNA's kernel). Layers are processed one at a time, so temporaries never
exceed one ``(N, N)`` matrix; the GEMM is applied to whole stacks, so a permutation of the rows of
``Z`` permutes the similarity matrix exactly (ties stay ties).

Tie structure
-------------
For row ``i`` let ``v`` be its ``k``-th largest similarity (the sample itself excluded by index).
``S(i)`` holds the samples strictly above ``v`` and ``T(i)`` those equal to it. When
``|S| + |T| = k`` the neighbourhood is unambiguous. Otherwise a tie *straddles* the ``k``-th place:
``r = k - |S|`` of the ``t = |T|`` tied samples must be chosen, and every choice is equally justified
by the data. The metrics decide what to do with that (see :mod:`prh_lib.metrics.knn`); this module
records ``S``, ``T``, ``r`` and ``t`` for the straddling rows, and a deterministic lowest-index choice
(the hard lists ``idx``) for the metrics and functions that need one list.

With ``groups`` (bootstrap resamples: positions holding copies of the same original sample), copies of
the sample itself are excluded as well, and ties among copies of one *other* sample are resolved by
copy rank (the first copy first), identically in ``X`` and ``Y``: copies are one sample, not a tie
between samples.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from . import _validation as V
from ._bits import Backend

__all__: list[str] = []


@dataclass
class Hoods:
    """Neighbourhoods of the ``L`` layers of one stack (arrays on ``bk``; private).

    idx : (L, N, k) int64 -- hard lists by decreasing similarity, ties by lowest index
    straddle : (L, N) bool -- a tie straddles the k-th place in this row
    s_layer, s_row : (R,) int64 -- the straddling rows, in order of ``layer * N + row``
    s_code : (R, N + 1) int8 -- 1 for ``S``, 2 for ``T``, else 0; column ``N`` is a sentinel (0)
    s_r, s_t : (R,) int64 -- places left for tied samples and number of tied samples (``r < t``)
    valid : (L,) bool (NumPy) -- False for degenerate layers (all samples identical)
    gram : (L, N, N) float32 torch tensor of raw inner products (CKNNA only), else None
    """

    idx: object
    straddle: object
    s_layer: object
    s_row: object
    s_code: object
    s_r: object
    s_t: object
    valid: np.ndarray
    k: int
    n: int
    bk: Backend
    gram: torch.Tensor | None = None

    @property
    def n_layers(self) -> int:
        return int(self.idx.shape[0])

    @property
    def n_straddling(self) -> int:
        return int(self.s_row.shape[0])


def similarity(Z: torch.Tensor, kind: str, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(S, sq_norms)`` for one layer ``Z`` (N, d): ranking similarity (float32) and ``||z_i||^2``.

    For ``kind="linear"`` ``S`` is the raw Gram matrix. Raises the package's NaN/inf error (naming
    ``name``) when a row is not finite: the Gram diagonal ``sum_d z_id^2`` is NaN or infinite exactly
    then (or when it overflows float32).
    """
    G = Z @ Z.T
    diag = G.diagonal().clone()
    if not bool(torch.isfinite(diag).all()):
        if kind == "linear" or not bool(torch.isfinite(Z).all()):
            raise V.nonfinite_error(Z, name)
        # finite rows whose squared norms overflow float32: cosine ranking is invariant to rescaling
        # each row, so rank the rows scaled by their largest entry instead
        m = Z.abs().amax(dim=1, keepdim=True)
        Z = Z / torch.where(m > 0, m, torch.ones_like(m))
        G = Z @ Z.T
        diag = G.diagonal().clone()
    if kind == "linear":
        return G, diag
    norms = diag.sqrt()
    norms = torch.where(norms > 0, norms, torch.ones_like(norms))
    return G.div_(norms), diag  # in place: no second (N, N) buffer


def is_constant(Z: torch.Tensor, kind: str) -> bool:
    """All rows identical (after L2 normalisation for ``kind="cosine"``)."""
    if kind == "cosine":
        def unit(z):  # scaled by the largest entry first, so that huge rows do not overflow
            m = z.abs().amax(dim=-1, keepdim=True)
            z = z / torch.where(m > 0, m, torch.ones_like(m))
            n = torch.linalg.vector_norm(z, dim=-1, keepdim=True)
            return z / torch.where(n > 0, n, torch.ones_like(n))
        if Z.shape[0] >= 2 and not torch.equal(unit(Z[0]), unit(Z[1])):
            return False
        return V.is_constant(unit(Z))
    return V.is_constant(Z)


def _order(vals: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Reorder ``ids`` (rows of equal length) by decreasing ``vals``, ties by increasing index."""
    o = torch.argsort(ids, dim=1)
    ids, vals = torch.gather(ids, 1, o), torch.gather(vals, 1, o)
    o = torch.sort(vals, dim=1, descending=True, stable=True).indices
    return torch.gather(ids, 1, o)


def select(S: torch.Tensor, k: int, excluded: torch.Tensor | None = None, copy_rank=None):
    """Neighbours of every row of one similarity matrix ``S`` (N, N); see the module docstring.

    ``S`` is modified in place (excluded entries set to -inf). Returns torch tensors
    ``idx (N, k)``, ``straddle (N,)``, ``rows (R,)``, ``code (R, N + 1)``, ``r (R,)``, ``t (R,)``.
    """
    N = S.shape[0]
    if excluded is None:
        S.fill_diagonal_(float("-inf"))
    else:
        S.masked_fill_(excluded, float("-inf"))
    m = min(k + 1, N)
    vals, ids = torch.topk(S, m, dim=1, largest=True, sorted=True)
    kth = vals[:, k - 1]
    if m > k:
        straddle = (vals[:, k] == kth) & torch.isfinite(kth)
    else:
        straddle = torch.zeros(N, dtype=torch.bool, device=S.device)
    idx = _order(vals[:, :k], ids[:, :k])
    rows = torch.nonzero(straddle).flatten()
    code = torch.zeros(0, N + 1, dtype=torch.int8, device=S.device)
    r = t = torch.zeros(0, dtype=torch.int64, device=S.device)
    if rows.numel():
        Sr, v = S[rows], kth[rows, None]
        strict, tie = Sr > v, Sr == v
        r = k - strict.sum(1)
        # hard lists: the lowest-index tied samples fill the remaining places
        chosen = tie & (torch.cumsum(tie, dim=1) <= r[:, None])
        member = strict | chosen
        nb = torch.nonzero(member)[:, 1].view(-1, k)
        idx[rows] = _order(torch.gather(Sr, 1, nb), nb)
        if copy_rank is not None:  # copies of one sample are not a tie between samples
            cr = torch.where(tie, copy_rank[None, :], torch.full_like(Sr, N, dtype=torch.int64))
            cstar = torch.gather(torch.sort(cr, dim=1).values, 1, (r - 1)[:, None])
            first = tie & (copy_rank[None, :] < cstar)
            strict, tie = strict | first, tie & (copy_rank[None, :] == cstar)
            r = k - strict.sum(1)
        t = tie.sum(1)
        code = torch.zeros(rows.numel(), N + 1, dtype=torch.int8, device=S.device)
        code[:, :N] = strict.to(torch.int8) + 2 * tie.to(torch.int8)
        keep = t > r  # after copy-rank resolution a row can become unambiguous
        if not bool(keep.all()):
            straddle[rows[~keep]] = False
            rows, code, r, t = rows[keep], code[keep], r[keep], t[keep]
    return idx, straddle, rows, code, r, t


def _copy_ranks(groups: torch.Tensor) -> torch.Tensor:
    """Rank of each position among the positions holding the same group id (0 for the first)."""
    n = groups.numel()
    order = torch.argsort(groups, stable=True)
    g = groups[order]
    start = torch.ones(n, dtype=torch.bool, device=groups.device)
    start[1:] = g[1:] != g[:-1]
    first = torch.cummax(torch.where(start, torch.arange(n, device=groups.device), torch.zeros_like(g)), 0).values
    rank = torch.empty(n, dtype=torch.int64, device=groups.device)
    rank[order] = torch.arange(n, device=groups.device) - first
    return rank


def hoods_from_similarity(S: torch.Tensor, valid, *, k: int, bk: Backend, groups=None, gram=None) -> Hoods:
    """:class:`Hoods` of a similarity stack ``S`` (L, N, N) (not modified)."""
    L, N, _ = S.shape
    excluded = copy_rank = None
    if groups is not None:
        excluded = groups[:, None] == groups[None, :]
        copy_rank = _copy_ranks(groups)
    parts = [select(S[l].clone(), k, excluded, copy_rank) for l in range(L)]
    return _assemble(parts, valid, k, N, bk, gram)


def hoods_from_features(XL: torch.Tensor, *, k: int, kind: str, name: str, bk: Backend,
                        keep_gram: bool = False) -> Hoods:
    """:class:`Hoods` of a feature stack ``XL`` (L, N, d), one layer at a time (bounded memory)."""
    L, N, _ = XL.shape
    parts, valid, n_zero = [], np.empty(L, dtype=bool), 0
    gram = torch.empty(L, N, N, dtype=torch.float32, device=XL.device) if keep_gram else None
    for l in range(L):
        S, sq = similarity(XL[l], kind, name)
        if kind == "cosine":
            n_zero += int((sq == 0).sum())
        if keep_gram:
            gram[l] = S  # a copy: select() below overwrites S's diagonal
        valid[l] = not is_constant(XL[l], kind)
        parts.append(select(S, k))
    if n_zero:
        warnings.warn(
            f"{name}: {n_zero} all-zero rows: their cosine similarity to every sample is 0, so their "
            "neighbourhoods are one large tie (see the k-NN tie semantics)",
            RuntimeWarning,
            stacklevel=4,
        )
    return _assemble(parts, valid, k, N, bk, gram)


def _assemble(parts, valid, k, N, bk: Backend, gram) -> Hoods:
    idx = torch.stack([p[0] for p in parts])
    straddle = torch.stack([p[1] for p in parts])
    layers = torch.cat([torch.full_like(p[2], l) for l, p in enumerate(parts)])
    rows = torch.cat([p[2] for p in parts])
    code = torch.cat([p[3] for p in parts])
    r = torch.cat([p[4] for p in parts])
    t = torch.cat([p[5] for p in parts])
    to = bk.asarray
    s_code = code.cpu().numpy() if bk.numpy else code
    return Hoods(
        idx=to(idx), straddle=bk.asbool(straddle), s_layer=to(layers), s_row=to(rows), s_code=s_code,
        s_r=to(r), s_t=to(t), valid=np.asarray(valid, dtype=bool), k=k, n=N, bk=bk, gram=gram,
    )
