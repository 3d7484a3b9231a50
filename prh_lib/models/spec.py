"""A model name, parsed once into a :class:`ModelSpec`, and its identity for cache keys.

Every model name goes through :func:`parse_model_name`, and the same spec serves the feature cache key
(:meth:`ModelSpec.identity`, no weights loaded) and the loader (:func:`prh_lib.models.load_model`), so the two cannot
disagree. A name is

* a zoo name (:data:`prh_lib.models.zoo.ZOO`, e.g. ``"minilm-l6"``), kind ``"zoo"``;
* ``"timm:<arch>[.<tag>]"``, ``"timm/<hub-id>"`` or ``"hf-hub:timm/<hub-id>"``, kind ``"timm"``;
* a local folder (Hugging Face or timm layout), kind ``"folder"``;
* a Hugging Face Hub id, kind ``"hub"``;
* one tower of a two-tower image-text model: ``"<folder or Hub id>:vision"`` or ``":text"``;
* a language model followed by ``"@pool:<pooling>"`` (:data:`TOKEN_POOLINGS`): its tokens pooled another way;
* any of the above followed by ``"@random-init:<seed>"``: the same architecture with seeded random weights;
* ``"<paper id>~rehearsal"`` (with any tower or random-init suffix after it): the paper model's tiny stand-in
  (:mod:`prh_lib.models.standins`), kind ``"folder"``, built on first use; the name keeps ``~rehearsal`` so caches and
  pages show it is a rehearsal.

No model is downloaded when ``HF_HUB_OFFLINE=1``: a Hub id not in the local Hugging Face cache raises
:class:`ModelNotAvailableError`."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

from prh_lib import paths
from prh_lib.models import standins, zoo
from prh_lib.models.zoo import ModelNotAvailableError

#: Hugging Face ``model_type`` values treated as vision models when the config does not say otherwise.
VISION_MODEL_TYPES = frozenset({
    "vit", "deit", "dinov2", "dinov2_with_registers", "dinov3_vit", "vit_mae", "vit_msn", "beit",
    "data2vec-vision", "ijepa", "vit_hybrid", "swin", "swinv2", "convnext", "convnextv2", "resnet",
    "regnet", "efficientnet", "mobilevit", "levit", "pvt", "segformer",
})

#: ``model_type`` of the supported two-tower models and how their towers pool hidden states.
#: CLIP: the vision tower's CLS token; the text tower's hidden states are mean-pooled over real tokens (like every
#: language model here), while its projection uses CLIP's own EOS pooling, and it gets its tokenizer's attention mask,
#: as its processor passes it. SigLIP (and the fixed-resolution SigLIP 2 checkpoints, ``model_type`` ``"siglip"``) has
#: no CLS token: hidden states are mean-pooled over patches; its projection is the attention-pooling head. SigLIP pools
#: the text tower's *last position*: big_vision trains SigLIP / SigLIP 2 on texts right-padded to 64 tokens with no
#: mask, so every text input is padded on the right to the full context with no attention mask, whatever the
#: checkpoint's tokenizer says, and the last position is a pad that attends to the whole caption. (transformers 5 loads
#: SigLIP 2's Gemma-based tokenizers with ``padding_side="left"`` and an ``attention_mask`` output; either would move
#: the pooled position onto the caption's last token or hide the pads from it.)
#: Qwen3-VL (Qwen3-VL-Embedding) is no two-tower model: one decoder reads an image or a text
#: (:mod:`prh_lib.models.vlm`); its "towers" are the two input modalities, hidden states mean-pooled.
JOINT_MODEL_TYPES = {
    "clip": {"vision_pooling": "cls", "pad_to_context": False, "attention_mask": True},
    "siglip": {"vision_pooling": "mean", "pad_to_context": True, "attention_mask": False},
    "qwen3_vl": {"vision_pooling": "mean", "pad_to_context": False, "attention_mask": True},
}

#: Pooling of each loading family (towers of two-tower models: see :data:`JOINT_MODEL_TYPES`).
POOLING = {"hf-text": "mean", "hf-vit": "cls", "timm-cnn": "gap"}

#: Token poolings of a language model's hidden states (``"@pool:<pooling>"``; :func:`prh_lib.extract.mean_pool`).
TOKEN_POOLINGS = ("mean", "mean-nofirst", "last")

#: Modality of each tower suffix.
TOWER_MODALITY = {"vision": "vision", "text": "language"}

KINDS = ("zoo", "timm", "folder", "hub")
TIMM_PREFIXES = ("timm:", "timm/", "hf-hub:timm/")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".gguf")

_TOWER_RE = re.compile(r"^(?P<base>.+):(?P<tower>vision|text)$")
_RANDOM_INIT_RE = re.compile(r"^(?P<base>.+)@random-init:(?P<seed>\d+)$")
_POOL_RE = re.compile(r"^(?P<base>.+)@pool:(?P<pooling>[\w-]+)$")


@dataclass(frozen=True)
class ModelIdentity:
    """What names a model's weights in cache keys, known without loading them.

    Attributes
    ----------
    name : str
        The name as requested (with any tower suffix, ``@pool:<pooling>`` and ``@random-init:<seed>``).
    revision : str
        ``"sha256:<16 hex>"`` of the weight file(s) for zoo models and local folders, the Hub commit for Hub ids,
        ``"timm-<version>:<hub id>"`` for timm pretrained tags; random init: ``"random-init:seed=<seed>:<trained
        revision>"``.
    modality : {"language", "vision"}
    family : {"hf-text", "hf-vit", "timm-cnn", "hf-joint"}
    pooling : {"mean", "cls", "gap"}
    """

    name: str
    revision: str
    modality: str
    family: str
    pooling: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model name (from :func:`parse_model_name`).

    Attributes
    ----------
    name : str
        The name as given.
    kind : {"zoo", "timm", "folder", "hub"}
        Where the trained weights come from.
    base : str
        Zoo name, timm name, folder path (as given) or Hub id, without tower suffix or random-init suffix.
    tower : {"vision", "text"} or None
        One tower of a two-tower image-text model.
    seed : int or None
        Seed of ``@random-init:<seed>``.
    pooling : str or None
        Token pooling of ``@pool:<pooling>`` (:data:`TOKEN_POOLINGS`).
    """

    name: str
    kind: str
    base: str
    tower: str | None = None
    seed: int | None = None
    pooling: str | None = None

    @property
    def trained(self) -> "ModelSpec":
        """The same model with its trained weights (``self`` when not randomly initialised)."""
        return self if self.seed is None else dataclasses.replace(
            self, name=self.name[:self.name.rindex("@random-init:")], seed=None)

    @property
    def mean_pooled(self) -> "ModelSpec":
        """The same model without ``@pool:<pooling>`` (``self`` when it has none)."""
        return self if self.pooling is None else dataclasses.replace(
            self, name=self.name[:self.name.rindex("@pool:")], pooling=None)

    @property
    def folder(self) -> Path:
        """The local folder (kind ``"folder"``), resolved."""
        return Path(self.base).expanduser().resolve()

    def identity(self, revision: str | None = None) -> ModelIdentity:
        """Name, revision, modality, family and pooling, equal to those of the loaded model.

        Parameters
        ----------
        revision : str, optional
            Hub ids: the git revision whose commit is the identity's revision.

        Raises
        ------
        ModelNotAvailableError
            If the model is not in the zoo, not a local folder and not obtainable from the Hub.
        ValueError
            If a tower suffix names a model that is not a supported two-tower model, or a Hub id or folder is a
            two-tower model named without a tower.
        """
        if self.seed is not None:
            trained = self.trained.identity(revision)
            return dataclasses.replace(trained, name=self.name,
                                       revision=random_init_revision(trained.revision, self.seed))
        if self.pooling is not None:
            ident = self.mean_pooled.identity(revision)
            if ident.modality != "language" or self.tower is not None:
                raise ValueError(f"{self.name!r}: @pool is for language models, not {ident.modality} ones")
            return dataclasses.replace(ident, name=self.name, pooling=self.pooling)
        if self.tower is not None:
            config, weight_revision = joint_config(self, revision)
            pooling = JOINT_MODEL_TYPES[config.model_type]["vision_pooling"] if self.tower == "vision" else "mean"
            return ModelIdentity(self.name, weight_revision, TOWER_MODALITY[self.tower], "hf-joint", pooling)
        if self.kind == "zoo":
            entry = zoo.get_entry(self.base)
            return _identity(self.name, zoo.revision(self.base), entry.modality, entry.family)
        if self.kind == "timm":
            return _identity(self.name, timm_revision(self.base), "vision", "timm-cnn")
        if self.kind == "folder":
            folder = self.folder
            if is_timm_folder(folder):
                return _identity(self.name, folder_revision(folder), "vision", "timm-cnn")
            modality = infer_modality(hf_config(self.name, str(folder)))
            return _identity(self.name, folder_revision(folder), modality,
                             "hf-vit" if modality == "vision" else "hf-text")
        config = hf_config(self.name, self.base, revision)
        modality = infer_modality(config)
        return _identity(self.name, getattr(config, "_commit_hash", None) or "unknown", modality,
                         "hf-vit" if modality == "vision" else "hf-text")


