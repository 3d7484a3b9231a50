"""The notebook runner: overrides, parameter filtering, atomic output, CLI errors."""

import pytest

from prh_lib import paths
from prh_lib.pages import report
from prh_lib.run import book as run_book
from prh_lib.run import runner
from prh_lib.run.profiles import PROFILES, get_profile

TINY = '''# %% tags=["parameters"]
a = 1
b = "x"

# %%
from prh_lib.pages import report
report.record("tiny", {"a": a, "b": b})
assert a != 13, "thirteen is unlucky"
'''


@pytest.fixture
def tiny_notebooks(tmp_path, monkeypatch):
    src = tmp_path / "notebooks"
    src.mkdir()
    (src / "tiny.py").write_text(TINY)
    (src / "_private.py").write_text("x = 1\n")
    monkeypatch.setattr(paths, "notebooks_dir", lambda: src)
    return tmp_path


@pytest.mark.parametrize("text, expected", [
    ("k=20", ("k", 20)), ("clip_q=None", ("clip_q", None)), ("device=cuda", ("device", "cuda")),
    ("models=['a', 'b']", ("models", ["a", "b"])), ("alpha=0.01", ("alpha", 0.01)), (" x = 'a=b'", ("x", "a=b")),
])
def test_parse_override(text, expected):
    assert runner.parse_override(text) == expected


@pytest.mark.parametrize("bad", ["k", "=3", ""])
def test_parse_override_rejects_malformed(bad):
    with pytest.raises(ValueError, match="key=value"):
        runner.parse_override(bad)


def test_profiles():
    assert set(PROFILES) >= {"offline", "smoke", "paper"}
    assert get_profile("offline") == {}
    p = get_profile("smoke")
    p["k"] = 99
    assert get_profile("smoke")["k"] != 99  # a copy
    with pytest.raises(ValueError, match="valid names"):
        get_profile("huge")


def test_only_declared_parameters_reach_the_notebook(tiny_notebooks):
    assert run_book.available_notebooks() == ["tiny"]  # "_private.py" is not a notebook
    out = runner.run_notebook("tiny", {"a": 5, "undeclared": 7}, output_dir=tiny_notebooks / "out", quiet=True)
    assert report.read_record(out, "tiny") == {"a": 5, "b": "x"}
    with pytest.raises(KeyError, match="has no record"):
        report.read_record(out, "other")


def test_a_failing_notebook_leaves_no_output(tiny_notebooks):
    import papermill

    out_dir = tiny_notebooks / "out"
    with pytest.raises(papermill.PapermillExecutionError, match="unlucky"):
        runner.run_notebook("tiny", {"a": 13}, output_dir=out_dir, quiet=True)
    assert not (out_dir / "tiny.ipynb").exists()
    assert [p for p in out_dir.iterdir()] == []


def test_a_long_chapter_survives_another_writes_cleaning_of_stale_temporaries(tiny_notebooks, monkeypatch):
    """A chapter executes for up to half an hour; another notebook's atomic write into book/ meanwhile removes
    temporary folders untouched that long (paths.remove_stale_temporaries). The executing notebook keeps its
    output in its own private folder until it is done, so such a cleaning cannot take it away (it did: 3.3
    under load, 'output folder ... .tmp doesn't exist')."""
    import papermill

    out_dir = tiny_notebooks / "out"
    out_dir.mkdir()
    real = papermill.execute_notebook

    def execute_while_another_write_cleans(*args, **kwargs):
        result = real(*args, **kwargs)
        assert paths.remove_stale_temporaries(out_dir, older_than=-1) == []  # nothing of ours is there
        return result

    monkeypatch.setattr(papermill, "execute_notebook", execute_while_another_write_cleans)
    out = runner.run_notebook("tiny", {"a": 4}, output_dir=out_dir, quiet=True)
    assert report.read_record(out, "tiny") == {"a": 4, "b": "x"}
    assert sorted(p.name for p in out_dir.iterdir()) == ["tiny.ipynb"]


