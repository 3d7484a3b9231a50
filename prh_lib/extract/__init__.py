"""Layer-wise feature extraction: pooling, length-sorted batching and the feature cache.

Pooling (Herbst et al., Section 2; Huh et al. 2024, Section 3):

- language models: mean over the *real* tokens of each hidden state, using the attention mask, so a
  caption gives the same vector whatever the batch size and padding side;
- vision transformers: the CLS token (position 0) of each hidden state;
- CNNs: global average pool of each stage's feature map;
- two-tower image-text models (CLIP, SigLIP; family ``"hf-joint"``): hidden states as above (SigLIP's vision
  tower, which has no CLS token: mean over patches), and the final ``"projection"`` output, which the model
  pools itself, as it is. Captions longer than the text tower's context are split into chunks whose
  pooled features are averaged (:func:`_extract_text_chunked`).

Hidden state 0 (the embedding output in Hugging Face ``hidden_states``) is included and labelled ``"embed"``.
Features are pooled in float32 whatever the model dtype. The forward passes and pooling are in
:mod:`prh_lib.extract.forward` (re-exported here); a causal LM on several caption sets shares the forward passes of
token prefixes, and pools them its other ways (``@pool:``) from the same passes (:func:`features_for_pairs`,
:func:`fill_cache`).

The feature cache (:func:`get_features`): one safetensors file per model and set of pairs, named by
:func:`features_cache_path` (through :func:`prh_lib.paths.cache_file`) from every option that changes the
numbers, written atomically. Models are reached through :mod:`prh_lib.models` only here.
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from prh_lib import __version__, models, paths
from prh_lib.models import precision
from prh_lib.progress import note
from prh_lib.data.pairs import Pairs
from prh_lib.extract.features import (CorruptCacheWarning, CorruptFeatureFileError,  # noqa: F401
    FeatureMismatchError, LayerFeatures, check_aligned, load_features, quarantine, save_features)

#: Bump when a change to extraction changes the numbers; it is part of every cache key.
FEATURES_FORMAT_VERSION = 1


from prh_lib.extract.forward import (_check_texts, _extract_images, _extract_text, _extract_text_chunked,  # noqa: F401  (re-exported: the public names and the passes used below)
    _extract_text_shared, cls_pool, gap_pool, mean_pool, prefix_servers, shares_prefixes, stack_layers)


def extract_features(
    model,
    pairs: Pairs,
    *,
    batch_size: int = 32,
    padding_side: str = "right",
    max_length: int | None = None,
    progress: bool = True,
) -> LayerFeatures:
    """Pooled features of every layer of ``model`` on ``pairs`` (texts for language models, images for vision).

    Parameters
    ----------
    model : prh_lib.models.LoadedModel
        From :func:`prh_lib.models.load_model`; its ``pooling`` decides mean / CLS / global-average pooling.
    pairs : Pairs
    batch_size : int
        Rows per forward pass (>= 1). Results do not depend on it (to float32 round-off).
    padding_side : {"right", "left"}
        Tokenizer padding side; results do not depend on it (positions are computed from the mask).
    max_length : int, optional
        Truncate texts to this many tokens (default: no truncation). Text towers of two-tower models
        (``model.text_chunking``) keep this many caption tokens and split them into chunks that fit the text context.
    progress : bool
        Show a tqdm progress bar.

    Returns
    -------
    LayerFeatures
        ``values`` of shape (n_layers, n_samples, dim), float32, rows in the order of ``pairs``.

    Raises
    ------
    prh_lib.data.DataError
        If a language model is given an empty (or whitespace-only) text, or a text that tokenizes to no
        token: it would pool to an all-zero row.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    if model.modality == "language":
        _check_texts(pairs)
    if model.modality == "language" and getattr(model, "text_chunking", None) is not None:
        values, dims = _extract_text_chunked(model, pairs.texts, batch_size=batch_size, max_length=max_length,
                                             progress=progress)
        data_key = pairs.text_fingerprint()
    elif model.modality == "language":
        values, dims = _extract_text(model, pairs.texts, batch_size=batch_size, padding_side=padding_side,
                               max_length=max_length, progress=progress)
        data_key = pairs.text_fingerprint()
    else:  # vision (LoadedModel validates modality)
        values, dims = _extract_images(model, pairs, batch_size=batch_size, progress=progress)
        data_key = pairs.image_fingerprint()
    return _layer_features(model, pairs, values, dims, data_key=data_key, max_length=max_length)


