"""The rehearsal: the paper's study end to end on stand-ins, offline, on a CPU (issue 12).

:func:`profile_from_paper` turns the ``paper`` profile into the ``rehearsal`` profile programmatically, so it
follows whatever the paper profile and the notebooks declare:

- every paper model id, wherever it appears (model lists, comparison pairs, summary model), becomes its
  stand-in ``"<id>~rehearsal"`` (:mod:`prh_lib.models.standins`: a tiny random model of the same class);
- every paper dataset points at a tiny local copy in that source's real format (:func:`build_data`), built from a few
  coco-mini images under :func:`data_dir` (``PRH_REHEARSAL_DATA``, default ``PRH_CACHE_DIR/rehearsal-data``): WIT-1024
  as a downloaded copy of the Hub repository (parquet), COCO in the official layout, DOCCI's official release layout,
  CC3M + DreamLIP as DreamLIP's CSV plus the img2dataset ``files`` folder of "downloaded" images;
- N shrinks to what the fixtures hold, 2 draws per dataset (WIT-1024 stays one fixed set), few permutations and
  replicates, CPU.

:func:`prepare` builds the stand-ins and the data (idempotent); :func:`prh_lib.run.profiles.get_profile` calls
it for ``"rehearsal"``. No number of a rehearsal means anything: the weights are random."""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path

from prh_lib.data import paper
from prh_lib import paths

#: Environment variable naming the folder of the rehearsal's dataset copies.
DATA_ENV = "PRH_REHEARSAL_DATA"
#: Bump when a fixture changes (part of the folder name).
DATA_FORMAT = 1
#: Images per dataset copy, and pairs per draw (N) and draws of the rehearsal.
FIXTURE_IMAGES, N_PAIRS, N_DRAWS = 20, 16, 2
_SIDE = 64  # fixture images are coco-mini images resized to 64 x 64

#: Parameters the rehearsal shrinks (applied over the mapped paper profile, where the paper sets them or a
#: notebook declares them). ``summary_pairs`` must exceed k + 1: the caption-detail control scores it with k-NN.
SMALL = {
    "n_pairs": N_PAIRS, "k": 5, "n_permutations": 20, "n_boot": 20, "batch_size": 8, "device": "cpu",
    "n_components": 8, "profile_components": [4, 8], "n_displacement_pairs": 500, "n_splits": 2, "n_shared": 3,
    "n_private": 3, "n_random": 5, "n_seeds": 2, "summary_pairs": 8, "max_captions": 3, "n_heldout": 8,
    "random_init_seeds": [0], "num_threads": 1, "n_draws": N_DRAWS,
    # the verdicts' held-out peaks and image resamples: every code path runs at a twentieth of the book's cost (10
    # splits, 50-100 resamples)
    "heldout_splits": 2, "heldout_boot": 5, "image_splits": 2, "image_boot": 5,
}


