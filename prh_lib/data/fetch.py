"""Fetch and verify the offline image-caption data from a committed manifest (``prh-data``).

A reader without this project's ``shared/`` folder gets the same 239 MS-COCO 2017 image-caption pairs
(``coco-mini``) from the official COCO image server::

    prh-data fetch coco-mini --dest ~/data/coco-mini     # download, check every sha256, write captions.json
    export PRH_DATA_ROOT=~/data/coco-mini                # where the notebooks look for data
    prh-data verify ~/data/coco-mini                     # check a folder against the manifest

The manifest (``prh_lib/resources/coco_mini_manifest.json``) lists per image its COCO id, file name, split, size,
sha256, licence, Flickr and COCO URLs, and its five captions with their annotation ids. The captions are the COCO
Consortium's (CC BY 4.0, attribution in the manifest); the photographs stay with their Flickr licences and are only
fetched, never committed.

Downloads are renamed into place only once their sha256 matches, so an interrupted or corrupted transfer never leaves a
file that looks complete; a rerun skips files already present with the right hash. ``--mirror URL`` fetches
``URL/<split>/<file_name>`` instead of the COCO server (any folder laid out like it, over http or ``file://``).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Sequence

from prh_lib import paths
from prh_lib.data.errors import DataError

#: Manifests by dataset name: file names under ``prh_lib/resources/``.
MANIFESTS: dict[str, str] = {"coco-mini": "coco_mini_manifest.json"}

#: Where the official COCO 2017 images are served (``<base>/<split>/<file_name>``).
COCO_IMAGE_SERVER = "http://images.cocodataset.org"

CAPTION_LICENSE = {
    "name": "Creative Commons Attribution 4.0 International (CC BY 4.0)",
    "url": "https://creativecommons.org/licenses/by/4.0/",
    "attribution": (
        "Captions: MS-COCO 2017 caption annotations, (c) COCO Consortium, https://cocodataset.org, licensed "
        "under CC BY 4.0. Lin et al., Microsoft COCO: Common Objects in Context, ECCV 2014; Chen et al., "
        "Microsoft COCO Captions: Data Collection and Evaluation Server, arXiv:1504.00325, 2015. "
        "Selection of 239 images and their five captions each, unchanged."
    ),
}
IMAGE_LICENSE_NOTE = (
    "The photographs are Flickr images under the Creative Commons licence given with each image "
    "(several are non-commercial). They are not redistributed with this project; prh-data fetches them "
    "from the COCO image server. Use for research and testing."
)

_CHUNK = 1 << 16


# --------------------------------------------------------------------------------------------- manifest


def load_manifest(name: str = "coco-mini") -> dict:
    """The committed manifest of dataset ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not in :data:`MANIFESTS` (the message lists the known names).
    """
    if name not in MANIFESTS:
        raise ValueError(f"unknown dataset {name!r}; known: {sorted(MANIFESTS)}")
    text = resources.files("prh_lib").joinpath("resources", MANIFESTS[name]).read_text(encoding="utf-8")
    return json.loads(text)


sha256_file = paths.sha256_file


def build_manifest(folder: str | Path, *, name: str = "coco-mini") -> dict:
    """Make a manifest from a COCO caption folder (``captions.json`` + ``images/``).

    This is how ``prh_lib/resources/coco_mini_manifest.json`` was made, from the project's local copy::

        python -c "import json, prh_lib.data.fetch as f; print(json.dumps(f.build_manifest('DIR'), indent=1))"

    Each ``images`` entry of ``captions.json`` must carry a ``split`` (``val2017`` / ``train2017``).

    Raises
    ------
    DataError
        If ``captions.json`` or an image is missing, or an image has no split.
    """
    folder = Path(folder)
    ann_path = folder / "captions.json"
    if not ann_path.is_file():
        raise DataError(f"{ann_path} not found: expected a COCO caption folder (captions.json + images/)")
    meta = json.loads(ann_path.read_text(encoding="utf-8"))
    licenses = {lic["id"]: lic for lic in meta.get("licenses", [])}
    captions: dict[int, list[dict]] = {}
    for ann in sorted(meta["annotations"], key=lambda a: a["id"]):
        captions.setdefault(ann["image_id"], []).append({"id": ann["id"], "caption": ann["caption"]})
    entries = []
    for im in meta["images"]:
        path = folder / "images" / im["file_name"]
        if not path.is_file():
            raise DataError(f"{path} is listed in {ann_path} but missing")
        if "split" not in im:
            raise DataError(f"image {im['file_name']} in {ann_path} has no 'split' (val2017 / train2017)")
        lic = licenses.get(im.get("license"), {})
        entries.append({
            "id": im["id"],
            "file_name": im["file_name"],
            "split": im["split"],
            "size": path.stat().st_size,
            "sha256": sha256_file(path),
            "width": im.get("width"),
            "height": im.get("height"),
            "date_captured": im.get("date_captured"),
            "license": {"id": im.get("license"), "name": lic.get("name"), "url": lic.get("url")},
            "flickr_url": im.get("flickr_url"),
            "coco_url": im.get("coco_url"),
            "captions": captions.get(im["id"], []),
        })
    return {
        "name": name,
        "description": (
            f"{len(entries)} MS-COCO 2017 images (val2017 and train2017) with their five human-written "
            "captions each: the offline image-caption pairs of this project."
        ),
        "image_server": COCO_IMAGE_SERVER,
        "url_template": "{image_server}/{split}/{file_name}",
        "caption_license": CAPTION_LICENSE,
        "image_license_note": IMAGE_LICENSE_NOTE,
        "info": meta.get("info", {}),
        "licenses": meta.get("licenses", []),
        "images": entries,
    }


def coco_captions(manifest: dict) -> dict:
    """The manifest as a COCO caption file (``info``, ``licenses``, ``images``, ``annotations``).

    ``images`` entries keep the COCO fields plus ``split``; annotations are sorted by id."""
    images, annotations = [], []
    for im in manifest["images"]:
        images.append({
            "license": im["license"]["id"], "file_name": im["file_name"], "coco_url": im["coco_url"],
            "height": im["height"], "width": im["width"], "date_captured": im["date_captured"],
            "flickr_url": im["flickr_url"], "id": im["id"], "split": im["split"],
        })
        annotations += [{"image_id": im["id"], "id": c["id"], "caption": c["caption"]} for c in im["captions"]]
    info = dict(manifest.get("info", {}))
    info["caption_license"] = manifest["caption_license"]
    return {
        "info": info,
        "licenses": manifest.get("licenses", []),
        "images": images,
        "annotations": sorted(annotations, key=lambda a: a["id"]),
    }


# --------------------------------------------------------------------------------------------- verify


@dataclass
class Report:
    """What a fetch or verify found: file names by outcome, and one message per problem."""

    ok: list[str] = field(default_factory=list)
    fetched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)

    def raise_for_problems(self, what: str) -> None:
        """Raise :class:`DataError` listing every problem (file name: reason), if there is one."""
        if self.problems:
            lines = "\n".join(f"  {name}: {why}" for name, why in sorted(self.problems.items()))
            raise DataError(f"{what}: {len(self.problems)} file(s) failed\n{lines}")


def _select(manifest: dict, only: Iterable[str] | None) -> list[dict]:
    images = manifest["images"]
    if only is None:
        return list(images)
    wanted = {str(x) for x in only}
    chosen = [im for im in images if im["file_name"] in wanted or str(im["id"]) in wanted]
    unknown = wanted - {im["file_name"] for im in chosen} - {str(im["id"]) for im in chosen}
    if unknown:
        raise ValueError(f"not in manifest {manifest['name']!r}: {sorted(unknown)[:5]}")
    return chosen


def _check_file(path: Path, entry: dict) -> str | None:
    """None if ``path`` holds the manifest's bytes, else the reason it does not."""
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != entry["size"]:
        return f"size {size} bytes, expected {entry['size']}"
    digest = sha256_file(path)
    if digest != entry["sha256"]:
        return f"sha256 {digest}, expected {entry['sha256']}"
    return None