def _layer_features(model, pairs: Pairs, values: torch.Tensor, dims, *, data_key: str, max_length: int | None,
                    shared: bool = False) -> LayerFeatures:
    """Wrap extracted values (n_layers, n_samples, dim) with the metadata every feature file records."""
    meta = {
        "model": model.name,
        "revision": model.revision,
        "source": model.source,
        "family": model.family,
        "modality": model.modality,
        "pooling": model.pooling,
        "dtype": models.dtype_name(model.dtype),
        "device": str(model.device),
        "dataset": pairs.dataset,
        "data_fingerprint": data_key,
        "caption_policy": f"{pairs.caption_policy}:{pairs.n_captions}",
        "max_length": str(max_length),
        "prh_lib_version": __version__,
        "features_format": str(FEATURES_FORMAT_VERSION),
    }
    if model.modality == "language" and getattr(model, "text_chunking", None) is not None:
        meta["text_chunking"] = f"context {model.text_chunking.context_length}, chunk mean weighted by caption tokens"
    if shared:
        meta["shared_prefixes"] = "token prefixes pooled from the forward pass of a longer text (causal LM)"
    return LayerFeatures(values, tuple(model.layer_labels), tuple(pairs.sample_ids), meta, dims)


def _shared_text_features(model, pairs_list: Sequence[Pairs], poolings: Sequence[str], *, batch_size: int,
                          max_length: int | None, progress: bool) -> list[LayerFeatures]:
    """:func:`extract_features` of a causal LM on several sets of pairs, each pooled its way (``poolings``), in one
    pass over their distinct texts (:func:`_extract_text_shared`)."""
    for pairs in pairs_list:
        _check_texts(pairs)
    unique = list(dict.fromkeys(t for pairs in pairs_list for t in pairs.texts))
    row = {t: i for i, t in enumerate(unique)}
    need: dict[str, dict] = {}
    for pairs, p in zip(pairs_list, poolings):
        need.setdefault(p, {}).update(dict.fromkeys(row[t] for t in pairs.texts))
    values, dims = _extract_text_shared(model, unique, batch_size=batch_size, max_length=max_length,
                                        progress=progress, poolings={p: list(r) for p, r in need.items()})
    at = {p: {i: j for j, i in enumerate(r)} for p, r in need.items()}
    return [_layer_features(_pooled_view(model, p), pairs,
                            values[p][:, torch.as_tensor([at[p][row[t]] for t in pairs.texts])].contiguous(), dims,
                            data_key=pairs.text_fingerprint(), max_length=max_length, shared=True)
            for pairs, p in zip(pairs_list, poolings)]


def _pooled_view(model, pooling: str | None):
    """``model`` (loaded) with its tokens pooled ``pooling`` and named ``<name>@pool:<pooling>`` as
    :func:`prh_lib.models.load_model` names it (itself for None or its own pooling); ValueError for a vision model."""
    if pooling is None or pooling == model.pooling:
        return model
    if model.modality != "language":
        raise ValueError(f"{model.name!r} is a {model.modality} model; token poolings ({pooling!r}) are a language "
                         "model's")
    return dataclasses.replace(model, name=models.spec.with_pooling(model.name, pooling), pooling=pooling)


# -- cache -----------------------------------------------------------------------------------------------


