"""Damaged feature caches (issue 13): every read is validated, a bad file is named, moved aside and recomputed.

The damage is done by hand to files written by ``save_features``: truncated, garbage bytes, no metadata,
bytes of the tensor overwritten (caught by the recorded SHA-256), other rows; and a write killed by SIGKILL,
whose temporary folder must never be read as a result and is removed by a later write.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from prh_lib import data, extract, models, paths
from prh_lib.extract import features
from prh_lib.batch.plan import Job
from prh_lib.data.study import DatasetSpec
from prh_lib.extract import LayerFeatures

IDS = tuple(f"s{i}" for i in range(5))
PAIRS = data.Pairs("fixture", IDS, tuple([None] * 5), tuple(f"caption number {i}" for i in range(5)))
MODEL = "fake/lm"


def _features(ids=IDS, seed=0):
    g = torch.Generator().manual_seed(seed)
    return LayerFeatures(torch.randn(3, len(ids), 4, generator=g), ("embed", "layer.1", "layer.2"), tuple(ids),
                         {"model": MODEL, "pooling": "mean"})


@pytest.fixture
def fake_model(monkeypatch, tmp_path):
    """``get_features(MODEL, PAIRS)`` without a model: a fixed identity, and extraction that counts its calls."""
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(models, "resolve_identity",
                        lambda name: {"name": name, "revision": "r1", "modality": "language", "pooling": "mean"})
    monkeypatch.setattr(models, "load_model", lambda name, **kw: object())
    monkeypatch.setattr(extract, "extract_features",
                        lambda model, pairs, **kw: calls.append(pairs.sample_ids) or _features(pairs.sample_ids))
    return calls


def _truncate(path):
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) - 24])


def _garbage(path):
    path.write_bytes(random.Random(0).randbytes(path.stat().st_size))


def _no_metadata(path):
    save_file({"values": _features().values.contiguous()}, str(path))


def _payload_overwritten(path):
    with open(path, "r+b") as f:  # the tensor is at the end of the file; two finite floats, so only the checksum sees it
        f.seek(-8, os.SEEK_END)
        f.write(struct.pack("<2f", 1.5, -2.25))


def _other_rows(path):
    features.save_features(_features(ids=tuple(reversed(IDS))), path)


DAMAGE = {  # damage -> (what load_features says, whether the cheap header check already sees it)
    "truncated": (_truncate, "unreadable safetensors file", True),
    "garbage": (_garbage, "unreadable safetensors file", True),
    "no-metadata": (_no_metadata, "metadata lacks", True),
    "payload-overwritten": (_payload_overwritten, "do not match the SHA-256", False),
    "other-rows": (_other_rows, "other rows than the requested pairs", False),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_load_features_names_the_file_and_the_problem(kind, tmp_path):
    damage, message, _ = DAMAGE[kind]
    path = features.save_features(_features(), tmp_path / "f.safetensors")
    damage(path)
    error = features.FeatureMismatchError if kind == "other-rows" else features.CorruptFeatureFileError
    with pytest.raises(error, match=message) as info:
        features.load_features(path, expected_sample_ids=IDS)
    assert str(path) in str(info.value)


def test_values_digest_is_the_sha256_of_the_little_endian_float32_bytes():
    """values_digest hashes the array's buffer: the same digest as hashing a C-ordered copy, for views with
    odd strides, a big-endian source and a tensor with no entries."""
    import hashlib

    import numpy as np

    base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5) / 7
    big_endian = torch.from_numpy(base.numpy().astype(">f4").astype("<f4"))
    for t in (base, base.transpose(0, 2), base[:, ::2, 1:], base.flip(1), big_endian, torch.empty(0, 4, 5),
              base.double()):
        expected = hashlib.sha256(np.ascontiguousarray(t.detach().to(torch.float32).numpy()).astype("<f4").tobytes())
        assert features.values_digest(t) == expected.hexdigest()


def _pin_times(path, mtime_ns):
    """Give ``path`` an mtime of its own (its ctime becomes now): the file's identity changes for certain."""
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_a_settled_file_is_checked_once_per_process_and_again_once_it_changes(tmp_path, monkeypatch):
    """features._VERIFIED: a second read of an unchanged file skips the SHA-256 (its digest is still known
    for the score cache); a file edited in place, or one changed less than _SETTLED_NS ago, is checked."""
    hashed = []
    real_sha256 = features.hashlib.sha256
    monkeypatch.setattr(features.hashlib, "sha256", lambda data=b"": hashed.append(1) or real_sha256(data))
    path = features.save_features(_features(), tmp_path / "f.safetensors")
    recorded = features.check_feature_file(path)["values_sha256"]
    first = features.load_features(path, expected_sample_ids=IDS)
    features.load_features(path, expected_sample_ids=IDS)
    assert len(hashed) == 3  # written, then read twice: just written, so not settled and checked each time
    monkeypatch.setattr(features, "_SETTLED_NS", 0)
    hashed.clear()
    features.load_features(path, expected_sample_ids=IDS)  # checked and recorded
    again = features.load_features(path, expected_sample_ids=IDS)  # recorded: not hashed
    assert len(hashed) == 1 and again.values is not first.values and torch.equal(again.values, first.values)
    assert features.values_digest(again.values) == recorded and len(hashed) == 1  # its digest is known
    _payload_overwritten(path)
    _pin_times(path, path.stat().st_mtime_ns + 1_000_000)
    with pytest.raises(features.CorruptFeatureFileError, match="do not match the SHA-256"):
        features.load_features(path, expected_sample_ids=IDS)
    with pytest.raises(features.CorruptFeatureFileError, match="do not match the SHA-256"):
        features.load_features(path, expected_sample_ids=IDS)  # a failed check records nothing


