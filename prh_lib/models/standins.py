"""Stand-ins for the paper's models: tiny randomly initialised models of the same architecture, built offline.

A stand-in of a paper id is named ``"<paper id>~rehearsal"`` (``"Qwen/Qwen3-8B~rehearsal"``,
``"openai/clip-vit-large-patch14~rehearsal:text"``): :func:`prh_lib.models.spec.parse_model_name` resolves it to a local
folder built here (:func:`ensure_standin`), while plans, caches, results and pages show the name with its
``~rehearsal``, so a rehearsal result cannot pass for a real one.

Each stand-in has the transformers architecture class of its paper model and that model's config quirks (ALiBi for
BLOOM, GQA and Llama-3 RoPE scaling, sliding windows, Gemma's sqrt(d) embedding scale and Gemma 2's logit soft-capping,
DINOv3's register tokens, MAE's default 75 % masking, CLIP's 77 and SigLIP's 64 text positions), with 2 layers and width
16. Its tokenizer is a character-level ``tokenizers`` model in a ``PreTrainedTokenizerFast`` carrying the family's
special tokens, BOS/EOS handling, pad token (or its absence) and default padding side, which is what pooling depends on.
The weights are random (seed 0), so a rehearsal exercises every code path and no number means anything.

What a stand-in cannot rehearse is listed in its entry's ``gaps`` (:data:`STANDINS`)."""

from __future__ import annotations

import json
import string
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from prh_lib.data import paper
from prh_lib import paths
from prh_lib.models import integrity

#: File in a stand-in folder recording the size, mtime and sha256 of its other files (checked on each use).
MANIFEST_FILE = "prh_standin.json"

#: What marks a stand-in name: ``"<paper id>~rehearsal"``.
SUFFIX = paper.STANDIN_SUFFIX

#: Bump when a builder changes: it is part of the folder name, so old stand-ins are rebuilt.
FORMAT_VERSION = 1

_WIDTH, _LAYERS = 16, 2
_CHARS = string.ascii_letters + string.digits + string.punctuation + " "


@dataclass(frozen=True)
class Tok:
    """A family's tokenizer behaviour: special tokens, what it adds around a text, default padding side."""

    bos: str | None
    eos: str | None
    pad: str | None  # None: the family ships no pad token (the loader pads with EOS)
    unk: str = "<unk>"
    add_bos: bool = False
    add_eos: bool = False
    padding_side: str = "right"
    input_names: tuple[str, ...] = ("input_ids", "attention_mask")


@dataclass(frozen=True)
class StandIn:
    """How the stand-in of one paper family is built (see :data:`STANDINS`)."""

    family: str
    arch: str  # the transformers class the stand-in is saved as
    tok: Tok | None
    quirks: str
    gaps: str = ""
    config: dict = field(default_factory=dict)


_LLAMA1_TOK = Tok("<s>", "</s>", None, add_bos=True)
_LLAMA3_TOK = Tok("<|begin_of_text|>", "<|end_of_text|>", None, unk="<|reserved_special_token_0|>", add_bos=True)
_MISTRAL_TOK = Tok("<s>", "</s>", None, add_bos=True)
_QWEN_TOK = Tok(None, "<|endoftext|>", "<|endoftext|>", unk="<|unk|>")
_QWEN3_TOK = Tok(None, "<|im_end|>", "<|endoftext|>", unk="<|unk|>")
_GEMMA_TOK = Tok("<bos>", "<eos>", "<pad>", add_bos=True, padding_side="left")
_R1_TOK = Tok("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>", add_bos=True)
_LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

