"""CKNNA for all layer pairs and re-pairings (private; torch, float64 after float32 Gram matrices).

Neighbourhoods are the hard lowest-index lists of :mod:`._neighbours` (inner-product ranking). Under a re-pairing
``Y' = Y[perm]`` the masks and kernel values of ``Y`` are looked up at permuted positions; rows of ``Y`` whose tie
straddles the ``k``-th place are re-chosen with the lowest-*new*-index rule (what recomputing on ``Y[perm]`` does), and
``Y``'s self-HSIC is then recomputed. Sums whose order would change under relabelling (the self-HSIC terms) are taken
over sorted terms, so a re-paired null equals recomputation bit for bit.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import torch

from prh_lib.metrics import _bits as B
from prh_lib.metrics import _overlap as O
from prh_lib.metrics._neighbours import Hoods, _order

__all__: list[str] = []

_GATHER_BUDGET = 1 << 24  # elements per batched gather; bounds memory of the layer-wise scores


@dataclass
class CknnaState:
    hoods: Hoods
    idx: torch.Tensor  # (L, N, k) int64
    mask: torch.Tensor  # (L, N, N) bool
    gram: torch.Tensor  # (L, N, N) float32
    self_hsic: torch.Tensor  # (L,) float64
    valid: np.ndarray


def _t(a, device):
    return a.to(device) if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a)).to(device)


def _mask(idx: torch.Tensor, N: int) -> torch.Tensor:
    L = idx.shape[0]
    m = torch.zeros(L, N, N, dtype=torch.bool, device=idx.device)
    return m.scatter_(2, idx, True)


def state(h: Hoods) -> CknnaState:
    dev = h.gram.device
    idx = _t(h.idx, dev)
    mask = _mask(idx, h.n)
    return CknnaState(h, idx, mask, h.gram, _self(h.gram, idx, mask), h.valid)


def _osum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last two axes in an order-independent way (over sorted terms)."""
    return torch.sort(x.reshape(x.shape[0], -1), dim=-1).values.sum(-1)


def _masked_hsic(A, Bv, rec, rowB_at_nbr, n: int, total=None) -> torch.Tensor:
    """Song et al. (2012) Eq. (5) for matrices supported on neighbour lists (sums over last 2 axes).

    ``A[..., i, t] = A_{i, j_t}``, ``Bv`` likewise, ``rec`` = ``M_{j_t, i}`` (reciprocal membership),
    ``rowB_at_nbr[..., i, t] = sum_l B_{j_t, l}``. The diagonal is zero by construction (a sample is
    never its own neighbour), as Eq. (5) requires.
    """
    total = total or (lambda x: x.sum((-1, -2)))
    tr = total(A * Bv * rec)  # tr(A B) = sum_ij A_ij B_ji, with B symmetric in value
    sA, sB = total(A), total(Bv)
    ab = total(A * rowB_at_nbr)  # 1^T A B 1 = sum_ij A_ij rowsum(B)_j  (no scatter)
    return (tr + sA * sB / ((n - 1) * (n - 2)) - 2.0 * ab / (n - 2)) / (n * (n - 3))


def _self(G, idx, mask) -> torch.Tensor:
    """``HSIC_u(M∘K, M∘K)`` per layer, float64, shape ``(L,)`` (order-independent sums)."""
    L, N, k = idx.shape
    lidx = torch.arange(L, device=idx.device).view(L, 1, 1)
    rows = torch.arange(N, device=idx.device).view(1, N, 1)
    kv = torch.gather(G, -1, idx).double()
    rec = mask[lidx, idx, rows]
    rowA = kv.sum(-1)  # (L, N): a row's list is in similarity order, the same under relabelling
    at = torch.gather(rowA, -1, idx.view(L, -1)).view(L, N, k)
    return _masked_hsic(kv, kv, rec, at, N, total=_osum)


