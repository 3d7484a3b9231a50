"""Shared test setup: no Hub access, and one converted-model cache per test session."""

import os

# Tests never download: set before transformers / huggingface_hub are imported (they read it at import).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory):
    """A PRH_CACHE_DIR shared by the whole session, in which zoo models are converted once.

    A fresh folder (not the default ``<repo>/.cache``) so that every run tests the current conversion
    code, not a folder an older version left behind; the cost is one conversion per model per session
    (~1 min in all, mostly the SmolLM2 GGUF dequantisation).
    """
    return tmp_path_factory.mktemp("prh-cache")


@pytest.fixture(scope="session")
def zoo_model(zoo_cache):
    """``zoo_model(name)`` -> the LoadedModel of a zoo model, loaded once per session from ``zoo_cache``.

    Skips (with the install command) when the model's package is not installed.
    """
    from prh_lib import zoo
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