#: The stand-in of every paper family (keys: :data:`prh_lib.data.paper.MODELS` ``family``).
STANDINS: dict[str, StandIn] = {
    "dinov2": StandIn("dinov2", "Dinov2Model", None, "CLS token at 0, no registers; layerscale"),
    "dinov3": StandIn("dinov3", "DINOv3ViTModel", None,
                      "CLS at 0 then 4 register tokens, then patches; RoPE patch positions",
                      config={"num_register_tokens": 4}),
    "mae": StandIn("mae", "ViTMAEModel", None, "config keeps mask_ratio 0.75 (the Hub default); loader sets 0"),
    "bloom": StandIn("bloom", "BloomForCausalLM", Tok("<s>", "</s>", "<pad>", padding_side="left"),
                     "ALiBi (no position ids), left padding, no BOS added"),
    "llama": StandIn("llama", "LlamaForCausalLM", _LLAMA1_TOK, "RoPE, MHA; no pad token, BOS added"),
    "llama3": StandIn("llama3", "LlamaForCausalLM", _LLAMA3_TOK,
                      "GQA, llama3 RoPE scaling (theta 5e5); no pad token, <|begin_of_text|> added",
                      config={"num_key_value_heads": 1, "rope_parameters": _LLAMA3_ROPE}),
    "mistral": StandIn("mistral", "MistralForCausalLM", _MISTRAL_TOK,
                       "GQA, sliding window 4096 (v0.1) / none (v0.3); no pad token, BOS added",
                       config={"num_key_value_heads": 1}),
    "qwen2.5": StandIn("qwen2.5", "Qwen2ForCausalLM", _QWEN_TOK,
                       "GQA, qkv bias, theta 1e6; pad = EOS <|endoftext|>, no BOS",
                       config={"num_key_value_heads": 1, "rope_parameters": {"rope_type": "default",
                                                                              "rope_theta": 1e6}}),
    "qwen3": StandIn("qwen3", "Qwen3ForCausalLM", _QWEN3_TOK,
                     "GQA, q/k RMSNorm, explicit head_dim; pad <|endoftext|> != EOS <|im_end|>, no BOS",
                     config={"num_key_value_heads": 1, "head_dim": 8}),
    "gemma": StandIn("gemma", "GemmaForCausalLM", _GEMMA_TOK,
                     "embeddings scaled by sqrt(d), head_dim, GeGLU; <bos> added, pads left",
                     config={"head_dim": 8, "num_key_value_heads": 1}),
    "gemma2": StandIn("gemma2", "Gemma2ForCausalLM", _GEMMA_TOK,
                      "attention/final logit soft-capping, alternating sliding-window layers, sqrt(d) scale",
                      config={"head_dim": 8, "num_key_value_heads": 1, "query_pre_attn_scalar": 8}),
    "r1-distill": StandIn("r1-distill", "Qwen2ForCausalLM", _R1_TOK,
                          "Qwen2 architecture with DeepSeek's tokenizer: BOS added, pad = EOS",
                          config={"num_key_value_heads": 1}),
    "qwen3-emb": StandIn("qwen3-emb", "Qwen3Model", Tok(None, "<|endoftext|>", "<|endoftext|>", unk="<|unk|>",
                                                        add_eos=True, padding_side="left"),
                         "Qwen3 encoder without LM head; tokenizer appends EOS and pads left (last-token pooling)",
                         config={"num_key_value_heads": 1, "head_dim": 8}),
    "nv-embed": StandIn("nv-embed", "MistralModel", Tok("<s>", "</s>", None, add_bos=True, add_eos=True),
                        "the Mistral encoder inside NVEmbedModel (its 'embedding_model')",
                        gaps="remote code not rehearsed: bidirectional attention and the latent-attention "
                             "pooling head live in the repository's modeling_nvembed.py",
                        config={"num_key_value_heads": 1}),
    "clip": StandIn("clip", "CLIPModel", Tok("<|startoftext|>", "<|endoftext|>", "<|endoftext|>",
                                             unk="<|unk|>", add_bos=True, add_eos=True),
                    "77 text positions, causal text mask, EOS pooling for the projection; vision CLS"),
    "siglip2": StandIn("siglip2", "SiglipModel", Tok("<bos>", "<eos>", "<pad>", add_eos=True, padding_side="left"),
                       "64 text positions, last-position text pooling, no vision CLS (attention-pool head); "
                       "Gemma-style tokenizer that pads LEFT by default (transformers 5)"),
    "qwen3-vl": StandIn("qwen3-vl", "Qwen3VLModel", Tok(None, "<|im_end|>", "<|endoftext|>", unk="<|unk|>"),
                        "Qwen3-VL: ViT with 2x2 patch merger and DeepStack into a Qwen3 decoder (M-RoPE)",
                        gaps="the model card's instruction prompt is not applied (prh_lib.models.vlm); no processor file: "
                             "a Qwen2-VL image processor is built from the config"),
}