def test_non_finite_values_are_refused_on_writing_and_caught_on_reading(tmp_path):
    bad = _features()
    bad.values[1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match=r"non-finite values in layers \['layer.1'\]"):
        features.save_features(bad, tmp_path / "nan.safetensors")
    assert not (tmp_path / "nan.safetensors").exists()
    # a file written without a checksum (as before issue 13) that holds a NaN
    meta = {"layer_labels": '["embed", "layer.1", "layer.2"]', "sample_ids": str(list(IDS)).replace("'", '"')}
    save_file({"values": bad.values.contiguous()}, str(tmp_path / "old.safetensors"), metadata=meta)
    with pytest.raises(features.CorruptFeatureFileError, match="1 non-finite values"):
        features.load_features(tmp_path / "old.safetensors")


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_get_features_moves_a_bad_file_aside_and_recomputes(kind, fake_model):
    damage, message, _ = DAMAGE[kind]
    first = extract.get_features(MODEL, PAIRS, progress=False)
    path = extract.features_path(MODEL, PAIRS)
    assert len(fake_model) == 1 and path.is_file()
    damage(path)
    with pytest.warns(features.CorruptCacheWarning, match=message) as caught:
        again = extract.get_features(MODEL, PAIRS, progress=False)
    assert str(path) in str(caught[0].message) and "moved aside" in str(caught[0].message)
    assert len(fake_model) == 2  # recomputed
    torch.testing.assert_close(again.values, first.values, rtol=0, atol=0)
    aside = [p.name for p in path.parent.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].startswith(path.name + ".corrupt-")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rewritten file is sound: read without a warning or a recompute
        extract.get_features(MODEL, PAIRS, progress=False)
    assert len(fake_model) == 2


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_batch_plans_a_damaged_header_as_not_done(kind, tmp_path):
    damage, _, header_level = DAMAGE[kind]
    path = features.save_features(_features(), tmp_path / "f.safetensors")
    job = Job(MODEL, DatasetSpec(name="fixture", source="coco-folder"), cache_file=str(path))
    assert job.is_done() and job.status() == "cached"
    damage(path)
    # header-level damage is seen at planning; tensor bytes and rows are checked by get_features, which
    # the worker calls (and which then recomputes)
    assert job.is_done() is (not header_level)


_KILLED_WRITE = """
import os, signal, sys
from prh_lib import paths
with paths.atomic_path(sys.argv[1]) as tmp:
    tmp.write_bytes(b"half a safetensors file")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_killed_write_leaves_nothing_that_is_read_and_is_cleaned_by_the_next_write(fake_model):
    path = extract.features_path(MODEL, PAIRS)
    path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(paths.repo_root())}
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITE, str(path)], env=env)
    assert proc.returncode == -9
    leftovers = [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]
    assert len(leftovers) == 1 and paths.is_temporary(leftovers[0] / path.name) and not path.exists()
    job = Job(MODEL, DatasetSpec(name="fixture", source="coco-folder"), cache_file=str(path))
    assert not job.is_done()
    # a fresh leftover may belong to a live writer: kept; an old one is removed by the next write there
    extract.get_features(MODEL, PAIRS, progress=False)
    assert len(fake_model) == 1 and leftovers[0].is_dir()
    old = time.time() - paths.STALE_TEMP_SECONDS - 60
    for p in (leftovers[0], *leftovers[0].iterdir()):
        os.utime(p, (old, old))
    extract.get_features(MODEL, PAIRS.subset([0, 1, 2]), progress=False)  # another file in the same folder
    assert not leftovers[0].exists()
    assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith(".")) == []


def test_remove_stale_temporaries_spares_recent_folders_and_other_files(tmp_path):
    old = time.time() - 3600
    stale, fresh, other = tmp_path / ".a.x1.tmp", tmp_path / ".b.x2.tmp", tmp_path / ".hidden"
    for d in (stale, fresh, other):
        d.mkdir()
    (stale / "a").write_bytes(b"x")
    for p in (stale / "a", stale, other):
        os.utime(p, (old, old))
    assert paths.remove_stale_temporaries(tmp_path, older_than=600) == [stale]
    assert fresh.is_dir() and other.is_dir() and not stale.exists()
    assert paths.is_temporary(fresh / "b") and not paths.is_temporary(other)
    assert Path(tmp_path / "f.safetensors").name and not paths.is_temporary(tmp_path / "f.safetensors")