def features_cache_path(model_name: str, revision: str, modality: str, pairs: Pairs, *, dtype: str,
                        max_length: int | None = None, pooling: str = "") -> Path:
    """Cache file of one model on one set of pairs; the name encodes every option that changes the numbers.

    The key hashes: model name and revision (for a local folder also the contents of its config, tokenizer
    and preprocessing files), pooling, dtype, modality, the data fingerprint (sample ids in row order plus
    the texts or the image contents, see :meth:`prh_lib.data.Pairs.image_fingerprint`), truncation, a timm
    CNN's memory layout (:data:`prh_lib.models.loaded.CNN_MEMORY_FORMAT`) and :data:`FEATURES_FORMAT_VERSION`.
    Batch size and padding side are left out because results do not depend on them (tested). The device is recorded in the metadata, not the key. Frozen by
    ``tests/test_cache_keys.py``.

    Returns
    -------
    Path
        ``PRH_CACHE_DIR/features/<model>/<dataset>-n<N>-<modality>-<digest>.safetensors``.
    """
    data_key = pairs.text_fingerprint() if modality == "language" else pairs.image_fingerprint()
    key = [model_name, revision, pooling, dtype, modality, data_key, max_length, FEATURES_FORMAT_VERSION]
    if pooling == "gap":  # a timm CNN: its layout changes the round-off (prh_lib.models.loaded.CNN_MEMORY_FORMAT)
        key.append(f"memory_format={str(models.loaded.CNN_MEMORY_FORMAT).removeprefix('torch.')}")
    folder_files = _folder_files_key(model_name)
    if folder_files is not None:  # only for local folders, so that no other key changes
        key.append(folder_files)
    return paths.cache_file("features", model_name, key, prefix=f"{pairs.dataset}-n{len(pairs)}-{modality}",
                            suffix=".safetensors")


def _folder_files_key(model_name: str) -> str | None:
    """Digest of the non-weight files of a local model folder (config, tokenizer, image processor), or None.

    A folder's revision hashes its weight files only; its ``config.json``, tokenizer and preprocessing files
    change the features too, so their contents (:func:`prh_lib.paths.file_digests`, each read once while
    unchanged) are part of the key of a model given as a folder.
    """
    try:
        spec = models.parse_model_name(model_name)
    except (models.ModelNotAvailableError, TypeError, ValueError):
        return None
    if spec.kind != "folder":
        return None
    files = sorted(p for p in spec.folder.iterdir()
                   if p.is_file() and not p.name.startswith(".") and not p.name.endswith(models.spec.WEIGHT_SUFFIXES))
    return paths.digest([[p.name, d] for p, d in zip(files, paths.file_digests(files))])


def model_identity(model) -> dict:
    """``{"name", "revision", "modality", "family"/"pooling"}`` of a model name (resolved without loading its
    weights, :func:`prh_lib.models.resolve_identity`) or of a loaded model: what caches key a model by.

    Raises
    ------
    ModelNotAvailableError
        If a name names no model that can be loaded here.
    """
    if isinstance(model, str):
        return models.resolve_identity(model)
    return {"name": model.name, "revision": model.revision, "modality": model.modality, "pooling": model.pooling}


def features_path(model, pairs: Pairs, *, dtype: str = "float32", max_length: int | None = None,
                  identity: dict | None = None, device: str = "cpu") -> Path:
    """The cache file :func:`get_features` reads and writes for ``model`` (name or LoadedModel) on ``pairs``.

    ``identity`` (``{"name", "revision", "modality", "pooling"}``) skips resolving the model again when the
    caller already has it. ``dtype="auto"`` is resolved for the model and ``device``
    (:func:`prh_lib.models.precision.feature_dtype`).

    Raises
    ------
    prh_lib.models.ModelNotAvailableError
        If a model given by name cannot be resolved.
    """
    ident = identity or model_identity(model)
    if not isinstance(model, str):
        dtype = models.dtype_name(model.dtype)
    else:
        dtype = precision.feature_dtype(model, dtype, device)
    return features_cache_path(ident["name"], ident["revision"], ident["modality"], pairs, dtype=dtype,
                               max_length=max_length, pooling=ident.get("pooling", ""))