def _blocks(n_x: int, per_x: int):
    step = max(1, _GATHER_BUDGET // max(per_x, 1))
    for s in range(0, n_x, step):
        yield slice(s, min(s + step, n_x))


def _cross(sx: CknnaState, sy: CknnaState, perm=None) -> torch.Tensor:
    """``HSIC_u(M∘K_a, M∘L_b')`` with ``M = M_Xa ∘ M_Yb'``; shape ``(L_x, L_y)``, float64."""
    Lx, N, k = sx.idx.shape
    Ly = sy.mask.shape[0]
    dev = sx.idx.device
    r = torch.arange(N, device=dev) if perm is None else perm
    rows_i = torch.arange(N, device=dev).view(1, N, 1)
    out = []
    for blk in _blocks(Lx, 4 * Ly * N * k):
        knn = sx.idx[blk]  # (B, N, k)
        nb = knn.shape[0]
        bidx = torch.arange(nb, device=dev).view(nb, 1, 1)
        kv = torch.gather(sx.gram[blk], -1, knn).double()  # K_a[i, j]
        rec_x = sx.mask[blk][bidx, knn, rows_i]  # M_Xa[j, i]
        pr, pc = r.view(1, N, 1), r[knn]
        w = sy.mask[:, pr, pc]  # M_Yb'[i, j]            (Ly, B, N, k)
        rec_y = sy.mask[:, pc, pr]  # M_Yb'[j, i]
        lv = sy.gram[:, pr, pc].double()  # L_b'[i, j]
        A = w * kv
        Bv = w * lv
        rowB = Bv.sum(-1)  # (Ly, B, N)
        at = torch.gather(rowB, -1, knn.reshape(1, nb, N * k).expand(Ly, nb, N * k)).view(Ly, nb, N, k)
        out.append(_masked_hsic(A, Bv, rec_x & rec_y, at, N).transpose(0, 1))
    return torch.cat(out, 0)


def _repaired(sy: CknnaState, perm: torch.Tensor) -> CknnaState:
    """``sy`` with its straddling rows re-chosen for the re-pairing ``perm`` (kept in ``Y``'s frame,
    where the null looks masks up at permuted positions), and ``Y``'s self-HSIC recomputed."""
    h = sy.hoods
    N, dev = h.n, sy.idx.device
    P = h.bk.asarray(perm)[None]
    new = O.rechosen(h, P, O.inverse(P, N, h.bk))[0]  # (R, k) labels in Y[perm]'s frame
    back = _t(h.bk.to_numpy(new) if h.bk.numpy else new, dev)
    lay, row = _t(h.s_layer, dev), _t(h.s_row, dev)
    members = perm[back]  # back to Y's frame
    vals = torch.gather(sy.gram[lay, row], 1, members)
    idx = sy.idx.clone()
    idx[lay, row] = _order(vals, members)
    mask = sy.mask.clone()
    mask[lay, row] = False
    mask[lay[:, None], row[:, None], idx[lay, row]] = True
    return replace(sy, idx=idx, mask=mask, self_hsic=_self(sy.gram, idx, mask))


def _ytable(idx: np.ndarray, b0: int, b1: int, N: int) -> np.ndarray:
    """Packed memberships of Y layers ``b0..b1-1``: bit ``b - b0`` of ``[i, j]`` iff ``j in N_b(i)``."""
    tab = np.zeros(N * (N + 1), dtype=np.int64)
    rows = np.arange(N)[:, None] * (N + 1)
    for bit, b in enumerate(range(b0, b1)):
        tab[(rows + idx[b]).ravel()] += 1 << bit
    return tab


def _x_arrays(sx: CknnaState):
    """NumPy views of X's lists, kernel values at them and reciprocal memberships (cached)."""
    if not hasattr(sx, "_np"):
        L, N, k = sx.idx.shape
        lidx = torch.arange(L).view(L, 1, 1)
        rows = torch.arange(N).view(1, N, 1)
        kv = torch.gather(sx.gram, -1, sx.idx).double()
        rec = sx.mask[lidx, sx.idx, rows]
        sx._np = (sx.idx.numpy(), kv.numpy(), rec.numpy())
    return sx._np


def _cross_hits(sx: CknnaState, sy: CknnaState, perm=None) -> np.ndarray:
    """:func:`_cross` on the CPU from the hits only (``j`` in both neighbourhoods of ``i``).

    Under a re-pairing only about ``k^2 / N`` of each row's ``k`` X-neighbours are also Y'-neighbours,
    so enumerating the hits (from packed Y memberships looked up at X's neighbour positions, 63 Y
    layers per word) replaces ``L_x L_y N k`` gathers per permutation by a few per hit. Every sum runs
    over a layer pair's hits in order of X position (``np.bincount``), so the null equals
    recomputation on ``Y[perm]``, and a layer-wise entry the pairwise value, bit for bit.
    """
    idx, kvx, recx = _x_arrays(sx)
    Lx, N, k = idx.shape
    Ly = sy.idx.shape[0]
    p = np.arange(N) if perm is None else np.asarray(perm.cpu() if isinstance(perm, torch.Tensor) else perm)
    Lg = sy.gram.numpy().reshape(-1)
    c = p[idx]  # (Lx, N, k): Y-frame column of X's neighbour j
    r = p[None, :, None] * (N + 1)
    G = Lx * Ly
    tr, sA, sB, ab = (np.zeros(G) for _ in range(4))
    cache = sy.__dict__.setdefault("_tables", {}) if perm is None or not sy.hoods.n_straddling else {}
    for b0 in range(0, Ly, 63):
        b1 = min(b0 + 63, Ly)
        tab = cache.get(b0)
        if tab is None:
            tab = _ytable(sy.idx.numpy(), b0, b1, N)
            cache[b0] = tab
        wf = np.take(tab, r + c).ravel()  # bit b: (perm j) in N_Yb(perm i), i.e. j in N_Y'b(i)
        e = np.flatnonzero(wf)
        w = wf[e]
        wr = np.take(tab, (c * (N + 1) + p[None, :, None]).ravel()[e])  # i in N_Y'b(j)
        es, bs, ws = [], [], []
        while e.size:  # peel set bits, lowest first
            low = w & -w
            es.append(e)
            bs.append(np.frexp(low.astype(np.float64))[1] - 1)
            ws.append(wr)
            w = w ^ low
            keep = w != 0
            e, w, wr = e[keep], w[keep], wr[keep]
        if not es:
            continue
        e, bit, wr = np.concatenate(es), np.concatenate(bs).astype(np.int64), np.concatenate(ws)
        # each peeling round is sorted by position; merging the runs (timsort) orders every layer
        # pair's hits by X position, independently of which other Y layers share a word
        o = np.argsort(e, kind="stable")
        e, bit, wr = e[o], bit[o], wr[o]
        a, i = e // (N * k), (e // k) % N
        j = idx.reshape(-1)[e]
        b = bit + b0
        kv = kvx.reshape(-1)[e]
        lv = Lg[(b * N + p[i]) * N + p[j]].astype(np.float64)
        rec = recx.reshape(-1)[e] & (((wr >> bit) & 1) == 1)
        g = a * Ly + b
        sA += np.bincount(g, kv, G)
        sB += np.bincount(g, lv, G)
        tr += np.bincount(g, kv * lv * rec, G)
        rowB = np.bincount(g * N + i, lv, G * N)
        ab += np.bincount(g, kv * rowB[g * N + j], G)
    n = N
    h = (tr + sA * sB / ((n - 1) * (n - 2)) - 2.0 * ab / (n - 2)) / (n * (n - 3))
    return h.reshape(Lx, Ly)


def scores(sx: CknnaState, sy: CknnaState, perms=None) -> np.ndarray:
    """CKNNA of every layer pair, ``(P, L_x, L_y)`` float64 NumPy; NaN for degenerate layers.

    On the CPU the cross terms come from the hits (:func:`_cross_hits`, permutations spread over
    ``torch.get_num_threads()`` threads); on CUDA from batched gathers (:func:`_cross`). Both equal
    recomputation bit for bit on their device; across devices they agree to float64 rounding.
    """
    dev = sx.idx.device
    plist = [None] if perms is None else list(_t(perms, dev))
    cpu = dev.type == "cpu" and B.NUMPY_ON_CPU

    def one(p):
        syp = _repaired(sy, p) if (p is not None and sy.hoods.n_straddling) else sy
        den = (sx.self_hsic[:, None] * syp.self_hsic[None, :]).cpu().numpy()
        cross = _cross_hits(sx, syp, p) if cpu else _cross(sx, syp, p).cpu().numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            s = cross / np.sqrt(np.maximum(den, 0))
        return np.where(den <= 0, np.nan, s)

    if cpu and len(plist) > 2 and torch.get_num_threads() > 1:
        first = one(plist[0])
        with ThreadPoolExecutor(max_workers=torch.get_num_threads()) as ex:
            out = [first] + list(ex.map(one, plist[1:]))
    else:
        out = [one(p) for p in plist]
    S = np.stack(out)
    S[:, ~(sx.valid[:, None] & sy.valid[None, :])] = np.nan
    return S
