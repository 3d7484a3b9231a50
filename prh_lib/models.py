"""Load language and vision models with their preprocessing and layer labels, by one function.

:func:`load_model` accepts

* a zoo name (:data:`prh_lib.zoo.ZOO`, e.g. ``"minilm-l6"``): converted once into a cached folder, then
  loaded like any local folder below;
* ``"timm:<arch>[.<tag>]"`` (timm pretrained weights) or ``"timm/<hub-id>"`` (a timm model on the Hugging
  Face Hub), or a local timm folder (``config.json`` with ``architecture``);
* a local Hugging Face folder or Hub id, loaded with the transformers Auto classes: ``AutoModel`` for
  encoders and vision models, ``AutoModelForCausalLM``'s base model for causal language models;
* one tower of a two-tower image-text model (CLIP, SigLIP / SigLIP 2 fixed resolution) as
  ``"<folder or Hub id>:vision"`` or ``"<folder or Hub id>:text"`` (family ``"hf-joint"``, see
  :data:`JOINT_MODEL_TYPES`);
* any of the above followed by ``"@random-init:<seed>"``: the same architecture with seeded random weights
  (:func:`random_init`), e.g. ``"dinov2-small@random-init:0"``.

It returns a :class:`LoadedModel` whose :meth:`LoadedModel.layer_outputs` gives the raw per-layer outputs
aligned with ``layer_labels``. Pooling is named, not applied here: the extraction code pools.

Layer labels
------------
Hugging Face models: ``("embed", "layer.1", ..., "layer.L")``, the ``hidden_states`` tuple, whose index 0
is the embedding output. As in transformers, ``layer.L`` is the last block's output; some architectures
(Llama, SmolLM2) apply their final norm to that last entry, others (BERT: none; ViT/DINOv2: before the
separate ``layernorm``) do not.

Two-tower towers (``"hf-joint"``): the tower's ``hidden_states`` labelled as above, then ``"projection"``,
the embedding in the joint image-text space (``get_image_features`` / ``get_text_features``), already
pooled by the model, of shape (B, d_joint).

timm EfficientNet/MobileNet family: ``("stem", "stage.1", ..., "stage.N", "head")``: the stem, every
block stage and the head convolution (the pre-logits feature map). Other timm models: their
``feature_info`` module names (e.g. ResNet ``("act1", "layer1", ..., "layer4")``).

No model is downloaded when ``HF_HUB_OFFLINE=1``: a Hub id that is not in the local Hugging Face cache
raises :class:`prh_lib.zoo.ModelNotAvailableError`.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
import torch

from prh_lib import zoo
from prh_lib.zoo import ModelNotAvailableError

__all__ = ["LoadedModel", "load_model", "resolve_identity", "ModelNotAvailableError", "VISION_MODEL_TYPES",
           "JOINT_MODEL_TYPES", "TextChunking", "random_init"]

#: Hugging Face ``model_type`` values treated as vision models when the config does not say otherwise.
VISION_MODEL_TYPES = frozenset({
    "vit", "deit", "dinov2", "dinov2_with_registers", "dinov3_vit", "vit_mae", "vit_msn", "beit",
    "data2vec-vision", "ijepa", "vit_hybrid", "swin", "swinv2", "convnext", "convnextv2", "resnet",
    "regnet", "efficientnet", "mobilevit", "levit", "pvt", "segformer",
})

_MODALITIES = ("language", "vision")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".gguf")


@dataclass
class LoadedModel:
    """A model ready for layer-wise feature extraction.

    Attributes
    ----------
    name : str
        As requested: zoo name, ``timm:<arch>``, Hub id or folder.
    modality : {"language", "vision"}
    family : {"hf-text", "hf-vit", "timm-cnn", "hf-joint"}
        ``"hf-joint"``: one tower of a two-tower image-text model (CLIP, SigLIP).
    module : torch.nn.Module
        In eval mode, ``requires_grad`` False, on ``device``, in ``dtype``.
    layer_labels : tuple of str
        One per element of :meth:`layer_outputs`.
    pooling : {"mean", "cls", "gap"}
        How the extraction code should pool a layer output: mean over real tokens (language), the CLS
        token (ViT), global average pool over space (CNN). Vision towers without a CLS token (SigLIP) use
        ``"mean"``: the mean over patch tokens. Outputs that are already pooled (the ``"projection"``
        of a two-tower model, shape (B, d)) are taken as they are.
    tokenizer : tokenizer or None
        Language only; has a pad token (EOS for causal LMs) and pads on the right.
    image_transform : callable or None
        Vision only: list of PIL images -> float32 tensor of shape (B, 3, H, W).
    revision : str
        Weight identity for cache keys: ``"sha256:<16 hex>"`` of the weight file(s) for zoo models and
        local folders, the Hub commit for Hub ids, ``"timm-<version>:<hub id>"`` for timm pretrained tags.
    source : str
        Human-readable provenance.
    device : torch.device
    dtype : torch.dtype
    """

    name: str
    modality: Literal["language", "vision"]
    family: str
    module: torch.nn.Module
    layer_labels: tuple[str, ...]
    pooling: Literal["mean", "cls", "gap"]
    tokenizer: Any | None
    image_transform: Callable[[list], torch.Tensor] | None
    revision: str
    source: str
    device: torch.device
    dtype: torch.dtype
    #: Text towers of two-tower models: how captions longer than the text context are split (else None).
    text_chunking: "TextChunking | None" = None

    @property
    def n_layers(self) -> int:
        return len(self.layer_labels)

    def layer_outputs(self, **inputs) -> tuple[torch.Tensor, ...]:
        """Raw per-layer outputs aligned with ``layer_labels``, computed without gradients.

        Parameters
        ----------
        **inputs
            Language: the tokenizer's output (``input_ids``, ``attention_mask``, ...). Vision:
            ``pixel_values`` of shape (B, 3, H, W), e.g. ``image_transform(images)``. Tensors are moved to
            ``device``; floating-point tensors are cast to ``dtype``.

        Returns
        -------
        tuple of Tensor
            Hugging Face: ``hidden_states``, each (B, T, d), index 0 the embedding output.
            timm: feature maps, each (B, C, H, W).
            Two-tower (``"hf-joint"``): the tower's ``hidden_states``, then the joint-space embedding (B, d).

        Raises
        ------
        TypeError
            If a timm model is not given exactly ``pixel_values``.
        RuntimeError
            If the model returns a different number of outputs than ``layer_labels``.
        """
        inputs = {k: self._to_device(v) for k, v in inputs.items()}
        with torch.inference_mode():
            if self.family == "timm-cnn":
                if set(inputs) != {"pixel_values"}:
                    raise TypeError(f"timm models take pixel_values only, got {sorted(inputs)}")
                outputs = _timm_layer_outputs(self.module, inputs["pixel_values"])
            elif self.family == "hf-joint":
                outputs = _joint_layer_outputs(self.module, self.modality, inputs)
            else:
                outputs = tuple(self.module(**inputs, output_hidden_states=True).hidden_states)
        if len(outputs) != len(self.layer_labels):
            raise RuntimeError(
                f"{self.name}: model returned {len(outputs)} layer outputs but has "
                f"{len(self.layer_labels)} labels {self.layer_labels}"
            )
        return outputs

    def _to_device(self, value):
        if not isinstance(value, torch.Tensor):
            return value
        if value.is_floating_point():
            return value.to(device=self.device, dtype=self.dtype)
        return value.to(device=self.device)


def load_model(
    name_or_path: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    modality: str | None = None,
    revision: str | None = None,
) -> LoadedModel:
    """Load a model with its preprocessing and layer labels.

    Parameters
    ----------
    name_or_path : str
        Zoo name (see ``prh-zoo list``), ``"timm:<arch>[.<tag>]"``, ``"timm/<hub-id>"``, a local folder
        (Hugging Face or timm layout) or a Hugging Face Hub id; a two-tower image-text model (CLIP,
        SigLIP) as ``"<folder or id>:vision"`` or ``"<folder or id>:text"``. A trailing
        ``"@random-init:<seed>"`` gives :func:`random_init` of the named model, with revision
        ``"random-init:seed=<seed>:<trained revision>"`` (so :func:`resolve_identity` knows it unloaded).
    device : str or torch.device, default "cpu"
    dtype : torch.dtype, default torch.float32
        Parameter dtype; inputs are cast to it in :meth:`LoadedModel.layer_outputs`.
    modality : {"language", "vision"}, optional
        Inferred from the config when omitted; when given it must agree with a zoo entry or timm model.
    revision : str, optional
        Hub ids: the git revision to load. Zoo models and local folders: the expected weight revision
        (``"sha256:..."``); a different one raises.

    Returns
    -------
    LoadedModel

    Raises
    ------
    ModelNotAvailableError
        If the model is not in the zoo, not a local folder and not obtainable from the Hub (the message
        names the model and the package, command or setting that would provide it).
    ValueError
        If ``modality`` is invalid or contradicts the model, if a vision transformer has no CLS token,
        if ``revision`` does not match a zoo model or folder, or if a tower suffix names a model that is
        not a supported two-tower model.
    """
    if modality is not None and modality not in _MODALITIES:
        raise ValueError(f"modality must be one of {_MODALITIES} or None, got {modality!r}")
    device = torch.device(device)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")

    base, seed = _split_random_init(name_or_path)
    if seed is not None:
        trained = load_model(base, device=device, dtype=dtype, modality=modality, revision=revision)
        return dataclasses.replace(random_init(trained, seed=seed),
                                   revision=_random_init_revision(trained.revision, seed))
    base, tower = _split_tower(name_or_path)
    if tower is not None:
        return _load_joint(name_or_path, base, tower, device=device, dtype=dtype, modality=modality, revision=revision)

    if name_or_path in zoo.ZOO:
        return _load_zoo(name_or_path, device=device, dtype=dtype, modality=modality, revision=revision)
    if name_or_path.startswith(("timm:", "timm/", "hf-hub:timm/")):
        return _load_timm(name_or_path, device=device, dtype=dtype, modality=modality)
    folder = Path(name_or_path).expanduser()
    if folder.is_dir():
        return _load_folder(name_or_path, folder, device=device, dtype=dtype, modality=modality, revision=revision)
    _check_not_a_missing_path(name_or_path)
    return _load_hf(name_or_path, device=device, dtype=dtype, modality=modality, revision=revision,
                    source=f"Hugging Face Hub {name_or_path}")


_POOLING = {"hf-text": "mean", "hf-vit": "cls", "timm-cnn": "gap"}


def resolve_identity(name_or_path: str) -> dict:
    """Name, revision, modality, family and pooling of a model, without loading its weights.

    The values equal those of ``load_model(name_or_path)``, so feature caches can be keyed (and looked up)
    before, or instead of, loading the model. Zoo models need not be converted: their revision is the
    sha256 of the installed source weight file, which conversion records.

    Returns
    -------
    dict
        ``{"name", "revision", "modality", "family", "pooling"}``, all str.

    Raises
    ------
    ModelNotAvailableError
        As :func:`load_model`.
    """
    base, seed = _split_random_init(name_or_path)
    if seed is not None:
        trained = resolve_identity(base)
        return {**trained, "name": name_or_path, "revision": _random_init_revision(trained["revision"], seed)}
    base, tower = _split_tower(name_or_path)
    if tower is not None:
        return _joint_identity(name_or_path, base, tower)
    if name_or_path in zoo.ZOO:
        entry = zoo.get_entry(name_or_path)
        return _identity(name_or_path, zoo.revision(name_or_path), entry.modality, entry.family)
    if name_or_path.startswith(("timm:", "timm/", "hf-hub:timm/")):
        if name_or_path.startswith("timm:"):
            _check_timm_arch(name_or_path)
        return _identity(name_or_path, _timm_revision(name_or_path), "vision", "timm-cnn")
    folder = Path(name_or_path).expanduser()
    if folder.is_dir():
        _check_model_folder(folder)
        prov = zoo.read_provenance(folder)
        revision = zoo.revision_of(prov) if prov else _weights_revision(folder)
        if _is_timm_folder(folder):
            return _identity(name_or_path, revision, "vision", "timm-cnn")
        modality = _infer_modality(_hf_config(name_or_path, str(folder.resolve())))
        return _identity(name_or_path, revision, modality, "hf-vit" if modality == "vision" else "hf-text")
    _check_not_a_missing_path(name_or_path)
    config = _hf_config(name_or_path, name_or_path)
    modality = _infer_modality(config)
    return _identity(name_or_path, getattr(config, "_commit_hash", None) or "unknown", modality,
                     "hf-vit" if modality == "vision" else "hf-text")


def _identity(name, revision, modality, family) -> dict:
    return {"name": name, "revision": revision, "modality": modality, "family": family, "pooling": _POOLING[family]}


# --------------------------------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------------------------------


def _check_model_folder(folder: Path) -> None:
    if not (folder / "config.json").is_file():
        raise ModelNotAvailableError(f"folder {str(folder)!r} is not a model folder: it has no config.json")


def _check_not_a_missing_path(name: str) -> None:
    # Hub ids are "name" or "org/name"; anything path-like that is not a folder is a missing folder.
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelNotAvailableError(f"model folder {name!r} does not exist")


def _check_timm_arch(name: str) -> None:
    import timm

    arch = name[len("timm:"):]
    if not timm.is_model(arch):
        raise ModelNotAvailableError(f"timm has no architecture {arch!r} (see timm.list_models())")


def _hf_config(name: str, path_or_id: str, revision: str | None = None):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path_or_id, revision=revision)
    except (OSError, ValueError) as err:
        if Path(path_or_id).is_dir():
            raise ModelNotAvailableError(f"cannot read the config of model folder {name!r}: {err}") from err
        zoo_hint = "" if "/" in name else f"; it is not a zoo model either (zoo: {', '.join(zoo.ZOO)})"
        raise ModelNotAvailableError(f"cannot load model {name!r}: {_hub_unreachable_hint(name)}{zoo_hint}") from err


def _load_zoo(name, *, device, dtype, modality, revision) -> LoadedModel:
    entry = zoo.get_entry(name)
    if modality is not None and modality != entry.modality:
        raise ValueError(f"zoo model {name!r} is a {entry.modality} model, not {modality}")
    folder = zoo.convert(name)  # reuses the cached folder when it is current
    prov = zoo.read_provenance(folder)
    zoo_revision = zoo.revision_of(prov)
    if revision is not None and revision != zoo_revision:
        raise ValueError(f"zoo model {name!r} has revision {zoo_revision}, not the requested {revision}")
    source = f"zoo:{name} <- {prov['package']} {prov['version']} ({prov['weight_file']}), converted in {folder}"
    if _is_timm_folder(folder):
        return _build_timm(name, f"local-dir:{folder}", device=device, dtype=dtype, revision=zoo_revision,
                           source=source)
    return _load_hf(str(folder), name=name, device=device, dtype=dtype, modality=entry.modality,
                    revision=None, known_revision=zoo_revision, source=source)


def _load_folder(name, folder: Path, *, device, dtype, modality, revision) -> LoadedModel:
    _check_model_folder(folder)
    prov = zoo.read_provenance(folder)
    folder_revision = zoo.revision_of(prov) if prov else _weights_revision(folder)
    if revision is not None and revision != folder_revision:
        raise ValueError(f"folder {str(folder)!r} holds revision {folder_revision}, not the requested {revision}")
    if _is_timm_folder(folder):
        if modality not in (None, "vision"):
            raise ValueError(f"{name!r} is a timm (vision) model, not {modality}")
        return _build_timm(name, f"local-dir:{folder.resolve()}", device=device, dtype=dtype,
                           revision=folder_revision, source=f"timm folder {folder.resolve()}")
    return _load_hf(str(folder.resolve()), name=name, device=device, dtype=dtype, modality=modality,
                    revision=None, known_revision=folder_revision, source=f"local folder {folder.resolve()}")


def _is_timm_folder(folder: Path) -> bool:
    config = Path(folder) / "config.json"
    if not config.is_file():
        return False
    cfg = json.loads(config.read_text())
    return "architecture" in cfg and "model_type" not in cfg


def _weights_revision(folder: Path) -> str:
    """``"sha256:<16 hex>"`` over the folder's weight files (names and contents)."""
    import hashlib

    files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES))
    if not files:
        return "unknown"
    digest = hashlib.sha256()
    for p in files:
        digest.update(p.name.encode() + b"\0" + zoo.sha256_file(p).encode() + b"\0")
    return "sha256:" + digest.hexdigest()[:16]


