"""The bf16 gate (issue 25, item 3): no model extracts in bfloat16 on a CPU unless its benchmark row allows it.

:func:`cpu_bf16_uses` lists every (notebook, profile, model) that would run in bfloat16 on a CPU: each
notebook's own ``dtype``/``device`` defaults and model names, under every profile that runs on a CPU
(the profile's ``dtype``/``device`` override the notebook's). ``test_no_cpu_bf16_without_permission``
fails as soon as one of them is not allowed by ``prh_lib/resources/bf16_allowed.json``; the checker itself
is shown to fail on a synthetic notebook that asks for bf16.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from prh_lib.models import ZOO
from prh_lib.models.precision import check_cpu_dtype, cpu_default_dtype, cpu_has_native_bf16, read_bf16_table
from prh_lib.run.profiles import PROFILES

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
#: Stand-ins of the paper's models (tiny random weights, :mod:`prh_lib.run.rehearsal`) rehearse the ``paper``
#: profile's code path, bf16 included; their numbers are never reported, so the gate does not apply.
STAND_IN = "~rehearsal"
#: Parameters that name a model loaded only when another parameter is non-empty (sec3_2_capability: the
#: interpolation ladder's model with no ladder fractions is never loaded).
USED_ONLY_WITH = {"ladder_model": "ladder_fractions"}
#: Parameters naming models whose weights are read, never run (ch_concepts: the ImageNet classifier rows,
#: ``extract.classifier_rows``, which has no dtype), and the parameter that picks among their rows.
WEIGHTS_ONLY = "concept_vision_models"
PICKS_FROM_WEIGHTS = ("ablation_student", "ablation_teacher")


def _names(value) -> set[str]:
    """Every string inside a (nested) parameter value."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(set(), *(_names(v) for v in value.values()))
    if isinstance(value, (list, tuple, set)):
        return set().union(set(), *(_names(v) for v in value))
    return set()


def notebook_parameters(source: str) -> dict:
    """A notebook's top-level assignments of literal values (first assignment of each name): its parameters."""
    params: dict = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                params.setdefault(node.targets[0].id, ast.literal_eval(node.value))
            except ValueError:
                continue
    return params


def cpu_bf16_uses(notebooks: dict[str, str], profiles: dict[str, dict]) -> list[tuple[str, str, str]]:
    """(notebook, profile, model) for every zoo model that a CPU run would extract in bfloat16.

    A profile's values replace the notebook's parameters of the same name (as the runner passes them); the
    models are the zoo names (``@random-init`` variants included) in the resulting parameter values.
    """
    out = []
    for nb, source in notebooks.items():
        own = notebook_parameters(source)
        for profile, overrides in profiles.items():
            params = {**own, **{k: v for k, v in overrides.items() if k in own}}
            device, dtype = params.get("device", "cpu"), params.get("dtype", "float32")
            if device != "cpu" or dtype != "bfloat16":
                continue
            used = {k: v for k, v in params.items() if k not in USED_ONLY_WITH or params.get(USED_ONLY_WITH[k])}
            rows = set(_names(used.pop(WEIGHTS_ONLY, [])))
            for k in PICKS_FROM_WEIGHTS:  # a model picked among the weight rows is not run either
                if used.get(k) in rows:
                    used.pop(k)
            named = {m for m in _names(used) if m.split("@")[0] in ZOO and STAND_IN not in m}
            out += [(nb, profile, m) for m in sorted(named)]
    return out


def _violations(notebooks, profiles, table) -> list[str]:
    bad = []
    for nb, profile, model in cpu_bf16_uses(notebooks, profiles):
        try:
            check_cpu_dtype(model.split("@")[0], "bfloat16", table=table)
        except ValueError as err:
            bad.append(f"{nb} under profile {profile!r}: {err}")
    return bad


@pytest.fixture(scope="module")
def table():
    return read_bf16_table()


@pytest.fixture(scope="module")
def notebooks():
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(NOTEBOOKS.glob("*.py"))}


def test_table_covers_the_zoo_and_is_valid(table):
    assert set(ZOO) <= set(table), f"models without a bf16 row: {sorted(set(ZOO) - set(table))}"