def is_standin_name(name: str) -> bool:
    """Whether ``name`` (without tower or random-init suffix) names a stand-in."""
    return isinstance(name, str) and name.endswith(SUFFIX)


def paper_id_of(name: str) -> str:
    """The paper id of a stand-in name (``"Qwen/Qwen3-8B~rehearsal"`` -> ``"Qwen/Qwen3-8B"``)."""
    return name[: -len(SUFFIX)] if is_standin_name(name) else name


def standin_name(model_id: str) -> str:
    """The stand-in name of a paper id, keeping a tower suffix after it (``"<id>~rehearsal:vision"``).

    Raises
    ------
    ValueError
        If ``model_id`` (without ``:vision``/``:text``) is not one of the paper's models.
    """
    base, sep, tower = model_id.rpartition(":") if model_id.endswith((":vision", ":text")) else (model_id, "", "")
    if paper.model_info(base) is None:
        raise ValueError(f"{base!r} is not a paper model; stand-ins exist for {paper.models()}")
    return f"{base}{SUFFIX}{sep}{tower}"


def standin_folder(model_id: str) -> Path:
    """Where the stand-in of ``model_id`` is (or will be) saved: ``PRH_CACHE_DIR/standins/<id>-v<format>``."""
    return paths.cache_dir("standins") / f"{paths.safe_name(model_id)}-v{FORMAT_VERSION}"


def ensure_standin(model_id: str) -> Path:
    """The stand-in folder of a paper id, built (atomically) if absent.

    A built folder records its files' sizes and digests in ``prh_standin.json``; one that no longer matches them, or
    whose safetensors file is cut short (:func:`prh_lib.models.integrity.problems`), is moved aside and rebuilt.

    Warns
    -----
    DamagedFolderWarning
        When the folder was damaged and is rebuilt (the warning names it).

    Raises
    ------
    ValueError
        If ``model_id`` is not one of the paper's models.
    """
    info = paper.model_info(model_id)
    if info is None:
        raise ValueError(f"no stand-in for {model_id!r}: it is not a paper model (paper models: {paper.models()})")
    folder = standin_folder(model_id)
    if (folder / "config.json").is_file():
        record = folder / MANIFEST_FILE
        found = integrity.problems(folder, json.loads(record.read_text()) if record.is_file() else None)
        if not found:
            return folder
        try:
            moved = integrity.quarantine(folder)
        except FileNotFoundError:  # another process moved it aside first: build as it does
            moved = "another process's quarantine"
        warnings.warn(f"the stand-in folder {folder} is damaged ({'; '.join(found[:3])}); it was moved to {moved} "
                      "and is built again", integrity.DamagedFolderWarning, stacklevel=2)
    with paths.atomic_path(folder, is_dir=True) as tmp:
        build_standin(model_id, tmp)
        (tmp / MANIFEST_FILE).write_text(json.dumps(integrity.manifest(tmp), indent=1) + "\n")
    return folder


# --------------------------------------------------------------------------------------------------------
# builders


