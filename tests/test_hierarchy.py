"""Hierarchy statistics on small hand-checked cases (no WordNet package needed)."""

import numpy as np
import pytest

from prh_lib.analysis.concepts import hierarchy as H

# two data.noun lines in wndb(5) format: offset lex type w_cnt word lex_id p_cnt (sym off pos src)...
DATA_NOUN = (
    "  1 This software and database is being provided\n"
    "00000001 03 n 01 entity 0 000 | root\n"
    "00000002 03 n 01 animal 0 001 @ 00000001 n 0000 | an animal\n"
    "00000003 03 n 02 dog 0 domestic_dog 0 002 @ 00000002 n 0000 ~ 00000004 n 0000 | a dog\n"
    "00000004 03 n 01 puppy 0 001 @i 00000003 n 0000 | a young dog\n"
)


def test_read_hypernyms_parses_pointers(tmp_path):
    p = tmp_path / "data.noun"
    p.write_text(DATA_NOUN)
    h = H.read_hypernyms(p)
    assert h == {"n00000001": [], "n00000002": ["n00000001"], "n00000003": ["n00000002"],
                 "n00000004": ["n00000003"]}


def test_read_hypernyms_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="wordnet-base"):
        H.read_hypernyms(tmp_path / "nope")


def test_statistics_hand_case_with_parent_vector():
    # parent e1; children e1 + e2 and e1 - e2: child-parent cos = 1/sqrt2, variation _|_ parent,
    # siblings' variations opposite (-1)
    V = np.array([[1.0, 1.0], [1.0, -1.0]])
    s = H.hierarchy_statistics(V, {"p": [0, 1]}, parent_vectors={"p": np.array([1.0, 0.0])}, n_boot=0)
    assert s["child_parent"] == pytest.approx(1 / np.sqrt(2))
    assert s["variation_parent"] == pytest.approx(0.0, abs=1e-12)
    assert s["sibling"] == pytest.approx(-1.0)
    assert s["n_families"] == 1


def test_centroid_parent_gives_minus_one_over_k_minus_one():
    # k children at the vertices of a regular simplex around a centroid: siblings = -1/(k-1) exactly
    k = 4
    V = np.vstack([np.eye(k) + 3.0])  # centroid (3.25,...) plus simplex offsets
    s = H.hierarchy_statistics(V, {"p": list(range(k))}, n_boot=0)
    assert s["sibling"] == pytest.approx(-1 / (k - 1))
    assert H.centroid_sibling_bound(4) == pytest.approx(-1 / 3)


def test_read_synsets_gives_each_parent_its_first_lemma_and_gloss(tmp_path):
    p = tmp_path / "data.noun"
    p.write_text(DATA_NOUN)
    s = H.read_synsets(["n00000003", "n00000002"], p)
    assert s.to_dict("list") == {"synset": ["n00000003", "n00000002"], "lemma": ["dog", "animal"],
                                 "definition": ["a dog", "an animal"]}
    with pytest.raises(KeyError, match="n00000009"):
        H.read_synsets(["n00000009"], p)


# A hand-worked tree with explicit parents, concept vectors already centred (they sum to 0):
# P = (2, 0, 0) over a = (1, 1, 0), b = (1, -1, 0): cos(a, P) = 2 / (2 sqrt2) = 1/sqrt2; a - P = (-1, 1, 0),
#   cos(a - P, P) = -2 / (2 sqrt2) = -1/sqrt2; b - P = (-1, -1, 0), siblings cos = (1 - 1) / 2 = 0.
# Q = (-1, 0, 0) over c = (-1, 0, 1), d = (-1, 0, -1): cos(c, Q) = 1/sqrt2; c - Q = (0, 0, 1) _|_ Q: 0;
#   siblings (0, 0, 1).(0, 0, -1) = -1.
# Means over the two families: child-parent 1/sqrt2, variation-parent -1/(2 sqrt2), siblings -1/2.
TREE_V = np.array([[1.0, 1, 0], [1, -1, 0], [-1, 0, 1], [-1, 0, -1]])
TREE_PARENTS = {"P": np.array([2.0, 0, 0]), "Q": np.array([-1.0, 0, 0])}
TREE_HYP = {"a": ["P"], "b": ["P"], "c": ["Q"], "d": ["Q"]}


def test_explicit_parent_statistics_on_a_hand_worked_tree():
    fams = H.families(list("abcd"), TREE_HYP)
    s = H.hierarchy_statistics(TREE_V, fams, parent_vectors=TREE_PARENTS, n_boot=0)
    assert s["child_parent"] == pytest.approx(1 / np.sqrt(2))
    assert s["variation_parent"] == pytest.approx(-1 / (2 * np.sqrt(2)))
    assert s["sibling"] == pytest.approx(-0.5)
    # the same tree with centroid parents: P's centroid (1, 0, 0) gives 0 and -1 instead
    c = H.hierarchy_statistics(TREE_V, fams, n_boot=0)
    assert (c["variation_parent"], c["sibling"]) == pytest.approx((0.0, -1.0))