def _timm_revision(name: str) -> str:
    """Revision of a timm pretrained model: ``"timm-<timm version>:<Hub id of the weights>"``."""
    import timm
    from timm.models import get_pretrained_cfg

    if name.startswith("timm:"):
        cfg = get_pretrained_cfg(name[len("timm:"):])
        hub_id = getattr(cfg, "hf_hub_id", None) or name[len("timm:"):]
    else:
        hub_id = name.removeprefix("hf-hub:")
    return f"timm-{timm.__version__}:{hub_id}"


def _hub_unreachable_hint(name: str) -> str:
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return (f"it is not in the local Hugging Face cache and the Hub is unreachable (HF_HUB_OFFLINE=1); "
                f"set HF_HOME to a cache that holds {name!r} or pass a local folder")
    return "the Hugging Face Hub did not provide it; check the id, your connection, or pass a local folder"


# --------------------------------------------------------------------------------------------------
# Hugging Face
# --------------------------------------------------------------------------------------------------


def _infer_modality(config) -> str:
    if hasattr(config, "vision_config") and hasattr(config, "text_config"):
        raise ValueError(
            f"{config.model_type!r} is a two-tower (image-text) model; load one tower with the suffix "
            "':vision' or ':text' (e.g. 'openai/clip-vit-large-patch14:text')"
        )
    if config.model_type in VISION_MODEL_TYPES:
        return "vision"
    if hasattr(config, "image_size") and hasattr(config, "num_channels") and not hasattr(config, "vocab_size"):
        return "vision"
    return "language"