def _tokenizer(tok: Tok, *, max_length: int):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = list(dict.fromkeys(t for t in (tok.pad, tok.unk, tok.bos, tok.eos) if t is not None))
    vocab = {t: i for i, t in enumerate(specials)}
    for c in _CHARS:
        vocab.setdefault(c, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=tok.unk))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    single = " ".join(([tok.bos] if tok.add_bos else []) + ["$A"] + ([tok.eos] if tok.add_eos else []))
    pair = " ".join(([tok.bos] if tok.add_bos else []) + ["$A", "$B:1"] + ([tok.eos] if tok.add_eos else []))
    added = [t for t, on in ((tok.bos, tok.add_bos), (tok.eos, tok.add_eos)) if on]
    core.post_processor = processors.TemplateProcessing(single=single, pair=pair,
                                                        special_tokens=[(t, vocab[t]) for t in added])
    kwargs = {k: v for k, v in (("bos_token", tok.bos), ("eos_token", tok.eos), ("pad_token", tok.pad),
                                ("unk_token", tok.unk)) if v is not None}
    return PreTrainedTokenizerFast(tokenizer_object=core, padding_side=tok.padding_side,
                                   model_input_names=list(tok.input_names), model_max_length=max_length, **kwargs)


def _lm_config(family: str, model_id: str, tokenizer, st: StandIn):
    import transformers as tf

    vocab = len(tokenizer)
    ids = {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id,
           "eos_token_id": tokenizer.eos_token_id}
    common = dict(vocab_size=vocab, hidden_size=_WIDTH, intermediate_size=2 * _WIDTH, num_hidden_layers=_LAYERS,
                  num_attention_heads=2, max_position_embeddings=512, **ids)
    extra = dict(st.config)
    if family == "bloom":
        return tf.BloomConfig(vocab_size=vocab, hidden_size=_WIDTH, n_layer=_LAYERS, n_head=2, **ids)
    if family == "llama3":
        extra["tie_word_embeddings"] = model_id.startswith("meta-llama/Llama-3.2")
        common["max_position_embeddings"] = 131072  # the released value; the llama3 RoPE scaling needs > 8192
        return tf.LlamaConfig(**common, **extra)
    if family == "llama":
        return tf.LlamaConfig(**common, rms_norm_eps=1e-6, **extra)
    if family in ("mistral", "nv-embed"):
        window = 4096 if model_id == "mistralai/Mistral-7B-v0.1" else None
        return tf.MistralConfig(**common, sliding_window=window, **extra)
    if family in ("qwen2.5", "r1-distill"):
        return tf.Qwen2Config(**common, tie_word_embeddings=model_id.endswith("1.5B"), **extra)
    if family in ("qwen3", "qwen3-emb"):
        return tf.Qwen3Config(**common, tie_word_embeddings=model_id == "Qwen/Qwen3-4B", **extra)
    if family == "gemma":
        return tf.GemmaConfig(**common, **extra)
    if family == "gemma2":
        return tf.Gemma2Config(**common, **extra)
    raise ValueError(f"no language stand-in for family {family!r}")  # pragma: no cover - STANDINS is complete


def _vision_config(family: str):
    import transformers as tf

    if family == "dinov2":
        return tf.Dinov2Config(hidden_size=_WIDTH, num_hidden_layers=_LAYERS, num_attention_heads=2, mlp_ratio=2,
                               image_size=28, patch_size=14), 28
    if family == "dinov3":
        return tf.DINOv3ViTConfig(hidden_size=_WIDTH, intermediate_size=2 * _WIDTH, num_hidden_layers=_LAYERS,
                                  num_attention_heads=2, image_size=32, patch_size=16,
                                  **STANDINS["dinov3"].config), 32
    if family == "mae":
        return tf.ViTMAEConfig(hidden_size=_WIDTH, intermediate_size=2 * _WIDTH, num_hidden_layers=_LAYERS,
                               num_attention_heads=2, image_size=32, patch_size=16, decoder_hidden_size=_WIDTH,
                               decoder_intermediate_size=2 * _WIDTH, decoder_num_hidden_layers=1,
                               decoder_num_attention_heads=2, mask_ratio=0.75), 32
    raise ValueError(f"no vision stand-in for family {family!r}")  # pragma: no cover


