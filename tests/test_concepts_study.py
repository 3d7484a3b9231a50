"""The concept study's orchestration on small synthetic inputs."""

import numpy as np
import pytest

from prh_lib.analysis.concepts import study as S
from prh_lib.analysis.displacement.procedures import OURS, REFERENCE
from prh_lib.analysis.displacement.reference import synthetic_pair


def test_category_labels_merge_small_categories():
    hyp = {"a": ["p"], "b": ["p"], "c": ["q"], "p": ["root"], "q": ["root"], "root": []}
    y = S.category_labels(["a", "b", "c"], hyp, depth=1, min_count=2)
    assert y[0] == y[1] != y[2]  # a, b under p; c alone under q -> "other"


def test_ablation_table_and_before_rows():
    X, Y, _ = synthetic_pair(300, r=16, n_shared=8, dims=(24, 28), seed=0)
    labels = (X[:, 0] > np.median(X[:, 0])).astype(int)
    t = S.ablation(X, Y, labels, seeds=(0,), n_components=8, steps=20, hidden=16, n_pca=12)
    assert set(t.method) == {"finetune", "mse", "relation"} and set(t.procedure) == {OURS, REFERENCE}
    assert len(t) == 3 * 2 * 2
    before = t[(t.stage == "before") & (t.procedure == OURS)]
    assert before.cross_model.nunique() == 1  # the same input model before every method
    assert np.isfinite(t[["pointwise", "cross_model"]].to_numpy()).all()
    m = S.concept_measures({"p": (X, Y)}, n_components=8, seeds=(0, 1))
    assert len(m) == 4 and m.pointwise.between(-1, 1).all()