def verify(folder: str | Path, manifest: dict | str = "coco-mini", *, only: Iterable[str] | None = None) -> Report:
    """Check that ``folder/images/`` holds every manifest image with its sha256, and ``captions.json`` its captions.

    Returns
    -------
    Report
        ``ok`` lists the matching files; ``problems`` maps each other file (or ``captions.json``) to the reason. Raises
        nothing for bad files: call :meth:`Report.raise_for_problems`.

    Raises
    ------
    DataError
        If ``folder`` does not exist.
    """
    manifest = load_manifest(manifest) if isinstance(manifest, str) else manifest
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder")
    report = Report()
    for entry in _select(manifest, only):
        why = _check_file(folder / "images" / entry["file_name"], entry)
        if why is None:
            report.ok.append(entry["file_name"])
        else:
            report.problems[entry["file_name"]] = why
    if only is None:
        why = _check_captions(folder / "captions.json", manifest)
        if why:
            report.problems["captions.json"] = why
    return report


def _check_captions(path: Path, manifest: dict) -> str | None:
    if not path.is_file():
        return "missing"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        have = {(a["image_id"], a["id"], a["caption"]) for a in meta["annotations"]}
        ids = {im["id"] for im in meta["images"]}
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        return f"not in COCO caption format ({err!r})"
    want = {(im["id"], c["id"], c["caption"]) for im in manifest["images"] for c in im["captions"]}
    if ids != {im["id"] for im in manifest["images"]}:
        return "its images differ from the manifest's"
    if have != want:
        return f"{len(want - have)} manifest captions missing or changed, {len(have - want)} extra"
    return None


