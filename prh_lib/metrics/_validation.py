"""Input checks shared by the public metric functions (private).

Every public function in :mod:`prh_lib.metrics` validates its arguments here once, then calls a private
implementation that trusts its input. Messages quote the offending shapes and values.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import torch

__all__: list[str] = []

_FLOAT_KINDS = "fiu"  # float, signed and unsigned integer


def to_tensor(X, name: str, *, ndim: int, device=None, check_finite: bool = True) -> torch.Tensor:
    """Check ``X`` and return it as a contiguous float32 tensor on ``device``.

    Integer and half-precision inputs are promoted to float32 and float64 inputs are rounded to float32:
    the metrics accumulate in float32 on purpose (float64 where an estimator needs it, as documented there).
    With ``check_finite=False`` the caller takes over the NaN/inf check (the k-NN family checks the
    diagonal of each Gram matrix instead, which is NaN or infinite exactly when a row is, and raises
    :func:`nonfinite_error`); everything else is still checked here.

    Raises
    ------
    TypeError
        If ``X`` is not a NumPy array or a torch tensor, or has a complex, boolean or object dtype.
    ValueError
        If ``X`` does not have ``ndim`` dimensions, has an empty axis, or holds NaN or infinite values.
    """
    what = "(n_samples, n_features)" if ndim == 2 else "(n_layers, n_samples, n_features)"
    if isinstance(X, torch.Tensor):
        if X.is_complex() or X.dtype == torch.bool:
            raise TypeError(f"{name} must hold real numbers; got dtype {X.dtype}")
        t = X.detach()
    elif isinstance(X, np.ndarray):
        if X.dtype.kind not in _FLOAT_KINDS:
            raise TypeError(f"{name} must hold real numbers; got dtype {X.dtype}")
        t = torch.from_numpy(np.ascontiguousarray(X))
    else:
        raise TypeError(f"{name} must be a numpy.ndarray or torch.Tensor; got {type(X).__name__}")
    if t.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D {what}; got shape {tuple(t.shape)}")
    if any(s == 0 for s in t.shape):
        raise ValueError(f"{name} has an empty axis: shape {tuple(t.shape)}")
    if device is not None:
        t = t.to(device)
    t = t.to(torch.float32) if t.dtype != torch.float32 else t
    if check_finite and not _all_finite(t):
        raise nonfinite_error(t, name)
    return t.contiguous()


def as_float64(x, name: str, ndim: int, shape_doc: str) -> np.ndarray:
    """NumPy array or torch tensor -> finite, C-contiguous float64 array of ``ndim`` (the displacement family's check).

    Raises
    ------
    TypeError
        If ``x`` is not an array or tensor of real numbers.
    ValueError
        If it is not ``ndim``-D (the message quotes ``shape_doc`` and the shape), is empty or holds NaN or inf.
    """
    if isinstance(x, torch.Tensor):
        if x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"{name} must hold real numbers; got dtype {x.dtype}")
        x = x.detach().cpu().double().numpy()  # .double() first: numpy has no bfloat16
    elif not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray or torch.Tensor; got {type(x).__name__}")
    arr = x
    if arr.dtype.kind not in "fiu":  # float, signed and unsigned integer
        raise TypeError(f"{name} must hold real numbers; got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D of shape {shape_doc}, got shape {arr.shape}")
    if 0 in arr.shape:
        raise ValueError(f"{name} must be non-empty, got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    n_bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
    if n_bad:
        raise ValueError(f"{name} contains {n_bad} non-finite values (NaN or inf), shape {arr.shape}")
    return arr


def nonfinite_error(t: torch.Tensor, name: str) -> ValueError:
    """The ValueError for a tensor with NaN or infinite values, counting them (call only on failure)."""
    n_nan = int(torch.isnan(t).sum())
    n_inf = int(torch.isinf(t).sum())
    if n_nan == n_inf == 0:
        return ValueError(
            f"{name} of shape {tuple(t.shape)} has values so large that squared row norms overflow "
            f"float32 (max |value| = {float(t.abs().max()):.3g}); rescale it"
        )
    return ValueError(f"{name} of shape {tuple(t.shape)} contains {n_nan} NaN and {n_inf} infinite values")


def _all_finite(t: torch.Tensor, chunk: int = 1 << 22) -> bool:
    """``torch.isfinite(t).all()`` in chunks: ``isfinite`` allocates an input-sized float temporary."""
    flat = t.reshape(-1)
    return all(bool(torch.isfinite(flat[s : s + chunk]).all()) for s in range(0, flat.numel(), chunk))


def check_same_samples(X: torch.Tensor, Y: torch.Tensor) -> int:
    """Return the shared number of samples (axis -2) or raise a ValueError quoting both shapes."""
    if X.shape[-2] != Y.shape[-2]:
        raise ValueError(
            f"X and Y must have the same number of samples (rows): "
            f"X has shape {tuple(X.shape)}, Y has shape {tuple(Y.shape)}"
        )
    return int(X.shape[-2])


def check_int(value, name: str, *, low: int, high: int | None = None, why: str = "") -> int:
    """Return ``value`` as int if ``low <= value <= high``, else raise (TypeError for non-integers)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {value!r} of type {type(value).__name__}")
    value = int(value)
    if value < low or (high is not None and value > high):
        rng = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be in {rng}{why}; got {name}={value}")
    return value


def check_k(k, n: int) -> int:
    """Neighbour count: ``1 <= k <= n - 1`` (a sample is never its own neighbour)."""
    return check_int(k, "k", low=1, high=n - 1, why=f" for n_samples={n}")


#: k-NN metrics whose score is 1 for any X and Y at ``k = n_samples - 1`` (every neighbourhood is all the
#: other samples), so that k is refused for them; CKNNA stays defined there (it becomes an unbiased CKA).
SATURATING_KNN = ("mutual_knn", "jaccard_knn", "cycle_knn")


def check_informative_k(k: int, n: int, metric: str) -> int:
    """Refuse ``k = n - 1`` for the :data:`SATURATING_KNN` metrics (a checked ``k`` otherwise passes).

    Raises
    ------
    ValueError
        If ``metric`` is one of :data:`SATURATING_KNN` and ``k == n - 1``.
    """
    if metric in SATURATING_KNN and k == n - 1:
        raise ValueError(
            f"{metric} with k={k} and n_samples={n} is 1 whatever X and Y are (k = n_samples - 1 makes every "
            f"neighbourhood all the other samples); use k <= n_samples - 2 = {n - 2}"
        )
    return k


def check_min_samples(n: int, minimum: int, estimator: str) -> None:
    """Raise if ``n`` is below what ``estimator`` needs."""
    if n < minimum:
        raise ValueError(f"{estimator} needs at least {minimum} samples; got n_samples={n}")


def check_fraction(value, name: str, *, closed_high: bool = False) -> float:
    """Return ``value`` as float if it lies in (0, 1) (or (0, 1] with ``closed_high``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {value!r}")
    value = float(value)
    ok = 0.0 < value <= 1.0 if closed_high else 0.0 < value < 1.0
    if not ok or not np.isfinite(value):
        raise ValueError(f"{name} must be in (0, 1{']' if closed_high else ')'}; got {name}={value}")
    return value


def constant_layers(X: torch.Tensor) -> torch.Tensor:
    """Boolean ``(n_layers,)``: True where every row of a ``(n_layers, n, d)`` stack is identical."""
    return torch.tensor([is_constant(Z) for Z in X], dtype=torch.bool, device=X.device)


def is_constant(Z: torch.Tensor) -> bool:
    """True if every row of ``Z`` (n, d) is identical. Compares rows 0 and 1 first (O(d)): real data
    differ there, so the full O(n d) comparison only runs for (nearly) degenerate layers."""
    if Z.shape[0] < 2:
        return True
    if not bool(torch.equal(Z[0], Z[1])):
        return False
    return bool((Z == Z[:1]).all())


def warn_degenerate(mask: torch.Tensor, name: str, metric: str, reason: str) -> None:
    """Warn (once per call) that the layers flagged in ``mask`` give NaN scores."""
    idx = torch.nonzero(mask).flatten().tolist()
    if idx:
        where = f"layers {idx}" if mask.numel() > 1 else "the representation"
        warnings.warn(
            f"{metric}: {name} is degenerate ({reason}) in {where}; their scores are NaN",
            RuntimeWarning,
            stacklevel=3,
        )


def resolve_device(device, *tensors_or_arrays) -> torch.device:
    """``device`` if given, else the device of the first torch input, else CPU."""
    if device is not None:
        return torch.device(device)
    for t in tensors_or_arrays:
        if isinstance(t, torch.Tensor):
            return t.device
    return torch.device("cpu")
