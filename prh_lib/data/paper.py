"""The paper's models and datasets, as data (Herbst et al., Section 2 and Appendix A).

Models (:data:`MODELS`, one entry per model with its family, group, parameter count and notes) are named by their exact
Hugging Face ids. ``params_b`` is the approximate parameter count in billions (model cards; it only sizes GPU requests
in :mod:`prh_lib.batch`). ``group`` is how the paper groups them: ``vision`` (self-supervised vision encoders: DINOv2,
DINOv3, MAE), ``language`` (the 21 generative language models), ``embedding`` (text embedding models) and ``vlm``
(image-text models with two towers).

How ambiguous names were resolved (each entry's ``notes`` says it in short):

- *LLaMA 7B/13B/30B* are the original LLaMA (v1) weights; Meta distributes them only on request, so the
  widely used conversion ``huggyllama/llama-*`` is the id (the "30B" model has 32.5 B parameters).
- *Llama-3.x, Mistral, Qwen2.5, Gemma*: the base (pre-trained) checkpoints, whose ids are the names as the paper writes
  them; instruction-tuned ids carry ``-Instruct``/``-it``. Mistral-7B v0.3 base is ``mistralai/Mistral-7B-v0.3``.
- *Qwen3-4B/8B*: ``Qwen/Qwen3-4B`` and ``Qwen/Qwen3-8B`` are the ids that equal the names in the paper; they
  are the post-trained (hybrid thinking) releases. The base checkpoints are ``Qwen/Qwen3-4B-Base`` and
  ``Qwen/Qwen3-8B-Base``; swap them in with ``-p language_models=...`` if the paper meant those.
- *DINOv3 ViT-L* is the ViT-L/16 distilled on the web dataset LVD-1689M, the release's main ViT-L (the
  satellite variant is ``...-sat493m``). *DINOv2 ViT-L* is ``facebook/dinov2-large`` (without registers).
- *MAE ViT-L* is ``facebook/vit-mae-large``, the self-supervised pre-trained MAE encoder. Its Hugging Face
  model masks 75 % of patches at random by default; features must be extracted with ``mask_ratio=0``.
- *SigLIP 2 So400M*: ``google/siglip2-so400m-patch14-384``, the So400m/14 checkpoint at its final 384 px resolution,
  the variant most used downstream (as the vision tower of open VLMs). The 224 px variant
  (``google/siglip2-so400m-patch14-224``) would match the other encoders' 224 px input (one line in :data:`MODELS`).
- *CLIP ViT-L/14* is OpenAI's 224 px ``openai/clip-vit-large-patch14`` (not the 336 px variant).

Datasets (:data:`DATASETS`): WIT-1024 (its fixed 1024 pairs, once), COCO captions, DOCCI and CC3M with DreamLIP captions
(N = 1024 pairs drawn with seeds 0-4). Sources and accepted local formats are described in :mod:`prh_lib.data.sources`.
"""

from __future__ import annotations

MODEL_GROUPS = ("vision", "language", "embedding", "vlm")


def _m(id, family, group, modality, params_b, notes="", *, towers=(), remote_code=None):
    return {"id": id, "family": family, "group": group, "modality": modality, "params_b": params_b, "notes": notes,
            "towers": tuple(towers), "remote_code": remote_code}


#: What marks the stand-in of a paper id (``"Qwen/Qwen3-8B~rehearsal"``, :mod:`prh_lib.models.standins`).
STANDIN_SUFFIX = "~rehearsal"

#: Environment variable that allows running a paper model's repository code (``trust_remote_code``).
TRUST_REMOTE_CODE_ENV = "PRH_TRUST_REMOTE_CODE"


_BASE = "base (pre-trained) checkpoint, the id that equals the paper's name"
_GATED = "; gated on the Hub: accept the licence and log in (hf auth login)"
_LLAMA1 = "original LLaMA v1 in the huggyllama conversion (Meta's weights are distributed on request only)"
_R1 = "DeepSeek-R1 distilled into Qwen2.5"