# --------------------------------------------------------------------------------------------- fetch


def image_url(entry: dict, mirror: str | None = None) -> str:
    """Where to download one manifest image: ``<mirror or COCO server>/<split>/<file_name>``."""
    base = (mirror or COCO_IMAGE_SERVER).rstrip("/")
    return f"{base}/{entry['split']}/{entry['file_name']}"


def _download(entry: dict, dest: Path, url: str, *, timeout: float) -> None:
    """Stream ``url`` into ``dest`` through a temporary name; rename only if size and sha256 match.

    Raises
    ------
    DataError
        On a network error, a short read, or a size or hash mismatch (nothing is then left at ``dest``).
    """
    with paths.atomic_path(dest) as tmp:
        h = hashlib.sha256()
        n = 0
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp, open(tmp, "wb") as out:
                for chunk in iter(lambda: resp.read(_CHUNK), b""):
                    h.update(chunk)
                    n += len(chunk)
                    out.write(chunk)
        except (OSError, http.client.HTTPException, ValueError) as err:  # URLError is an OSError
            raise DataError(f"download from {url} failed ({err!r})") from err
        if n != entry["size"] or h.hexdigest() != entry["sha256"]:
            raise DataError(
                f"rejected: {url} gave {n} bytes with sha256 {h.hexdigest()}, expected {entry['size']} bytes "
                f"with sha256 {entry['sha256']}"
            )


