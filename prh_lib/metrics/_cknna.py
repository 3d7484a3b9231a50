"""CKNNA for all layer pairs and re-pairings (private; torch, float64 after float32 Gram matrices).

Neighbourhoods are the hard lowest-index lists of :mod:`._neighbours` (inner-product ranking). Under a
re-pairing ``Y' = Y[perm]`` the masks and kernel values of ``Y`` are looked up at permuted positions;
rows of ``Y`` whose tie straddles the ``k``-th place are re-chosen with the lowest-*new*-index rule
(what recomputing on ``Y[perm]`` does), and ``Y``'s self-HSIC is then recomputed. Sums whose order
would change under relabelling (the self-HSIC terms) are taken over sorted terms, so a re-paired
null equals recomputation bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from . import _overlap as O
from ._neighbours import Hoods, _order

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


def scores(sx: CknnaState, sy: CknnaState, perms=None) -> np.ndarray:
    """CKNNA of every layer pair, ``(P, L_x, L_y)`` float64 NumPy; NaN for degenerate layers."""
    dev = sx.idx.device
    plist = [None] if perms is None else list(_t(perms, dev))
    out = []
    for p in plist:
        syp = _repaired(sy, p) if (p is not None and sy.hoods.n_straddling) else sy
        den = sx.self_hsic[:, None] * syp.self_hsic[None, :]
        s = _cross(sx, syp, p) / den.clamp_min(0).sqrt()
        out.append(s.masked_fill(den <= 0, float("nan")).cpu().numpy())
    S = np.stack(out)
    S[:, ~(sx.valid[:, None] & sy.valid[None, :])] = np.nan
    return S
