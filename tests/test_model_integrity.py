"""Integrity of converted model folders (issue 27, item 1): a zoo folder or stand-in cut short, edited or
missing a file is quarantined and rebuilt with one warning naming it, or refused with an error naming the
folder and the ``prh-zoo install`` command when its packages are gone."""

import dataclasses
import hashlib
import json
import os
import warnings

import numpy as np
import pytest
import torch

from prh_lib.data import paper
from prh_lib.models import ModelNotAvailableError, load_model, standins, zoo
from prh_lib.models.integrity import DamagedFolderWarning, manifest, problems, safetensors_problem


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    """A zoo entry ``"fake-one"`` from one real (tiny) installed distribution; its converter writes a real
    ``model.safetensors`` and counts its calls."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("PRH_CACHE_DIR", str(cache))
    site = tmp_path / "site"
    info = site / "prh_fake_one-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: prh-fake-one\nVersion: 1.0\n")
    (site / "prh_fake_one").mkdir()
    blob = np.random.default_rng(0).bytes(4096)
    (site / "prh_fake_one" / "w.bin").write_bytes(blob)
    monkeypatch.syspath_prepend(str(site))
    calls = []

    def converter(src, out):
        from safetensors.torch import save_file

        calls.append(src)
        save_file({"w": torch.frombuffer(bytearray(src.read_bytes()), dtype=torch.float32).clone()},
                  str(out / "model.safetensors"))
        (out / "config.json").write_text("{}")

    entry = zoo.ZooEntry(
        name="fake-one", modality="language", family="hf-text", model="fake",
        packages=(zoo.Package("prh-fake-one", "1.0"),), parts=(("prh-fake-one", "prh_fake_one/w.bin"),),
        weight_name="w.bin", sha256=hashlib.sha256(blob).hexdigest(), licence="none", naming="test",
        description="one part", converter=converter,
    )
    monkeypatch.setitem(zoo.ZOO, "fake-one", entry)
    return {"entry": entry, "calls": calls, "cache": cache}


def _cut(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _convert_quietly():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return zoo.convert("fake-one", progress=False)


def test_conversion_records_size_and_digest_of_every_file(fake_zoo):
    folder = _convert_quietly()
    files = zoo.read_provenance(folder)["files"]
    assert sorted(files) == ["config.json", "model.safetensors"]
    st = (folder / "model.safetensors").stat()
    assert files["model.safetensors"]["size"] == st.st_size
    assert files["model.safetensors"]["sha256"] == hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert problems(folder, files) == []
    _convert_quietly()  # intact: reused without a warning
    assert len(fake_zoo["calls"]) == 1


@pytest.mark.parametrize("damage", ["truncate", "edit", "delete", "truncate-unrecorded"])
def test_damaged_zoo_folder_is_quarantined_and_converted_again(fake_zoo, damage):
    folder = _convert_quietly()
    weights = folder / "model.safetensors"
    if damage in ("truncate", "truncate-unrecorded"):
        _cut(weights)
        if damage == "truncate-unrecorded":  # a folder converted before manifests: the layout check catches it
            prov = zoo.read_provenance(folder)
            del prov["files"]
            (folder / zoo.PROVENANCE_FILE).write_text(json.dumps(prov))
    elif damage == "edit":  # same size, other bytes, later mtime
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0xFF
        weights.write_bytes(bytes(data))
        os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    else:
        (folder / "config.json").unlink()
    with pytest.warns(DamagedFolderWarning) as record:
        again = zoo.convert("fake-one", progress=False)
    assert len(record) == 1 and str(folder) in str(record[0].message)
    assert again == folder and len(fake_zoo["calls"]) == 2
    assert problems(folder, zoo.read_provenance(folder)["files"]) == []
    quarantined = [p.name for p in folder.parent.iterdir() if ".damaged-" in p.name]
    assert len(quarantined) == 1 and quarantined[0].startswith(".fake-one.damaged-")


def test_damaged_folder_without_its_packages_names_the_folder_and_the_repair(fake_zoo, monkeypatch):
    folder = _convert_quietly()
    _cut(folder / "model.safetensors")
    gone = dataclasses.replace(fake_zoo["entry"], packages=(zoo.Package("prh-fake-gone", "1.0"),),
                               parts=(("prh-fake-gone", "prh_fake_gone/w.bin"),))
    monkeypatch.setitem(zoo.ZOO, "fake-one", gone)
    with pytest.raises(ModelNotAvailableError) as info:
        zoo.convert("fake-one", progress=False)
    message = str(info.value)
    assert str(folder) in message and "damaged" in message and "were written at conversion" in message
    assert "prh-zoo install fake-one" in message
    assert (folder / "model.safetensors").exists()  # left in place (never used), nothing else written


def test_safetensors_layout_check(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "m.safetensors"
    save_file({"a": torch.zeros(10), "b": torch.ones(3, 4)}, str(path))
    assert safetensors_problem(path) is None
    full = path.read_bytes()
    for keep, words in ((len(full) - 1, "cut short"), (20, "cut short"), (4, "fewer than the 8")):
        path.write_bytes(full[:keep])
        assert words in safetensors_problem(path)
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00" + b"not json at all!")
    assert "unreadable" in safetensors_problem(path)


def test_manifest_excludes_and_problems_name_each_file(tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "rec.json").write_text("{}")
    rec = manifest(tmp_path, exclude=("rec.json",))
    assert list(rec) == ["a.txt"] and rec["a.txt"]["size"] == 5
    (tmp_path / "a.txt").write_text("hell")
    assert problems(tmp_path, rec) == [f"{tmp_path / 'a.txt'} has 4 bytes, 5 were written at conversion"]


def test_damaged_standin_is_rebuilt_and_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    model_id = next(m for m in paper.models() if paper.model_info(m)["modality"] == "vision")
    folder = standins.ensure_standin(model_id)
    assert (folder / standins.MANIFEST_FILE).is_file()
    [weights] = folder.glob("*.safetensors")
    _cut(weights)
    with pytest.warns(DamagedFolderWarning, match=str(folder)):
        assert standins.ensure_standin(model_id) == folder
    assert safetensors_problem(weights) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", DamagedFolderWarning)
        load_model(standins.standin_name(model_id))


def test_damaged_folder_that_cannot_be_moved_aside_is_refused_clearly(fake_zoo, monkeypatch):
    from prh_lib.models import integrity

    folder = _convert_quietly()
    _cut(folder / "model.safetensors")

    def read_only(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(integrity, "quarantine", read_only)
    with pytest.raises(ModelNotAvailableError, match=rf"{folder} .* is damaged .* cannot be moved aside .*"
                                                     r"prh-zoo convert fake-one"):
        zoo.convert("fake-one", progress=False)
    assert len(fake_zoo["calls"]) == 1


def test_damaged_folder_moved_aside_by_another_process_is_converted_again(fake_zoo, monkeypatch):
    from prh_lib.models import integrity

    folder = _convert_quietly()
    _cut(folder / "model.safetensors")
    real = integrity.quarantine

    def raced(path):  # the other run quarantines it between our check and our rename
        real(path)
        raise FileNotFoundError(2, "No such file or directory", str(path))

    monkeypatch.setattr(integrity, "quarantine", raced)
    with pytest.warns(DamagedFolderWarning, match="another process"):
        zoo.convert("fake-one", progress=False)
    assert len(fake_zoo["calls"]) == 2 and problems(folder, zoo.read_provenance(folder)["files"]) == []
