"""Two-tower image-text models (CLIP, SigLIP / fixed-resolution SigLIP 2), loaded one tower at a time.

``"<folder or Hub id>:vision"`` or ``":text"`` (family ``"hf-joint"``, see
:data:`~prh_lib.models.spec.JOINT_MODEL_TYPES`). A tower's layers are its hidden states, then ``"projection"``, its
joint-space embedding. Captions longer than the text context are split into chunks (:class:`TextChunking`) whose
features the extraction code averages.

References
----------
Herbst et al., Section 3.3 ("explicitly aligned vision-language models") and Appendix E.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from prh_lib.models.loaded import LoadedModel, dtype_kwarg, freeze, hf_labels, input_device, placement
from prh_lib.models.spec import JOINT_MODEL_TYPES, TOWER_MODALITY, ModelSpec, joint_config
from prh_lib.models.hf import text_tokenizer
from prh_lib.models.standins import SUFFIX
from prh_lib.models.vlm import VLM_MODEL_TYPES, load_vlm
from prh_lib.models.zoo import ModelNotAvailableError


@dataclass(frozen=True)
class TextChunking:
    """How a two-tower text tower embeds captions longer than its context (Herbst et al., Section 3.3).

    A caption's tokens (without special tokens) are split into consecutive windows of ``window`` tokens, each embedded
    on its own with the model's special tokens (``prefix`` + window + ``suffix``, at most ``context_length`` tokens).
    The extraction code averages each layer's pooled chunk features weighted by caption tokens per chunk
    (:func:`prh_lib.extract.extract_features`). A caption that fits gives one chunk equal to the tokenizer's own
    encoding.

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
        Pass an attention mask to the model: CLIP yes (as its processor does), SigLIP no, whatever its
        tokenizer returns (trained without one; see :data:`~prh_lib.models.spec.JOINT_MODEL_TYPES`).
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

        Every token lands in exactly one chunk, in order; an empty caption gives one chunk of the special tokens alone.
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
            ``input_ids`` (B, T) and, if ``attention_mask``, ``attention_mask`` (B, T); T is ``context_length`` with
            ``pad_to_context``, else the longest chunk.
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
        attention_mask=JOINT_MODEL_TYPES[config.model_type]["attention_mask"],
    )


def load_joint(spec: ModelSpec, *, device, dtype, modality, revision) -> LoadedModel:
    """One tower of a two-tower image-text model (``spec.tower``): its hidden states, then ``"projection"``.

    Raises
    ------
    ValueError
        If ``modality`` is not the tower's, or the model is not a supported two-tower model.
    ModelNotAvailableError
        If the vision tower has no image processor, or the model cannot be found.
    """
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    name, tower = spec.name, spec.tower
    tower_modality = TOWER_MODALITY[tower]
    if modality is not None and modality != tower_modality:
        raise ValueError(f"{name!r} is the {tower} tower ({tower_modality}), not {modality}")
    config, weight_revision = joint_config(spec, revision)
    if spec.kind == "folder":
        path, hub_revision, source = str(spec.folder), None, f"local folder {spec.folder}"
    else:
        path, hub_revision, source = spec.base, revision, f"Hugging Face Hub {spec.base}"
    if config.model_type in VLM_MODEL_TYPES:
        return load_vlm(spec, path, config, hub_revision=hub_revision, weight_revision=weight_revision,
                        source=source, device=device, dtype=dtype, standin=SUFFIX in spec.name,
                        text_tokenizer=text_tokenizer)
    module = AutoModel.from_pretrained(path, revision=hub_revision, **dtype_kwarg(dtype), **placement(device))
    module = freeze(module, device, dtype)
    kind = JOINT_MODEL_TYPES[config.model_type]
    common = dict(name=name, family="hf-joint", module=module, revision=weight_revision,
                  source=f"{source} ({tower} tower)", device=input_device(module, device), dtype=dtype)
    if tower == "vision":
        try:
            processor = AutoImageProcessor.from_pretrained(path, revision=hub_revision)
        except (OSError, ValueError) as err:
            raise ModelNotAvailableError(f"{name!r} has no image processor (preprocessor_config.json)") from err

        def image_transform(images: list) -> torch.Tensor:
            return processor(images=[im.convert("RGB") for im in images], return_tensors="pt")["pixel_values"].float()

        return LoadedModel(modality="vision", layer_labels=hf_labels(config.vision_config) + ("projection",),
                           pooling=kind["vision_pooling"], tokenizer=None, image_transform=image_transform, **common)
    tokenizer = AutoTokenizer.from_pretrained(path, revision=hub_revision)
    # TextChunking.collate pads on the right itself; the tokenizer is set to agree for any other use
    tokenizer.padding_side = "right"
    return LoadedModel(modality="language", layer_labels=hf_labels(config.text_config) + ("projection",),
                       pooling="mean", tokenizer=tokenizer, image_transform=None,
                       text_chunking=_text_chunking(tokenizer, config), **common)


