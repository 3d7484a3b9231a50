"""Concept sets, classifier rows, and the two procedures on a planted synthetic pair."""

import numpy as np
import pytest

from prh_lib.analysis import concepts as CO
from prh_lib.analysis.displacement_reference import predicted_measures, reference_procedure, synthetic_pair
from prh_lib.metrics import displacement as D


def test_imagenet_concepts_in_class_order():
    c = CO.imagenet_concepts()
    assert len(c) == 1000 and c.synset.is_unique
    assert c.synset.iloc[0] == "n01440764" and c.lemma.iloc[0] == "tench"
    assert c.lemma.iloc[1] == "goldfish"
    assert CO.concept_prompts(c.iloc[:1]) == ["a photo of a tench"]
    ix = CO.subsample(1000, 600, seed=0)
    assert len(ix) == 600 and np.all(np.diff(ix) > 0)
    assert len(CO.subsample(10, None)) == 10


def test_classifier_rows_missing_model_names_it(tmp_path, monkeypatch):
    from prh_lib.extract import classifier_rows

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        classifier_rows("no-such-model")


@pytest.mark.parametrize("offset", [0.0, 3.0])
def test_two_procedures_on_planted_pair(offset):
    # planted: 16 of 32 latent coordinates shared with correlation 0.9 -> rho = 0.45; mean offsets of
    # norm ~ offset in whitened units. Ours (centred) gives rho for Pointwise and Cross-Model and ~0
    # Cross-Object at any offset; the reference adds the means back: Cross-Model stays rho, Pointwise
    # and Cross-Object follow predicted_measures.
    r, n = 32, 4000
    X, Y, rho = synthetic_pair(n, r=r, n_shared=16, correlation=0.9, offset_a=offset, offset_b=offset, seed=0)
    assert rho == pytest.approx(0.45)
    ours = D.displacement_similarity(X, Y, n_components=r, seed=0)
    assert ours.pointwise == pytest.approx(rho, abs=0.03)
    assert ours.cross_model == pytest.approx(rho, abs=0.03)
    assert ours.cross_object == pytest.approx(0.0, abs=0.03)
    ref = reference_procedure(X, Y, n_components=r, train_size=n // 2, seed=0)
    m = ref.measures()
    pred = predicted_measures(rho, ref.mean_a, ref.mean_b, norm2_a=r)
    assert m["cross_model"] == pytest.approx(rho, abs=0.04)
    assert m["pointwise"] == pytest.approx(pred["pointwise"], abs=0.04)
    assert m["cross_object"] == pytest.approx(pred["cross_object"], abs=0.04)
    if offset == 0.0:
        assert m["pointwise"] == pytest.approx(m["cross_model"], abs=0.04)
    else:  # means added back: the reference's Cross-Object departs from 0
        assert m["cross_object"] > 0.1
