"""ImageNet-1k concepts for the concept-level displacement measures (arXiv:2609.24209 [1]_).

The concept level of the companion paper compares *concept* vectors rather than samples. Offline,
timm ships the ImageNet-1k synsets in class order, their lemmas and WordNet definitions
(``timm/data/_info/``); the classifier rows of two vision models (:func:`prh_lib.extract.classifier_rows`)
and a language model's embedding of a prompt naming the lemma are concept vectors of the same concepts.

References
----------
.. [1] "Displacement geometry captures platonic shared reality across models and modalities",
   arXiv:2609.24209, Sec. "Concept-level analysis".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

#: The prompt a language model embeds for a concept (``{lemma}``: its first lemma, ``{definition}``: WordNet's gloss).
PROMPT = "a photo of a {lemma}"


def imagenet_concepts() -> pd.DataFrame:
    """The 1000 ImageNet-1k classes in timm's class order.

    Returns
    -------
    DataFrame
        Columns ``synset`` (``n########``), ``lemma`` (first lemma, ``_`` -> space), ``lemmas`` (all),
        ``definition``; row ``k`` is class ``k``.

    Raises
    ------
    FileNotFoundError
        If timm's info files are missing.
    """
    import timm

    d = Path(timm.__file__).parent / "data" / "_info"
    synsets = (d / "imagenet_synsets.txt").read_text().split()
    if len(synsets) != 1000:
        raise ValueError(f"{d / 'imagenet_synsets.txt'} has {len(synsets)} synsets, expected 1000")

    def table(name):
        out = {}
        for line in (d / name).read_text(encoding="utf-8").splitlines():
            k, _, v = line.partition("\t")
            out[k] = v.strip()
        return out

    lem, dfn = table("imagenet_synset_to_lemma.txt"), table("imagenet_synset_to_definition.txt")
    return pd.DataFrame({"synset": synsets, "lemmas": [lem[s] for s in synsets],
                         "lemma": [lem[s].split(",")[0].strip().replace("_", " ") for s in synsets],
                         "definition": [dfn.get(s, "") for s in synsets]})


def concept_prompts(concepts: pd.DataFrame, *, template: str = PROMPT) -> list[str]:
    """One prompt per concept, ``template.format(lemma=..., definition=...)``."""
    return [template.format(lemma=r.lemma, definition=r.definition) for r in concepts.itertuples()]


def subsample(n_total: int, n: int | None, *, seed: int = 0) -> np.ndarray:
    """Sorted seeded subset of ``n`` of ``range(n_total)`` (all when ``n`` is None or >= ``n_total``)."""
    if n is None or n >= n_total:
        return np.arange(n_total)
    return np.sort(np.random.default_rng(seed).choice(n_total, size=n, replace=False))
