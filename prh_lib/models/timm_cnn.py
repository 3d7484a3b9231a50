"""timm models (CNNs such as EfficientNet, ResNet): pretrained tags, Hub ids and local timm folders.

Layers are the stem, every block stage and the head convolution for the EfficientNet/MobileNet family
(``("stem", "stage.1", ..., "head")``), else the model's ``feature_info`` module names. Features are
global-average pooled by the extraction code (pooling ``"gap"``)."""

from __future__ import annotations

import torch

from prh_lib.models.loaded import LoadedModel, freeze, timm_all_stages
from prh_lib.models.spec import hub_unreachable_hint
from prh_lib.models.zoo import ModelNotAvailableError


def timm_source_name(name: str) -> str:
    """What ``timm.create_model`` reads for a ``"timm:<arch>"`` or ``"timm/<hub-id>"`` name."""
    if name.startswith("timm:"):
        return name[len("timm:"):]
    return "hf-hub:" + name.removeprefix("hf-hub:")


def build_timm(name, timm_name, *, device, dtype, revision, source, weights: bool = True) -> LoadedModel:
    """A timm model with pretrained weights from ``timm_name`` (``"<arch>"``, ``"hf-hub:..."``, ``"local-dir:..."``);
    with ``weights=False`` its architecture alone (its constructor's initial weights; nothing is fetched or read).

    Raises
    ------
    ModelNotAvailableError
        If the weights cannot be obtained (not for local folders, whose errors are raised as they are).
    """
    import timm
    from timm.data import create_transform, resolve_data_config

    try:
        module = timm.create_model(timm_name, pretrained=weights)
    except (OSError, RuntimeError) as err:
        if timm_name.startswith("local-dir:"):
            raise
        raise ModelNotAvailableError(f"cannot load timm model {name!r}: {hub_unreachable_hint(name)}") from err
    if timm_all_stages(module):
        labels = ("stem",) + tuple(f"stage.{i}" for i in range(1, len(module.blocks) + 1)) + ("head",)
    else:
        labels = tuple(info["module"] for info in module.feature_info)
    transform = create_transform(**resolve_data_config({}, model=module))

    def image_transform(images: list) -> torch.Tensor:
        return torch.stack([transform(im.convert("RGB")) for im in images]).float()

    return LoadedModel(
        name=name, modality="vision", family="timm-cnn", module=freeze(module, device, dtype),
        layer_labels=labels, pooling="gap", tokenizer=None, image_transform=image_transform,
        revision=revision, source=source, device=device, dtype=dtype,
    )