def _identity(name, revision, modality, family) -> ModelIdentity:
    return ModelIdentity(name, revision, modality, family, POOLING[family])


def parse_model_name(name: str) -> ModelSpec:
    """Parse a model name into a :class:`ModelSpec`: the one place a model name is read.

    Parameters
    ----------
    name : str
        See the module docstring. A name that is an existing folder is always a folder, whatever its suffixes.

    Returns
    -------
    ModelSpec

    Raises
    ------
    TypeError
        If ``name`` is not a non-empty str.
    ModelNotAvailableError
        If ``name`` looks like a path (starts with ``.``, ``/`` or ``~``, or has more than one ``/``) but is no folder,
        a folder lacks ``config.json``, or ``timm:<arch>`` names no timm architecture.
    ValueError
        If ``@random-init`` or ``@pool`` is applied twice, or ``@pool`` names no :data:`TOKEN_POOLINGS`.

    Examples
    --------
    >>> parse_model_name("openai/clip-vit-large-patch14:text@random-init:2")  # doctest: +SKIP
    ModelSpec(name='openai/clip-vit-large-patch14:text@random-init:2', kind='hub',
              base='openai/clip-vit-large-patch14', tower='text', seed=2)
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"a model name must be a non-empty str, got {name!r}")
    rest, seed = name, None
    match = _RANDOM_INIT_RE.match(name)
    if match is not None and not _is_dir(name):
        rest, seed = match["base"], int(match["seed"])
        if _RANDOM_INIT_RE.match(rest) is not None and not _is_dir(rest):
            raise ValueError(f"{name!r} applies @random-init twice")
    pooling, match = None, _POOL_RE.match(rest)
    if match is not None and not _is_dir(rest):
        rest, pooling = match["base"], match["pooling"]
        if pooling not in TOKEN_POOLINGS or _POOL_RE.match(rest) or _RANDOM_INIT_RE.match(rest):
            raise ValueError(f"{name!r}: one @pool:<pooling> of {TOKEN_POOLINGS} after the model, before @random-init")
    tower = None
    match = _TOWER_RE.match(rest)
    if match is not None and not rest.startswith("timm:") and not _is_dir(rest):
        rest, tower = match["base"], match["tower"]
    if standins.is_standin_name(rest):
        rest = str(standins.ensure_standin(standins.paper_id_of(rest)))
    if tower is not None:
        kind = "folder" if _is_dir(rest) else "hub"
    elif rest in zoo.ZOO:
        kind = "zoo"
    elif rest.startswith(TIMM_PREFIXES):
        kind = "timm"
        if rest.startswith("timm:"):
            check_timm_arch(rest)
    elif _is_dir(rest):
        kind = "folder"
    else:
        kind = "hub"
    if kind == "folder":
        check_model_folder(Path(rest).expanduser())
    elif kind == "hub":
        check_not_a_missing_path(rest)
    return ModelSpec(name, kind, rest, tower, seed, pooling)


def resolve_identity(name: str) -> dict:
    """Name, revision, modality, family and pooling of a model, without loading its weights.

    The values equal those of ``load_model(name)``, so feature caches can be keyed (and looked up) before, or instead
    of, loading the model. Zoo models need not be converted: their revision is the sha256 of the installed source weight
    file, which conversion records.

    Returns
    -------
    dict
        ``{"name", "revision", "modality", "family", "pooling"}``, all str.

    Raises
    ------
    ModelNotAvailableError
        As :func:`prh_lib.models.load_model`.
    """
    return parse_model_name(name).identity().as_dict()


def token_pooling(name: str) -> tuple[str, str | None]:
    """``(the name without "@pool:<pooling>", the pooling)``: ``("smollm2-135m@random-init:0", "last")`` for
    ``"smollm2-135m@pool:last@random-init:0"``, ``(name, None)`` without one (the model pools its own way)."""
    m = _RANDOM_INIT_RE.match(name)
    rest, tail = (m["base"], f"@random-init:{m['seed']}") if m else (name, "")
    m = _POOL_RE.match(rest)
    return (m["base"] + tail, m["pooling"]) if m else (name, None)


def with_pooling(name: str, pooling: str | None) -> str:
    """``name`` pooled ``pooling`` (:data:`TOKEN_POOLINGS`; ``"mean"`` and None: the name without ``@pool:``), the
    ``@pool:`` before any ``@random-init:<seed>``: the inverse of :func:`token_pooling`. ValueError for another pooling."""
    if pooling not in (None, *TOKEN_POOLINGS):
        raise ValueError(f"unknown token pooling {pooling!r}; valid: {TOKEN_POOLINGS}")
    base, tail = token_pooling(name)[0], ""
    if m := _RANDOM_INIT_RE.match(base):
        base, tail = m["base"], f"@random-init:{m['seed']}"
    return base + ("" if pooling in (None, "mean") else f"@pool:{pooling}") + tail


def random_init_revision(trained_revision: str, seed: int) -> str:
    """Revision of ``@random-init:<seed>`` of a model with ``trained_revision``."""
    return f"random-init:seed={int(seed)}:{trained_revision}"


# --------------------------------------------------------------------------------------------------
# Checks and revisions (no weights loaded)
# --------------------------------------------------------------------------------------------------


def _is_dir(name: str) -> bool:
    return Path(name).expanduser().is_dir()


def check_model_folder(folder: Path) -> None:
    if not (folder / "config.json").is_file():
        raise ModelNotAvailableError(f"folder {str(folder)!r} is not a model folder: it has no config.json")


def check_not_a_missing_path(name: str) -> None:
    # Hub ids are "name" or "org/name"; anything path-like that is not a folder is a missing folder.
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelNotAvailableError(f"model folder {name!r} does not exist")


def check_timm_arch(name: str) -> None:
    import timm

    arch = name[len("timm:"):]
    if not timm.is_model(arch):
        raise ModelNotAvailableError(f"timm has no architecture {arch!r} (see timm.list_models())")


def hub_unreachable_hint(name: str) -> str:
    """Why a Hub id could not be loaded, and what would provide it."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return (f"it is not in the local Hugging Face cache and the Hub is unreachable (HF_HUB_OFFLINE=1); "
                f"set HF_HOME to a cache that holds {name!r} or pass a local folder")
    return "the Hugging Face Hub did not provide it; check the id, your connection, or pass a local folder"


