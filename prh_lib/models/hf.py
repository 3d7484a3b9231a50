"""Hugging Face encoders, vision transformers and causal language models (the transformers Auto classes).

``AutoModel`` for encoders and vision models; for causal language models the one causal-LM loader of the
package, :func:`load_causal_lm`, which keeps the head (bits per byte, generation) and gives the base model
as a :class:`~prh_lib.models.LoadedModel` (hidden states for features). :func:`prh_lib.models.load_model`
uses the same loader and keeps only the base model."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from prh_lib.models.loaded import LoadedModel, dtype_kwarg, freeze, hf_labels, input_device, placement, torch_dtype
from prh_lib.models.spec import (ModelSpec, hf_config, infer_modality, is_causal_lm, location, parse_model_name,
    remote_code_kwargs)
from prh_lib.models.zoo import ModelNotAvailableError


@dataclass
class CausalLM:
    """A causal LM with its head (for bits per byte) and the feature view of its base model.

    Attributes
    ----------
    lm : torch.nn.Module
        ``AutoModelForCausalLM`` model, eval mode, no gradients.
    loaded : prh_lib.models.LoadedModel
        The same weights as a LoadedModel whose ``module`` is ``lm.base_model`` (hidden states for
        :func:`prh_lib.extract.get_features`); its ``name`` and ``revision`` identify the weights.
    """

    lm: torch.nn.Module
    loaded: object

    @property
    def name(self) -> str:
        return self.loaded.name

    @property
    def tokenizer(self):
        return self.loaded.tokenizer


def text_tokenizer(name: str, path_or_id: str, revision: str | None = None):
    """The tokenizer of a language model, with a pad token (EOS for causal LMs) and right padding.

    Raises
    ------
    ValueError
        If the tokenizer has neither a pad nor an EOS token.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path_or_id, revision=revision, **remote_code_kwargs(path_or_id))
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer of {name!r} has neither a pad nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    # Right padding keeps the real tokens at the positions they have unpadded; the attention mask marks
    # them for mean pooling.
    tokenizer.padding_side = "right"
    return tokenizer


def _causal_lm_module(path_or_id: str, *, revision, device, dtype) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    module = AutoModelForCausalLM.from_pretrained(path_or_id, revision=revision, **dtype_kwarg(dtype),
                                                  **placement(device))
    return freeze(module, device, dtype)


def _architecture(auto, config, **kwargs) -> torch.nn.Module:
    """``auto.from_config(config)`` on the meta device, without weights (no initialiser run; a forward pass fails): for
    ``weights=False``, whose one reader re-creates it under a seed (:func:`prh_lib.models.random_init`)."""
    with torch.device("meta"):
        return auto.from_config(config, **kwargs)


def load_hf(spec: ModelSpec, path_or_id: str, *, device, dtype, modality, revision, weight_revision: str,
            source: str, weights: bool = True) -> LoadedModel:
    """A Hugging Face model (not a two-tower tower) from a folder or Hub id, with ``weight_revision`` as revision.

    With ``weights=False`` only the config, tokenizer and image processor are read, never a weight file, and the
    module is the architecture alone, on the meta device (:func:`_architecture`).

    Raises
    ------
    ValueError
        If ``modality`` contradicts the config, or a vision transformer has no CLS token.
    ModelNotAvailableError
        If the config or the image processor cannot be read.
    """
    config = hf_config(spec.name, path_or_id, revision)
    inferred = infer_modality(config)
    if modality is not None and modality != inferred:
        raise ValueError(f"{spec.name!r} looks like a {inferred} model ({config.model_type}), not {modality}")
    build = _build_hf_vision if inferred == "vision" else _build_hf_text
    return build(spec.name, path_or_id, config, device=device, dtype=dtype, revision=revision,
                 weight_revision=weight_revision, source=source, weights=weights)


