"""A loaded model (:class:`LoadedModel`): its module, preprocessing, layer labels, and how its layers are read.

Also the small mechanisms every loader shares: the one dtype map (:data:`DTYPES`), placement on devices (a large model
is sharded over several GPUs by accelerate's ``device_map="auto"``) and freezing.

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
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch

MODALITIES = ("language", "vision")

#: Weight dtypes by name: the one dtype map of the package.
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def torch_dtype(dtype) -> torch.dtype:
    """``dtype`` as a ``torch.dtype``: a name in :data:`DTYPES` or a ``torch.dtype``.

    Raises
    ------
    ValueError
        If ``dtype`` is an unknown name.
    TypeError
        If ``dtype`` is neither a str nor a ``torch.dtype``.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a name in {sorted(DTYPES)} or a torch.dtype, got {dtype!r}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def dtype_name(dtype) -> str:
    """The name of a dtype in :data:`DTYPES` (``torch.bfloat16`` -> ``"bfloat16"``): its one spelling in cache keys."""
    return str(torch_dtype(dtype)).replace("torch.", "")


def dtype_bytes(dtype) -> int:
    """Bytes per element of a dtype (``"bfloat16"`` -> 2)."""
    return torch.empty((), dtype=torch_dtype(dtype)).element_size()


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
    pooling : {"mean", "mean-nofirst", "last", "cls", "gap"}
        How extraction pools a layer output: real tokens (language, :data:`~prh_lib.models.spec.TOKEN_POOLINGS`),
        the CLS token (ViT), global average pool (CNN); vision towers without CLS (SigLIP): ``"mean"`` over patches.
        Already pooled outputs (a two-tower model's ``"projection"``, shape (B, d)) are taken as they are.
    tokenizer : tokenizer or None
        Language only; has a pad token (EOS for causal LMs) and pads on the right.
    image_transform : callable or None
        Vision only: list of PIL images -> float32 tensor of shape (B, 3, H, W).
    revision : str
        Weight identity for cache keys (:attr:`prh_lib.models.spec.ModelIdentity.revision`).
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
    pooling: Literal["mean", "mean-nofirst", "last", "cls", "gap"]
    tokenizer: Any | None
    image_transform: Callable[[list], torch.Tensor] | None
    revision: str
    source: str
    device: torch.device
    dtype: torch.dtype
    #: Text towers of two-tower models: how captions longer than the text context are split (else None); a
    #: :class:`prh_lib.models.two_tower.TextChunking`, typed loosely so this module imports no loader.
    text_chunking: Any = None

    @property
    def n_layers(self) -> int:
        return len(self.layer_labels)

    def layer_outputs(self, **inputs) -> tuple[torch.Tensor, ...]:
        """Raw per-layer outputs aligned with ``layer_labels``, computed without gradients.

        Parameters
        ----------
        **inputs
            Language: the tokenizer's output (``input_ids``, ``attention_mask``, ...). Vision: ``pixel_values`` of shape
            (B, 3, H, W), e.g. ``image_transform(images)``. Tensors are moved to ``device``; floating-point ones cast to
            ``dtype``.

        Returns
        -------
        tuple of Tensor
            Hugging Face: ``hidden_states``, each (B, T, d), index 0 the embedding output. timm: feature maps, each (B,
            C, H, W). Two-tower (``"hf-joint"``): the tower's ``hidden_states``, then the joint-space embedding (B, d).

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


def dtype_kwarg(dtype) -> dict:
    """``from_pretrained`` takes ``dtype`` since transformers 4.56 and ``torch_dtype`` before."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def placement(device) -> dict:
    """``from_pretrained`` placement: ``device="cuda"`` with several GPUs shards the model (accelerate's
    ``device_map="auto"``); ``"cuda:i"`` loads straight onto GPU i; the CPU needs nothing."""
    device = torch.device(device)
    if device.type != "cuda":
        return {}
    if device.index is None and torch.cuda.device_count() > 1:
        return {"device_map": "auto"}
    return {"device_map": {"": device.index or 0}}


def freeze(module: torch.nn.Module, device, dtype) -> torch.nn.Module:
    """``module`` in eval mode without gradients, on ``device`` in ``dtype`` (left where it is when sharded over GPUs
    or on the meta device, which has no values to move)."""
    if getattr(module, "hf_device_map", None) is None and not any(p.is_meta for p in module.parameters()):
        module = module.to(device=device, dtype=dtype)
    module = module.eval()
    module.requires_grad_(False)
    return module


def input_device(module: torch.nn.Module, device) -> torch.device:
    """Where inputs go: the device of the first parameter (the embeddings, for a sharded model)."""
    if getattr(module, "hf_device_map", None) is None:
        return torch.device(device)
    return next(module.parameters()).device


def hf_labels(config) -> tuple[str, ...]:
    return ("embed",) + tuple(f"layer.{i}" for i in range(1, config.num_hidden_layers + 1))


def timm_all_stages(module) -> bool:
    """EfficientNet/MobileNet-style timm models can return every block stage (``extra_blocks``)."""
    return "extra_blocks" in inspect.signature(module.forward_intermediates).parameters


#: Memory layout of a timm CNN's weights and inputs. Channels-last runs oneDNN's depthwise and pointwise convolutions:
#: EfficientNet-Lite2 1.7x and Lite0 1.4x faster in float32 on a 2-core Xeon, features equal to the NCHW layout's up to
#: float32 round-off (largest relative difference 5e-6; ``benchmarks/cnn_memory_format.py``). Part of the feature cache
#: key (:func:`prh_lib.extract.features_cache_path`).
CNN_MEMORY_FORMAT = torch.channels_last


def _timm_layer_outputs(module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # a module runs in CNN_MEMORY_FORMAT unless ``module._prh_memory_format`` says otherwise (the benchmark's contiguous
    # reference); weights are converted in place on the first call
    memory_format = getattr(module, "_prh_memory_format", None) or CNN_MEMORY_FORMAT
    if getattr(module, "_prh_converted_to", None) != memory_format:
        module.to(memory_format=memory_format)
        module._prh_memory_format = module._prh_converted_to = memory_format
    x = x.contiguous(memory_format=memory_format)
    if timm_all_stages(module):
        # stem + every block stage, then the head conv (+BN+act) output that forward_intermediates returns
        final, intermediates = module.forward_intermediates(x, extra_blocks=True)
        return tuple(intermediates) + (final,)
    return tuple(module.forward_intermediates(x, intermediates_only=True))


def _joint_layer_outputs(module, modality: str, inputs: dict) -> tuple[torch.Tensor, ...]:
    """The tower's hidden states, then its joint-space embedding (``get_image_features`` / ``get_text_features``)."""
    if getattr(module.config, "model_type", None) == "qwen3_vl":  # one decoder for both inputs
        return vlm_layer_outputs(module, modality, inputs)
    get = module.get_image_features if modality == "vision" else module.get_text_features
    out = get(**inputs, output_hidden_states=True, return_dict=True)
    return tuple(out.hidden_states) + (out.pooler_output,)


def vlm_layer_outputs(module, modality: str, inputs: dict) -> tuple[torch.Tensor, ...]:
    """Qwen3-VL (:mod:`prh_lib.models.vlm`): Decoder hidden states for an image (``pixel_values`` (B, n_patches, patch_dim)) or a text, then the
    last-token embedding (B, d)."""
    cfg = module.config
    if modality == "vision":
        pixels = inputs["pixel_values"]
        b, n_patches, dim = pixels.shape
        side = math.isqrt(n_patches)
        if side * side != n_patches:
            raise ValueError(f"expected square images, got {n_patches} patches per image")
        merge = cfg.vision_config.spatial_merge_size
        n_tokens = n_patches // (merge * merge)
        row = [cfg.vision_start_token_id] + [cfg.image_token_id] * n_tokens + [cfg.vision_end_token_id]
        ids = torch.tensor([row] * b, device=pixels.device)
        out = module(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixels.reshape(b * n_patches, dim),
                     image_grid_thw=torch.tensor([[1, side, side]] * b, device=pixels.device),
                     mm_token_type_ids=(ids == cfg.image_token_id).long(), output_hidden_states=True)
        last = out.hidden_states[-1][:, -1]
    else:
        mask = inputs["attention_mask"]
        extra = {"position_ids": inputs["position_ids"]} if "position_ids" in inputs else {}
        out = module(input_ids=inputs["input_ids"], attention_mask=mask, output_hidden_states=True, **extra)
        # last real token (right padding: at mask.sum - 1; left padding: at the end)
        index = (mask.long().cumsum(-1).argmax(-1)).to(out.hidden_states[-1].device)
        last = out.hidden_states[-1][torch.arange(mask.shape[0], device=index.device), index]
    return tuple(out.hidden_states) + (last,)