def _is_causal_lm(config) -> bool:
    architectures = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        return True
    return bool(getattr(config, "is_decoder", False)) and not architectures


def _load_hf(path_or_id, *, device, dtype, modality, revision, source, name=None, known_revision=None):
    name = name or path_or_id
    config = _hf_config(name, path_or_id, revision)
    inferred = _infer_modality(config)
    if modality is not None and modality != inferred:
        raise ValueError(f"{name!r} looks like a {inferred} model ({config.model_type}), not {modality}")
    hf_revision = known_revision or getattr(config, "_commit_hash", None) or "unknown"
    if inferred == "vision":
        return _build_hf_vision(name, path_or_id, config, device=device, dtype=dtype, revision=revision,
                                weight_revision=hf_revision, source=source)
    return _build_hf_text(name, path_or_id, config, device=device, dtype=dtype, revision=revision,
                          weight_revision=hf_revision, source=source)


def _dtype_kwarg(dtype) -> dict:
    """``from_pretrained`` takes ``dtype`` since transformers 4.56 and ``torch_dtype`` before."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def _placement(device) -> dict:
    """``from_pretrained`` placement: ``device="cuda"`` with several GPUs shards the model (accelerate's
    ``device_map="auto"``); ``"cuda:i"`` loads straight onto GPU i; the CPU needs nothing."""
    device = torch.device(device)
    if device.type != "cuda":
        return {}
    if device.index is None and torch.cuda.device_count() > 1:
        return {"device_map": "auto"}
    return {"device_map": {"": device.index or 0}}


def _freeze(module: torch.nn.Module, device, dtype) -> torch.nn.Module:
    if getattr(module, "hf_device_map", None) is None:
        module = module.to(device=device, dtype=dtype)
    module = module.eval()
    module.requires_grad_(False)
    return module


def _input_device(module: torch.nn.Module, device) -> torch.device:
    """Where inputs go: the device of the first parameter (the embeddings, for a sharded model)."""
    if getattr(module, "hf_device_map", None) is None:
        return torch.device(device)
    return next(module.parameters()).device


def _hf_labels(config) -> tuple[str, ...]:
    return ("embed",) + tuple(f"layer.{i}" for i in range(1, config.num_hidden_layers + 1))


def _build_hf_text(name, path_or_id, config, *, device, dtype, revision, weight_revision, source):
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    causal = _is_causal_lm(config)
    if causal:
        module = AutoModelForCausalLM.from_pretrained(path_or_id, revision=revision, **_dtype_kwarg(dtype),
                                                      **_placement(device)).base_model
    else:
        module = AutoModel.from_pretrained(path_or_id, revision=revision, **_dtype_kwarg(dtype), **_placement(device))
    tokenizer = AutoTokenizer.from_pretrained(path_or_id, revision=revision)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer of {name!r} has neither a pad nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    # Right padding keeps the real tokens at the positions they have unpadded; the attention mask marks
    # them for mean pooling.
    tokenizer.padding_side = "right"
    module = _freeze(module, device, dtype)
    return LoadedModel(
        name=name, modality="language", family="hf-text", module=module,
        layer_labels=_hf_labels(config), pooling="mean", tokenizer=tokenizer, image_transform=None,
        revision=weight_revision, source=source, device=_input_device(module, device), dtype=dtype,
    )


def _build_hf_vision(name, path_or_id, config, *, device, dtype, revision, weight_revision, source):
    from transformers import AutoImageProcessor, AutoModel

    kwargs = {}
    if config.model_type == "vit_mae":
        # ViT-MAE masks 75% of patches at inference by default; keep them all. (Its patch order is still
        # shuffled; the CLS output does not depend on it.)
        kwargs["mask_ratio"] = 0.0
    module = AutoModel.from_pretrained(path_or_id, revision=revision, **_dtype_kwarg(dtype), **kwargs,
                                       **_placement(device))
    embeddings = getattr(module, "embeddings", None)
    if not isinstance(getattr(embeddings, "cls_token", None), torch.nn.Parameter):
        raise ValueError(
            f"vision model {name!r} ({config.model_type}) has no CLS token, which CLS pooling needs; "
            "supported Hugging Face vision models are ViT-style encoders with one (ViT, DeiT, DINOv2, MAE, "
            "BEiT); load CNNs through timm (timm:<arch>)"
        )
    try:
        processor = AutoImageProcessor.from_pretrained(path_or_id, revision=revision)
    except (OSError, ValueError) as err:
        raise ModelNotAvailableError(f"vision model {name!r} has no image processor (preprocessor_config.json)") from err

    def image_transform(images: list) -> torch.Tensor:
        rgb = [im.convert("RGB") for im in images]
        return processor(images=rgb, return_tensors="pt")["pixel_values"].float()

    module = _freeze(module, device, dtype)
    return LoadedModel(
        name=name, modality="vision", family="hf-vit", module=module,
        layer_labels=_hf_labels(config), pooling="cls", tokenizer=None, image_transform=image_transform,
        revision=weight_revision, source=source, device=_input_device(module, device), dtype=dtype,
    )


# --------------------------------------------------------------------------------------------------
# timm
# --------------------------------------------------------------------------------------------------


def _load_timm(name, *, device, dtype, modality) -> LoadedModel:
    if modality not in (None, "vision"):
        raise ValueError(f"{name!r} is a timm (vision) model, not {modality}")
    if name.startswith("timm:"):
        _check_timm_arch(name)
        timm_name = name[len("timm:"):]
    else:
        timm_name = "hf-hub:" + name.removeprefix("hf-hub:")
    return _build_timm(name, timm_name, device=device, dtype=dtype, revision=_timm_revision(name),
                       source=f"timm {timm_name}")


def _build_timm(name, timm_name, *, device, dtype, revision, source) -> LoadedModel:
    import timm
    from timm.data import create_transform, resolve_data_config

    try:
        module = timm.create_model(timm_name, pretrained=True)
    except (OSError, RuntimeError) as err:
        if timm_name.startswith("local-dir:"):
            raise
        raise ModelNotAvailableError(f"cannot load timm model {name!r}: {_hub_unreachable_hint(name)}") from err
    if _timm_all_stages(module):
        labels = ("stem",) + tuple(f"stage.{i}" for i in range(1, len(module.blocks) + 1)) + ("head",)
    else:
        labels = tuple(info["module"] for info in module.feature_info)
    transform = create_transform(**resolve_data_config({}, model=module))

    def image_transform(images: list) -> torch.Tensor:
        return torch.stack([transform(im.convert("RGB")) for im in images]).float()

    return LoadedModel(
        name=name, modality="vision", family="timm-cnn", module=_freeze(module, device, dtype),
        layer_labels=labels, pooling="gap", tokenizer=None, image_transform=image_transform,
        revision=revision, source=source, device=device, dtype=dtype,
    )


def _timm_all_stages(module) -> bool:
    """EfficientNet/MobileNet-style timm models can return every block stage (``extra_blocks``)."""
    return "extra_blocks" in inspect.signature(module.forward_intermediates).parameters


def _timm_layer_outputs(module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    if _timm_all_stages(module):
        # stem + every block stage, then the head conv (+BN+act) output that forward_intermediates returns
        final, intermediates = module.forward_intermediates(x, extra_blocks=True)
        return tuple(intermediates) + (final,)
    return tuple(module.forward_intermediates(x, intermediates_only=True))


# --------------------------------------------------------------------------------------------------
# Two-tower image-text models (Herbst et al., Section 3.3, "explicitly aligned vision-language models")
# --------------------------------------------------------------------------------------------------

#: ``model_type`` of the supported two-tower models and how their towers pool hidden states.
#: CLIP: the vision tower's CLS token; the text tower's hidden states are mean-pooled over real tokens
#: (like every language model here), while its projection uses CLIP's own EOS pooling. SigLIP (and the
#: fixed-resolution SigLIP 2 checkpoints, whose ``model_type`` is ``"siglip"``) has no CLS token: hidden
#: states are mean-pooled over patches; its projection is the attention-pooling head. SigLIP pools the
#: text tower's *last position*, so every text input is padded to the full context, as in training.
JOINT_MODEL_TYPES = {
    "clip": {"vision_pooling": "cls", "pad_to_context": False},
    "siglip": {"vision_pooling": "mean", "pad_to_context": True},
}

_TOWERS = {"vision": "vision", "text": "language"}
_TOWER_RE = re.compile(r"^(?P<base>.+):(?P<tower>vision|text)$")
_RANDOM_INIT_RE = re.compile(r"^(?P<base>.+)@random-init:(?P<seed>\d+)$")


def _split_random_init(name: str) -> tuple[str, int | None]:
    """``"x@random-init:3"`` -> ``("x", 3)``; other names -> ``(name, None)``."""
    match = _RANDOM_INIT_RE.match(name)
    if match is None or Path(name).expanduser().is_dir():
        return name, None
    return match["base"], int(match["seed"])


def _split_tower(name: str) -> tuple[str, str | None]:
    """``"openai/clip-vit-large-patch14:text"`` -> ``("openai/clip-vit-large-patch14", "text")``."""
    match = _TOWER_RE.match(name)
    if match is None or name.startswith("timm:") or Path(name).expanduser().is_dir():
        return name, None
    return match["base"], match["tower"]


def _random_init_revision(trained_revision: str, seed: int) -> str:
    return f"random-init:seed={int(seed)}:{trained_revision}"


@dataclass(frozen=True)
class TextChunking:
    """How a two-tower text tower embeds captions longer than its context (Herbst et al., Section 3.3).

    A caption's tokens (without special tokens) are split into consecutive windows of ``window`` tokens;
    each window gets the model's special tokens (``prefix`` + window + ``suffix``, at most
    ``context_length`` tokens) and is embedded on its own. The extraction code averages each layer's
    pooled chunk features, weighted by the number of caption tokens in each chunk
    (:func:`prh_lib.extract.extract_features`). A caption that fits gives one chunk equal to the
    tokenizer's own encoding, so the chunked path reduces to the plain one.

    Attributes
    ----------
    context_length : int
        Tokens per forward pass including special tokens (CLIP 77, SigLIP 64).
    prefix, suffix : tuple of int
        Special token ids the tokenizer puts before and after a caption (CLIP: ``<|startoftext|>`` and
        ``<|endoftext|>``; SigLIP: ``</s>`` after).
    pad_id : int
    pad_to_context : bool
        Pad every chunk to ``context_length`` (SigLIP, which pools the last position) instead of to the
        longest chunk of the batch.
    attention_mask : bool
        Pass an attention mask to the model: True when its tokenizer returns one (as its processor
        would), False for tokenizers whose only model input is ``input_ids`` (SigLIP).
    """

    context_length: int
    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    pad_id: int
    pad_to_context: bool
    attention_mask: bool

    def __post_init__(self):
        if self.window < 1:
            raise ValueError(f"context_length {self.context_length} leaves no room for caption tokens between "
                             f"{len(self.prefix)} + {len(self.suffix)} special tokens")

    @property
    def window(self) -> int:
        """Caption tokens per chunk: ``context_length`` minus the special tokens."""
        return self.context_length - len(self.prefix) - len(self.suffix)

    def split(self, ids) -> list[list[int]]:
        """Chunks of one caption's token ids (no special tokens): ``prefix + window + suffix`` each.

        Every token lands in exactly one chunk, in order; an empty caption gives one chunk of the
        special tokens alone.
        """
        ids = list(ids)
        windows = [ids[i : i + self.window] for i in range(0, len(ids), self.window)] or [[]]
        return [[*self.prefix, *w, *self.suffix] for w in windows]

    def encode(self, tokenizer, texts, *, max_length: int | None = None):
        """Chunks of every caption.

        Parameters
        ----------
        tokenizer : tokenizer
        texts : sequence of str
        max_length : int, optional
            Keep at most this many caption tokens (special tokens not counted) before chunking.

        Returns
        -------
        chunks : list of list of int
            Token ids of every chunk, with special tokens, captions in order.
        owner : ndarray of shape (n_chunks,), int64
            Index of the caption each chunk belongs to.
        n_tokens : ndarray of shape (n_chunks,), float64
            Caption tokens in each chunk (1 for the chunk of an empty caption), the averaging weights.
        """
        ids = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
        chunks, owner, n_tokens = [], [], []
        for i, caption in enumerate(ids):
            caption = caption[:max_length] if max_length is not None else caption
            for chunk in self.split(caption):
                chunks.append(chunk)
                owner.append(i)
                n_tokens.append(max(len(chunk) - len(self.prefix) - len(self.suffix), 1))
        return chunks, np.asarray(owner, dtype=np.int64), np.asarray(n_tokens, dtype=np.float64)

    def collate(self, chunks) -> tuple[dict, torch.Tensor]:
        """Model inputs for a batch of chunks, right-padded, and the mask of real (non-pad) tokens.

        Returns
        -------
        inputs : dict
            ``input_ids`` (B, T) and, if ``attention_mask``, ``attention_mask`` (B, T); T is
            ``context_length`` with ``pad_to_context``, else the longest chunk.
        real : Tensor of shape (B, T), int64
            1 at the chunk's tokens (special tokens included), 0 at padding: the mask of mean pooling.
        """
        width = self.context_length if self.pad_to_context else max(len(c) for c in chunks)
        input_ids = torch.full((len(chunks), width), self.pad_id, dtype=torch.long)
        real = torch.zeros((len(chunks), width), dtype=torch.long)
        for row, chunk in enumerate(chunks):
            input_ids[row, : len(chunk)] = torch.as_tensor(chunk, dtype=torch.long)
            real[row, : len(chunk)] = 1
        inputs = {"input_ids": input_ids}
        if self.attention_mask:
            inputs["attention_mask"] = real
        return inputs, real


def _special_affixes(tokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Special token ids the tokenizer adds before and after a text (found by encoding a probe)."""
    probe = "a photo"
    plain = list(tokenizer(probe, add_special_tokens=False)["input_ids"])
    full = list(tokenizer(probe)["input_ids"])
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return tuple(full[:start]), tuple(full[start + len(plain) :])
    raise ValueError(f"cannot find the special tokens of tokenizer {type(tokenizer).__name__}: "
                     f"{full} does not contain {plain}")


