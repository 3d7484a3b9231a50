"""Load any model by name: :func:`load_model` (and a language model's tokenizer alone, :func:`load_tokenizer`).

The name is parsed once (:func:`prh_lib.models.spec.parse_model_name`); the spec's identity, the same one
that keys the feature cache, gives the loaded model its name, revision, modality and pooling."""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import re
from pathlib import Path

import torch

from prh_lib.models import zoo
from prh_lib.models.hf import load_hf
from prh_lib.models.loaded import MODALITIES, LoadedModel
from prh_lib.models.random_init import random_init
from prh_lib.models.spec import ModelSpec, is_timm_folder, location, parse_model_name, random_init_revision
from prh_lib.models.timm_cnn import build_timm, timm_source_name
from prh_lib.models.two_tower import load_joint

#: Pickle weight files (``torch.save``); they are only ever read with ``torch.load(weights_only=True)``.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


@contextlib.contextmanager
def _no_weight_loading_bars():
    """``transformers``' progress bars off for one load ("Loading weights: 100%|...", shown by transformers 5 on
    every ``from_pretrained``), restored afterwards. Its log messages stay on: a missing or unexpected weight
    is still reported."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


class UnsafeWeightsError(ValueError):
    """A model's pickle weight file would run code when unpickled; it was refused, not loaded."""