def remote_code_kwargs(path_or_id: str) -> dict:
    """``{"trust_remote_code": True}`` for a paper model that needs its repository's code, if allowed; else ``{}``.

    Running a model repository's Python code is allowed only explicitly, with ``PRH_TRUST_REMOTE_CODE=1``
    (:data:`prh_lib.data.paper.TRUST_REMOTE_CODE_ENV`), because the code runs with your permissions and the weights come
    under their own licence (NV-Embed-v2: CC-BY-NC-4.0).

    Raises
    ------
    ModelNotAvailableError
        If the model needs remote code and it is not allowed; the message names ``trust_remote_code``, the licence and
        the variable that allows it.
    """
    import os

    from prh_lib.data import paper

    info = paper.model_info(str(path_or_id))
    needs = info and info.get("remote_code")
    if not needs:
        return {}
    if os.environ.get(paper.TRUST_REMOTE_CODE_ENV, "") not in ("1", "true", "yes"):
        raise ModelNotAvailableError(
            f"{path_or_id!r} needs its repository's own code ({needs['code']}), which transformers runs only "
            f"with trust_remote_code=True, and its weights are licensed {needs['licence']}. Read the code and "
            f"the licence on the Hub, then allow it with {paper.TRUST_REMOTE_CODE_ENV}=1 (or leave the model out: "
            f"prh-batch --models ...). Its stand-in '{path_or_id}~rehearsal' rehearses the Mistral encoder only."
        )
    return {"trust_remote_code": True}


