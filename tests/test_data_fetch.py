"""``prh-data``: the committed coco-mini manifest, verification, and fetching from a local mirror.

No test reaches the COCO server: the mirror is an ``http.server`` on 127.0.0.1 serving a temporary folder
laid out like the server (``<split>/<file_name>``), filled from the local copy (``PRH_DATA_ROOT``).
"""

import functools
import http.server
import json
import shutil
import threading

import pytest

from prh_lib.data import fetch as data_fetch
from prh_lib import paths
from prh_lib.data import DataError, load_coco_folder


@pytest.fixture(scope="module")
def manifest():
    return data_fetch.load_manifest("coco-mini")


@pytest.fixture(scope="module")
def local_copy():
    try:
        root = paths.data_root()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    return root


class _Mirror:
    """A folder served over HTTP on 127.0.0.1; records every requested path."""

    def __init__(self, root):
        self.root = root
        self.requests = []
        self.truncate = set()  # request paths answered with half the body but the full Content-Length
        mirror = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                mirror.requests.append(self.path)
                if self.path in mirror.truncate:
                    body = (mirror.root / self.path.lstrip("/")).read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                super().do_GET()

        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(root))
        )
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _lay_out(entries, local_copy, root, *, link=False):
    for e in entries:
        target = root / e["split"] / e["file_name"]
        target.parent.mkdir(parents=True, exist_ok=True)
        src = local_copy / "images" / e["file_name"]
        if link:
            target.symlink_to(src)
        else:
            shutil.copy(src, target)


