"""Random initialisation: the "random init" baseline of Herbst et al., Section 3.3 (Figure 5).

A name ending in ``"@random-init:<seed>"`` loads the trained model and replaces its weights by the
architecture's own initialiser under that seed (:func:`random_init`); the tokenizer and preprocessing stay."""

from __future__ import annotations

import torch

from prh_lib.validation import check_seed
from prh_lib.models.loaded import LoadedModel, freeze


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

    The architecture's own initialiser, drawn inside :func:`torch.random.fork_rng` seeded with ``seed`` (the
    global RNG state is untouched). ``name`` gets the suffix ``@random-init:<seed>`` and ``revision`` records
    the architecture and seed, so its features cache apart.

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
    seed = check_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        fresh = _fresh_module(model.module, model.family)
    arch = type(fresh).__name__
    return LoadedModel(
        name=f"{model.name}@random-init:{int(seed)}", modality=model.modality, family=model.family,
        module=freeze(fresh, model.device, model.dtype), layer_labels=model.layer_labels, pooling=model.pooling,
        tokenizer=model.tokenizer, image_transform=model.image_transform,
        revision=f"random-init:{arch}:seed={int(seed)}:{model.revision}", source=f"random init of {model.source}",
        device=model.device, dtype=model.dtype, text_chunking=model.text_chunking,
    )