def fetch(
    dest: str | Path,
    manifest: dict | str = "coco-mini",
    *,
    mirror: str | None = None,
    only: Iterable[str] | None = None,
    jobs: int = 8,
    retries: int = 2,
    timeout: float = 60.0,
    log=None,
) -> Report:
    """Download the manifest's images into ``dest/images/``, verify them, and write ``dest/captions.json``.

    Parameters
    ----------
    dest : path
        Target folder (created). Files already there with the right sha256 are kept (resume).
    manifest : dict or str
        A manifest or the name of a committed one (:data:`MANIFESTS`).
    mirror : str, optional
        Base URL laid out like the COCO server (``<mirror>/<split>/<file_name>``). Default: the COCO server.
    only : iterable of str, optional
        File names or image ids to fetch (default: all). ``captions.json`` is written only for a full fetch.
    jobs : int
        Parallel downloads.
    retries : int
        Further attempts per file after a failed one (network error or hash mismatch), with a short pause.
    timeout : float
        Seconds per network operation.
    log : callable, optional
        Called with one line of progress text at a time (default: silent).

    Returns
    -------
    Report
        ``fetched`` and ``skipped`` (already present) file names; ``problems`` for files that failed.

    Raises
    ------
    DataError
        If any file could not be fetched with the right hash; the message names every such file and why.
        Files fetched before stay in place (a rerun resumes).
    """
    manifest = load_manifest(manifest) if isinstance(manifest, str) else manifest
    if jobs < 1 or retries < 0:
        raise ValueError(f"jobs must be >= 1 and retries >= 0, got jobs={jobs}, retries={retries}")
    log = log or (lambda line: None)
    dest = Path(dest).expanduser()
    (dest / "images").mkdir(parents=True, exist_ok=True)
    entries = _select(manifest, only)
    report = Report()

    def one(entry: dict) -> tuple[str, str, str | None]:
        path = dest / "images" / entry["file_name"]
        if _check_file(path, entry) is None:
            return entry["file_name"], "skipped", None
        url = image_url(entry, mirror)
        err = None
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 5.0))
            try:
                _download(entry, path, url, timeout=timeout)
                return entry["file_name"], "fetched", None
            except DataError as e:
                err = str(e)
        return entry["file_name"], "failed", err

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for i, (name, outcome, err) in enumerate(pool.map(one, entries), 1):
            if outcome == "failed":
                report.problems[name] = err
                log(f"[prh-data] {i}/{len(entries)} {name}: FAILED {err}")
            else:
                getattr(report, outcome).append(name)
                if outcome == "fetched" or i == len(entries):
                    log(f"[prh-data] {i}/{len(entries)} {name}: {outcome}")
    out = dest / "captions.json"
    # written atomically, unless the file there already holds the manifest's captions
    if only is None and not report.problems and not (out.is_file() and _check_captions(out, manifest) is None):
        with paths.atomic_path(out) as tmp:
            tmp.write_text(json.dumps(coco_captions(manifest), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    report.raise_for_problems(f"fetching {manifest['name']} into {dest}")
    return report


# --------------------------------------------------------------------------------------------- CLI


def default_dest(name: str) -> Path:
    """``PRH_DATA_ROOT`` when it is set, else ``<PRH_CACHE_DIR>/data/<name>``."""
    env = os.environ.get("PRH_DATA_ROOT")
    return Path(env).expanduser() if env else paths.cache_dir("data") / name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prh-data", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_fetch = sub.add_parser("fetch", help="download a dataset by its manifest and verify every file")
    p_fetch.add_argument("name", choices=sorted(MANIFESTS))
    p_fetch.add_argument("--dest", type=Path, default=None,
                         help="target folder (default: $PRH_DATA_ROOT if set, else <PRH_CACHE_DIR>/data/NAME)")
    p_fetch.add_argument("--mirror", default=None,
                         help=f"base URL laid out as <URL>/<split>/<file_name> (default: {COCO_IMAGE_SERVER})")
    p_fetch.add_argument("--jobs", type=int, default=8, help="parallel downloads (default: 8)")
    p_fetch.add_argument("--retries", type=int, default=2, help="further attempts per failed file (default: 2)")
    p_verify = sub.add_parser("verify", help="check a folder against a manifest (sha256 of every image, captions)")
    p_verify.add_argument("folder", type=Path)
    p_verify.add_argument("--name", default="coco-mini", choices=sorted(MANIFESTS))
    args = parser.parse_args(argv)

    try:
        if args.command == "fetch":
            dest = args.dest or default_dest(args.name)
            report = fetch(dest, args.name, mirror=args.mirror, jobs=args.jobs, retries=args.retries,
                           log=lambda line: print(line, flush=True))
            print(f"[prh-data] {dest}: {len(report.fetched)} fetched, {len(report.skipped)} already present, "
                  "all verified")
            print(f"[prh-data] use it with: export PRH_DATA_ROOT={dest.resolve()}")
        else:
            report = verify(args.folder, args.name)
            report.raise_for_problems(f"verifying {args.folder} against {args.name}")
            print(f"[prh-data] {args.folder}: {len(report.ok)} images and captions.json match {args.name}")
    except DataError as err:
        print(f"prh-data: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