def _unsafe_weights_error(spec: ModelSpec, err: Exception) -> UnsafeWeightsError:
    """The refusal of a pickle that ``torch.load(weights_only=True)`` rejected, naming its files and the
    global it tried to call (the pickle's code never ran)."""
    where = spec.folder if spec.kind == "folder" else None
    files = sorted(str(p) for p in Path(where).iterdir() if p.suffix in PICKLE_SUFFIXES) if where else []
    called = re.search(r"(?:GLOBAL|Unsupported globals:) ([\w.]+)", str(err))
    return UnsafeWeightsError(
        f"refused to load model {spec.name!r}: its pickle weights ({', '.join(files) or 'a pytorch_model.bin'}) "
        f"would call {called.group(1) if called else 'a function'} when unpickled, which is code, not weights. "
        "Weights are only read with torch.load(weights_only=True), so that code did not run. Use a "
        "model.safetensors from a trusted source instead (never load this file with weights_only=False)."
    )


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
        Any name :mod:`prh_lib.models.spec` reads (zoo, timm, folder, Hub id, ``:vision``/``:text`` tower,
        ``@pool:<pooling>``, ``@random-init:<seed>`` for :func:`~prh_lib.models.random_init` of the named model).
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
    UnsafeWeightsError
        If a pickle weight file (``pytorch_model.bin``) would run code when unpickled: it is refused
        (weights are read with ``torch.load(weights_only=True)`` only, so the code never runs) and the
        message names the file and the callable it carries.
    """
    if modality is not None and modality not in MODALITIES:
        raise ValueError(f"modality must be one of {MODALITIES} or None, got {modality!r}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    spec = parse_model_name(name_or_path)
    try:
        with _no_weight_loading_bars():  # a page or a log shows no "Loading weights" bar
            return load_spec(spec, device=torch.device(device), dtype=dtype, modality=modality, revision=revision)
    except (pickle.UnpicklingError, RuntimeError) as err:
        # torch.load(weights_only=True) met a global it does not allow (timm re-raises it as a RuntimeError)
        if isinstance(err, RuntimeError) and "weights_only=True blocked" not in str(err):
            raise
        raise _unsafe_weights_error(spec.trained if spec.seed is not None else spec, err) from None


def load_spec(spec: ModelSpec, *, device: torch.device, dtype: torch.dtype, modality: str | None,
              revision: str | None, weights: bool = True) -> LoadedModel:
    """:func:`load_model` of a parsed name; ``weights=False`` reads no weight file (timm, Hugging Face and zoo
    models: the architecture from its config, with tokenizer and preprocessing; a zoo model is still converted
    once, which is where its config comes from)."""
    if spec.seed is not None:  # the architecture alone, re-initialised under the seed: no trained weight is read
        trained = load_spec(spec.trained, device=device, dtype=dtype, modality=modality, revision=revision,
                            weights=False)  # (a two-tower model's tower is still cut from the loaded model)
        return dataclasses.replace(random_init(trained, seed=spec.seed),
                                   revision=random_init_revision(trained.revision, spec.seed))
    if spec.pooling is not None:  # the same model, its tokens pooled another way (the identity checks it may be)
        spec.identity(revision)
        return dataclasses.replace(load_spec(spec.mean_pooled, device=device, dtype=dtype, modality=modality,
                                             revision=revision, weights=weights), name=spec.name, pooling=spec.pooling)
    if spec.tower is not None:
        return load_joint(spec, device=device, dtype=dtype, modality=modality, revision=revision)
    name = spec.name
    if spec.kind == "zoo":
        entry = zoo.get_entry(name)
        if modality is not None and modality != entry.modality:
            raise ValueError(f"zoo model {name!r} is a {entry.modality} model, not {modality}")
        folder = zoo.convert(name, progress=False)  # reuses the cached folder when it is current; never on a page
        prov = zoo.read_provenance(folder)
        zoo_revision = zoo.revision_of(prov)
        if revision is not None and revision != zoo_revision:
            raise ValueError(f"zoo model {name!r} has revision {zoo_revision}, not the requested {revision}")
        source = f"zoo:{name} <- {prov['package']} {prov['version']} ({prov['weight_file']}), converted in {folder}"
        if is_timm_folder(folder):
            return build_timm(name, f"local-dir:{folder}", device=device, dtype=dtype, revision=zoo_revision,
                              source=source, weights=weights)
        return load_hf(spec, str(folder), device=device, dtype=dtype, modality=entry.modality, revision=None,
                       weight_revision=zoo_revision, source=source, weights=weights)
    if spec.kind == "timm":
        if modality not in (None, "vision"):
            raise ValueError(f"{name!r} is a timm (vision) model, not {modality}")
        timm_name = timm_source_name(name)
        return build_timm(name, timm_name, device=device, dtype=dtype, revision=spec.identity().revision,
                          source=f"timm {timm_name}", weights=weights)
    if spec.kind == "folder":
        folder, folder_revision = spec.folder, spec.identity().revision
        if revision is not None and revision != folder_revision:
            raise ValueError(f"folder {str(Path(spec.base).expanduser())!r} holds revision {folder_revision}, not the requested {revision}")
        if is_timm_folder(folder):
            if modality not in (None, "vision"):
                raise ValueError(f"{name!r} is a timm (vision) model, not {modality}")
            return build_timm(name, f"local-dir:{folder}", device=device, dtype=dtype, revision=folder_revision,
                              source=f"timm folder {folder}", weights=weights)
        return load_hf(spec, str(folder), device=device, dtype=dtype, modality=modality, revision=None,
                       weight_revision=folder_revision, source=f"local folder {folder}", weights=weights)
    return load_hf(spec, spec.base, device=device, dtype=dtype, modality=modality, revision=revision,
                   weight_revision=spec.identity(revision).revision, source=f"Hugging Face Hub {spec.base}",
                   weights=weights)


def load_tokenizer(name: str):
    """The tokenizer of a language model given by zoo name, local folder or Hugging Face id (no weights loaded)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(location(parse_model_name(name)))


def describe(names):
    """Table of models for the book (:func:`prh_lib.models.zoo.describe`) of the trained model behind each name.

    ``"<m>@random-init:<seed>"`` is described as ``<m>``; names are kept once each, in first-seen order.

    Returns
    -------
    pandas.DataFrame
        One row per model, columns ``modality``, ``source``, ``licence``, ``description``.
    """
    return zoo.describe(list(dict.fromkeys(parse_model_name(n).trained.name for n in names)))