def test_shuffled_tree_pairs_children_with_other_parents_own_vectors():
    # swap the families: P = (2, 0, 0) over c, d: cos(c, P) = -1/sqrt2, c - P = (-3, 0, 1), cos(c - P, P) = -3/sqrt10,
    # siblings (9 - 1) / 10 = 0.8; Q = (-1, 0, 0) over a, b: -1/sqrt2, a - Q = (2, 1, 0): -2/sqrt5, (4 - 1) / 5 = 0.6
    s = H.hierarchy_statistics(TREE_V, {"P": [2, 3], "Q": [0, 1]}, parent_vectors=TREE_PARENTS, n_boot=0)
    assert s["child_parent"] == pytest.approx(-1 / np.sqrt(2))
    assert s["variation_parent"] == pytest.approx((-3 / np.sqrt(10) - 2 / np.sqrt(5)) / 2)
    assert s["sibling"] == pytest.approx(0.7)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_table_with_explicit_parents_centres_them_with_the_concepts_and_shuffles_children_only(seed):
    shift = np.random.default_rng(seed).normal(size=3) * 5  # the same offset on children and parents
    V, parents = TREE_V + shift, ["Q", "P"]
    P = np.array([TREE_PARENTS[p] for p in parents]) + shift
    t = H.hierarchy_table({"lm": V, "vision": V}, list("abcd"), TREE_HYP, parents=parents,
                          parent_vectors={"lm": P}, n_boot=0, seed=seed).set_index(["model", "tree"])
    lm = t.loc[("lm", "WordNet")]
    assert (lm["child_parent"], lm["variation_parent"], lm["sibling"]) == pytest.approx(
        (1 / np.sqrt(2), -1 / (2 * np.sqrt(2)), -0.5))
    assert lm["own_parents"] == 2 and t.loc[("vision", "WordNet"), "own_parents"] == 0
    assert t.loc[("vision", "WordNet"), "sibling"] == pytest.approx(-1.0)  # no vector: the centroid stands in
    fams = H.shuffled_families(H.families(list("abcd"), TREE_HYP), seed=seed)
    ref = H.hierarchy_statistics(TREE_V, fams, parent_vectors=TREE_PARENTS, n_boot=0)
    for k in ("child_parent", "variation_parent", "sibling"):
        assert t.loc[("lm", "shuffled"), k] == pytest.approx(ref[k])


def test_a_parent_among_the_concepts_is_its_own_row():
    V = np.array([[2.0, 0, 0], [3, 1, 0], [3, -1, 0]])  # "p" is a concept and the parent of "a" and "b"
    t = H.hierarchy_table({"m": V}, ["p", "a", "b"], {"a": ["p"], "b": ["p"]}, n_boot=0)
    assert set(t["own_parents"]) == {1}
    # centred on (8/3, 0, 0): p = (-2/3, 0, 0), a - p = (1, 1, 0): cos(a - p, p) = -1/sqrt2, siblings 0
    assert t.iloc[0]["variation_parent"] == pytest.approx(-1 / np.sqrt(2))
    assert t.iloc[0]["sibling"] == pytest.approx(0.0)


def test_families_and_shuffled_control():
    hyp = {"a": ["p"], "b": ["p"], "c": ["q"], "d": ["q"], "e": ["q"], "f": ["r"]}
    fams = H.families(list("abcdef"), hyp)
    assert fams == {"p": [0, 1], "q": [2, 3, 4]}  # r has one child: dropped
    sh = H.shuffled_families(fams, seed=1)
    assert [len(v) for v in sh.values()] == [2, 3]
    assert sorted(sum(sh.values(), [])) == [0, 1, 2, 3, 4]


def test_table_tree_beats_shuffled_on_planted_hierarchy():
    rng = np.random.default_rng(0)
    parents = rng.normal(size=(30, 20)) * 3
    V = np.vstack([p + rng.normal(size=(3, 20)) for p in parents])
    concepts = [f"c{i}" for i in range(len(V))]
    hyp = {c: [f"p{i // 3}"] for i, c in enumerate(concepts)}
    t = H.hierarchy_table({"m": V}, concepts, hyp, n_boot=200)
    tree = t[t.tree == "WordNet"].iloc[0]
    shuf = t[t.tree == "shuffled"].iloc[0]
    assert tree.child_parent > 0.8 > shuf.child_parent
    assert tree.child_parent_low <= tree.child_parent <= tree.child_parent_high
    assert tree.centroid_artefact == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="no families"):
        H.hierarchy_statistics(V, {})


def test_display_hierarchy_writes_each_statistic_with_its_interval_in_words():
    import pandas as pd
    import pytest

    from prh_lib.pages import ch_concepts as cp

    row = {"model": "minilm-l6", "tree": "WordNet", "n_families": 219, "own_parents": 219, "centroid_artefact": -0.737}
    for col, v in (("child_parent", 0.713), ("variation_parent", 0.01), ("sibling", -0.737)):
        row.update({col: v, f"{col}_low": v - 0.02, f"{col}_high": v + 0.02})
    shown = cp.display_hierarchy(pd.DataFrame([row]))
    assert shown.loc[0, "cos(child, parent)"] == "0.713 [0.693, 0.733]"
    assert shown.loc[0, "families"] == 219 and shown.loc[0, "parents with a vector of their own"] == 219
    assert not [c for c in shown.columns if "_" in c]
    with pytest.raises(ValueError, match="sibling_low"):
        cp.display_hierarchy(pd.DataFrame([row]).drop(columns=["sibling_low"]))
