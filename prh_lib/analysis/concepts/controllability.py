"""The controllability ablation of arXiv:2609.24209 [1]_ on cached features.

A small student (a 2-layer MLP on one model's cached features) is trained three ways toward
a teacher model's features of the same rows:

* **fine-tuning** (``"finetune"``): cross-entropy on a task's labels, no teacher;
* **feature distillation** (``"mse"``): mean squared error between the student's output and the
  teacher's (standardised) features, :func:`feature_distillation_loss`;
* **relation distillation** (``"relation"``): KL divergence between the teacher's and the student's
  row-wise softmax distributions of cosine similarities of *whitened* features within a batch,
  :func:`relation_distillation_loss`.

The paper reports that fine-tuning keeps Pointwise and lowers Cross-Model, MSE distillation raises both, and relation
distillation leaves Pointwise and raises Cross-Model. The displacement measures before and after are computed by the
caller with either procedure (:func:`prh_lib.metrics.displacement.displacement_similarity`,
:func:`prh_lib.analysis.displacement.reference.reference_procedure`) on held-out rows.

Everything runs in torch on CPU in float32, full-batch or in mini-batches; a few hundred steps on
a few thousand rows take seconds.

References
----------
.. [1] "Displacement geometry captures platonic shared reality across models and modalities",
   arXiv:2609.24209, Sec. "Controllability" (ablation table).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

METHODS = ("finetune", "mse", "relation")


def batch_whiten(Z: torch.Tensor, *, eps: float = 1e-5) -> torch.Tensor:
    """Centre and ZCA-whiten the rows of a batch (differentiable).

    Parameters
    ----------
    Z : tensor of shape (n, d)
    eps : float, default 1e-5
        Added to the covariance's eigenvalues.

    Returns
    -------
    tensor of shape (n, d)
        ``(Z - mean) C^{-1/2}`` with ``C`` the batch covariance (``1/(n-1)``).
    """
    Zc = Z - Z.mean(dim=0, keepdim=True)
    C = Zc.T @ Zc / max(Z.shape[0] - 1, 1)
    evals, evecs = torch.linalg.eigh(C)
    W = evecs @ torch.diag(1.0 / torch.sqrt(evals.clamp_min(0) + eps)) @ evecs.T
    return Zc @ W


def feature_distillation_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean squared error ``mean_{i,k} (s_ik - t_ik)^2`` (feature / MSE distillation).

    Raises
    ------
    ValueError
        If the shapes differ.
    """
    if student.shape != teacher.shape:
        raise ValueError(f"student and teacher shapes differ: {tuple(student.shape)} vs {tuple(teacher.shape)}")
    return F.mse_loss(student, teacher)


def _relation_logits(Z: torch.Tensor, whiten: bool, temperature: float) -> torch.Tensor:
    Z = batch_whiten(Z) if whiten else Z
    U = F.normalize(Z, dim=1)
    S = U @ U.T / temperature
    n = S.shape[0]
    return S.masked_fill(torch.eye(n, dtype=torch.bool, device=S.device), float("-inf"))


def relation_distillation_loss(student: torch.Tensor, teacher: torch.Tensor, *, temperature: float = 0.1,
                               whiten: bool = True) -> torch.Tensor:
    """KL between the teacher's and the student's distributions of cosine similarities.

    For each row ``i`` of the batch, ``p_i = softmax_j(cos(t_i, t_j) / tau)`` and
    ``q_i = softmax_j(cos(s_i, s_j) / tau)`` over ``j != i`` (features whitened in the batch first
    when ``whiten``); the loss is ``mean_i KL(p_i || q_i)``. It depends on the student only through
    its cosine structure, so it constrains directions between rows and not where they sit.

    Parameters
    ----------
    student : tensor of shape (n, d_s)
    teacher : tensor of shape (n, d_t)
        Same rows; the dimensions may differ.
    temperature : float > 0, default 0.1
    whiten : bool, default True

    Returns
    -------
    scalar tensor >= 0 (0 when the cosine structures agree).

    Raises
    ------
    ValueError
        If the row counts differ or fewer than 3 rows are given.
    """
    if student.shape[0] != teacher.shape[0]:
        raise ValueError(f"student and teacher row counts differ: {student.shape[0]} vs {teacher.shape[0]}")
    if student.shape[0] < 3:
        raise ValueError("relation distillation needs at least 3 rows in a batch")
    ls = _relation_logits(student, whiten, temperature)
    lt = _relation_logits(teacher, whiten, temperature)
    logq = F.log_softmax(ls, dim=1)
    p = F.softmax(lt, dim=1)
    logp = F.log_softmax(lt, dim=1)
    off = ~torch.eye(ls.shape[0], dtype=torch.bool, device=ls.device)
    return (p * (logp - logq))[off].sum() / ls.shape[0]


