"""Decoder-embedding VLMs (Qwen3-VL-Embedding): both "towers" are the same decoder, fed an image or a text.

Qwen3-VL-Embedding (Qwen3-VL architecture, ``model_type`` ``"qwen3_vl"``) embeds images and texts with one
model: a ViT with a 2x2 patch merger whose tokens replace ``<|image_pad|>`` placeholders in the input of a
Qwen3 decoder (M-RoPE, DeepStack). Its embedding is the decoder's final hidden state at the last token. So a
"tower" here is an input modality:

- ``"<id>:vision"``: the decoder on ``<|vision_start|> <|image_pad|> x n <|vision_end|>`` for one image at a
  fixed square resolution (:data:`IMAGE_SIZE`); every hidden state is mean-pooled over the sequence;
- ``"<id>:text"``: the decoder on the caption (mean over real tokens, like every language model here);
- both end with ``"projection"``: the final hidden state at the last real token (the model's own embedding,
  before its L2 normalisation).

Not reproduced: the model card's instruction prompt (chat template with "Represent the user's input."), which changes
which tokens surround the content; features are those of the bare content. Video inputs are not used."""

from __future__ import annotations

import torch

from prh_lib.models.loaded import LoadedModel, dtype_kwarg, freeze, hf_labels, input_device, placement
from prh_lib.models.zoo import ModelNotAvailableError

#: ``model_type`` of decoder-embedding VLMs and the loader of each.
VLM_MODEL_TYPES = ("qwen3_vl",)

#: Side of the square every image is resized to, in pixels (a multiple of patch size x merge size).
IMAGE_SIZE = {"real": 448, "standin": 64}


def _image_processor(path: str, config, *, revision):
    from transformers import AutoImageProcessor, Qwen2VLImageProcessor

    vc = config.vision_config
    try:
        return AutoImageProcessor.from_pretrained(path, revision=revision)
    except (OSError, ValueError):
        # stand-ins carry no processor file: the Qwen2-VL processor with the config's patching
        return Qwen2VLImageProcessor(patch_size=vc.patch_size, merge_size=vc.spatial_merge_size,
                                     temporal_patch_size=vc.temporal_patch_size)


def load_vlm(spec, path: str, config, *, hub_revision, weight_revision: str, source: str, device, dtype,
             standin: bool, text_tokenizer) -> LoadedModel:
    """One input modality (``spec.tower``) of a Qwen3-VL-style embedding model.

    ``text_tokenizer`` is :func:`prh_lib.models.hf.text_tokenizer` (passed in: this module imports no loader)."""
    from transformers import AutoModel

    module = AutoModel.from_pretrained(path, revision=hub_revision, **dtype_kwarg(dtype), **placement(device))
    module = freeze(module, device, dtype)
    labels = hf_labels(config.text_config) + ("projection",)
    common = dict(name=spec.name, family="hf-joint", module=module, revision=weight_revision,
                  source=f"{source} ({spec.tower} input of the decoder)", device=input_device(module, device),
                  dtype=dtype, layer_labels=labels)
    if spec.tower == "text":
        return LoadedModel(modality="language", pooling="mean", image_transform=None,
                           tokenizer=text_tokenizer(spec.name, path, hub_revision), **common)
    try:
        processor = _image_processor(path, config, revision=hub_revision)
    except Exception as err:  # pragma: no cover - depends on the checkpoint's files
        raise ModelNotAvailableError(f"{spec.name!r}: cannot build its image processor ({err})") from err
    side = IMAGE_SIZE["standin" if standin else "real"]

    def image_transform(images: list) -> torch.Tensor:
        rgb = [im.convert("RGB").resize((side, side)) for im in images]
        out = processor(images=rgb, return_tensors="pt", do_resize=False)
        # (B * n_patches, patch_dim) -> (B, n_patches, patch_dim): every image has the same grid
        return out["pixel_values"].float().reshape(len(rgb), -1, out["pixel_values"].shape[-1])

    return LoadedModel(modality="vision", pooling="mean", tokenizer=None, image_transform=image_transform,
                       **common)