def test_no_cpu_bf16_without_permission(notebooks, table):
    assert notebooks, "no notebooks found"
    bad = _violations(notebooks, PROFILES, table)
    assert not bad, "\n".join(bad)


def test_checker_fails_on_a_notebook_asking_for_bf16(table):
    fake = {"fake.py": 'device = "cpu"\ndtype = "bfloat16"\nvision_models = ["efficientnet-lite0"]\nx = len([])\n'}
    assert cpu_bf16_uses(fake, {"offline": {}}) == [("fake.py", "offline", "efficientnet-lite0")]
    assert not table["efficientnet-lite0"]["allowed"]
    assert _violations(fake, {"offline": {}}, table)  # efficientnet-lite0's row does not allow bf16
    # a profile that turns bf16 on for a CPU run is caught too, and a GPU run is not the gate's business
    fp32 = {"fake.py": 'dtype = "float32"\ndevice = "cpu"\nmodels = ["efficientnet-lite2@random-init:0"]\n'}
    assert _violations(fp32, {"cpu-bf16": {"dtype": "bfloat16"}}, table)
    assert not _violations(fp32, {"gpu": {"dtype": "bfloat16", "device": "cuda"}}, table)
    # weight rows are read, not run: no dtype applies; a language model of the same page is still checked
    concepts = {"c.py": 'dtype = "bfloat16"\ndevice = "cpu"\nconcept_vision_models = ["efficientnet-lite0"]\n'
                        'ablation_student = "efficientnet-lite0"\nconcept_language_models = ["minilm-l6"]\n'}
    assert cpu_bf16_uses(concepts, {"offline": {}}) == [("c.py", "offline", "minilm-l6")]
    allowed = {"efficientnet-lite2": dict(table["efficientnet-lite2"], allowed=True, speed_ratio=2.8, max_rel_error=0.02,
                                 max_score_change=0.001, threshold=0.004, benchmark="test")}
    assert not _violations(fp32, {"cpu-bf16": {"dtype": "bfloat16"}}, allowed)


@pytest.mark.parametrize("model", sorted(ZOO))
def test_default_dtype_follows_the_row(model, table):
    expected = "bfloat16" if table[model]["allowed"] and cpu_has_native_bf16() else "float32"
    assert cpu_default_dtype(model, table=table) == expected
    assert cpu_default_dtype(model, table=table, native_bf16=False) == "float32"


def test_default_dtype_on_synthetic_rows():
    row = {"allowed": True, "speed_ratio": 3.4, "max_rel_error": 0.03, "max_score_change": 0.002,
           "threshold": 0.004, "benchmark": "benchmarks/bf16_extraction.py"}
    rows = {"a": row, "b": dict(row, allowed=False)}
    assert cpu_default_dtype("a", table=rows, native_bf16=True) == "bfloat16"
    assert cpu_default_dtype("a", table=rows, native_bf16=False) == "float32"  # emulated bf16: no
    assert cpu_default_dtype("b", table=rows, native_bf16=True) == "float32"
    assert cpu_default_dtype("unknown", table=rows, native_bf16=True) == "float32"
    check_cpu_dtype("a", "bfloat16", table=rows)
    check_cpu_dtype("b", "float32", table=rows)
    with pytest.raises(ValueError, match="'b'.*does not allow"):
        check_cpu_dtype("b", "bfloat16", table=rows)
    with pytest.raises(ValueError, match="'unknown'.*missing"):
        check_cpu_dtype("unknown", "bfloat16", table=rows)


@pytest.mark.parametrize("change, threshold, match", [
    (0.004, 0.004, "not below its threshold"),  # equal is not below
    (0.001, 0.0, "must be positive"),  # no interval, no threshold: nothing is allowed
    (None, 0.004, "without the benchmark's evidence"),
])
def test_table_refuses_an_allowed_row_without_evidence(tmp_path, change, threshold, match):
    row = {"allowed": True, "speed_ratio": 3.0, "max_rel_error": 0.02, "max_score_change": change,
           "threshold": threshold, "benchmark": "x"}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"models": {"m": row}}))
    with pytest.raises(ValueError, match=match):
        read_bf16_table(path)