def _build_hf_text(name, path_or_id, config, *, device, dtype, revision, weight_revision, source, weights=True):
    from transformers import AutoModel, AutoModelForCausalLM

    if not weights:
        module = _architecture(AutoModelForCausalLM if is_causal_lm(config) else AutoModel, config,
                               **remote_code_kwargs(path_or_id))
        module = freeze(getattr(module, "embedding_model", getattr(module, "base_model", module)), device, dtype)
    elif is_causal_lm(config):
        module = _causal_lm_module(path_or_id, revision=revision, device=device, dtype=dtype).base_model
    else:
        module = AutoModel.from_pretrained(path_or_id, revision=revision, **dtype_kwarg(dtype), **placement(device),
                                           **remote_code_kwargs(path_or_id))
        module = freeze(module, device, dtype)
        # NV-Embed-v2 (remote code): hidden states are those of its Mistral encoder; the latent-attention
        # pooling head on top is not a layer of the encoder and is left out
        module = getattr(module, "embedding_model", module)
        config = getattr(config, "text_config", None) or config
    return LoadedModel(
        name=name, modality="language", family="hf-text", module=module,
        layer_labels=hf_labels(config), pooling="mean", tokenizer=text_tokenizer(name, path_or_id, revision),
        image_transform=None, revision=weight_revision, source=source, device=input_device(module, device),
        dtype=dtype,
    )


def _build_hf_vision(name, path_or_id, config, *, device, dtype, revision, weight_revision, source, weights=True):
    from transformers import AutoImageProcessor, AutoModel

    kwargs = {}
    if config.model_type == "vit_mae":
        # ViT-MAE masks 75% of patches at inference by default; keep them all. (Its patch order is still
        # shuffled; the CLS output does not depend on it.)
        kwargs["mask_ratio"] = 0.0
    if weights:
        module = AutoModel.from_pretrained(path_or_id, revision=revision, **dtype_kwarg(dtype), **kwargs,
                                           **placement(device))
    else:  # the options become the config's, as from_pretrained makes them
        module = _architecture(AutoModel, config.__class__.from_dict({**config.to_dict(), **kwargs}))
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

    module = freeze(module, device, dtype)
    return LoadedModel(
        name=name, modality="vision", family="hf-vit", module=module,
        layer_labels=hf_labels(config), pooling="cls", tokenizer=None, image_transform=image_transform,
        revision=weight_revision, source=source, device=input_device(module, device), dtype=dtype,
    )


def load_causal_lm(name: str, *, device: str = "cpu", dtype="float32") -> CausalLM:
    """Load a causal LM (zoo name, local folder or Hugging Face id) once, with its head.

    Parameters
    ----------
    name : str
        As for :func:`prh_lib.models.load_model`; must be a causal language model (``random-init`` and towers are not).
    device : str, default="cpu"
        ``"cuda"`` shards a large model over all visible GPUs, as :func:`prh_lib.models.load_model`.
    dtype : str or torch.dtype, default="float32"

    Returns
    -------
    CausalLM
        ``lm`` is the ``AutoModelForCausalLM`` model (eval mode, no gradients; ``forward`` returns
        ``logits``); ``loaded`` is what :func:`prh_lib.models.load_model` gives ``name``: its ``module`` is
        ``lm.base_model`` (hidden states for features) and its name, revision, layer labels, pooling and
        tokenizer set-up are the same, so features share one cache.

    Raises
    ------
    ValueError
        If the model is not a causal language model or ``dtype`` is unknown.
    prh_lib.models.ModelNotAvailableError
        If the model cannot be found (the message says what provides it).
    """
    dtype = torch_dtype(dtype)
    spec = parse_model_name(name)
    if spec.seed is not None:
        raise ValueError(f"{name!r} names seeded random weights; load the trained model and draw them with "
                         "prh_lib.lm.random_weights (or prh_lib.models.random_init)")
    ident = spec.identity()
    if ident.modality != "language" or ident.family != "hf-text":
        raise ValueError(f"{name!r} is a {ident.modality} model ({ident.family}), not a causal language model")
    path = location(spec)
    config = hf_config(name, path)
    if not is_causal_lm(config):
        raise ValueError(f"{name!r} ({config.model_type}) is not a causal language model: "
                         f"architectures {getattr(config, 'architectures', None)}")
    lm = _causal_lm_module(path, revision=None, device=torch.device(device), dtype=dtype)
    loaded = LoadedModel(
        name=ident.name, modality="language", family="hf-text", module=lm.base_model,
        layer_labels=hf_labels(config), pooling="mean", tokenizer=text_tokenizer(name, path), image_transform=None,
        revision=ident.revision, source=f"{name} (AutoModelForCausalLM, base model for features)",
        device=input_device(lm, device), dtype=dtype,
    )
    return CausalLM(lm, loaded)