#: The paper's models. ``modality`` is ``"vision"``, ``"language"`` or ``"vision-language"`` (both towers).
MODELS: tuple[dict, ...] = (
    _m("facebook/dinov2-large", "dinov2", "vision", "vision", 0.30, "DINOv2 ViT-L/14 without registers; CLS token"),
    _m("facebook/dinov3-vitl16-pretrain-lvd1689m", "dinov3", "vision", "vision", 0.30,
       "DINOv3 ViT-L/16 distilled on the web dataset LVD-1689M (the release's main ViT-L)" + _GATED),
    _m("facebook/vit-mae-large", "mae", "vision", "vision", 0.33,
       "MAE ViT-L/16 pre-trained encoder; extract with mask_ratio=0 (the HF model masks 75 % by default)"),
    _m("bigscience/bloomz-1b1", "bloom", "language", "language", 1.07, "BLOOMZ (multitask fine-tuned BLOOM)"),
    _m("bigscience/bloomz-1b7", "bloom", "language", "language", 1.72, "BLOOMZ"),
    _m("bigscience/bloomz-7b1", "bloom", "language", "language", 7.07, "BLOOMZ"),
    _m("huggyllama/llama-7b", "llama", "language", "language", 6.74, _LLAMA1),
    _m("huggyllama/llama-13b", "llama", "language", "language", 13.0, _LLAMA1),
    _m("huggyllama/llama-30b", "llama", "language", "language", 32.5, _LLAMA1 + "; 'LLaMA 30B' has 32.5 B parameters"),
    _m("meta-llama/Llama-3.1-8B", "llama3", "language", "language", 8.03, _BASE + _GATED),
    _m("meta-llama/Llama-3.2-1B", "llama3", "language", "language", 1.24, _BASE + _GATED),
    _m("meta-llama/Llama-3.2-3B", "llama3", "language", "language", 3.21, _BASE + _GATED),
    _m("mistralai/Mistral-7B-v0.1", "mistral", "language", "language", 7.24, _BASE),
    _m("mistralai/Mistral-7B-v0.3", "mistral", "language", "language", 7.25, _BASE + _GATED),
    _m("Qwen/Qwen2.5-14B", "qwen2.5", "language", "language", 14.8, _BASE),
    _m("Qwen/Qwen3-4B", "qwen3", "language", "language", 4.02,
       "the id equal to the paper's name: the post-trained release (base: Qwen/Qwen3-4B-Base)"),
    _m("Qwen/Qwen3-8B", "qwen3", "language", "language", 8.19,
       "the id equal to the paper's name: the post-trained release (base: Qwen/Qwen3-8B-Base)"),
    _m("google/gemma-2b", "gemma", "language", "language", 2.51, _BASE + _GATED),
    _m("google/gemma-7b", "gemma", "language", "language", 8.54, _BASE + _GATED),
    _m("google/gemma-2-9b", "gemma2", "language", "language", 9.24, _BASE + _GATED),
    _m("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "r1-distill", "language", "language", 1.78, _R1),
    _m("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "r1-distill", "language", "language", 7.62, _R1),
    _m("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "r1-distill", "language", "language", 14.8, _R1),
    _m("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "r1-distill", "language", "language", 32.8, _R1),
    _m("Qwen/Qwen3-Embedding-8B", "qwen3-emb", "embedding", "language", 7.57, "text embedding model (Qwen3 based)"),
    _m("nvidia/NV-Embed-v2", "nv-embed", "embedding", "language", 7.85,
       "text embedding model (Mistral based); needs trust_remote_code; licence CC-BY-NC-4.0",
       remote_code={"licence": "CC-BY-NC-4.0 (non-commercial use only)",
                    "code": "modeling_nvembed.py in the model repository (bidirectional Mistral + latent attention)"}),
    _m("openai/clip-vit-large-patch14", "clip", "vlm", "vision-language", 0.43, "OpenAI CLIP ViT-L/14 at 224 px", towers=("vision", "text")),
    _m("google/siglip2-so400m-patch14-384", "siglip2", "vlm", "vision-language", 1.14,
       "SigLIP 2 So400m/14 at its final 384 px resolution (224 px variant: google/siglip2-so400m-patch14-224)",
       towers=("vision", "text")),
    _m("Qwen/Qwen3-VL-Embedding-8B", "qwen3-vl", "vlm", "vision-language", 8.8,
       "multimodal embedding model (Qwen3-VL architecture): one decoder reads an image (':vision') or a text "
       "(':text'), see prh_lib.models.vlm", towers=("vision", "text")),
)


def _ds(name, source, location, n_pairs, repetitions, notes, **options):
    return {"name": name, "source": source, "location": location, "n_pairs": n_pairs, "repetitions": repetitions,
            "caption_policy": "first", "options": options, "notes": notes}


#: The paper's datasets: a source in :data:`prh_lib.data.SOURCES`, its default location, N and repetitions.
#: Repetition r uses seed r. WIT-1024 is used whole, once (seed 0 only fixes the row order).
DATASETS: tuple[dict, ...] = (
    _ds("wit-1024", "wit", "minhuh/prh", 1024, 1, "Huh et al.'s 1024 WIT pairs (revision wit_1024), first text"),
    _ds("coco", "coco-captions", "lmms-lab/COCO-Caption2017", 1024, 5,
        "MS-COCO val2017 (5000 images, 5 human captions), first caption"),
    _ds("docci", "docci", "not-lain/docci", 1024, 5,
        "DOCCI test split (5000 images, one long human description); parquet copy of the official release"),
    _ds("cc3m-dreamlip", "cc3m-dreamlip", None, 1024, 5,
        "CC3M images with DreamLIP long captions (ShareGPT4V first); needs a local img2dataset folder"),
)


def models(*groups: str) -> list[str]:
    """Hugging Face ids of the paper's models in the given groups (default: all), in table order.

    Raises
    ------
    ValueError
        If a group is unknown; the message lists :data:`MODEL_GROUPS`.
    """
    unknown = [g for g in groups if g not in MODEL_GROUPS]
    if unknown:
        raise ValueError(f"unknown model groups {unknown}; valid groups: {list(MODEL_GROUPS)}")
    return [m["id"] for m in MODELS if not groups or m["group"] in groups]


def feature_models(*groups: str) -> list[str]:
    """What extraction needs for the paper's models in ``groups``: every id, with image-text models expanded
    into their towers (``"<id>:vision"``, ``"<id>:text"``); a bare VLM id names no single model.

    Raises
    ------
    ValueError
        If a group is unknown.
    """
    return [t for m in models(*groups) for t in expand_towers(m)]


def expand_towers(name: str) -> list[str]:
    """``[name]``, or its towers ``[name:vision, name:text]`` when ``name`` is a paper VLM named without one.

    Stand-in names (``"<id>~rehearsal"``) are expanded like the id they stand in for."""
    base = name[: -len(STANDIN_SUFFIX)] if name.endswith(STANDIN_SUFFIX) else name
    info = model_info(base)
    if info is None or not info["towers"]:
        return [name]
    return [f"{name}:{t}" for t in info["towers"]]


def model_info(model_id: str) -> dict | None:
    """The :data:`MODELS` entry of an id (a tower suffix ``:vision``/``:text`` is ignored), or None for a model
    outside the paper's list."""
    if model_id.endswith((":vision", ":text")):
        model_id = model_id.rsplit(":", 1)[0]
    return next((dict(m) for m in MODELS if m["id"] == model_id), None)


def dataset_info(name: str) -> dict:
    """The :data:`DATASETS` entry of a name (a copy).

    Raises
    ------
    ValueError
        If ``name`` is not one of the paper's datasets; the message lists them.
    """
    for d in DATASETS:
        if d["name"] == name:
            return {**d, "options": dict(d["options"])}
    raise ValueError(f"unknown paper dataset {name!r}; valid names: {[d['name'] for d in DATASETS]}")


def table():
    """The model list as a ``pandas.DataFrame`` (for the book and ``prh-batch models``)."""
    import pandas as pd

    return pd.DataFrame(list(MODELS)).set_index("id")