def get_features(
    model,
    pairs: Pairs,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    batch_size: int = 32,
    max_length: int | None = None,
    progress: bool = True,
    cache: bool = True,
) -> LayerFeatures:
    """Cached layer-wise features of a model on ``pairs``.

    The first call loads the model, extracts and writes the cache atomically; later calls with the same
    options read the cache without loading the model.

    Parameters
    ----------
    model : str or prh_lib.models.LoadedModel
        A name as understood by :func:`prh_lib.models.load_model` (zoo name, Hugging Face id, folder,
        ``timm:<arch>``), or an already loaded model (then ``device`` and ``dtype`` are the model's).
    pairs : Pairs
    device : str
        ``"cpu"``, ``"cuda"`` (all visible GPUs; large models are sharded), ``"cuda:1"``, ...
    dtype : {"float32", "bfloat16", "float16", "auto"}
        Weight dtype; pooling is always float32. ``"auto"``: the model's row in the bf16 table decides on a CPU
        (:func:`prh_lib.models.precision.feature_dtype`), float32 elsewhere.
    batch_size, max_length, progress
        As in :func:`extract_features`.
    cache : bool
        Read and write the feature cache (default True).

    Returns
    -------
    LayerFeatures
        ``values`` of shape (n_layers, n_samples, dim), float32, rows in the order of ``pairs``.

    Raises
    ------
    ValueError
        If ``dtype`` is unknown.
    prh_lib.models.ModelNotAvailableError
        If the model is neither installed nor reachable (the message names the package or command).

    A cache file that is damaged (unreadable, truncated, without metadata, bytes that do not match their
    recorded checksum, non-finite values, other rows than ``pairs``) is reported with a
    :class:`CorruptCacheWarning` naming it and the problem, moved aside (:func:`prh_lib.extract.features.quarantine`)
    and recomputed.
    """
    return features_for_pairs(model, [pairs], device=device, dtype=dtype, batch_size=batch_size,
                              max_length=max_length, progress=progress, cache=cache)[0]


def features_for_pairs(model, pairs_list: Sequence[Pairs], *, device: str = "cpu", dtype: str = "float32",
                       batch_size: int = 32, max_length: int | None = None, progress: bool = True,
                       cache: bool = True, num_threads: int | None = None,
                       share_prefixes: bool = True, keep: bool = True,
                       poolings: Sequence[str] | None = None) -> list[LayerFeatures | None]:
    """:func:`get_features` of one model on several sets of pairs, loading the model at most once.

    The model is loaded only if some set of pairs is not cached (e.g. caption variants of the same images).
    For a causal language model (:func:`shares_prefixes`) and more than one set to extract, each distinct
    text is run once and every text whose tokens are a prefix of another's (one caption and the same caption
    with more appended, a truncation) is pooled from that longer text's forward pass: the same features to
    float32 round-off (checked on the first such text), for a fraction of the compute. Other token poolings of the
    same texts (``poolings``) are read off the same passes.

    Parameters
    ----------
    model : str or prh_lib.models.LoadedModel
    pairs_list : sequence of Pairs
    device, dtype, batch_size, max_length, progress, cache
        As in :func:`get_features`.
    num_threads : int, optional
        Torch intra-op threads while extracting (:func:`torch_threads`, restored afterwards); None: unchanged.
    share_prefixes : bool, default True
        Share forward passes between token prefixes (above); False: every set is extracted on its own.
    keep : bool, default True
        False (with ``cache``): only fill the cache; sets extracted one by one are not held in memory, and
        None is returned in their place.
    poolings : sequence of str, optional
        Per set, a language model's token pooling: that set is ``<model>@pool:<pooling>``'s
        (:func:`prh_lib.models.spec.with_pooling`), cached as such; None (default): every set is the model's as named.

    Returns
    -------
    list of LayerFeatures
        One per set of pairs, in order.
    """
    if isinstance(model, str):
        dtype = precision.feature_dtype(model, dtype, device)  # "auto": the model's benchmark row decides
    models.torch_dtype(dtype)  # unknown dtype: ValueError before anything is loaded
    pools = [None] * len(pairs_list) if poolings is None else list(poolings)
    if len(pools) != len(pairs_list):
        raise ValueError(f"poolings gives {len(pools)} token poolings for {len(pairs_list)} sets of pairs")
    out: list[LayerFeatures | None] = [None] * len(pairs_list)
    todo, first_of, repeats = [], {}, []
    for i, (pairs, pooling) in enumerate(zip(pairs_list, pools)):
        named = (model if pooling is None else models.spec.with_pooling(model, pooling)) if isinstance(model, str) \
            else _pooled_view(model, pooling)
        path = features_path(named, pairs, dtype=dtype, max_length=max_length)
        if path in first_of and pairs_list[first_of[path]].sample_ids == pairs.sample_ids:
            repeats.append((i, first_of[path]))  # the same data again (the images of every caption draw): once
            continue
        first_of[path] = i
        cached = read_cached_features(path, pairs.sample_ids) if cache else None
        if cached is not None:
            out[i] = cached
        else:
            todo.append((i, pairs, path, pooling))
    if not todo:
        return _fill_repeats(out, repeats)
    options = dict(device=device, dtype=dtype, batch_size=batch_size, max_length=max_length, progress=progress,
                   cache=cache, num_threads=num_threads, share_prefixes=share_prefixes, keep=keep)
    if not cache:
        _extract_into(out, model, todo, **options)
        return _fill_repeats(out, repeats)
    # Two processes on one cache (prh-run's notebooks side by side) never extract the same file twice: each
    # claims the files it will write (extraction_lock); a file another process is writing is waited for and read.
    with ExitStack() as held:
        mine, theirs = [], []
        for entry in todo:
            (mine if held.enter_context(extraction_lock(entry[2], wait=False)) else theirs).append(entry)
        mine = _read_claimed(out, mine)  # written by another process between the first look and the claim
        loaded = _extract_into(out, model, mine, **options)
    for entry in theirs:
        note(f"waiting for another process extracting {getattr(model, 'name', model)} on {entry[1].dataset}")
        with extraction_lock(entry[2], wait=True):
            if not _read_claimed(out, [entry]):
                continue
            loaded = _extract_into(out, model if loaded is None else loaded, [entry], **options)
    return _fill_repeats(out, repeats)