class Student(nn.Module):
    """2-layer MLP ``Linear(d_in, hidden) -> GELU -> Linear(hidden, d_out)``; ``head`` is the task head
    :func:`train_student` adds for ``"finetune"`` (``None`` until then)."""

    def __init__(self, d_in: int, d_out: int, *, hidden: int = 256):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, d_out))
        self.head = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _std(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    return (X - X.mean(0)) / X.std(0).clip(1e-8)


def train_student(X, *, method: str, teacher=None, labels=None, init: "Student | None" = None,
                  hidden: int = 256, d_out: int | None = None, steps: int = 300, batch_size: int = 256,
                  lr: float = 1e-3, temperature: float = 0.1, seed: int = 0) -> tuple[Student, np.ndarray]:
    """Train a :class:`Student` on rows ``X`` by one of :data:`METHODS`.

    Parameters
    ----------
    X : array of shape (n, d_in)
        The student's input features (standardised per column here).
    method : {"finetune", "mse", "relation"}
    teacher : array of shape (n, d_t), optional
        Required for ``"mse"`` and ``"relation"`` (standardised per column here).
    labels : int array of shape (n,), optional
        Required for ``"finetune"``.
    init : Student, optional
        Start from a copy of this student (e.g. one pre-trained to reproduce ``X``'s own model), so
        "before" and "after" are the same network.
    hidden, d_out : int
        Sizes when ``init`` is not given (``d_out`` defaults to the teacher's dimension, else ``d_in``).
    steps, batch_size, lr, temperature, seed
        Adam steps on random mini-batches; ``seed`` fixes initialisation and batches.

    Returns
    -------
    (Student, ndarray of shape (n, d_out))
        The trained student and its outputs on all rows of ``X`` (float64).

    Raises
    ------
    ValueError
        For an unknown method or a missing teacher / labels.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method in ("mse", "relation") and teacher is None:
        raise ValueError(f"method {method!r} needs teacher=")
    if method == "finetune" and labels is None:
        raise ValueError("method 'finetune' needs labels=")
    torch.manual_seed(seed)
    Xt = torch.as_tensor(_std(X), dtype=torch.float32)
    T = torch.as_tensor(_std(teacher), dtype=torch.float32) if teacher is not None else None
    if init is not None:
        import copy
        model = copy.deepcopy(init)
    else:
        d_out = d_out or (T.shape[1] if T is not None else Xt.shape[1])
        model = Student(Xt.shape[1], d_out, hidden=hidden)
    if method == "finetune":
        y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
        model.head = nn.Linear(model.body[-1].out_features, int(y.max()) + 1)
    if method == "mse" and T.shape[1] != model.body[-1].out_features:
        raise ValueError(f"mse needs d_out == teacher dimension ({T.shape[1]}), student has "
                         f"{model.body[-1].out_features}")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    n = Xt.shape[0]
    for _ in range(steps):
        b = torch.randperm(n, generator=g)[:min(batch_size, n)]
        out = model(Xt[b])
        if method == "finetune":
            loss = F.cross_entropy(model.head(out), y[b])
        elif method == "mse":
            loss = feature_distillation_loss(out, T[b])
        else:
            loss = relation_distillation_loss(out, T[b], temperature=temperature)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        Z = model(Xt).double().numpy()
    return model, Z
