"""Neighbour sets of every layer of a stack, with their exact tie structure (private).

Similarity
----------
``kind="cosine"`` ranks the samples ``j`` of row ``i`` by ``s_ij = <z_i, z_j> / ||z_j||``: the cosine
similarity up to the factor ``1 / ||z_i||``, which is the same for the whole row and does not change
its order (all-zero rows have similarity 0 to every sample). The Gram matrix ``Z Z^T`` of the raw rows
is the only ``O(N^2 d)`` step; no normalised copy of the features is made. ``kind="linear"`` ranks by
the raw inner product (CKNNA's kernel). Layers are processed in chunks of at most
:data:`CHUNK_ELEMENTS` similarity entries (64 MiB), so temporaries stay bounded; the GEMM is applied to
whole layers, so a permutation of the rows of ``Z`` permutes the similarity matrix exactly (ties stay
ties). Selection runs on a whole chunk at once (one ``topk`` over the stack); every matrix of a stack is
treated on its own, so chunking does not change a bit.

Tie structure
-------------
For row ``i`` let ``v`` be its ``k``-th largest similarity (the sample itself excluded by index). ``S(i)`` holds the
samples strictly above ``v`` and ``T(i)`` those equal to it. When ``|S| + |T| = k`` the neighbourhood is unambiguous.
Otherwise a tie *straddles* the ``k``-th place: ``r = k - |S|`` of the ``t = |T|`` tied samples must be chosen, and
every choice is equally justified by the data. The metrics decide what to do with that (see :mod:`prh_lib.metrics.knn`);
this module records ``S``, ``T``, ``r`` and ``t`` for the straddling rows, and a deterministic lowest-index choice (the
hard lists ``idx``) for the metrics and functions that need one list.

With ``groups`` (bootstrap resamples: positions holding copies of the same original sample), copies of the sample itself
are excluded as well, and ties among copies of one *other* sample are resolved by copy rank (the first copy first),
identically in ``X`` and ``Y``: copies are one sample, not a tie between samples.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from prh_lib.metrics import _validation as V
from prh_lib.metrics._bits import Backend

__all__: list[str] = []


@dataclass
class Hoods:
    """Neighbourhoods of the ``L`` layers of one stack (arrays on ``bk``; private).

    idx : (L, N, k) int64 -- hard lists by decreasing similarity, ties by lowest index
    straddle : (L, N) bool -- a tie straddles the k-th place in this row
    s_layer, s_row : (R,) int64 -- the straddling rows, in order of ``layer * N + row``
    s_code : (R, N + 1) int8 -- 1 for ``S``, 2 for ``T``, else 0; column ``N`` is a sentinel (0)
    s_r, s_t : (R,) int64 -- places left for tied samples and number of tied samples (``r < t``)
    valid : (L,) bool (NumPy) -- False for degenerate layers (all samples identical); their rows are not
        recorded as straddling (every score of such a layer is NaN)
    gram : (L, N, N) float32 torch tensor of raw inner products (CKNNA only), else None
    n_zero : int -- all-zero rows over the layers (cosine kind; see :func:`warn_zero_rows`)
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
    n_zero: int = 0  # all-zero rows seen over the layers (cosine similarity), for the caller's warning

    @property
    def n_layers(self) -> int:
        return int(self.idx.shape[0])

    @property
    def n_straddling(self) -> int:
        return int(self.s_row.shape[0])