def fill_cache(jobs: Sequence[tuple[str, Pairs]], *, device: str = "cpu", dtype: str = "float32",
               batch_size: int = 32, num_threads: int | None = None) -> None:
    """Extract the files of ``jobs`` (``(model name, Pairs)`` each, of any datasets) not cached: each model loaded once,
    then one :func:`features_for_pairs` call per dataset (its ``@pool:`` names pooled from the same forward passes),
    options as there. A name that cannot be resolved raises :class:`prh_lib.models.ModelNotAvailableError`."""
    families: dict[str, dict[str, list]] = {}
    for name, pairs in jobs:
        if not features_path(name, pairs, dtype=dtype, device=device).is_file():
            family, pooling = models.spec.token_pooling(name)
            families.setdefault(family, {}).setdefault(pairs.dataset, []).append((pairs, pooling))
    for family, by_dataset in families.items():
        model = family  # loaded here only when several datasets need it (features_for_pairs loads it otherwise)
        if len(by_dataset) > 1:
            note(f"loading {family}")
            model = models.load_model(family, device=device,
                                      dtype=models.torch_dtype(precision.feature_dtype(family, dtype, device)))
        for sets in by_dataset.values():
            features_for_pairs(model, [p for p, _ in sets], poolings=[q for _, q in sets], device=device, dtype=dtype,
                               batch_size=batch_size, progress=False, num_threads=num_threads, keep=False)


def _read_claimed(out: list, entries: list) -> list:
    """Fill ``out`` from the cache for the entries now cached; return the others."""
    left = []
    for entry in entries:
        cached = read_cached_features(entry[2], entry[1].sample_ids)
        if cached is not None:
            out[entry[0]] = cached
        else:
            left.append(entry)
    return left


@contextmanager
def extraction_lock(path: Path, *, wait: bool):
    """Hold the lock of feature file ``path`` (``fcntl.flock`` on ``PRH_CACHE_DIR/locks/features/<digest>.lock``).

    Yields True when held; with ``wait=False`` it yields False at once when another process holds it. The
    operating system releases the lock when the holder's file is closed, also when the process is killed,
    so no lock is ever left stale. A cache whose lock folder cannot be written is used without locks (True):
    two processes may then extract the same file, each writing it atomically, as before locks.
    """
    import fcntl

    lock = paths.cache_root() / "locks" / "features" / f"{paths.digest(str(path))}.lock"
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")
    except OSError:
        yield True
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True  # closing the file releases the lock


