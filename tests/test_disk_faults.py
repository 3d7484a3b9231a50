"""Full disk and read-only cache (issue 27, item 4): feature, score-cache and results writes that fail for
lack of space say so and name the path, and leave nothing half-written behind; a read-only location gives a
clear error too. The real-disk tests mount a small tmpfs (skipped where mounting is not allowed)."""

import errno
import os
import subprocess
import uuid

import pandas as pd
import pytest
import torch

from prh_lib import paths, results
from prh_lib.paths import CacheWriteError, disk_error
from prh_lib.extract import LayerFeatures
from prh_lib.extract.features import load_features, save_features


def _features(n=64, d=256):
    g = torch.Generator().manual_seed(0)
    return LayerFeatures(torch.randn(3, n, d, generator=g), ("embed", "layer.1", "layer.2"),
                         tuple(f"s{i}" for i in range(n)), {"model": "m", "pooling": "mean"})


def _rows(n=200):
    return [{"model_x": "a", "model_y": "b", "layer_x": f"layer.{i}", "layer_y": "layer.6", "depth_x": 0.5,
             "depth_y": 1.0, "metric": "mutual_knn", "score": i / n, "quantity": "layer_pair"} for i in range(n)]


@pytest.fixture
def tiny_disk(tmp_path):
    """A 96 KiB tmpfs: a few small files fit, a feature file of 3 x 64 x 256 float32 (192 KiB) does not."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _leftovers(folder):
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


def test_feature_write_on_a_full_disk_names_the_file_and_leaves_nothing(tiny_disk):
    path = tiny_disk / "features" / "m.safetensors"
    with pytest.raises(CacheWriteError, match=rf"the disk is full: cannot write {path} \(.* MiB free"):
        save_features(_features(), path)
    assert _leftovers(tiny_disk) == [] and not path.exists()
    small = _features(n=4, d=8)  # once there is room, the same write works and reads back
    save_features(small, path)
    assert load_features(path).sample_ids == small.sample_ids


def test_results_write_on_a_full_disk_names_the_file_and_leaves_nothing(tiny_disk):
    filler = tiny_disk / "filler"
    with open(filler, "wb") as fh:  # fill the disk up
        try:
            fh.write(b"\0" * (96 << 10))
        except OSError:
            pass
    with pytest.raises(CacheWriteError, match=r"the disk is full: cannot write .*/ch/ch__.*\.parquet"):
        results.write(_rows(), chapter="ch", params={"k": 10}, dataset="d", draw=0, root=tiny_disk / "results")
    assert _leftovers(tiny_disk) == ["filler"]
    filler.unlink()
    results.write(_rows(), chapter="ch", params={"k": 10}, dataset="d", draw=0, root=tiny_disk / "results")
    assert len(results.load(root=tiny_disk / "results", chapter="ch")) == 200


def test_read_only_cache_gives_a_clear_error(tiny_disk):
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True)
    path = tiny_disk / "features" / "m.safetensors"
    with pytest.raises(CacheWriteError, match=rf"cannot write {path}: the location is read-only"):
        save_features(_features(n=4, d=8), path)
    with pytest.raises(CacheWriteError, match=r"read-only"):
        results.write(_rows(3), chapter="ch", params={"k": 10}, dataset="d", draw=0, root=tiny_disk / "results")


@pytest.mark.parametrize("err", [OSError(errno.ENOSPC, "No space left on device"),
                                 RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                                              "message: \"No space left on device\" })"),
                                 OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device")])
def test_every_form_of_a_full_disk_is_recognised_and_the_temporary_removed(tmp_path, err):
    final = tmp_path / "cache" / "entry.bin"
    with pytest.raises(CacheWriteError, match=rf"the disk is full: cannot write {final}") as info:
        with paths.atomic_path(final) as tmp:
            tmp.write_bytes(b"half")
            raise err
    assert info.value.errno == errno.ENOSPC and info.value.__cause__ is err
    assert _leftovers(tmp_path) == []


def test_other_errors_pass_through_unchanged(tmp_path):
    assert disk_error(ValueError("bad value"), tmp_path) is None
    with pytest.raises(KeyError):
        with paths.atomic_path(tmp_path / "x"):
            raise KeyError("k")
