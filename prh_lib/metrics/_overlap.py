"""Layer-pair scores of mutual, Jaccard and cycle k-NN for many re-pairings at once (private).

Notation: ``pinv`` is the inverse of a re-pairing ``perm`` (``Y' = Y[perm]``), extended by
``pinv[N] = N`` so that the sentinel column ``N`` maps to itself. For re-paired data, sample ``i``'s
``Y'``-neighbours are ``pinv[N_Y(perm[i])]`` (relabelled, never recomputed), so with ``i' = perm[i]``

    overlap = sum_{i', t} [ pinv[idx_Y[i', t]] in N_X(pinv[i']) ] ,

a look-up of ``X``'s packed membership word at row ``pinv[i']`` and column ``pinv[idx_Y[i', t]]``.
With ``perm = None`` (the observed pairing) ``pinv`` is the identity. The same code computes the
observed scores, the null, and the scores of explicitly permuted data, so they agree bit for bit.

Mutual and Jaccard k-NN (tie-averaged membership)
-------------------------------------------------
Per sample the expected overlap under independent uniform tie-breaking is ``m_i = sum_j w_X(i, j) w_Y(i, j)`` with
``w = 1`` on ``S``, ``r / t`` on ``T``. Rows where neither side straddles have an integer ``m_i`` (counted by the
bit-sliced fast path). The others ("affected" rows) are computed exactly as ``num / den`` with integer weights ``u = t``
on ``S``, ``r`` on ``T`` (``w = u / t``), ``den = t_X t_Y``, and added as fixed-point integers (:mod:`._bits`): type Y
where the ``Y`` row straddles (its support, relabelled, looks up ``X``'s weights), type X where only the ``X`` row does
(``Y``'s ``k`` neighbours look up ``X``'s weights).

Cycle k-NN (lowest-index rule, re-applied in the re-paired frame)
-----------------------------------------------------------------
Rows of ``Y`` whose tie straddles the ``k``-th place take, for every re-pairing, the ``r`` tied
samples with the lowest *new* indices, exactly what recomputing on ``Y[perm]`` does.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from prh_lib.metrics import _bits as B
from prh_lib.metrics._neighbours import Hoods

__all__: list[str] = []

_BUDGET = 1 << 18  # elements of the packed-word array of one batch of permutations (fits in cache)


# -- cached views of a Hoods -----------------------------------------------------------------------


def _cache(h: Hoods) -> dict:
    if not hasattr(h, "_views"):
        h._views = {}
    return h._views


def _chunks(L: int):
    return [(a0, min(a0 + B.WORD, L)) for a0 in range(0, L, B.WORD)]


def _table(h: Hoods, a0: int, a1: int, *, transpose: bool, skip_straddling: bool):
    """Packed membership words, flat ``(N * (N + 1),)``: bit ``a - a0`` of ``[i, j]`` is set iff
    ``j in N_a(i)`` (``transpose``: iff ``i in N_a(j)``). Column ``N`` (sentinel) is 0. The words are
    the narrowest signed integers with a bit per layer (:func:`._bits.word_dtype`): the gathers and
    bit-sliced counts move 8 / 4 / 2 times less memory for 7 / 15 / 31 layers."""
    key = ("table", a0, a1, transpose, skip_straddling)
    c = _cache(h)
    if key in c:
        return c[key]
    bk, N = h.bk, h.n
    tab = bk.zeros(N * (N + 1), dtype=B.word_dtype(a1 - a0))  # the narrowest word for the layers
    rows = bk.arange(N)[:, None]
    for bit, a in enumerate(range(a0, a1)):
        cols = h.idx[a]
        if skip_straddling:
            cols = bk.where(h.straddle[a][:, None], N, cols)
        pos = cols * (N + 1) + rows if transpose else rows * (N + 1) + cols
        tab[pos.reshape(-1)] += 1 << bit  # positions are distinct within a layer (sentinels aside)
    tab.reshape(N, N + 1)[:, N] = 0
    c[key] = tab
    return tab


def _lists(h: Hoods, *, sentinel_straddling: bool):
    """Hard neighbour lists ``(L, N, k)``; straddling rows replaced by the sentinel ``N`` if asked."""
    key = ("lists", sentinel_straddling)
    c = _cache(h)
    if key not in c:
        c[key] = h.bk.where(h.straddle[:, :, None], h.n, h.idx) if sentinel_straddling else h.idx
    return c[key]


def _lists_by_row(h: Hoods, *, sentinel_straddling: bool):
    """:func:`_lists` laid out ``(N, k, L)``: one contiguous block of all layers' lists per row."""
    key = ("lists_by_row", sentinel_straddling)
    c = _cache(h)
    if key not in c:
        a = _lists(h, sentinel_straddling=sentinel_straddling)
        c[key] = a.transpose(1, 2, 0).copy() if h.bk.numpy else a.permute(1, 2, 0).contiguous()
    return c[key]