def _extract_into(out: list, model, todo: list, *, device, dtype, batch_size, max_length, progress, cache,
                  num_threads, share_prefixes, keep):
    """Extract the ``todo`` entries ``(i, pairs, path, pooling)`` into ``out`` (writing the cache); the loaded model
    or None."""
    if not todo:
        return None if isinstance(model, str) else model
    loaded = None if isinstance(model, str) else model
    if loaded is None:
        note(f"loading {model}")
        loaded = models.load_model(model, device=device, dtype=models.torch_dtype(dtype))
    if share_prefixes and len(todo) > 1 and shares_prefixes(loaded):
        sets, pools = [e[1] for e in todo], [e[3] or loaded.pooling for e in todo]
        note(f"extracting {loaded.name} on {len(sets)} caption sets of {sets[0].dataset} "
             f"({sum(map(len, sets))} texts; token prefixes shared; pooled {', '.join(dict.fromkeys(pools))})")
        with torch_threads(num_threads):
            got = _shared_text_features(loaded, sets, pools, batch_size=batch_size, max_length=max_length,
                                        progress=progress)
        for (i, _, path, _), feats in zip(todo, got):
            if cache:
                save_features(feats, path)
            out[i] = feats
        return loaded
    for i, pairs, path, pooling in todo:
        view = _pooled_view(loaded, pooling)
        note(f"extracting {getattr(view, 'name', view)} on {pairs.dataset} ({len(pairs)} pairs, {pairs.caption_policy})")
        with torch_threads(num_threads):
            feats = extract_features(view, pairs, batch_size=batch_size, max_length=max_length, progress=progress)
        if cache:
            save_features(feats, path)
        out[i] = feats if keep or not cache else None
    return loaded


def _fill_repeats(out: list, repeats: list[tuple[int, int]]) -> list:
    """Give every repeated set of pairs (same cache file: same data, same rows) its first occurrence's features."""
    for i, first in repeats:
        out[i] = out[first]
    return out


def read_cached_features(path: Path, expected_sample_ids: Sequence[str]) -> LayerFeatures | None:
    """The features cached at ``path``, or None if there are none or the file is bad.

    A bad file (:class:`CorruptFeatureFileError`, or rows that are not ``expected_sample_ids`` in order) is
    moved aside with a :class:`CorruptCacheWarning` naming it and what is wrong, so the caller recomputes it.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return load_features(path, expected_sample_ids=expected_sample_ids)
    except (CorruptFeatureFileError, FeatureMismatchError) as err:
        quarantine(path, str(err))
        return None


@contextmanager
def torch_threads(n: int | None):
    """Run the body with ``torch.set_num_threads(n)`` and restore the previous count afterwards (None: no change).

    Token-by-token decoding and small forward passes run many small operations; on a shared CPU with other busy
    processes, one intra-op thread can be several times faster than two. The setting is scoped, never left behind.

    Raises
    ------
    ValueError
        If ``n`` is below 1.
    """
    if n is None:
        yield
        return
    if int(n) < 1:
        raise ValueError(f"number of threads must be >= 1; got {n}")
    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def classifier_rows(model_name: str) -> np.ndarray:
    """ImageNet-1k classifier weight rows of a timm vision model in the cache (concept vectors).

    Row ``k`` of the final linear layer is the direction the model reads class ``k`` from: a concept
    vector of that model, in timm's ImageNet-1k class order (``timm/data/_info/imagenet_synsets.txt``).

    Parameters
    ----------
    model_name : str
        A converted model folder under ``cache_dir("models")`` holding ``model.safetensors`` with a
        ``classifier.weight`` (EfficientNet-Lite0 / Lite2: ``"efficientnet-lite0"``, ``"efficientnet-lite2"``).

    Returns
    -------
    ndarray of shape (1000, d), float64.

    Raises
    ------
    FileNotFoundError
        If the model is not converted in the cache.
    KeyError
        If its weights have no ``classifier.weight``.
    """
    from safetensors import safe_open

    path = paths.cache_dir("models") / model_name / "model.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"no converted weights for {model_name!r} at {path}: run the model's conversion first")
    with safe_open(str(path), "np") as f:
        keys = set(f.keys())
        if "classifier.weight" not in keys:
            raise KeyError(f"{model_name!r} has no 'classifier.weight' (keys like {sorted(keys)[:3]})")
        return f.get_tensor("classifier.weight").astype(np.float64)