def similarity(Z: torch.Tensor, kind: str, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(S, sq_norms)`` for one layer ``Z`` (N, d): ranking similarity (float32) and ``||z_i||^2``.

    For ``kind="linear"`` ``S`` is the raw Gram matrix. Raises the package's NaN/inf error (naming ``name``) when a row
    is not finite: the Gram diagonal ``sum_d z_id^2`` is NaN or infinite exactly then (or when it overflows float32).
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


#: Entries of one stack of similarity matrices processed at once (float32: 64 MiB); layers (and bootstrap
#: replicates) are taken in chunks of at most this many ``N x N`` entries, so memory stays bounded.
CHUNK_ELEMENTS = 1 << 24


def chunk_layers(L: int, N: int) -> list[tuple[int, int]]:
    """``[(l0, l1), ...]`` covering ``range(L)`` with at most :data:`CHUNK_ELEMENTS` entries per chunk."""
    step = max(1, CHUNK_ELEMENTS // max(N * N, 1))
    return [(l0, min(l0 + step, L)) for l0 in range(0, L, step)]


def _order(vals: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Reorder ``ids`` (rows of equal length) by decreasing ``vals``, ties by increasing index."""
    o = torch.argsort(ids, dim=-1)
    ids, vals = torch.gather(ids, -1, o), torch.gather(vals, -1, o)
    o = torch.sort(vals, dim=-1, descending=True, stable=True).indices
    return torch.gather(ids, -1, o)


def select(S: torch.Tensor, k: int, excluded: torch.Tensor | None = None, copy_rank=None):
    """Neighbours of every row of a stack of similarity matrices ``S`` (L, N, N); see the module docstring.

    ``S`` is modified in place (excluded entries set to -inf). ``excluded`` is an (L, N, N) boolean mask
    (None: the diagonal), ``copy_rank`` an (L, N) tensor of copy ranks (bootstrap) or None. Every matrix
    of the stack is treated independently: the result equals selecting each one on its own. Returns
    torch tensors ``idx (L, N, k)``, ``straddle (L, N)``, ``layers (R,)``, ``rows (R,)``,
    ``code (R, N + 1)``, ``r (R,)``, ``t (R,)``, the straddling rows in order of ``layer * N + row``.
    """
    L, N, _ = S.shape
    if excluded is None:
        S.diagonal(dim1=1, dim2=2).fill_(float("-inf"))
    else:
        S.masked_fill_(excluded, float("-inf"))
    ranks = None if copy_rank is None else (lambda flat: copy_rank[flat // N])
    idx, straddle, flat, code, r, t = select_rows(S.reshape(L * N, N), k, ranks)
    return idx.view(L, N, k), straddle.view(L, N), flat // N, flat % N, code, r, t


def select_rows(S: torch.Tensor, k: int, ranks=None, top=None):
    """:func:`select` for rows ``S`` (R0, M) whose excluded entries are already -inf.

    ``ranks(flat) -> (len(flat), M)`` gives the copy ranks of the columns for the rows ``flat`` (None:
    no copies). ``top``: ``torch.topk(S, K, sorted=True)`` for some ``K > k`` (or ``K = M``), to select several
    ``k`` from one sort (:func:`hoods_at_ks`); the result is the same, since only a row's first ``k`` entries
    are read when its ``k``-th and ``k + 1``-th values differ (a unique set, put in canonical order), and a
    row where they tie is selected from ``S`` itself. Returns ``idx (R0, k)``, ``straddle (R0,)``, ``flat (R,)``
    (the straddling rows), ``code (R, M + 1)``, ``r (R,)``, ``t (R,)``.
    """
    R0, N = S.shape
    m = min(k + 1, N)
    if top is None:
        vals, ids = torch.topk(S, m, dim=1, largest=True, sorted=True)
    else:
        vals, ids = top[0][:, :m], top[1][:, :m]
    kth = vals[:, k - 1]
    if m > k:
        straddle = (vals[:, k] == kth) & torch.isfinite(kth)
    else:
        straddle = torch.zeros(R0, dtype=torch.bool, device=S.device)
    idx = _order(vals[:, :k], ids[:, :k])
    flat = torch.nonzero(straddle).flatten()
    code = torch.zeros(0, N + 1, dtype=torch.int8, device=S.device)
    r = t = torch.zeros(0, dtype=torch.int64, device=S.device)
    if flat.numel():
        Sr, v = S[flat], kth[flat, None]
        strict, tie = Sr > v, Sr == v
        r = k - strict.sum(1)
        # hard lists: the lowest-index tied samples fill the remaining places
        chosen = tie & (torch.cumsum(tie, dim=1) <= r[:, None])
        member = strict | chosen
        nb = torch.nonzero(member)[:, 1].view(-1, k)
        idx[flat] = _order(torch.gather(Sr, 1, nb), nb)
        if ranks is not None:  # copies of one sample are not a tie between samples
            cr_rows = ranks(flat)  # (R, N): the copy ranks of each straddling row's own matrix
            cr = torch.where(tie, cr_rows, torch.full_like(cr_rows, N))
            cstar = torch.gather(torch.sort(cr, dim=1).values, 1, (r - 1)[:, None])
            first = tie & (cr_rows < cstar)
            strict, tie = strict | first, tie & (cr_rows == cstar)
            r = k - strict.sum(1)
        t = tie.sum(1)
        code = torch.zeros(flat.numel(), N + 1, dtype=torch.int8, device=S.device)
        code[:, :N] = strict.to(torch.int8) + 2 * tie.to(torch.int8)
        keep = t > r  # after copy-rank resolution a row can become unambiguous
        if not bool(keep.all()):
            straddle[flat[~keep]] = False
            flat, code, r, t = flat[keep], code[keep], r[keep], t[keep]
    return idx, straddle, flat, code, r, t


def candidates(k: int, n: int, m: int | None = None) -> int:
    """Candidates per row kept from the full sample of ``n`` for resamples or subsamples of ``m`` (default ``n``):
    ``3 k n / m + 10`` (rounded up), at most the ``n - 1`` other samples. A resample holds each candidate
    ``Poisson(1)``-many times (:func:`hoods_of_resamples`), a subsample with probability ``m / n``
    (:func:`hoods_of_subsample`), so fewer than ``k`` members among them is rare (about 1e-5 of the rows at
    ``k = 10``); such rows take the exact path."""
    m = n if m is None else max(int(m), 1)
    return min(int(np.ceil(3 * k * n / m)) + 10, n - 1)


def hoods_of_resamples(S: torch.Tensor, valid, draws: torch.Tensor, *, k: int, bk: Backend) -> Hoods:
    """:class:`Hoods` of the resampled matrices ``S[d][:, d]`` for every row ``d`` of ``draws``, stacked as
    layers, equal to :func:`hoods_from_similarity` of that stack with ``groups=draws`` (bit for bit).

    ``S`` (N, N) is the full sample's similarity (not modified); ``draws`` (B, m) int64, each row sorted
    (a bootstrap resample, copies allowed, or a subsample); ``valid`` (B,) bool.

    Each row's neighbours in a resample are the first drawn samples of its full-sample ranking, so the ``k`` neighbours
    of a position are read off the row's :func:`candidates` best samples of the full sample by counting copies: every
    copy of the best candidates, then the first copies of the one where the count reaches ``k`` (copies of one sample
    are one sample, the first copy first). That is ``O(B N (3k + 10))`` instead of a ``topk`` over ``B m^2`` entries.
    Rows whose full-sample candidates hold a tie between samples, or whose resample holds fewer than ``k`` of their
    candidates, are selected exactly (:func:`select_rows`) instead.
    """
    N = S.shape[0]
    B, m = draws.shape
    dev = S.device
    T = candidates(k, N)
    cand, tied = (a[0] for a in subsample_candidates(S[None], T))
    counts = torch.zeros(B, N, dtype=torch.int64, device=dev)
    counts.scatter_add_(1, draws, torch.ones_like(draws))
    start = torch.cumsum(counts, 1) - counts  # position of each sample's first copy
    cum = torch.cumsum(counts[:, cand], 2)  # (B, N, T): copies among the first t + 1 candidates
    short = cum[..., -1] < k
    place = torch.arange(k, device=dev).expand(B, N, k).contiguous()
    t_of = torch.searchsorted(cum, place, right=True).clamp_(max=T - 1)  # candidate holding place p
    prev = torch.where(t_of > 0, torch.gather(cum, 2, (t_of - 1).clamp_(min=0)), torch.zeros_like(t_of))
    sample = torch.gather(cand.expand(B, N, T), 2, t_of)
    pos = torch.gather(start, 1, sample.reshape(B, -1)).view(B, N, k) + (place - prev)
    idx = torch.gather(pos, 1, draws[:, :, None].expand(B, m, k)).contiguous()  # rows by position
    straddle = torch.zeros(B, m, dtype=torch.bool, device=dev)
    exact = torch.gather(tied[None, :].expand(B, N) | short, 1, draws)
    flat = torch.nonzero(exact.reshape(-1)).flatten()
    empty = (torch.zeros(0, dtype=torch.int64, device=dev), torch.zeros(0, m + 1, dtype=torch.int8, device=dev))
    part = (idx, straddle, empty[0], empty[0], empty[1], empty[0], empty[0])
    if flat.numel():
        b, a = flat // m, flat % m
        Sr = S[draws[b, a][:, None], draws[b]]  # (R0, m): the rows of the resampled matrices
        Sr.masked_fill_(draws[b] == draws[b, a][:, None], float("-inf"))
        copy_rank = _copy_ranks(draws)
        i_r, st_r, f_r, code, r, t = select_rows(Sr, k, lambda f: copy_rank[b[f]])
        idx.view(B * m, k)[flat] = i_r
        straddle.view(-1)[flat] = st_r
        part = (idx, straddle, b[f_r], a[f_r], code, r, t)
    return _assemble([part], valid, k, m, bk, None)


def hoods_at_ks(S: torch.Tensor, valid, ks, *, bk: Backend) -> dict[int, Hoods]:
    """:class:`Hoods` of a similarity stack ``S`` (L, N, N) at every ``k`` of ``ks`` from one sort of each row
    (not modified): the same bits as :func:`hoods_from_similarity` at each ``k``."""
    L, N, _ = S.shape
    Sd = S.clone()
    Sd.diagonal(dim1=1, dim2=2).fill_(float("-inf"))
    rows = Sd.view(L * N, N)
    ks = [int(k) for k in dict.fromkeys(ks)]
    top = torch.topk(rows, min(max(ks) + 1, N), dim=1, largest=True, sorted=True)
    out = {}
    for k in ks:
        idx, straddle, flat, code, r, t = select_rows(rows, k, None, top)
        out[k] = _assemble([(idx.view(L, N, k), straddle.view(L, N), flat // N, flat % N, code, r, t)], valid, k,
                           N, bk, None)
    return out


def subsample_candidates(S: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's ``T`` best other samples in a similarity stack ``S`` (L, N, N), for :func:`hoods_of_subsample`
    and :func:`hoods_of_resamples`.

    Returns ``cand`` (L, N, T) int64, by decreasing similarity and ties by index, and ``tied`` (L, N) bool: a
    tie between two of the row's ``T + 1`` best samples (one more than the candidates, to see a tie at their
    edge). ``S`` is not modified.
    """
    L, N, _ = S.shape
    T = min(int(T), N - 1)
    Sd = S.clone()
    Sd.diagonal(dim1=1, dim2=2).fill_(float("-inf"))
    # one more than the candidates (when there is one), to see a tie at the candidates' edge
    vals, cand = torch.topk(Sd, min(T + 1, N - 1), dim=2, largest=True, sorted=True)
    cand = _order(vals, cand)  # by decreasing similarity, ties by index (topk's order among ties is unset)
    vals = torch.gather(Sd, 2, cand)
    tied = (vals[..., 1:] == vals[..., :-1]).any(2)
    return cand[..., :T].contiguous(), tied


def hoods_of_subsample(S: torch.Tensor, cand: torch.Tensor, tied: torch.Tensor, valid, idx: torch.Tensor, *,
                       k: int, bk: Backend) -> Hoods:
    """:class:`Hoods` of the sub-stack ``S[:, idx][:, :, idx]`` (a subsample of distinct samples, ``idx`` (m,)
    sorted int64), equal to :func:`hoods_from_similarity` of that sub-stack (bit for bit), read off each row's
    full-sample candidates (:func:`subsample_candidates` of ``S``).

    A row's ``k`` neighbours in the subsample are its first ``k`` candidates that the subsample holds, in the
    candidates' order (decreasing similarity; a subsample keeps the samples' order, so ties by index stay ties
    by position): ``O(L m T)`` instead of a ``topk`` over ``L m^2`` entries. Rows whose candidates hold a tie
    between samples, or fewer than ``k`` samples of the subsample, are selected exactly (:func:`select_rows`
    on the row's subsample similarities).
    """
    L, N, _ = S.shape
    m = idx.shape[0]
    dev = S.device
    inside = torch.zeros(N, dtype=torch.bool, device=dev)
    inside[idx] = True
    position = torch.full((N,), -1, dtype=torch.int64, device=dev)
    position[idx] = torch.arange(m, device=dev)
    # as many candidates as this subsample's density needs (:func:`candidates`); fewer rows then fall short of
    # k members and take the exact path, which changes no bit
    T = min(cand.shape[2], candidates(k, N, m))
    # (1-D index_select is several times faster on a CPU than advanced indexing with the same result)
    C = cand[:, :, :T].index_select(1, idx)  # (L, m, T)
    member = inside.index_select(0, C.reshape(-1)).view(C.shape)
    cum = torch.cumsum(member, 2, dtype=torch.int32)  # subsample members among the first t + 1 candidates
    short = cum[..., -1] < k
    place = torch.arange(1, k + 1, device=dev, dtype=torch.int32).expand(L, m, k).contiguous()
    t_of = torch.searchsorted(cum, place).clamp_(max=C.shape[2] - 1)  # first candidate where the count reaches p
    sample = torch.gather(C, 2, t_of)
    hood = position.index_select(0, sample.reshape(-1)).view(sample.shape)  # (L, m, k) positions in the subsample
    exact = (tied[:, idx] | short)
    flat = torch.nonzero(exact.reshape(-1)).flatten()
    empty = (torch.zeros(0, dtype=torch.int64, device=dev), torch.zeros(0, m + 1, dtype=torch.int8, device=dev))
    straddle = torch.zeros(L, m, dtype=torch.bool, device=dev)
    part = (hood, straddle, empty[0], empty[0], empty[1], empty[0], empty[0])
    if flat.numel():
        lay, row = flat // m, flat % m
        Sr = S[lay[:, None], idx[row][:, None], idx[None, :]]  # (R0, m): the rows of the sub-stack
        Sr[torch.arange(flat.numel(), device=dev), row] = float("-inf")  # the sample itself
        i_r, st_r, f_r, code, r, t = select_rows(Sr, k)
        hood.view(L * m, k)[flat] = i_r
        straddle.view(-1)[flat] = st_r
        part = (hood, straddle, lay[f_r], row[f_r], code, r, t)
    return _assemble([part], valid, k, m, bk, None)


def _copy_ranks(groups: torch.Tensor) -> torch.Tensor:
    """Rank of each position among the positions holding the same group id (0 for the first), per row
    of ``groups`` (L, N)."""
    L, n = groups.shape
    order = torch.argsort(groups, dim=1, stable=True)
    g = torch.gather(groups, 1, order)
    start = torch.ones(L, n, dtype=torch.bool, device=groups.device)
    start[:, 1:] = g[:, 1:] != g[:, :-1]
    pos = torch.arange(n, device=groups.device).expand(L, n)
    first = torch.cummax(torch.where(start, pos, torch.zeros_like(pos)), 1).values
    rank = torch.empty(L, n, dtype=torch.int64, device=groups.device)
    rank.scatter_(1, order, pos - first)
    return rank


def hoods_from_similarity(S: torch.Tensor, valid, *, k: int, bk: Backend, groups=None, gram=None) -> Hoods:
    """:class:`Hoods` of a similarity stack ``S`` (L, N, N) (not modified).

    ``groups`` (N,): per position the original sample it holds (a bootstrap resample), for every layer.
    """
    L, N, _ = S.shape
    excluded = copy_rank = None
    if groups is not None:
        groups = groups.expand(L, N)
        excluded = groups[:, :, None] == groups[:, None, :]
        copy_rank = _copy_ranks(groups)
    part = select(S.clone(), k, excluded, copy_rank)
    return _assemble([part], valid, k, N, bk, gram)


def hoods_from_features(XL: torch.Tensor, *, k: int, kind: str, name: str, bk: Backend,
                        keep_gram: bool = False) -> Hoods:
    """:class:`Hoods` of a feature stack ``XL`` (L, N, d), in chunks of layers (bounded memory)."""
    L, N, _ = XL.shape
    parts, valid, n_zero = [], np.empty(L, dtype=bool), 0
    gram = torch.empty(L, N, N, dtype=torch.float32, device=XL.device) if keep_gram else None
    for l0, l1 in chunk_layers(L, N):
        S = torch.empty(l1 - l0, N, N, dtype=torch.float32, device=XL.device)
        for l in range(l0, l1):
            S[l - l0], sq = similarity(XL[l], kind, name)
            if kind == "cosine":
                n_zero += int((sq == 0).sum())
            valid[l] = not is_constant(XL[l], kind)
        if keep_gram:
            gram[l0:l1] = S  # a copy: select() below overwrites S's diagonal
        idx, straddle, layers, rows, code, r, t = select(S, k)
        parts.append((idx, straddle, layers + l0, rows, code, r, t))
        del S
    h = _assemble(parts, valid, k, N, bk, gram)
    h.n_zero = n_zero
    return h


def warn_zero_rows(h: Hoods, name: str, stacklevel: int = 4) -> None:
    """Warn (RuntimeWarning) that ``name`` has all-zero rows, whose neighbourhoods are one large tie."""
    if h.n_zero:
        warnings.warn(
            f"{name}: {h.n_zero} all-zero rows: their cosine similarity to every sample is 0, so their "
            "neighbourhoods are one large tie (see the k-NN tie semantics)",
            RuntimeWarning,
            stacklevel=stacklevel,
        )


def _assemble(parts, valid, k, N, bk: Backend, gram) -> Hoods:
    """One :class:`Hoods` from the parts of :func:`select` (chunks of layers, in order)."""
    idx = torch.cat([p[0] for p in parts])
    straddle = torch.cat([p[1] for p in parts])
    layers = torch.cat([p[2] for p in parts])
    rows = torch.cat([p[3] for p in parts])
    code = torch.cat([p[4] for p in parts])
    r = torch.cat([p[5] for p in parts])
    t = torch.cat([p[6] for p in parts])
    valid = np.asarray(valid, dtype=bool)
    if not valid.all():  # a degenerate layer is one tie (N - 1 samples a row) whose scores are NaN by definition:
        ok = torch.from_numpy(valid).to(straddle.device)  # its tie records would only cost time
        keep = ok[layers]
        straddle = straddle & ok[:, None]
        layers, rows, code, r, t = layers[keep], rows[keep], code[keep], r[keep], t[keep]
    to = bk.asarray
    s_code = code.cpu().numpy() if bk.numpy else code
    return Hoods(
        idx=to(idx), straddle=bk.asbool(straddle), s_layer=to(layers), s_row=to(rows), s_code=s_code,
        s_r=to(r), s_t=to(t), valid=valid, k=k, n=N, bk=bk, gram=gram,
    )