def hf_config(name: str, path_or_id: str, revision: str | None = None):
    """``AutoConfig`` of a folder or Hub id; :class:`ModelNotAvailableError` (with the fix) if it cannot be read, or if
    a paper model needs remote code that is not allowed (:func:`remote_code_kwargs`)."""
    from transformers import AutoConfig

    import difflib

    remote = remote_code_kwargs(path_or_id)
    try:
        return AutoConfig.from_pretrained(path_or_id, revision=revision, **remote)
    except Exception as err:  # noqa: BLE001 -- a missing repo, the Hub offline or unreachable (OSError, httpx, ...)
        if not isinstance(err, (OSError, ValueError, ConnectionError)) and type(err).__module__.split(".")[0] not in (
                "httpx", "httpcore", "requests", "urllib3", "huggingface_hub"):
            raise
        if Path(path_or_id).is_dir():
            raise ModelNotAvailableError(f"cannot read the config of model folder {name!r}: {err}") from err
        close = difflib.get_close_matches(name, list(zoo.ZOO), n=3, cutoff=0.6)
        raise ModelNotAvailableError(
            f"cannot load model {name!r}: it is not a zoo model ({'closest: ' + ', '.join(close) if close else 'zoo: ' + ', '.join(zoo.ZOO)}), "
            f"not a local folder ({str(Path(path_or_id).expanduser().resolve())!r} does not exist), and as a Hugging Face "
            f"id: {hub_unreachable_hint(name)}") from err