def _text_chunking(tokenizer, config) -> TextChunking:
    prefix, suffix = _special_affixes(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad_id is None:
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has neither a pad nor an EOS token")
    return TextChunking(
        context_length=int(config.text_config.max_position_embeddings), prefix=prefix, suffix=suffix,
        pad_id=int(pad_id), pad_to_context=JOINT_MODEL_TYPES[config.model_type]["pad_to_context"],
        attention_mask="attention_mask" in tokenizer.model_input_names,
    )


def _check_joint(name: str, config) -> None:
    if config.model_type not in JOINT_MODEL_TYPES:
        raise ValueError(
            f"{name!r} is a {config.model_type!r} model, not a supported two-tower image-text model "
            f"(supported model_type: {sorted(JOINT_MODEL_TYPES)}; SigLIP 2 NaFlex 'siglip2' checkpoints are not)"
        )


def _joint_location(name: str, base: str, revision):
    """(path or id for from_pretrained, Hub revision, weight revision or None, source) of a two-tower model."""
    folder = Path(base).expanduser()
    if folder.is_dir():
        _check_model_folder(folder)
        prov = zoo.read_provenance(folder)
        folder_revision = zoo.revision_of(prov) if prov else _weights_revision(folder)
        if revision is not None and revision != folder_revision:
            raise ValueError(f"folder {str(folder)!r} holds revision {folder_revision}, not the requested {revision}")
        return str(folder.resolve()), None, folder_revision, f"local folder {folder.resolve()}"
    _check_not_a_missing_path(base)
    return base, revision, None, f"Hugging Face Hub {base}"


def _joint_identity(name: str, base: str, tower: str) -> dict:
    path, hub_revision, weight_revision, _ = _joint_location(name, base, None)
    config = _hf_config(base, path, hub_revision)
    _check_joint(name, config)
    revision = weight_revision or getattr(config, "_commit_hash", None) or "unknown"
    pooling = JOINT_MODEL_TYPES[config.model_type]["vision_pooling"] if tower == "vision" else "mean"
    return {"name": name, "revision": revision, "modality": _TOWERS[tower], "family": "hf-joint", "pooling": pooling}


def _load_joint(name, base, tower, *, device, dtype, modality, revision) -> LoadedModel:
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    tower_modality = _TOWERS[tower]
    if modality is not None and modality != tower_modality:
        raise ValueError(f"{name!r} is the {tower} tower ({tower_modality}), not {modality}")
    path, hub_revision, weight_revision, source = _joint_location(name, base, revision)
    config = _hf_config(base, path, hub_revision)
    _check_joint(name, config)
    weight_revision = weight_revision or getattr(config, "_commit_hash", None) or "unknown"
    module = AutoModel.from_pretrained(path, revision=hub_revision, **_dtype_kwarg(dtype), **_placement(device))
    module = _freeze(module, device, dtype)
    kind = JOINT_MODEL_TYPES[config.model_type]
    common = dict(name=name, family="hf-joint", module=module, revision=weight_revision,
                  source=f"{source} ({tower} tower)", device=_input_device(module, device), dtype=dtype)
    if tower == "vision":
        try:
            processor = AutoImageProcessor.from_pretrained(path, revision=hub_revision)
        except (OSError, ValueError) as err:
            raise ModelNotAvailableError(f"{name!r} has no image processor (preprocessor_config.json)") from err

        def image_transform(images: list) -> torch.Tensor:
            return processor(images=[im.convert("RGB") for im in images], return_tensors="pt")["pixel_values"].float()

        return LoadedModel(modality="vision", layer_labels=_hf_labels(config.vision_config) + ("projection",),
                           pooling=kind["vision_pooling"], tokenizer=None, image_transform=image_transform, **common)
    tokenizer = AutoTokenizer.from_pretrained(path, revision=hub_revision)
    tokenizer.padding_side = "right"
    return LoadedModel(modality="language", layer_labels=_hf_labels(config.text_config) + ("projection",),
                       pooling="mean", tokenizer=tokenizer, image_transform=None,
                       text_chunking=_text_chunking(tokenizer, config), **common)


def _joint_layer_outputs(module, modality: str, inputs: dict) -> tuple[torch.Tensor, ...]:
    """The tower's hidden states, then its joint-space embedding (``get_image_features`` / ``get_text_features``)."""
    get = module.get_image_features if modality == "vision" else module.get_text_features
    out = get(**inputs, output_hidden_states=True, return_dict=True)
    return tuple(out.hidden_states) + (out.pooler_output,)


# --------------------------------------------------------------------------------------------------
# Random initialisation (the "random init" baseline of Herbst et al., Section 3.3)
# --------------------------------------------------------------------------------------------------


def _fresh_module(module: torch.nn.Module, family: str) -> torch.nn.Module:
    if family == "timm-cnn":
        import timm

        arch = module.pretrained_cfg.get("architecture")
        if not arch:
            raise ValueError("timm model has no pretrained_cfg['architecture'] to re-create it from")
        return timm.create_model(arch, pretrained=False, num_classes=module.num_classes)
    from transformers import AutoModel

    return AutoModel.from_config(module.config)


def random_init(model: LoadedModel, *, seed: int) -> LoadedModel:
    """The same architecture, tokenizer and preprocessing with seeded random weights.

    Weights come from the architecture's own initialiser (Hugging Face ``_init_weights`` / timm's
    constructor), drawn inside :func:`torch.random.fork_rng` seeded with ``seed``, so the result depends
    only on ``seed`` and the global RNG state is left untouched. The returned model's ``name`` gets the
    suffix ``@random-init:<seed>`` and its ``revision`` records the architecture and seed, so its features
    cache apart from the trained model's.

    Parameters
    ----------
    model : LoadedModel
        A loaded (trained) model; only its architecture, tokenizer and preprocessing are used.
    seed : int
        Seed of the initialisation.

    Returns
    -------
    LoadedModel

    Raises
    ------
    ValueError
        If the model cannot be re-created from its configuration.

    References
    ----------
    Herbst et al., Section 3.3 and Figure 5 ("random initialisation" regime); Huh et al. (2024), Sec. 3.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {seed!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        fresh = _fresh_module(model.module, model.family)
    arch = type(fresh).__name__
    return LoadedModel(
        name=f"{model.name}@random-init:{int(seed)}", modality=model.modality, family=model.family,
        module=_freeze(fresh, model.device, model.dtype), layer_labels=model.layer_labels, pooling=model.pooling,
        tokenizer=model.tokenizer, image_transform=model.image_transform,
        revision=f"random-init:{arch}:seed={int(seed)}:{model.revision}", source=f"random init of {model.source}",
        device=model.device, dtype=model.dtype, text_chunking=model.text_chunking,
    )