def _tower(kind: str, **extra) -> dict:
    return dict(hidden_size=_WIDTH, intermediate_size=2 * _WIDTH, num_hidden_layers=_LAYERS, num_attention_heads=2,
                **extra)


def build_standin(model_id: str, folder: Path) -> Path:
    """Build and save the stand-in of a paper id into ``folder`` (weights, config, tokenizer / processor).

    The folder also holds ``standin.json``: the paper id, family, class, quirks and gaps.

    Raises
    ------
    ValueError
        If ``model_id`` is not a paper model.
    """
    import torch
    import transformers as tf

    info = paper.model_info(model_id)
    if info is None:
        raise ValueError(f"{model_id!r} is not a paper model")
    family = info["family"]
    st = STANDINS[family]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    if family in ("dinov2", "dinov3", "mae"):
        config, px = _vision_config(family)
        model = getattr(tf, st.arch)(config)
        processor = tf.BitImageProcessor(size={"shortest_edge": px}, crop_size={"height": px, "width": px},
                                         do_center_crop=True)
        processor.save_pretrained(folder)
    elif family in ("clip", "siglip2"):
        context = 77 if family == "clip" else 64
        tokenizer = _tokenizer(st.tok, max_length=context)
        ids = {k: v for k, v in (("pad_token_id", tokenizer.pad_token_id), ("eos_token_id", tokenizer.eos_token_id),
                                 ("bos_token_id", tokenizer.bos_token_id)) if v is not None}
        text = _tower("text", vocab_size=len(tokenizer), max_position_embeddings=context, **ids)
        vision = _tower("vision", image_size=28, patch_size=14)
        if family == "clip":
            config = tf.CLIPConfig(text_config=text, vision_config=vision, projection_dim=8)
            processor = tf.CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
        else:
            config = tf.SiglipConfig(text_config={**text, "projection_size": _WIDTH}, vision_config=vision)
            processor = tf.SiglipImageProcessor(size={"height": 28, "width": 28})
        model = getattr(tf, st.arch)(config)
        tokenizer.save_pretrained(folder)
        processor.save_pretrained(folder)
    elif family == "qwen3-vl":
        tokenizer = _tokenizer(st.tok, max_length=512)
        config = tf.Qwen3VLConfig(
            text_config=dict(vocab_size=len(tokenizer) + 8, hidden_size=_WIDTH, intermediate_size=2 * _WIDTH,
                             num_hidden_layers=_LAYERS, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                             rope_parameters={"rope_type": "default", "rope_theta": 5e6,
                                              "mrope_section": [2, 1, 1]}),
            vision_config=dict(depth=_LAYERS, hidden_size=_WIDTH, intermediate_size=2 * _WIDTH, num_heads=2,
                               out_hidden_size=_WIDTH, patch_size=16, spatial_merge_size=2,
                               temporal_patch_size=2, num_position_embeddings=16, deepstack_visual_indexes=[0]),
            image_token_id=len(tokenizer) + 1, video_token_id=len(tokenizer) + 2,
            vision_start_token_id=len(tokenizer) + 3, vision_end_token_id=len(tokenizer) + 4)
        model = tf.Qwen3VLModel(config)
        tokenizer.save_pretrained(folder)
    else:
        tokenizer = _tokenizer(st.tok, max_length=512)
        config = _lm_config(family, model_id, tokenizer, st)
        model = getattr(tf, st.arch)(config)
        tokenizer.save_pretrained(folder)
    model.config.architectures = [st.arch]
    model.save_pretrained(folder)
    (folder / "standin.json").write_text(json.dumps({
        "paper_id": model_id, "family": family, "class": st.arch, "quirks": st.quirks, "gaps": st.gaps,
        "width": _WIDTH, "layers": _LAYERS, "format": FORMAT_VERSION, "weights": "random, torch seed 0",
    }, indent=1))
    return folder