def _weights(h: Hoods):
    """Integer weights of the straddling rows: ``U (R + 1, N + 1)`` (``t`` on S, ``r`` on T, row R
    and column N zero), ``ridx (L, N)`` (row of U, R if the row does not straddle), ``tfull (L, N)``
    (``t`` of straddling rows, 1 elsewhere)."""
    c = _cache(h)
    if "weights" not in c:
        bk, N, L, R = h.bk, h.n, h.n_layers, h.n_straddling
        code = bk.asarray(h.s_code)
        U = bk.zeros((R + 1, N + 1))
        U[:R] = bk.where(code == 1, h.s_t[:, None], bk.where(code == 2, h.s_r[:, None], 0))
        ridx = bk.full((L, N), R)
        tfull = bk.full((L, N), 1)
        ridx[h.s_layer, h.s_row] = bk.arange(R)
        tfull[h.s_layer, h.s_row] = h.s_t
        c["weights"] = (U.reshape(-1), ridx, tfull)
    return c["weights"]


def _support(h: Hoods):
    """Support of the straddling rows as flat entries: row id, column, integer weight."""
    c = _cache(h)
    if "support" not in c:
        bk = h.bk
        code = bk.asarray(h.s_code)
        nz = code.reshape(-1) != 0
        flat = bk.nonzero(nz)
        e_row, e_col = flat // (h.n + 1), flat % (h.n + 1)
        e_code = code.reshape(-1)[flat]
        e_u = bk.where(e_code == 1, h.s_t[e_row], h.s_r[e_row])
        c["support"] = (e_row, e_col, e_u)
    return c["support"]


def _tie_lists(h: Hoods):
    """Strict and tied samples of straddling rows, padded with the sentinel: ``(R, k)``, ``(R, t_max)``."""
    c = _cache(h)
    if "tie_lists" not in c:
        bk, R, N, k = h.bk, h.n_straddling, h.n, h.k
        code = bk.asarray(h.s_code)
        cols = bk.arange(N + 1)[None, :]
        # sort keys: members first (by index), the rest pushed to the sentinel
        s_key = bk.sort(bk.where(code == 1, cols, N), -1)[:, :k]
        t_max = int(h.s_t.max()) if R else 0
        t_key = bk.sort(bk.where(code == 2, cols, N), -1)[:, : max(t_max, k)]
        c["tie_lists"] = (s_key, t_key)
    return c["tie_lists"]


# -- permutations ----------------------------------------------------------------------------------


def inverse(perms, N: int, bk: B.Backend):
    """``(P, N + 1)`` inverse permutations with ``pinv[:, N] = N``; identity when ``perms`` is None."""
    if perms is None:
        return bk.arange(N + 1)[None, :]
    P = perms.shape[0]
    inv = bk.zeros((P, N + 1))
    inv[bk.arange(P)[:, None], perms] = bk.arange(N)[None, :]
    inv[:, N] = N
    return inv


def _relabel(pinv, cols, bk: B.Backend):
    """``pinv[p, cols]`` for every permutation ``p``: shape ``(P,) + cols.shape``."""
    P, M = pinv.shape
    off = (bk.arange(P) * M).reshape((P,) + (1,) * cols.ndim)
    return bk.take(pinv.reshape(-1), off + cols[None])


def _by_x_row(h: Hoods, perms, pinv, *, sentinel_straddling: bool):
    """Flat table positions ``(P, N, k, L_y)`` ordered by the X row ``i`` they look up: row ``i`` of
    ``X`` meets row ``perm[i]`` of ``Y``, whose neighbours are relabelled by ``pinv``. Reading the
    table row by row keeps its look-ups in cache."""
    bk, N = h.bk, h.n
    lists = _lists_by_row(h, sentinel_straddling=sentinel_straddling)
    if perms is None:
        return _relabel(pinv, lists, bk)  # (1, N, k, L)
    rows = bk.take_rows(lists, perms)  # (P, N, k, L): row perm[p, i] of Y for X row i
    P, M = pinv.shape
    off = (bk.arange(P) * M).reshape(P, 1, 1, 1)
    return bk.take(pinv.reshape(-1), off + rows)


def _flat(new, N: int, bk: B.Backend):
    return new + (bk.arange(N) * (N + 1))[None, :, None, None]


