"""Integer kernels of the k-NN family: array backend, bit-sliced counting, fixed-point values (private).

Everything here is integer arithmetic (bitwise operations, additions, exact divisions), so a result
does not depend on the order of operations, on blocking or on the device: NumPy on the CPU (single
threaded, no thread start-up cost on small arrays) and torch on CUDA give the same bits.

Bit-sliced counting
-------------------
Neighbour memberships of up to :data:`WORD` layers are packed into one word per (row, column) position, bit ``a`` for
layer ``a``; the word is the narrowest signed integer type with a bit per layer (:func:`word_dtype`: int8 for up to 7
layers, ..., int64 for up to 63). Counting, for every bit position at once, how many of ``M`` words have that bit set
("positional popcount") is done by adding the words as bit-sliced counters: a counter is a list of *planes*, plane ``l``
holding bit ``l`` of every position's count. Halving the list of counters and adding the halves with a ripple-carry
adder on whole words takes about ``7 M`` word operations in all, for up to 63 positions at a time.

Fixed-point values
------------------
A per-sample value ``num / den`` (a rational with integer numerator and denominator) is represented
exactly rounded as ``round(num * 2**Q / den)`` in int64; sums of such integers are exact and
order-free. ``Q`` depends only on ``(n_samples, k)`` (:func:`fixed_point_bits`).
"""

from __future__ import annotations

import numpy as np
import torch

__all__: list[str] = []

#: Layers packed into one int64 word (bit 63, the sign bit, is left unused).
WORD = 63


def word_dtype(nbits: int) -> str:
    """The narrowest signed integer type holding ``nbits`` (1-63) bits below its sign bit."""
    for name, width in (("int8", 7), ("int16", 15), ("int32", 31), ("int64", 63)):
        if nbits <= width:
            return name
    raise ValueError(f"at most {WORD} bits fit in a word; got {nbits}")


#: Run the integer kernels with NumPy on CPU (False: torch everywhere; the tests use this to run the
#: CUDA code path on a CPU and check that both give the same bits).
NUMPY_ON_CPU = True


