"""Papermill sweeps: grids, slugs, key validation, and real sweeps of a tiny notebook into runs/."""

import os

from pathlib import Path

import nbformat
import pandas as pd
import pytest

from prh_lib import paths, results
from prh_lib.run import runner

# a notebook that loads no model: like 3.1 it writes the peak under the page's preprocessing (that of its
# layer_pair rows) and under another clipping choice it compares with, and one layer_pair row
TINY = '''# %% tags=["parameters"]
k = 5
seed = 0
label = "x"

# %%
from prh_lib import progress, results

assert k != 13, "thirteen is unlucky"
progress.note(f"scoring at k = {k}")
params = {"k": k, "seed": seed, "label": label}
rows = [{"model_x": "a", "model_y": "b", "metric": "mutual_knn", "quantity": "peak", "score": k / 100 + seed,
         "preprocessing": "clip(stack, q=0.95)"},
        {"model_x": "a", "model_y": "b", "metric": "mutual_knn", "quantity": "peak", "score": 9.0,
         "preprocessing": "none"},
        {"model_x": "a", "model_y": "b", "metric": "mutual_knn", "quantity": "layer_pair", "score": 0.0,
         "preprocessing": "clip(stack, q=0.95)"}]
results.write(rows, chapter="tiny_sweep", params=params, dataset="toy", draw=0, k=k, seed=seed)
'''


def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*")) \
        if folder.is_dir() else None


@pytest.fixture
def sweep_env(tmp_path, monkeypatch):
    src = tmp_path / "notebooks"
    src.mkdir()
    (src / "tiny_sweep.py").write_text(TINY)
    book = tmp_path / "book"
    book.mkdir()
    (book / "tiny_sweep.ipynb").write_text("the book's page")
    monkeypatch.setattr(paths, "notebooks_dir", lambda: src)
    monkeypatch.setattr(paths, "book_dir", lambda: book)
    monkeypatch.setenv("PRH_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    # the kernel imports this checkout's prh_lib
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(paths.repo_root()),
                                                                    os.environ.get("PYTHONPATH")])))
    real_book = _snapshot(paths.REPO_ROOT / "book")
    yield tmp_path
    assert (book / "tiny_sweep.ipynb").read_text() == "the book's page"
    assert sorted(p.name for p in book.iterdir()) == ["tiny_sweep.ipynb"]
    assert _snapshot(paths.REPO_ROOT / "book") == real_book


@pytest.mark.parametrize("text, expected", [
    ("k=5,10,20", ("k", [5, 10, 20])),
    ("k=5", ("k", [5])),
    ("clip_q=None,0.95", ("clip_q", [None, 0.95])),
    ("device=cpu,cuda", ("device", ["cpu", "cuda"])),
    ("fracs=[0.5,1.0],[1.0]", ("fracs", [[0.5, 1.0], [1.0]])),
    ("name='a,b','c'", ("name", ["a,b", "c"])),
])
def test_parse_sweep(text, expected):
    assert runner.parse_sweep(text) == expected


@pytest.mark.parametrize("bad, match", [("k", "key=v1"), ("k=", "key=v1"), ("=1,2", "key=v1"), ("k=5,5", "repeats")])
def test_parse_sweep_rejects_malformed(bad, match):
    with pytest.raises(ValueError, match=match):
        runner.parse_sweep(bad)


def test_grid_from_yaml_and_flags_is_a_cartesian_product(tmp_path):
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text("k: [5, 10]\nseed: [0, 1]\nclip_q: 0.95\n")
    grid = runner.sweep_grid(["label=a,b"], grid_file)
    assert grid == {"k": [5, 10], "seed": [0, 1], "clip_q": [0.95], "label": ["a", "b"]}
    combos = runner.sweep_combinations(grid)
    assert len(combos) == 8 and len({tuple(c.items()) for c in combos}) == 8
    assert combos[0] == {"k": 5, "seed": 0, "clip_q": 0.95, "label": "a"}
    assert combos[-1] == {"k": 10, "seed": 1, "clip_q": 0.95, "label": "b"}
    with pytest.raises(ValueError, match="'k' is swept twice"):
        runner.sweep_grid(["k=1,2"], grid_file)
    grid_file.write_text("- k\n- 5\n")
    with pytest.raises(ValueError, match="must map parameter names"):
        runner.sweep_grid([], grid_file)


def test_parameter_slugs_are_safe_and_distinct():
    assert runner.parameter_slug({"k": 5, "seed": 0}) == "k=5__seed=0"
    assert runner.parameter_slug({"clip_q": None, "device": "cuda:0"}).startswith("clip_q=None__device=cuda-0__")
    combos = [{"loc": "/data/a b"}, {"loc": "/data/a/b"}, {"fracs": [0.5, 1.0]}, {"fracs": [0.5, 10]},
              {"m": "x" * 300}]
    slugs = [runner.parameter_slug(c) for c in combos]
    assert len(set(slugs)) == len(slugs)
    for s in slugs:
        assert len(s) <= 120 and "/" not in s and " " not in s and not s.startswith(".")