def test_cli_lists_and_rejects(tiny_notebooks, capsys):
    assert runner.main(["--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    at = listed.index("tiny")  # the notebook, then its parameters one per line with their defaults as written
    assert listed[at + 1:at + 3] == ["  a = 1", '  b = "x"']
    with pytest.raises(SystemExit):
        runner.main(["nonexistent", "--no-build"])
    assert "unknown notebooks ['nonexistent']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        runner.main(["tiny", "--params", "huge", "--no-build"])
    assert "valid names" in capsys.readouterr().err
    assert runner.main(["tiny", "-p", "a=2", "--no-build", "--output-dir", str(tiny_notebooks / "o")]) == 0
    assert report.read_record(tiny_notebooks / "o" / "tiny.ipynb", "tiny")["a"] == 2


def test_figures_are_recorded_even_with_a_headless_backend_set(tiny_notebooks, monkeypatch):
    import nbformat

    (tiny_notebooks / "notebooks" / "fig.py").write_text(
        '# %% tags=["parameters"]\nn = 3\n\n# %%\nimport matplotlib.pyplot as plt\nplt.plot(range(n))\n')
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = runner.run_notebook("fig", {}, output_dir=tiny_notebooks / "out", quiet=True)
    outputs = [o for c in nbformat.read(str(out), as_version=4).cells for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    import os
    assert os.environ["MPLBACKEND"] == "Agg"


# ------------------------------------------------------------------ parameters no notebook declares (issue 13)


def test_an_override_no_selected_notebook_declares_is_an_error_before_anything_runs(tiny_notebooks, capsys):
    out_dir = tiny_notebooks / "o"
    with pytest.raises(SystemExit):
        runner.main(["tiny", "-p", "kk=5", "--no-build", "--output-dir", str(out_dir)])
    assert "parameter 'kk' is not declared by notebook 'tiny'; valid parameters: a, b" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # also in a sweep, and with several notebooks: the union is valid
        runner.main(["tiny", "-p", "kk=5", "--sweep", "a=1,2"])
    assert "parameter 'kk' is not declared" in capsys.readouterr().err
    (tiny_notebooks / "notebooks" / "other.py").write_text('# %% tags=["parameters"]\nkk = 1\n\n# %%\nkk\n')
    runner.check_overrides(["tiny", "other"], {"a": 1, "kk": 2})
    with pytest.raises(ValueError, match=r"'zz' is not declared by any of the notebooks tiny, other; "
                                         r"valid parameters: a, b, kk"):
        runner.check_overrides(["tiny", "other"], {"zz": 1})
    assert not out_dir.exists()


def test_profile_keys_a_notebook_does_not_declare_are_fine(tiny_notebooks):
    assert set(get_profile("smoke")) - {"a", "b"}  # the profile carries keys tiny does not declare
    assert runner.main(["tiny", "--params", "smoke", "--no-build", "--output-dir", str(tiny_notebooks / "o")]) == 0


@pytest.mark.parametrize("source, cells", [
    ('# %%\na = 1\n\n# %%\nprint(a)\n', 0),
    ('# %% tags=["parameters"]\na = 1\n\n# %% tags=["parameters"]\nb = 2\n', 2),
])
def test_a_notebook_without_exactly_one_parameters_cell_is_an_error(tiny_notebooks, capsys, source, cells):
    (tiny_notebooks / "notebooks" / "untagged.py").write_text(source)
    with pytest.raises(SystemExit):
        runner.main(["untagged", "tiny", "--no-build", "--output-dir", str(tiny_notebooks / "o")])
    assert f"untagged.py has {cells} cells tagged 'parameters'; it needs exactly one" in capsys.readouterr().err
    assert not (tiny_notebooks / "o").exists()  # tiny did not run either
    with pytest.raises(ValueError, match="untagged.py has"):
        runner.run_notebook("untagged", {"a": 2}, output_dir=tiny_notebooks / "o", quiet=True)
    with pytest.raises(ValueError, match="untagged.py has"):
        runner.check_sweep_keys("untagged", ["a"])


def test_timing_table_lists_steps_slowest_first_with_the_total():
    text = runner.timing_table({"a": 1.0, "sec3_1_layerwise": 12.25, "(book build)": 3.0}, total=16.5)
    lines = text.splitlines()
    assert lines[0] == "[prh-run] wall time per step:"
    assert [ln.split()[0] for ln in lines[1:]] == ["sec3_1_layerwise", "(book", "a", "total"]
    assert lines[1].endswith("12.2 s") and lines[-1].endswith("16.5 s")


# ------------------------------------------------------------------------ notebooks side by side


def test_two_notebooks_side_by_side_write_both_and_remember_their_times(tiny_notebooks, monkeypatch, capfd):
    from prh_lib.run import schedule

    monkeypatch.setenv("PRH_CACHE_DIR", str(tiny_notebooks / "cache"))
    for var in schedule.THREAD_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    (tiny_notebooks / "notebooks" / "tiny2.py").write_text(TINY.replace(
        'report.record("tiny", {"a": a, "b": b})',
        'import os\nreport.record("tiny2", {"a": a, "threads": os.environ.get("OMP_NUM_THREADS")})'))
    out = tiny_notebooks / "o"
    assert runner.main(["tiny", "tiny2", "--jobs", "2", "--no-build", "--output-dir", str(out), "-p", "a=4"]) == 0
    assert report.read_record(out / "tiny.ipynb", "tiny") == {"a": 4, "b": "x"}
    # each kernel gets its share of the cores, so two never oversubscribe them
    threads = str(max(1, __import__("os").cpu_count() // 2))
    assert report.read_record(out / "tiny2.ipynb", "tiny2") == {"a": 4, "threads": threads}
    printed = capfd.readouterr().out
    assert "2 at a time" in printed and printed.count("[prh-run] wrote ") == 2
    assert set(schedule.remembered_seconds()) == {"tiny", "tiny2"}
    assert all(s > 0 for s in schedule.remembered_seconds().values())


def test_a_failing_notebook_side_by_side_fails_the_run_by_name(tiny_notebooks, monkeypatch, capfd):
    monkeypatch.setenv("PRH_CACHE_DIR", str(tiny_notebooks / "cache"))
    (tiny_notebooks / "notebooks" / "tiny2.py").write_text(TINY.replace("a = 1", "a = 13"))
    out = tiny_notebooks / "o"
    assert runner.main(["tiny", "tiny2", "--jobs", "2", "--no-build", "--output-dir", str(out)]) == 1
    err = capfd.readouterr().err
    assert "tiny2 failed" in err and "thirteen is unlucky" in err
    assert not (out / "tiny2.ipynb").exists()
    # one at a time, the same error, by name
    assert runner.main(["tiny2", "--jobs", "1", "--no-build", "--output-dir", str(out)]) == 1
    assert "tiny2 failed" in capfd.readouterr().err


def test_default_jobs(monkeypatch):
    from prh_lib.run import schedule

    monkeypatch.delenv("PRH_JOBS", raising=False)
    monkeypatch.delenv("PRH_CORES", raising=False)
    assert schedule.default_jobs({"device": "cuda"}) == 1
    cores = len(__import__("os").sched_getaffinity(0))
    assert schedule.default_jobs({}) == schedule.plan_lanes(cores, 8)[0]
    monkeypatch.setenv("PRH_CORES", "16")  # the cores this process may use, as a lane's share says
    assert schedule.default_jobs({}) == 8 and schedule.default_jobs({}, 3) == 3
    monkeypatch.setenv("PRH_JOBS", "3")
    assert schedule.default_jobs({"device": "cuda"}) == 3
    monkeypatch.setenv("PRH_JOBS", "two")
    with pytest.raises(ValueError, match="PRH_JOBS must be a positive integer; got 'two'"):
        schedule.default_jobs({})


@pytest.mark.parametrize("cores, notebooks, device, plan", [
    (1, 8, "cpu", (1, 1)),
    (2, 8, "cpu", (2, 1)),    # the reference machine: two notebooks, one core each
    (2, 1, "cpu", (1, 2)),    # one chapter alone gets both cores
    (8, 8, "cpu", (4, 2)),    # one lane per two cores: each kernel scores two draws side by side
    (16, 8, "cpu", (8, 2)),
    (16, 3, "cpu", (3, 5)),   # never more lanes than notebooks; their cores grow instead
    (16, 8, "cuda", (1, 16)),  # one GPU: one kernel at a time, every core for it
])
def test_the_schedule_follows_the_machine(cores, notebooks, device, plan):
    from prh_lib.run import schedule

    lanes, per_lane = schedule.plan_lanes(cores, notebooks, device=device)
    assert (lanes, per_lane) == plan
    assert lanes * per_lane <= max(cores, 1)  # never oversubscribed


@pytest.mark.parametrize("override, message", [
    ("a=abc", "parameter 'a' expects int (its default is 1); got 'abc' (str)"),
    ("a=1.5", "parameter 'a' expects int (its default is 1); got 1.5 (float)"),
    ("a=True", "parameter 'a' expects int (its default is 1); got True (bool)"),
    ("b=3", "parameter 'b' expects str (its default is \"x\"); got 3 (int)"),
])
def test_a_wrong_type_is_refused_before_any_kernel_starts(tiny_notebooks, capsys, monkeypatch, override, message):
    def no_kernel(*args, **kwargs):
        raise AssertionError("a kernel was started")

    monkeypatch.setattr(runner, "_execute_notebook", no_kernel)
    with pytest.raises(SystemExit):
        runner.main(["tiny", "-p", override, "--no-build", "--output-dir", str(tiny_notebooks / "o")])
    err = capsys.readouterr().err
    assert f"notebook 'tiny': {message}" in err
    assert not (tiny_notebooks / "o").exists()


@pytest.mark.parametrize("value, default", [(None, "1"), (2, "1.0"), ((1, 2), "[0]"), ("x", "None"),
                                            (3, "some_function()")])
def test_values_that_fit_their_default_pass(value, default):
    assert runner.override_type_error("p", value, default) is None


@pytest.fixture
def fresh_env(tiny_notebooks, monkeypatch):
    """The tiny notebooks with a cache and a data root of their own (a coco-mini folder and a sibling)."""
    monkeypatch.setenv("PRH_CACHE_DIR", str(tiny_notebooks / "cache"))
    data = tiny_notebooks / "data"
    for d in ("coco-mini", "flickr8k-1k"):
        (data / d / "images").mkdir(parents=True)
        (data / d / "captions.json").write_text("{}")
    monkeypatch.setenv("PRH_DATA_ROOT", str(data / "coco-mini"))
    return tiny_notebooks


def _run(env, capfd, *extra):
    assert runner.main(["tiny", "--no-build", "--output-dir", str(env / "o"), *extra]) == 0
    return capfd.readouterr().out


def test_an_unchanged_notebook_is_skipped_and_each_input_change_executes_it(fresh_env, monkeypatch, capfd):
    import os

    out = fresh_env / "o" / "tiny.ipynb"
    assert "tiny: to execute (not executed yet)" in _run(fresh_env, capfd)
    written = out.stat().st_mtime_ns
    printed = _run(fresh_env, capfd)
    assert "tiny: up to date" in printed and "[prh-run] wrote" not in printed
    assert out.stat().st_mtime_ns == written  # not rewritten

    def executes(why, *extra):
        printed = _run(fresh_env, capfd, *extra)
        assert f"tiny: to execute ({why})" in printed and "[prh-run] wrote" in printed, printed
        assert "up to date" in _run(fresh_env, capfd, *extra)  # and is up to date again after

    a2 = ("-p", "a=2")
    executes("its parameters changed", *a2)
    nb = fresh_env / "notebooks" / "tiny.py"
    nb.write_text(nb.read_text() + "\n# an edit\n")
    executes("its notebook changed", *a2)
    image = fresh_env / "data" / "flickr8k-1k" / "images" / "1.jpg"  # a sibling dataset gains a file
    image.write_bytes(b"x")
    executes("its data changed", *a2)
    os.utime(image, ns=(1, 1))  # ... or a file of it is modified (make's rule: size and modification time)
    executes("its data changed", *a2)
    monkeypatch.setenv("PRH_CACHE_DIR", str(fresh_env / "another-cache"))  # results table without its run
    executes("the results-table run that wrote it is not in this cache", *a2)
    printed = _run(fresh_env, capfd, "--force", *a2)
    assert "[prh-run] wrote" in printed and "tiny:" not in printed


def test_skipping_needs_every_input_local(fresh_env, monkeypatch, capfd):
    from prh_lib.run import freshness

    _run(fresh_env, capfd)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert freshness.skipping_allowed("offline") and freshness.skipping_allowed("smoke")
    assert not freshness.skipping_allowed("paper")  # Hub models are named, not hashed: always executed
    assert runner.main(["tiny", "--no-build", "--params", "paper", "--output-dir", str(fresh_env / "o")]) == 0
    assert "[prh-run] wrote" in capfd.readouterr().out
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert freshness.skipping_allowed("paper")


def test_library_digest_reads_every_file_and_the_record_is_in_the_page(fresh_env, tmp_path, capfd):
    from prh_lib.run import freshness

    lib = tmp_path / "lib"
    (lib / "sub").mkdir(parents=True)
    (lib / "a.py").write_text("x = 1\n")
    (lib / "sub" / "b.json").write_text("{}")
    before = freshness._library_digest(lib)
    (lib / "sub" / "b.json").write_text("[]")  # same size: the bytes are read, not only the sizes
    assert freshness._library_digest(lib) != before
    _run(fresh_env, capfd)
    rec = freshness.recorded_inputs(fresh_env / "o" / "tiny.ipynb")
    assert set(rec["digests"]) == {"notebook", "parameters", "library", "packages", "data", "environment"}
    assert rec["run_id"] and freshness.up_to_date(fresh_env / "o" / "tiny.ipynb", rec["digests"]) == (True, "")
    assert freshness.up_to_date(fresh_env / "o" / "missing.ipynb", rec["digests"]) == (False, "not executed yet")


def test_a_system_file_a_page_reads_is_an_input(fresh_env, monkeypatch, capfd):
    from prh_lib.run import freshness

    wordnet = fresh_env / "data.noun"  # stands for /usr/share/wordnet/data.noun: installing it reruns the page
    monkeypatch.setattr(freshness, "SYSTEM_FILES", (str(wordnet),))
    _run(fresh_env, capfd)
    wordnet.write_text("x")
    printed = _run(fresh_env, capfd)
    assert "tiny: to execute (its environment changed)" in printed
