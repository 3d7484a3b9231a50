"""Shared test setup: no Hub access, and one converted-model cache per test session."""

import functools
import json
import os

# Tests never download: set before transformers / huggingface_hub are imported (they read it at import).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory):
    """The PRH_CACHE_DIR in which the session's tests find zoo models converted (once each).

    By default the project's own cache (``PRH_CACHE_DIR``, default ``<repo>/.cache``), where the main job
    has already converted them: a converted folder is reused only while its ``prh_zoo.json`` matches the
    entry's checksum, conversion number, ``ZOO_FORMAT`` and the installed package versions (``zoo.is_converted``),
    so a folder written by older conversion code is rebuilt, not trusted. A second copy would cost 4.2 GB
    of disk (the fp32 weights of the five language and vision models), which is what filled CI's disk.
    ``PRH_TEST_FRESH_ZOO=1`` converts into a fresh temporary folder instead (every model again, ~1 min).
    """
    if os.environ.get("PRH_TEST_FRESH_ZOO") == "1":
        return tmp_path_factory.mktemp("prh-cache")
    from prh_lib import paths

    return paths.cache_root()


@pytest.fixture(scope="session")
def zoo_model(zoo_cache):
    """``zoo_model(name)`` -> the LoadedModel of a zoo model, loaded once per session from ``zoo_cache``.

    Skips (with the install command) when the model's package is not installed.
    """
    from prh_lib.models import zoo
    from prh_lib.models import load_model

    loaded = {}

    def get(name):
        if name not in loaded:
            if zoo.installed_version(name) is None:
                pytest.skip(f"zoo model {name!r} needs {zoo.ZOO[name].package}: {zoo.ZOO[name].install_command}")
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("PRH_CACHE_DIR", str(zoo_cache))
                loaded[name] = load_model(name)
        return loaded[name]

    return get


def execute_side_by_side(names, params, output_dir):
    """Execute the notebooks ``names`` as ``prh-run`` does: the feature files they read extracted over every core first
    (:func:`prh_lib.run.extraction.extract_first`), then the notebooks side by side
    (:func:`prh_lib.run.schedule.run_notebooks`, this machine's lanes). Returns ``{name: executed .ipynb}``.

    Raises ``prh_lib.run.schedule.NotebookFailed`` naming the first notebook that failed. The runs' wall times are not
    remembered: small-profile times would reorder the main job's notebooks."""
    from prh_lib.run import extraction, runner, schedule

    extraction.extract_first(names, params)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(schedule, "_remember", lambda seconds: None)
        schedule.run_notebooks(list(names), params, run=functools.partial(runner.run_notebook, quiet=True),
                               what="test", jobs=schedule.default_jobs(params, len(names)), output_dir=output_dir)
    return {name: output_dir / f"{name}.ipynb" for name in names}


@pytest.fixture(scope="session")
def executed_notebook(tmp_path_factory):
    """``executed_notebook(name, **overrides)`` -> path of the notebook executed with the ``smoke`` profile;
    ``executed_notebook.every()`` -> ``{name: path}`` of every notebook on it, run side by side.

    Each (name, overrides) combination runs once per session through the same runner as ``prh-run``,
    writing into a temporary folder (never into ``book/``). Features are read from and written to the
    default feature cache, so notebooks share extraction work.
    """
    from prh_lib.run import book as run_book
    from prh_lib.run import runner
    from prh_lib.run.profiles import get_profile

    out_dir = tmp_path_factory.mktemp("executed")
    done = {}

    def key(name, overrides):
        return name, json.dumps(overrides, sort_keys=True, default=str)  # overrides may hold lists and dicts

    def run(name, **overrides):
        k = key(name, overrides)
        if k not in done:
            params = {**get_profile("smoke"), **overrides}
            done[k] = runner.run_notebook(name, params, output_dir=out_dir / f"{name}-{len(done)}", quiet=True)
        return done[k]

    def every():
        names = run_book.available_notebooks()
        todo = [n for n in names if key(n, {}) not in done]
        if todo:
            for name, path in execute_side_by_side(todo, get_profile("smoke"), out_dir / "every").items():
                done[key(name, {})] = path
        return {n: done[key(n, {})] for n in names}

    run.every = every
    return run


@pytest.fixture(scope="session")
def built_book(executed_notebook, tmp_path_factory):
    """HTML folder of the Jupyter Book built once per session from every notebook on the ``smoke`` profile.

    The book's sources (configuration, Markdown pages, ``_static``) are copied into a temporary folder
    with the executed notebooks, and built by the runner's ``build_book`` with warnings as errors, as
    ``prh-run`` does. Shared by ``test_book.py`` and ``test_browser.py``.
    """
    import shutil

    from prh_lib import paths
    from prh_lib.run import book as run_book

    book = tmp_path_factory.mktemp("book") / "book"
    shutil.copytree(paths.book_dir(), book, ignore=shutil.ignore_patterns("_build", "*.ipynb"))
    for name, path in executed_notebook.every().items():
        shutil.copy(path, book / f"{name}.ipynb")
    return run_book.build_book(book, strict=True, quiet=True)


@pytest.fixture(scope="session")
def coco_root():
    """The real coco-mini folder (``PRH_DATA_ROOT``), read-only."""
    from prh_lib import paths

    root = paths.data_root()
    if not (root / "captions.json").is_file():
        pytest.fail(f"coco-mini not found at {root}: set PRH_DATA_ROOT (see the README)")
    return root