def data_dir() -> Path:
    """Where the dataset copies are: ``$PRH_REHEARSAL_DATA`` or ``PRH_CACHE_DIR/rehearsal-data-v<format>``."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return paths.cache_root() / f"rehearsal-data-v{DATA_FORMAT}"


def dataset_locations(root: Path | None = None) -> dict[str, str]:
    """The local copy of each paper dataset (paper name -> path) under ``root`` (default :func:`data_dir`)."""
    root = Path(root) if root is not None else data_dir()
    return {"wit-1024": str(root / "prh-repo"), "coco": str(root / "coco"), "docci": str(root / "docci"),
            "cc3m-dreamlip": str(root / "cc3m-dreamlip")}


# --------------------------------------------------------------------------------------------------------
# models


def map_models(value):
    """``value`` with every paper model id (also with a tower suffix) replaced by its stand-in name, recursively
    through lists, tuples and dicts; other values unchanged."""
    from prh_lib.data.paper import STANDIN_SUFFIX

    if isinstance(value, str):
        base, sep, tower = value.rpartition(":") if value.endswith((":vision", ":text")) else (value, "", "")
        return f"{base}{STANDIN_SUFFIX}{sep}{tower}" if paper.model_info(base) is not None else value
    if isinstance(value, (list, tuple)):
        return type(value)(map_models(v) for v in value)
    if isinstance(value, dict):
        return {k: map_models(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------------------------------------
# the profile


def _map_dataset(spec: dict, locations: dict[str, str]) -> dict:
    out = {k: v for k, v in spec.items() if k != "notes"}
    out["location"] = locations[spec["name"]]
    if spec["name"] == "wit-1024":  # a fixed set used whole, once: the copy is used whole, once
        out["n_pairs"], out["repetitions"] = None, 1
    else:
        out["n_pairs"], out["repetitions"] = N_PAIRS, N_DRAWS
    return out


def profile_from_paper(paper_params: dict, *, root: Path | None = None) -> dict:
    """The rehearsal parameters: ``paper_params`` with stand-ins, local dataset copies and small sizes.

    Pure: nothing is built (see :func:`prepare`)."""
    locations = dataset_locations(root)
    params = {k: map_models(v) for k, v in paper_params.items()}
    for key in ("datasets", "study_datasets"):
        if params.get(key):
            params[key] = [_map_dataset(d, locations) for d in params[key]]
    # the notebooks' own single dataset (the paper's: WIT-1024) and the caption-detail dataset (COCO)
    if params.get("dataset_source") == "wit":
        params["data_location"], params["n_pairs"] = locations["wit-1024"], None
    if params.get("caption_dataset_source") == "coco-captions":
        params["caption_data_location"] = locations["coco"]
    small = dict(SMALL)
    if params.get("dataset_source") == "wit":
        small.pop("n_pairs")  # WIT is used whole
    params.update({k: v for k, v in small.items()})
    return params


def prepare(params: dict | None = None) -> None:
    """Build (once) the dataset copies and the stand-in of every model the parameters name."""
    build_data()
    if params is None:
        return
    from prh_lib.models import standins

    names = set()

    def walk(v):
        if isinstance(v, str) and paper.STANDIN_SUFFIX in v:
            names.add(v.split(paper.STANDIN_SUFFIX)[0])
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    walk(params)
    for model_id in sorted(names):
        standins.ensure_standin(model_id)


# --------------------------------------------------------------------------------------------------------
# dataset copies in the paper sources' real formats


def _images(records, image_dir: Path, start: int, n: int):
    from PIL import Image

    out = []
    for rec in records[start : start + n]:
        with Image.open(image_dir / rec["file_name"]) as im:
            out.append((rec, im.convert("RGB").resize((_SIDE, _SIDE))))
    return out


def build_data(root: Path | None = None) -> dict[str, str]:
    """Write the four dataset copies under ``root`` (default :func:`data_dir`) unless present; their paths.

    Each copy holds :data:`FIXTURE_IMAGES` coco-mini images (distinct images per dataset), resized to
    64 x 64, with their real COCO captions in the source's own columns."""
    from prh_lib.data.coco import read_coco_captions

    root = Path(root) if root is not None else data_dir()
    locations = dataset_locations(root)
    if all(Path(p).exists() for p in locations.values()):
        return locations
    root.mkdir(parents=True, exist_ok=True)
    records, captions = read_coco_captions(paths.data_root() / "captions.json")
    image_dir = paths.data_root() / "images"
    n = FIXTURE_IMAGES
    builders = {"wit-1024": _wit_repo, "coco": _coco_official, "docci": _docci_official,
                "cc3m-dreamlip": _cc3m_dreamlip}
    for i, (name, build) in enumerate(builders.items()):
        final = Path(locations[name])
        if final.exists():
            continue
        rows = [(rec, im, captions.get(rec["id"], [])) for rec, im in _images(records, image_dir, i * n, n)]
        with paths.atomic_path(final, is_dir=True) as tmp:
            build(tmp, rows)
    return locations