def test_auto_dtype_follows_each_models_row_and_only_on_a_cpu():
    from prh_lib.models.precision import dtype_statement, feature_dtype

    rows = {"a": {"allowed": True, "speed_ratio": 3.0, "max_rel_error": 0.01, "max_score_change": 0.001,
                  "threshold": 0.002, "benchmark": "test"},
            "b": {"allowed": False, "speed_ratio": 1.4, "max_rel_error": 0.07, "max_score_change": 0.004,
                  "threshold": 0.001, "benchmark": "test"}}
    kw = dict(table=rows, native_bf16=True)
    assert feature_dtype("a", "auto", **kw) == "bfloat16"
    assert feature_dtype("a@random-init:0", "auto", **kw) == "bfloat16"  # the benchmark measured the twin too
    assert feature_dtype("a@interp:t=0.5:seed=0", "auto", **kw) == "float32"  # never measured
    assert feature_dtype("b", "auto", **kw) == "float32"
    assert feature_dtype("unknown", "auto", **kw) == "float32"
    assert feature_dtype("a", "auto", "cuda", **kw) == "float32"
    assert feature_dtype("a", "auto", table=rows, native_bf16=False) == "float32"  # emulated bf16: never
    assert feature_dtype("b", "float32", **kw) == "float32" and feature_dtype("b", "bfloat16", **kw) == "bfloat16"
    text = dtype_statement(["a", "a@random-init:0", "b"], "auto", **kw)
    assert "**bfloat16** for a (with its random-init twin) (`dtype = \"auto\"`: its row in" in text
    assert "float32 for b." in text
    both = dtype_statement(["a", "c", "c@random-init:0"], "auto", table={**rows, "c": rows["a"]}, native_bf16=True)
    assert "for a, c (with their random-init twins) (`dtype = \"auto\"`: their rows in" in both
    assert "0.0010 against its threshold 0.0020" in text
    assert "no model of this page has a row that allows" in dtype_statement(["b"], "auto", **kw)
    emulated = dtype_statement(["a", "b"], "auto", table=rows, native_bf16=False)  # a CPU without avx512_bf16/AMX
    assert "every model in float32" in emulated and "no native bfloat16, so the rows that allow it (a) do not" in emulated
    assert "off a CPU" in dtype_statement(["a"], "auto", "cuda", **kw)
    assert dtype_statement(["a"], "float32", **kw) == 'Features of every model in float32 (`dtype = "float32"`).'


def test_auto_dtype_reaches_the_feature_cache_key(monkeypatch):
    """``dtype="auto"`` names the same cache file as the dtype it resolves to: float32 for a model whose row does
    not allow bf16 (the committed table), bfloat16 once a row allows it on a CPU with native bf16."""
    from prh_lib import data, extract
    from prh_lib.models import precision

    pairs = data.Pairs("t", ("s0", "s1"), (None, None), ("a dog", "a cat"))
    row = read_bf16_table()["minilm-l6"]
    monkeypatch.setattr(precision, "read_bf16_table", lambda path=None: {"minilm-l6": dict(row, allowed=False)})
    assert extract.features_path("minilm-l6", pairs, dtype="auto") == \
        extract.features_path("minilm-l6", pairs, dtype="float32")
    allowed = {"minilm-l6": dict(row, allowed=True, speed_ratio=2.3, max_rel_error=0.01, max_score_change=0.001,
                                 threshold=0.002, benchmark="test")}
    monkeypatch.setattr(precision, "read_bf16_table", lambda path=None: allowed)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert extract.features_path("minilm-l6", pairs, dtype="auto") == \
        extract.features_path("minilm-l6", pairs, dtype="bfloat16")
    assert extract.features_path("minilm-l6@random-init:0", pairs, dtype="auto") == \
        extract.features_path("minilm-l6@random-init:0", pairs, dtype="bfloat16")
    assert extract.features_path("minilm-l6", pairs, dtype="auto", device="cuda") == \
        extract.features_path("minilm-l6", pairs, dtype="float32")