def is_timm_folder(folder: Path) -> bool:
    config = Path(folder) / "config.json"
    if not config.is_file():
        return False
    cfg = json.loads(config.read_text())
    return "architecture" in cfg and "model_type" not in cfg


def folder_revision(folder: Path) -> str:
    """Revision of a local folder: from its zoo provenance, else ``"sha256:<16 hex>"`` over its weight files."""
    prov = zoo.read_provenance(folder)
    if prov:
        return zoo.revision_of(prov)
    files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if not files:
        return "unknown"
    return "sha256:" + paths.digest_texts(f"{p.name}\0{zoo.sha256_files([p])}" for p in files)


def timm_revision(name: str) -> str:
    """Revision of a timm pretrained model: ``"timm-<timm version>:<Hub id of the weights>"``."""
    import timm
    from timm.models import get_pretrained_cfg

    if name.startswith("timm:"):
        cfg = get_pretrained_cfg(name[len("timm:"):])
        hub_id = getattr(cfg, "hf_hub_id", None) or name[len("timm:"):]
    else:
        hub_id = name.removeprefix("hf-hub:")
    return f"timm-{timm.__version__}:{hub_id}"


def infer_modality(config) -> str:
    """``"vision"`` or ``"language"`` from a Hugging Face config."""
    if hasattr(config, "vision_config") and hasattr(config, "text_config"):
        raise ValueError(
            f"{config.model_type!r} is a two-tower (image-text) model; load one tower with the suffix "
            "':vision' or ':text' (e.g. 'openai/clip-vit-large-patch14:text')"
        )
    if config.model_type in VISION_MODEL_TYPES:
        return "vision"
    if hasattr(config, "image_size") and hasattr(config, "num_channels") and not hasattr(config, "vocab_size"):
        return "vision"
    return "language"


def is_causal_lm(config) -> bool:
    """Whether a Hugging Face config, or the model a name names (no weights loaded), is a decoder-only LM."""
    if isinstance(config, str):
        spec = parse_model_name(config)
        if spec.tower is not None or spec.identity().family != "hf-text":
            return False
        config = hf_config(config, location(spec))
    architectures = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        return True
    return bool(getattr(config, "is_decoder", False)) and not architectures


def location(spec: ModelSpec) -> str:
    """What ``from_pretrained`` reads for a Hugging Face model: the converted zoo folder, the folder or the Hub id."""
    if spec.kind == "zoo":
        return str(zoo.convert(spec.base, progress=False))
    if spec.kind == "folder":
        return str(spec.folder)
    return spec.base


def joint_config(spec: ModelSpec, revision: str | None = None):
    """Config and weight revision of the two-tower model of a tower spec.

    Raises
    ------
    ValueError
        If the model is not a supported two-tower model, or a folder holds another revision than requested.
    """
    if spec.kind == "folder":
        weight_revision = folder_revision(spec.folder)
        if revision is not None and revision != weight_revision:
            raise ValueError(f"folder {str(Path(spec.base).expanduser())!r} holds revision {weight_revision}, "
                             f"not the requested {revision}")
        config = hf_config(spec.base, str(spec.folder))
    else:
        config = hf_config(spec.base, spec.base, revision)
        weight_revision = getattr(config, "_commit_hash", None) or "unknown"
    if config.model_type not in JOINT_MODEL_TYPES:
        raise ValueError(
            f"{spec.name!r} is a {config.model_type!r} model, not a supported two-tower image-text model "
            f"(supported model_type: {sorted(JOINT_MODEL_TYPES)}; SigLIP 2 NaFlex 'siglip2' checkpoints are not)"
        )
    return config, weight_revision