def _wit_repo(out: Path, rows) -> None:
    """A downloaded copy of ``minhuh/prh`` @ ``wit_1024``: ``data/train-00000-of-00001.parquet`` with
    ``image`` (Image) and ``text`` (list of str)."""
    import datasets

    feats = datasets.Features({"image": datasets.Image(), "text": datasets.List(datasets.Value("string"))})
    table = datasets.Dataset.from_dict({"image": [im for _, im, _ in rows], "text": [caps[:2] for _, _, caps in rows]},
                                       features=feats)
    (out / "data").mkdir(parents=True)
    table.to_parquet(str(out / "data" / "train-00000-of-00001.parquet"))


def _coco_official(out: Path, rows, split: str = "val2017") -> None:
    """The official layout: ``annotations/captions_val2017.json`` + ``val2017/<012d id>.jpg``."""
    (out / "annotations").mkdir(parents=True)
    (out / split).mkdir()
    images, anns = [], []
    for rec, im, caps in rows:
        fname = f"{rec['id']:012d}.jpg"
        im.save(out / split / fname, quality=90)
        images.append({"id": rec["id"], "file_name": fname, "height": _SIDE, "width": _SIDE})
        anns += [{"id": rec["id"] * 10 + c, "image_id": rec["id"], "caption": t} for c, t in enumerate(caps)]
    (out / "annotations" / f"captions_{split}.json").write_text(json.dumps({"images": images, "annotations": anns}))


def _docci_official(out: Path, rows) -> None:
    """DOCCI's release: ``docci_descriptions.jsonlines`` + ``images/``; the long description of an image is
    its COCO captions joined (long enough to need chunking in CLIP's 77 tokens); the last 2 rows are train."""
    (out / "images").mkdir(parents=True)
    lines = []
    for k, (rec, im, caps) in enumerate(rows):
        split = "test" if k < len(rows) - 2 else "train"
        ex = f"{split}_{k:05d}"
        im.save(out / "images" / f"{ex}.jpg", quality=90)
        lines.append(json.dumps({"example_id": ex, "split": split, "image_file": f"{ex}.jpg",
                                 "description": " ".join(caps)}))
    (out / "docci_descriptions.jsonlines").write_text("\n".join(lines) + "\n")


def _cc3m_dreamlip(out: Path, rows) -> None:
    """DreamLIP's CSV (``cc3m_3long_3short_1raw_captions_url.csv``) and the img2dataset ``files`` output made
    from it (``00000/<key>.jpg`` + ``<key>.json`` with the caption columns saved); one download failed."""
    from prh_lib.data.sources import DREAMLIP_COLUMNS

    shard = out / "00000"
    shard.mkdir(parents=True)
    with open(out / "cc3m_3long_3short_1raw_captions_url.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["Image Path", *DREAMLIP_COLUMNS])
        writer.writeheader()
        for k, (rec, im, caps) in enumerate(rows):
            url = f"https://example.invalid/cc3m/{hashlib.sha256(str(rec['id']).encode()).hexdigest()[:12]}.jpg"
            long = " ".join(caps)
            row = {"Image Path": url, "raw_caption": caps[0] if caps else ""}
            for c in DREAMLIP_COLUMNS[1:]:
                row[c] = str([long]) if c.startswith("long") else str(caps[:1])
            writer.writerow(row)
            key = f"{k:09d}"
            meta = {"url": url, "key": key, "caption": row["raw_caption"], "error_message": None,
                    "status": "failed_to_download" if k == len(rows) - 1 else "success",
                    **{c: row[c] for c in DREAMLIP_COLUMNS}}
            if meta["status"] == "success":
                im.save(shard / f"{key}.jpg", quality=90)
            (shard / f"{key}.json").write_text(json.dumps(meta))
    (out / "00000_stats.json").write_text(json.dumps({"count": len(rows), "successes": len(rows) - 1}))
