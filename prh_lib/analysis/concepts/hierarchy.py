"""Hierarchical orthogonality of concept vectors on the WordNet tree (arXiv:2609.24209 [1]_).

The companion paper explains shared displacements by a hierarchy: with ``v_p`` a parent
concept's vector and ``v_c`` a child's, it reports

* child-parent cosine ``cos(v_c, v_p)`` ~ 0.72,
* variation-parent cosine ``cos(v_c - v_p, v_p)`` ~ 0 (the "variation" is orthogonal to the parent),
* sibling variation cosine ``cos(v_c1 - v_p, v_c2 - v_p)`` ~ -0.30.

This module computes the three statistics for one model's concept vectors and a parent map, with
a bootstrap interval over parents and a control that shuffles the tree (children re-assigned to
parents at random, keeping every parent's number of children; a parent keeps its own vector).

A parent is a concept of its own where the model has a vector for it (a language model's embedding of the parent's
lemma, :func:`read_synsets`; a classifier row where the parent is a class). Otherwise (a vision model's parents of
ImageNet-1k classes, which are leaves) it is the **centroid of its children**: then the variations sum to zero, and for
``k`` children of roughly equal variation norm their mean pairwise cosine is exactly ``-1/(k-1)``
(:func:`centroid_sibling_bound`), an artefact of the construction on any tree, not a property of the model.

WordNet 3.0 is read directly from Debian's ``wordnet-base`` files (``/usr/share/wordnet/data.noun``,
:func:`read_hypernyms`); ImageNet's ``n########`` ids are ``'n'`` + the synset's 8-digit offset.

References
----------
.. [1] "Displacement geometry captures platonic shared reality across models and modalities",
   arXiv:2609.24209, Sec. "Hierarchical orthogonality".
.. [2] Princeton WordNet 3.0, ``wndb(5)``: the data file format (pointer symbol ``@`` hypernym,
   ``@i`` instance hypernym).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

#: Where Debian's ``wordnet-base`` installs WordNet 3.0.
WORDNET_DIR = Path("/usr/share/wordnet")


def read_hypernyms(path=None) -> dict[str, list[str]]:
    """Hypernym map of WordNet nouns from a ``data.noun`` file [2]_.

    Parameters
    ----------
    path : path-like, optional
        A ``data.noun`` file; default ``WORDNET_DIR / "data.noun"``.

    Returns
    -------
    dict
        ``'n' + offset`` (ImageNet's spelling, e.g. ``'n01440764'``) -> list of its hypernyms'
        ids (pointers ``@`` and ``@i``), in file order.

    Raises
    ------
    FileNotFoundError
        If the file is missing (install Debian's ``wordnet-base``).
    """
    path = Path(path) if path is not None else WORDNET_DIR / "data.noun"
    if not path.exists():
        raise FileNotFoundError(f"WordNet noun data not found at {path}: install Debian's wordnet-base "
                                "(apt-get install wordnet-base) or pass path=")
    out: dict[str, list[str]] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for tok in (line.split() for line in f if not line.startswith(" ")):  # " ": the licence header
            k = 4 + 2 * int(tok[3], 16)  # after the w_cnt words and their lex_ids
            ptrs = [tok[k + 1 + 4 * p: k + 4 + 4 * p] for p in range(int(tok[k]))]
            out["n" + tok[0]] = ["n" + off for sym, off, pos in ptrs if sym in ("@", "@i") and pos == "n"]
    return out


def read_synsets(ids, path=None) -> pd.DataFrame:
    """WordNet noun synsets as concepts of their own, in the order of ``ids`` (``'n' + offset``, e.g. the parents of
    :func:`families`): ``synset``, ``lemma`` (first word, ``_`` -> space) and ``definition`` (the gloss), the columns
    :func:`~prh_lib.analysis.concepts.prompts.concept_prompts` reads; ``path`` as in :func:`read_hypernyms` (an
    unknown id raises ``KeyError``)."""
    with open(Path(path) if path is not None else WORDNET_DIR / "data.noun", encoding="utf-8", errors="replace") as f:
        syn = {"n" + ln[:8]: (ln.split()[4].replace("_", " "), ln.partition(" | ")[2].strip()) for ln in f if ln[0] != " "}
    ids = list(ids)
    return pd.DataFrame({"synset": ids, "lemma": [syn[i][0] for i in ids], "definition": [syn[i][1] for i in ids]})


def families(concepts, hypernyms: dict[str, list[str]], *, min_children: int = 2,
             max_children: int | None = None) -> dict[str, list[int]]:
    """Group concepts under their first (direct) hypernym.

    Parameters
    ----------
    concepts : sequence of str
        Synset ids of the concept vectors' rows.
    hypernyms : dict
        From :func:`read_hypernyms` (or a hand-made tree).
    min_children : int, default 2
        Parents with fewer concepts below them are dropped (a sibling needs two).
    max_children : int, optional
        Parents with more are dropped.

    Returns
    -------
    dict
        parent id -> row indices of its children among ``concepts``.
    """
    fam: dict[str, list[int]] = {}
    for i, c in enumerate(concepts):
        hs = hypernyms.get(c, [])
        if hs:
            fam.setdefault(hs[0], []).append(i)
    return {p: ix for p, ix in fam.items()
            if len(ix) >= min_children and (max_children is None or len(ix) <= max_children)}


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(a * b, axis=-1) / (na * nb)


def _family_stats(V: np.ndarray, children: list[int], parent_vec: np.ndarray | None) -> tuple[float, float, float]:
    C = V[children]
    p = C.mean(axis=0) if parent_vec is None else parent_vec
    var = C - p
    cp = float(np.nanmean(_cos(C, p[None])))
    vp = float(np.nanmean(_cos(var, p[None])))
    k = len(children)
    iu = np.triu_indices(k, 1)
    U = var / np.linalg.norm(var, axis=1, keepdims=True).clip(1e-300)
    sib = float(np.nanmean((U @ U.T)[iu])) if k > 1 else np.nan
    return cp, vp, sib


def hierarchy_statistics(V, fams: dict[str, list[int]], *, parent_vectors: dict | None = None,
                         n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """Child-parent, variation-parent and sibling cosines, averaged over families.

    Each statistic is first averaged within a family (children of one parent; siblings over the
    family's ``k (k-1) / 2`` pairs), then over families with equal weight.

    Parameters
    ----------
    V : array of shape (n_concepts, d)
        One model's concept vectors (used as given: centre them first if the paper's convention
        of centred vectors is wanted).
    fams : dict
        parent id -> row indices of its children (:func:`families`).
    parent_vectors : dict, optional
        parent id -> vector of shape (d,); a parent not in it is the centroid of its children.
    n_boot : int, default 1000
        Bootstrap resamples of the families for the interval (0: none, NaN bounds).
    seed : int, default 0
    level : float in (0, 1), default 0.95

    Returns
    -------
    dict
        ``child_parent``, ``variation_parent``, ``sibling`` (means over families), each with
        ``_low`` / ``_high`` percentile bounds, and ``n_families``.

    Raises
    ------
    ValueError
        If ``fams`` is empty or ``V`` is not 2-D.
    """
    V = np.asarray(V, dtype=np.float64)
    if V.ndim != 2:
        raise ValueError(f"V must be 2-D (n_concepts, d), got shape {V.shape}")
    if not fams:
        raise ValueError("no families: every parent has fewer than two children among the concepts")
    pv = parent_vectors or {}
    S = np.array([_family_stats(V, ix, None if p not in pv else np.asarray(pv[p], dtype=np.float64))
                  for p, ix in fams.items()])
    names = ("child_parent", "variation_parent", "sibling")
    out: dict[str, float] = {"n_families": len(fams)}
    means = np.nanmean(S, axis=0)
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        B = np.array([np.nanmean(S[rng.integers(0, len(S), len(S))], axis=0) for _ in range(n_boot)])
        lo, hi = np.nanpercentile(B, [50 * (1 - level), 50 * (1 + level)], axis=0)
    else:
        lo = hi = np.full(3, np.nan)
    for k, name in enumerate(names):
        out[name], out[name + "_low"], out[name + "_high"] = float(means[k]), float(lo[k]), float(hi[k])
    return out


def shuffled_families(fams: dict[str, list[int]], *, seed: int = 0) -> dict[str, list[int]]:
    """The control: the same family sizes, children drawn at random from all families' children."""
    rng = np.random.default_rng(seed)
    pool = rng.permutation(np.concatenate([np.asarray(ix) for ix in fams.values()]))
    out, start = {}, 0
    for p, ix in fams.items():
        out[p] = pool[start:start + len(ix)].tolist()
        start += len(ix)
    return out


def centroid_sibling_bound(k) -> np.ndarray:
    """``-1/(k-1)``: the mean pairwise cosine of ``k`` equal-norm vectors summing to zero."""
    k = np.asarray(k, dtype=np.float64)
    return -1.0 / (k - 1.0)


def hierarchy_table(vectors: dict, concepts, hypernyms: dict, *, parents=(), parent_vectors: dict | None = None,
                    n_boot: int = 1000, seed: int = 0, min_children: int = 2, max_children: int | None = None) -> pd.DataFrame:
    """:func:`hierarchy_statistics` per model, on the tree and on a shuffled tree.

    Parameters
    ----------
    vectors : dict
        model name -> array (n_concepts, d), rows in the order of ``concepts``; centred on their mean here.
    concepts : sequence of str
    hypernyms : dict
    parents, parent_vectors : sequence of str, dict
        Parent ids, and model name -> array (len(parents), d) of their own vectors (centred on the model's concepts'
        mean). For a model not in it, a parent among ``concepts`` is its row there, any other its children's centroid.

    Returns
    -------
    DataFrame
        One row per (model, tree in {"WordNet", "shuffled"}), the statistics' columns, ``own_parents`` (of the
        ``n_families`` parents, those with a vector of their own), ``centroid_artefact`` (mean ``-1/(k-1)``).
    """
    fams = families(concepts, hypernyms, min_children=min_children, max_children=max_children)
    artefact = float(np.mean(centroid_sibling_bound([len(ix) for ix in fams.values()]))) if fams else np.nan
    rows, index = [], {c: i for i, c in enumerate(concepts)}
    for name, V in vectors.items():
        V = np.asarray(V, dtype=np.float64)
        mu = V.mean(axis=0)
        own = (dict(zip(parents, np.asarray(parent_vectors[name], dtype=np.float64))) if name in (parent_vectors or {})
               else {p: V[index[p]] for p in fams if p in index})
        pv = {p: own[p] - mu for p in fams if p in own}
        for tree, f in (("WordNet", fams), ("shuffled", shuffled_families(fams, seed=seed))):
            stats = hierarchy_statistics(V - mu, f, parent_vectors=pv, n_boot=n_boot, seed=seed)
            rows.append({"model": name, "tree": tree, **stats, "own_parents": len(pv), "centroid_artefact": artefact})
    return pd.DataFrame(rows)