def _batches(perms, per_perm: int):
    if perms is None:
        return [None]
    step = max(1, _BUDGET // max(per_perm, 1))
    return [perms[s : s + step] for s in range(0, perms.shape[0], step)]


def _map(fn, batches, bk: B.Backend) -> list:
    """``[fn(b) for b in batches]``, on CPU spread over ``torch.get_num_threads()`` threads (NumPy
    releases the GIL in its array loops). Batches are independent integer computations, so the result
    does not depend on the threading. The first batch runs alone and fills the shared caches."""
    workers = torch.get_num_threads() if bk.numpy else 1
    if workers <= 1 or len(batches) <= 2:
        return [fn(b) for b in batches]
    first = fn(batches[0])
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return [first] + list(ex.map(fn, batches[1:]))


# -- mutual and Jaccard k-NN -----------------------------------------------------------------------


def overlap_scores(hx: Hoods, hy: Hoods, perms=None, *, jaccard: bool = False) -> np.ndarray:
    """Mutual (or Jaccard) k-NN of every layer pair, ``(P, L_x, L_y)`` float64 NumPy (P = 1 if no perms).

    ``perms`` is a ``(P, N)`` int64 backend array of re-pairings ``Y' = Y[perm]``.
    """
    bk, N, k = hx.bk, hx.n, hx.k
    Lx, Ly = hx.n_layers, hy.n_layers
    out = _map(lambda b: bk.to_numpy(_overlap_batch(hx, hy, b, jaccard)), _batches(perms, Ly * N * k), bk)
    F = np.concatenate(out, 0)
    q = B.fixed_point_bits(N, k)
    scale = float(2**q) * N * (1 if jaccard else k)
    S = F.astype(np.float64) / scale
    bad = ~(hx.valid[:, None] & hy.valid[None, :])
    S[:, bad] = np.nan
    return S


def _jaccard_table(k: int, q: int, bk: B.Backend):
    c = bk.arange(k + 1)
    return B.fixed(c, 2 * k - c, q, bk)


def _overlap_batch(hx: Hoods, hy: Hoods, perms, jaccard: bool):
    bk, N, k = hx.bk, hx.n, hx.k
    Lx, Ly = hx.n_layers, hy.n_layers
    q = B.fixed_point_bits(N, k)
    pinv = inverse(perms, N, bk)
    P = pinv.shape[0]
    flat = _flat(_by_x_row(hy, perms, pinv, sentinel_straddling=True), N, bk)  # (P, N, k, Ly)
    F = bk.zeros((P, Lx, Ly))
    jq = _jaccard_table(k, q, bk) if jaccard else None
    for a0, a1 in _chunks(Lx):
        nb = a1 - a0
        words = bk.take(_table(hx, a0, a1, transpose=False, skip_straddling=True), flat)
        if jaccard:  # per-sample counts as bit planes, then how many samples have each count c
            planes = B.count_planes(words, bk, axis=2)  # (P, N, Ly) each
            while len(planes) > 1 and not bool(planes[-1].any()):
                planes = planes[:-1]  # counts < 2**len(planes): larger c need no indicator (exact)
            cmax = min(k, 2 ** len(planes) - 1)
            ind = []
            for c in range(1, cmax + 1):  # bit a of ind[c-1] set where sample's count for layer a is c
                e = None
                for level, p in enumerate(planes):
                    term = p if (c >> level) & 1 else ~p
                    e = term if e is None else e & term
                ind.append(e)
            h = B.column_counts_axis(bk.stack(ind, -1), nb, bk, axis=1)  # (P, Ly, cmax, nb)
            part = (h * jq[1 : cmax + 1, None]).sum(axis=2)
        else:
            # count over every (sample, neighbour) slot at once: (P, N k, Ly) -> (P, Ly, nb)
            part = B.column_counts_axis(words.reshape(P, N * k, Ly), nb, bk, axis=1) << q
        F[:, a0:a1, :] += part.transpose(0, 2, 1) if bk.numpy else part.permute(0, 2, 1)
    if hx.n_straddling or hy.n_straddling:
        F += _corrections(hx, hy, perms, pinv, q, jaccard)
    return F


def _value(num, den, k: int, q: int, jaccard: bool, bk):
    return B.fixed(num, 2 * k * den - num if jaccard else den, q, bk)


def _corrections(hx: Hoods, hy: Hoods, perms, pinv, q: int, jaccard: bool):
    """Fixed-point sum of the affected rows' values, ``(P, L_x, L_y)`` int64."""
    bk, N, k = hx.bk, hx.n, hx.k
    Lx, Ly = hx.n_layers, hy.n_layers
    P = pinv.shape[0]
    F = bk.zeros((P, Lx, Ly))
    U, ridx, tfull = _weights(hx)
    if hy.n_straddling:  # type Y: the Y row straddles
        e_row, e_col, e_u = _support(hy)
        Ry = hy.n_straddling
        ix = _relabel(pinv, hy.s_row, bk)  # (P, Ry) X row of each straddling Y row
        j = _relabel(pinv, e_col, bk)  # (P, E)
        ie = ix[:, e_row]
        num = bk.zeros((P, Lx, Ry))
        for a0, a1 in _chunks(Lx):
            w = bk.take(_table(hx, a0, a1, transpose=False, skip_straddling=True), ie * (N + 1) + j)
            bits = (w[:, None, :] >> bk.arange(a1 - a0)[None, :, None]) & 1  # (P, nb, E)
            num[:, a0:a1, :] += bk.segment_sum(bits * e_u, e_row, Ry)
        rid = ridx[:, ie]  # (Lx, P, E)
        ux = bk.take(U, rid * (N + 1) + j[None]) * e_u
        ux = bk.segment_sum(ux, e_row, Ry)  # (Lx, P, Ry)
        num += ux.transpose(1, 0, 2) if bk.numpy else ux.permute(1, 0, 2)
        tx = tfull[:, ix]  # (Lx, P, Ry)
        den = (tx.transpose(1, 0, 2) if bk.numpy else tx.permute(1, 0, 2)) * hy.s_t[None, None, :]
        F += bk.segment_sum(_value(num, den, k, q, jaccard, bk), hy.s_layer, Ly)
    if hx.n_straddling:  # type X: only the X row straddles (straddling Y rows hit the sentinel)
        Rx = hx.n_straddling
        yrow = hx.s_row[None, :] if perms is None else perms[:, hx.s_row]  # (P, Rx)
        cols = _lists(hy, sentinel_straddling=True)[:, yrow, :]  # (Ly, P, Rx, k)
        j = bk.take(pinv.reshape(-1), (bk.arange(P) * (N + 1))[None, :, None, None] + cols)
        u = bk.take(U, bk.arange(Rx)[None, None, :, None] * (N + 1) + j).sum(axis=-1)  # (Ly, P, Rx)
        val = _value(u, hx.s_t[None, None, :], k, q, jaccard, bk)
        val = bk.segment_sum(val, hx.s_layer, Lx)  # (Ly, P, Lx)
        F += val.transpose(1, 2, 0) if bk.numpy else val.permute(1, 2, 0)
    return F


# -- cycle k-NN ------------------------------------------------------------------------------------


def rechosen(hy: Hoods, perms, pinv):
    """New-frame neighbour lists ``(P, R, k)`` of ``Y``'s straddling rows under the re-pairings: the
    strict members plus the ``r`` tied samples with the lowest new indices (what recomputing on
    ``Y[perm]`` gives)."""
    bk, k = hy.bk, hy.k
    s_key, t_key = _tie_lists(hy)
    sS = _relabel(pinv, s_key, bk)  # (P, R, k), members first
    sT = bk.sort(_relabel(pinv, t_key, bk), -1)[..., :k]  # lowest new indices first
    ar = bk.arange(k)[None, :]
    mask = bk.cat([ar < (k - hy.s_r)[:, None], ar < hy.s_r[:, None]], -1)  # (R, 2k), k True per row
    both = bk.cat([sS, sT], -1)
    P, R = both.shape[0], both.shape[1]
    full = mask[None].repeat(P, 0) if bk.numpy else mask[None].expand(P, R, 2 * k)
    return both[full].reshape(P, R, k)


def cycle_scores(hx: Hoods, hy: Hoods, perms=None) -> np.ndarray:
    """Cycle k-NN ``hits / N`` for every layer pair, ``(P, L_x, L_y)`` float64 NumPy."""
    bk, N, k = hx.bk, hx.n, hx.k
    Lx, Ly = hx.n_layers, hy.n_layers
    def one(batch):
        pinv = inverse(batch, N, bk)
        P = pinv.shape[0]
        new = _by_x_row(hy, batch, pinv, sentinel_straddling=False)  # hard lists, relabelled
        if hy.n_straddling and batch is not None:  # straddling Y row i' sits at X row pinv[i']
            pos = _relabel(pinv, hy.s_row, bk)  # (P, R)
            new[bk.arange(P)[:, None], pos, :, hy.s_layer[None, :]] = rechosen(hy, batch, pinv)
        flat = _flat(new, N, bk)
        H = bk.zeros((P, Lx, Ly))
        for a0, a1 in _chunks(Lx):
            w = bk.take(_table(hx, a0, a1, transpose=True, skip_straddling=False), flat)
            anyhit = w[:, :, 0]
            for t in range(1, k):
                anyhit = anyhit | w[:, :, t]
            c = B.column_counts_axis(anyhit, a1 - a0, bk, axis=1)  # (P, Ly, nb)
            H[:, a0:a1, :] = c.transpose(0, 2, 1) if bk.numpy else c.permute(0, 2, 1)
        return bk.to_numpy(H)

    S = np.concatenate(_map(one, _batches(perms, Ly * N * k), bk), 0).astype(np.float64) / N
    S[:, ~(hx.valid[:, None] & hy.valid[None, :])] = np.nan
    return S