def test_a_sweep_writes_one_notebook_and_one_run_per_combination(sweep_env, capsys):
    runs = sweep_env / "runs" / "tiny_sweep"
    # the smoke profile sets k=5; -p overrides it; the sweep goes on top of both
    assert runner.main(["tiny_sweep", "--params", "smoke", "-p", "seed=1", "--sweep", "k=6,7"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    notebooks = sorted(p.name for p in runs.iterdir() if p.suffix != ".csv")
    assert notebooks == ["k=6.ipynb", "k=7.ipynb"]  # no temp folders left
    for k in (6, 7):
        nb = nbformat.read(str(runs / f"k={k}.ipynb"), as_version=4)
        injected = [c.source for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
        assert f"k = {k}" in injected[0] and "seed = 1" in injected[0]
        line = next(ln for ln in captured.err.splitlines() if ln.startswith(f"[k={k}]"))
        assert line.endswith(f"scoring at k = {k}")  # the kernel's progress, named by its combination
    df = results.load(chapter="tiny_sweep")
    assert len(df) == 6 and df["run_id"].nunique() == 2
    peaks = df[(df["quantity"] == "peak") & (df["preprocessing"] != "none")].set_index("k")["score"]
    assert peaks.to_dict() == pytest.approx({6: 1.06, 7: 1.07})
    assert set(df["seed"]) == {1}
    # the runs: one row per combination with its status and run id (printed, so the rows can be selected)
    table = out[out.index("[prh-run] sweep of tiny_sweep"):]
    lines = table.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["combination", "status"])
    runs_rows = [ln.split() for ln in lines[head + 1:head + 3]]
    assert [r[:2] for r in runs_rows] == [["k=6", "ok"], ["k=7", "ok"]]
    assert {r[4] for r in runs_rows} == set(df["run_id"])
    # the scores: one row per comparison and dataset, one column per combination, the page's preprocessing
    # only (a mean with the 'none' clipping's 9.0 would read 5.03 and 5.035)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("peak score"))
    assert "clip(stack, q=0.95)" in lines[at]
    assert lines[at + 1].split() == ["comparison", "dataset", "k=6", "k=7"]
    assert lines[at + 2].split() == ["a", "×", "b", "toy", "1.0600", "1.0700"]
    assert lines[at + 2].startswith("a × b")  # words left-aligned
    assert max(len(ln) for ln in lines[1:at + 3]) < 100  # a terminal can read it (the first line names the folder)
    # the whole table, in a file named at the end
    csv = Path(lines[-1].split("the whole table: ")[1])
    whole = pd.read_csv(csv)
    assert len(whole) == 2 and whole.set_index("combination")["peak"].to_dict() == pytest.approx({"k=6": 1.06, "k=7": 1.07})
    assert set(whole["run_id"]) == set(df["run_id"]) and set(whole["status"]) == {"ok"}
    first_k6 = set(df.loc[df["k"] == 6, "run_id"])

    # rerunning a combination replaces its notebook and its rows; nothing is duplicated
    assert runner.main(["tiny_sweep", "--params", "smoke", "-p", "seed=1", "--sweep", "k=6"]) == 0
    df = results.load(chapter="tiny_sweep")
    assert len(df) == 6 and df["run_id"].nunique() == 2
    assert set(df.loc[df["k"] == 6, "run_id"]).isdisjoint(first_k6)
    assert sorted(p.name for p in runs.iterdir() if p.suffix != ".csv") == ["k=6.ipynb", "k=7.ipynb"]


def test_wrong_type_sweep_values_are_refused_before_any_kernel_starts(sweep_env, capsys):
    with pytest.raises(SystemExit):
        runner.main(["tiny_sweep", "--sweep", "k=6,abc"])
    err = capsys.readouterr().err
    assert "parameter 'k' expects int (its default is 5); got 'abc' (str)" in err
    assert not (sweep_env / "runs").exists()


def test_a_failing_combination_is_reported_and_the_others_still_run(sweep_env, capsys):
    runs = sweep_env / "runs" / "tiny_sweep"
    runs.mkdir(parents=True)
    (runs / "k=13.ipynb").write_text("stale notebook of an earlier sweep")
    assert runner.main(["tiny_sweep", "--sweep", "k=13,6"]) == 1
    captured = capsys.readouterr()
    assert sorted(p.name for p in runs.iterdir() if p.suffix != ".csv") == ["k=6.ipynb"]
    assert "unlucky" in captured.out and "1 combination(s) failed" in captured.err
    table = captured.out[captured.out.index("[prh-run] sweep of tiny_sweep"):]
    rows = {ln.split()[0]: ln.split()[1] for ln in table.splitlines()[2:4]}
    assert rows == {"k=13": "failed", "k=6": "ok"}
    assert results.load(chapter="tiny_sweep", quantity="peak")["k"].tolist() == [6, 6]  # two clippings


def test_undeclared_sweep_keys_are_rejected_before_anything_runs(sweep_env, capsys):
    with pytest.raises(SystemExit):
        runner.main(["tiny_sweep", "--sweep", "k=5,6", "--sweep", "topk=5,10"])
    err = capsys.readouterr().err
    assert "declares no parameter 'topk'" in err and "its parameters: k, label, seed" in err
    assert not (sweep_env / "runs").exists()
    with pytest.raises(SystemExit):
        runner.main(["--sweep", "k=5,6"])
    assert "needs the notebook" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        runner.main(["tiny_sweep", "--sweep", "k=5,6", "--output-dir", str(sweep_env / "o")])
    assert "--runs-dir" in capsys.readouterr().err