def _leftovers(folder):
    """Temporary names a download may have left (atomic writes use dot-prefixed siblings)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# --------------------------------------------------------------------------------------------- manifest


def test_manifest_lists_239_images_with_hash_licence_and_five_captions(manifest):
    images = manifest["images"]
    assert len(images) == 239
    assert len({im["id"] for im in images}) == 239 and len({im["file_name"] for im in images}) == 239
    assert {im["split"] for im in images} == {"val2017", "train2017"}
    licence_ids = {lic["id"] for lic in manifest["licenses"]}
    for im in images:
        assert len(im["sha256"]) == 64 and int(im["sha256"], 16) >= 0
        assert im["size"] > 0
        assert im["license"]["id"] in licence_ids and im["license"]["name"] and im["license"]["url"]
        assert im["flickr_url"].startswith("http") and im["coco_url"] == data_fetch.image_url(im)
        assert len(im["captions"]) == 5 and all(c["caption"].strip() for c in im["captions"])
    assert "CC BY 4.0" in manifest["caption_license"]["attribution"]
    assert "COCO Consortium" in manifest["caption_license"]["attribution"]


def test_manifest_is_what_build_manifest_makes_from_the_local_copy(manifest, local_copy):
    assert data_fetch.build_manifest(local_copy) == manifest


def test_captions_json_from_manifest_equals_the_local_copy(manifest, local_copy):
    original = json.loads((local_copy / "captions.json").read_text())
    made = data_fetch.coco_captions(manifest)
    assert made["images"] == original["images"]
    assert made["annotations"] == sorted(original["annotations"], key=lambda a: a["id"])
    assert made["licenses"] == original["licenses"]


def test_unknown_manifest_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="coco-mini"):
        data_fetch.load_manifest("coco-maxi")


# --------------------------------------------------------------------------------------------- verify


def test_local_copy_verifies(local_copy):
    report = data_fetch.verify(local_copy)
    assert report.problems == {}
    assert len(report.ok) == 239


def test_verify_names_a_corrupted_a_missing_file_and_changed_captions(manifest, local_copy, tmp_path):
    entries = manifest["images"][:3]
    (tmp_path / "images").mkdir()
    for e in entries[:2]:
        shutil.copy(local_copy / "images" / e["file_name"], tmp_path / "images" / e["file_name"])
    bad = tmp_path / "images" / entries[1]["file_name"]
    raw = bytearray(bad.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size, different bytes
    bad.write_bytes(bytes(raw))
    report = data_fetch.verify(tmp_path, manifest, only=[e["file_name"] for e in entries])
    assert report.ok == [entries[0]["file_name"]]
    assert "sha256" in report.problems[entries[1]["file_name"]]
    assert report.problems[entries[2]["file_name"]] == "missing"
    with pytest.raises(DataError, match=entries[1]["file_name"]):
        report.raise_for_problems("verifying")

    full = data_fetch.verify(tmp_path, manifest)
    assert full.problems["captions.json"] == "missing"
    captions = data_fetch.coco_captions(manifest)
    captions["annotations"][0]["caption"] = "changed"
    (tmp_path / "captions.json").write_text(json.dumps(captions))
    assert "1 manifest captions missing or changed" in data_fetch.verify(tmp_path, manifest).problems["captions.json"]


def test_cli_verify_exit_codes(local_copy, tmp_path, capsys):
    assert data_fetch.main(["verify", str(local_copy)]) == 0
    assert "239 images" in capsys.readouterr().out
    (tmp_path / "images").mkdir()
    assert data_fetch.main(["verify", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "240 file(s) failed" in err and "captions.json: missing" in err


# --------------------------------------------------------------------------------------------- fetch


def test_fetch_rejects_a_corrupted_file_by_name_then_resumes(manifest, local_copy, tmp_path):
    entries = manifest["images"][:4]
    names = [e["file_name"] for e in entries]
    served = tmp_path / "mirror"
    _lay_out(entries, local_copy, served)
    corrupt = served / entries[2]["split"] / names[2]
    good_bytes = corrupt.read_bytes()
    raw = bytearray(good_bytes)
    raw[100] ^= 0x55
    corrupt.write_bytes(bytes(raw))
    dest = tmp_path / "dest"

    with _Mirror(served) as mirror:
        with pytest.raises(DataError) as info:
            data_fetch.fetch(dest, manifest, mirror=mirror.url, only=names, retries=0, jobs=2)
        message = str(info.value)
        assert names[2] in message and "sha256" in message and "1 file(s) failed" in message
        assert all(n not in message for n in names[:2] + names[3:])
        # the good files are in place and verified, the corrupted one is absent, no temporary left behind
        assert not (dest / "images" / names[2]).exists()
        assert _leftovers(dest / "images") == []
        assert data_fetch.verify(dest, manifest, only=names[:2] + names[3:]).problems == {}
        assert not (dest / "captions.json").exists()  # only written for a complete fetch

        corrupt.write_bytes(good_bytes)
        mirror.requests.clear()
        report = data_fetch.fetch(dest, manifest, mirror=mirror.url, only=names, retries=0)
        assert report.fetched == [names[2]] and sorted(report.skipped) == sorted(names[:2] + names[3:])
        assert mirror.requests == [f"/{entries[2]['split']}/{names[2]}"]  # resume: only the missing file


def test_fetch_replaces_a_file_present_with_a_wrong_hash(manifest, local_copy, tmp_path):
    entry = manifest["images"][5]
    served = tmp_path / "mirror"
    _lay_out([entry], local_copy, served)
    dest = tmp_path / "dest"
    (dest / "images").mkdir(parents=True)
    (dest / "images" / entry["file_name"]).write_bytes(b"not a jpeg")
    with _Mirror(served) as mirror:
        report = data_fetch.fetch(dest, manifest, mirror=mirror.url, only=[str(entry["id"])], retries=0)
    assert report.fetched == [entry["file_name"]]
    assert data_fetch.sha256_file(dest / "images" / entry["file_name"]) == entry["sha256"]


def test_interrupted_download_leaves_no_file_that_looks_complete(manifest, local_copy, tmp_path):
    entry = manifest["images"][7]
    served = tmp_path / "mirror"
    _lay_out([entry], local_copy, served)
    dest = tmp_path / "dest"
    with _Mirror(served) as mirror:
        mirror.truncate.add(f"/{entry['split']}/{entry['file_name']}")
        with pytest.raises(DataError, match=entry["file_name"]):
            data_fetch.fetch(dest, manifest, mirror=mirror.url, only=[entry["file_name"]], retries=1)
        assert len(mirror.requests) == 2  # one retry
    assert list((dest / "images").iterdir()) == []


def test_missing_file_on_the_mirror_is_named(manifest, tmp_path):
    (tmp_path / "mirror").mkdir()
    entry = manifest["images"][0]
    with _Mirror(tmp_path / "mirror") as mirror:
        with pytest.raises(DataError, match=rf"{entry['file_name']}: download from .* failed .*404"):
            data_fetch.fetch(tmp_path / "dest", manifest, mirror=mirror.url, only=[entry["file_name"]], retries=0)


def test_cli_fetch_everything_from_a_mirror_gives_a_loadable_copy(manifest, local_copy, tmp_path, capsys):
    served = tmp_path / "mirror"
    _lay_out(manifest["images"], local_copy, served, link=True)
    dest = tmp_path / "coco-mini"
    with _Mirror(served) as mirror:
        assert data_fetch.main(["fetch", "coco-mini", "--dest", str(dest), "--mirror", mirror.url]) == 0
        out = capsys.readouterr().out
        assert "239 fetched, 0 already present" in out and f"PRH_DATA_ROOT={dest}" in out
        assert data_fetch.main(["fetch", "coco-mini", "--dest", str(dest), "--mirror", mirror.url]) == 0
        assert "0 fetched, 239 already present" in capsys.readouterr().out
    assert data_fetch.main(["verify", str(dest)]) == 0
    fetched, original = load_coco_folder(dest), load_coco_folder(local_copy)
    assert fetched.sample_ids == original.sample_ids and fetched.captions == original.captions
    assert [p.name for p in fetched.images] == [p.name for p in original.images]


def test_fetch_from_a_file_url_mirror(manifest, local_copy, tmp_path):
    entries = manifest["images"][:2]
    _lay_out(entries, local_copy, tmp_path / "mirror", link=True)
    report = data_fetch.fetch(tmp_path / "dest", manifest, mirror=(tmp_path / "mirror").as_uri(),
                              only=[e["file_name"] for e in entries])
    assert sorted(report.fetched) == sorted(e["file_name"] for e in entries)


def test_default_destination_is_prh_data_root_else_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PRH_DATA_ROOT", str(tmp_path / "here"))
    assert data_fetch.default_dest("coco-mini") == tmp_path / "here"
    monkeypatch.delenv("PRH_DATA_ROOT")
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    assert data_fetch.default_dest("coco-mini") == (tmp_path / "cache" / "data" / "coco-mini").resolve()