class Backend:
    """The array library the integer kernels run on: NumPy for CPU tensors, torch otherwise (CUDA)."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.numpy = self.device.type == "cpu" and NUMPY_ON_CPU

    # conversions -----------------------------------------------------------------------------
    def asarray(self, a):
        """int64 array on this backend from a torch tensor or a NumPy array."""
        if self.numpy:
            if isinstance(a, torch.Tensor):
                a = a.cpu().numpy()
            return np.ascontiguousarray(a, dtype=np.int64)
        if isinstance(a, np.ndarray):
            a = torch.from_numpy(np.ascontiguousarray(a))
        return a.to(device=self.device, dtype=torch.int64)

    def asbool(self, a):
        if self.numpy:
            return a.cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a, dtype=bool)
        return torch.as_tensor(a, device=self.device).bool()

    def to_numpy(self, a) -> np.ndarray:
        return a if self.numpy else a.cpu().numpy()

    # constructors ----------------------------------------------------------------------------
    def zeros(self, shape, dtype="int64"):
        if self.numpy:
            return np.zeros(shape, dtype=np.dtype(dtype))
        return torch.zeros(shape, dtype=getattr(torch, dtype), device=self.device)

    def zeros_like_dtype(self, shape, like):
        """Zeros of ``shape`` with the dtype of the array ``like``."""
        if self.numpy:
            return np.zeros(shape, dtype=like.dtype)
        return torch.zeros(shape, dtype=like.dtype, device=self.device)

    def full(self, shape, value):
        if self.numpy:
            return np.full(shape, value, dtype=np.int64)
        return torch.full(shape, value, dtype=torch.int64, device=self.device)

    def arange(self, n):
        return np.arange(n, dtype=np.int64) if self.numpy else torch.arange(n, device=self.device)

    # operations ------------------------------------------------------------------------------
    def take(self, flat, idx):
        """``flat[idx]`` for a 1-D ``flat`` (torch: ``index_select``, much faster than indexing)."""
        if self.numpy:
            return np.take(flat, idx)
        return flat.index_select(0, idx.reshape(-1)).reshape(idx.shape)

    def take_rows(self, a, idx):
        """``a[idx]`` along the first axis (``idx`` any shape): blocks of contiguous rows."""
        if self.numpy:
            return a[idx]
        return a.index_select(0, idx.reshape(-1)).reshape(tuple(idx.shape) + tuple(a.shape[1:]))

    def cat(self, arrays, axis=-1):
        return np.concatenate(arrays, axis=axis) if self.numpy else torch.cat(arrays, dim=axis)

    def stack(self, arrays, axis=-1):
        return np.stack(arrays, axis=axis) if self.numpy else torch.stack(arrays, dim=axis)

    def where(self, cond, a, b):
        if self.numpy:
            return np.where(cond, a, b)
        a = a if isinstance(a, torch.Tensor) else torch.tensor(a, device=self.device)
        b = b if isinstance(b, torch.Tensor) else torch.tensor(b, device=self.device)
        return torch.where(cond, a, b)

    def sort(self, a, axis=-1):
        return np.sort(a, axis=axis) if self.numpy else torch.sort(a, dim=axis).values

    def nonzero(self, a):
        """Indices of True entries of a 1-D boolean array (int64)."""
        return np.flatnonzero(a).astype(np.int64) if self.numpy else torch.nonzero(a).flatten()

    def floordiv(self, a, b):
        return a // b if self.numpy else torch.div(a, b, rounding_mode="floor")

    def segment_sum(self, values, seg, n_seg):
        """Sum ``values[..., e]`` into ``out[..., seg[e]]`` (int64, exact); shape ``(..., n_seg)``."""
        out = self.zeros(tuple(values.shape[:-1]) + (n_seg,))
        if self.numpy:
            flat = out.reshape(-1, n_seg)
            np.add.at(flat, (slice(None), seg), values.reshape(-1, values.shape[-1]))
            return flat.reshape(out.shape)
        return out.index_add_(out.ndim - 1, seg, values)


# -- bit-sliced counting ---------------------------------------------------------------------------


def count_planes(W, bk: Backend, axis: int = -1, stop: int = 1):
    """Add the words of ``W`` along ``axis`` as bit-sliced counters.

    Returns a list of planes, each of ``W``'s shape without ``axis``: bit ``a`` of plane ``l`` is bit
    ``l`` of the number of words whose bit ``a`` is set. With ``stop > 1`` the halving stops once
    ``axis`` has at most ``stop`` entries, which are kept (partial counters to be summed).
    """
    axis = axis % W.ndim
    lead = (slice(None),) * axis

    def part(p, lo, hi):
        return p[lead + (slice(lo, hi),)]

    m = W.shape[axis]
    halvings = 0
    while -(-m // 2**halvings) > stop:
        halvings += 1
    size = -(-m // 2**halvings) * 2**halvings  # padded once with zero words, so every halving is even
    if size > m:
        shape = list(W.shape)
        shape[axis] = size - m
        W = bk.cat([W, bk.zeros_like_dtype(tuple(shape), W)], axis)
    planes = [W]
    for _ in range(halvings):
        m = planes[0].shape[axis]
        h = m // 2
        out, carry = [], None
        for p in planes:
            x, y = part(p, 0, h), part(p, h, m)
            if carry is None:
                out.append(x ^ y)
                carry = x & y
            else:
                t = x ^ y
                out.append(t ^ carry)
                carry = (x & y) | (t & carry)
        out.append(carry)
        planes = out
    return [p[lead + (0,)] for p in planes] if stop == 1 else planes


def unpack_counts(planes, nbits: int, bk: Backend):
    """Counts per bit position from :func:`count_planes`' planes; shape ``(..., nbits)`` int64."""
    shifts = bk.arange(nbits)
    total = None
    for level, p in enumerate(planes):
        c = ((bk.asarray(p)[..., None] >> shifts) & 1) << level  # int64, whatever the word type
        total = c if total is None else total + c
    return total


def column_counts_axis(W, nbits: int, bk: Backend, axis: int, stop: int = 8):
    """For each of the low ``nbits`` bit positions, how many words of ``W`` along ``axis`` have it set: shape
    ``W.shape`` without ``axis``, plus ``(nbits,)``.

    The last few halvings (fewer than ``stop`` counters left) are replaced by unpacking the partial
    counters and summing them, which takes fewer (Python-level) operations on tiny arrays.
    """
    axis = axis % W.ndim
    planes = count_planes(W, bk, axis=axis, stop=stop)
    counts = unpack_counts(planes, nbits, bk)
    return counts if stop == 1 else counts.sum(axis=axis)  # stop = 1: the axis is already gone


# -- fixed-point rationals -------------------------------------------------------------------------


def fixed_point_bits(n: int, k: int) -> int:
    """Fractional bits ``Q`` of the per-sample fixed-point values for ``n`` samples and ``k`` neighbours.

    A value is ``num / d`` with ``num <= k t_x t_y`` and ``d <= 2 k t_x t_y`` (``t`` a tie-set size,
    at most ``n - 1``); ``2 num 2**Q + d`` must fit in int64, and so must the sum over ``n`` samples.
    At most 52 (float64 precision); 36 at the paper's size (``n = 1024``, ``k = 10``: a resolution of
    1.5e-11 of a neighbour per sample), 23 at ``n = 32768``, ``k = 100``.
    """
    bound = 2 * k * max(n - 1, 1) ** 2
    return max(0, min(52, 61 - bound.bit_length(), 61 - (n * k).bit_length()))


def fixed(num, d, q: int, bk: Backend):
    """``round(num / d * 2**q)`` (half up) in exact int64 arithmetic; ``d > 0``."""
    return bk.floordiv(2 * (num << q) + d, 2 * d)
