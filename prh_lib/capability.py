"""Language-model capability versus cross-modal alignment (Herbst et al., Section 3.2, Figures 3-4, App. D).

The paper's claim: alignment of a language model with a vision model grows with the language model's
capability when captions are informative. This module supplies the capability side and the statistics:

- :func:`load_capability_table` reads a CSV of published benchmark scores (one row per model, every
  value with its source; empty cells are missing, read as NaN); the packaged table is
  ``prh_lib/resources/capability_scores.csv`` (:func:`capability_table_path`).
- :func:`bits_per_byte` measures a causal LM's bits per UTF-8 byte on a list of texts (the capability
  axis of Huh et al. 2024), which needs no benchmark download.
- :func:`ladder_weights` / :func:`ladder_models` build a *capability ladder* from one trained model:
  every weight interpolated between a seeded random initialisation and the trained value,
  ``theta(t) = (1 - t) theta_random(seed) + t theta_trained``. It is a controlled offline proxy for a list
  of models of different capability, not the paper's experiment.
- :func:`alignment_table` scores each language model against each vision model (raw mutual k-NN at the
  best layer pair and at the final layers, plus permutation-calibrated scores); :func:`correlate` gives
  Pearson's r with its p-value and a bootstrap interval over models; :func:`correlation_table` applies it
  to every (vision model, alignment score, capability measure) combination.

Regenerating the benchmark columns
----------------------------------
The CSV holds published numbers. To measure them instead, run the LM Evaluation Harness (``pip install
lm-eval``) on a machine that reaches the Hugging Face Hub and the benchmark datasets, once per model::

    lm_eval --model hf --model_args pretrained=<hf-id>,dtype=bfloat16 --tasks mmlu --num_fewshot 5 \\
        --batch_size auto --output_path results/<hf-id>
    lm_eval --model hf --model_args pretrained=<hf-id>,dtype=bfloat16 --tasks arc_challenge --num_fewshot 4 \\
        --batch_size auto --output_path results/<hf-id>
    lm_eval --model hf --model_args pretrained=<hf-id>,dtype=bfloat16 --tasks gsm8k --num_fewshot 5 \\
        --batch_size auto --output_path results/<hf-id>

and copy ``mmlu`` ``acc``, ``arc_challenge`` ``acc_norm`` and ``gsm8k`` ``exact_match,strict-match``
(times 100) into the row, with the source ``"lm-eval <version>, <n>-shot, <metric>, <date>"``. ARC is run
4-shot here as in the paper's protocol; the Open LLM Leaderboard v1 used 25 shots, so published ARC
numbers (and those in the packaged table, whose source column names the shot count) are not directly
comparable with a 4-shot run.

References
----------
Herbst, Roschmann, Bouniot, Akata. "Where Does Alignment Emerge and What Does It Mean? A Closer Look at
the Platonic Representation Hypothesis", Section 3.2, Figures 3 and 4, Appendix D.
Huh, Cheung, Wang, Isola (2024). "The Platonic Representation Hypothesis", ICML, Sec. 3 (alignment versus
language-model performance measured in bits per byte).
Gao et al. "A framework for few-shot language model evaluation" (LM Evaluation Harness), Zenodo.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from . import __version__, paths

__all__ = [
    # capability table
    "BENCHMARKS", "SOURCE_COLUMNS", "capability_table_path", "load_capability_table", "capability_scores",
    "join_capabilities", "missing_counts", "describe_missing", "capability_columns",
    # bits per byte
    "BitsPerByte", "bits_per_byte", "heldout_captions", "BPB_SOURCES", "bpb_corpus",
    # causal LMs and the interpolation ladder
    "CausalLM", "load_causal_lm", "RandomWeights", "random_weights", "ladder_tag", "ladder_weights",
    "LanguageModelResult", "ladder_models", "pretrained_models", "bpb_table", "describe_ladder", "ladder_is_monotone",
    # alignment and correlation
    "alignment_table", "CorrelationResult", "correlate", "correlation_table", "correlation_note",
    "describe_correlations",
    # figures
    "scatter_with_labels", "scatter_grid",
]

#: Benchmark columns of the capability table (percent, 0-100) and the column naming each value's source.
BENCHMARKS = ("mmlu_5shot", "arc_challenge", "gsm8k_5shot")
SOURCE_COLUMNS = {"mmlu_5shot": "mmlu_source", "arc_challenge": "arc_source", "gsm8k_5shot": "gsm8k_source"}
_REQUIRED = ("model",) + tuple(c for b in BENCHMARKS for c in (b, SOURCE_COLUMNS[b]))

#: Bump when a change to :func:`bits_per_byte` changes its numbers; part of every cache key.
BPB_FORMAT_VERSION = 1


# --------------------------------------------------------------------------------------------------------
# capability table


def capability_table_path() -> Path:
    """Path of the packaged capability table ``prh_lib/resources/capability_scores.csv``."""
    from importlib import resources

    return Path(str(resources.files("prh_lib") / "resources" / "capability_scores.csv"))


def load_capability_table(path: str | Path | None = None) -> pd.DataFrame:
    """Read and validate a capability table.

    Parameters
    ----------
    path : path, optional
        A CSV with the columns ``model``, ``mmlu_5shot``, ``mmlu_source``, ``arc_challenge``,
        ``arc_source``, ``gsm8k_5shot``, ``gsm8k_source`` (further columns are kept; ``arc_shots``, the
        ARC shot count, is read as a number). Lines starting with ``#`` are comments.
        Default: :func:`capability_table_path`.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``model`` (unique), benchmark columns as float64 in [0, 100] with NaN for empty cells,
        source columns as str ("" where the value is missing).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If a required column is missing (the message names it), a model is listed twice or has no name,
        a value is not a number or lies outside [0, 100], or a value has no source.

    References
    ----------
    Herbst et al., Section 3.2 and Appendix D (capability scores of the 21 language models).
    """
    path = capability_table_path() if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no capability table at {path}")
    import io

    # lines starting with "#" are comments (a "#" inside a cell, e.g. in a URL, is kept)
    text = "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                   if not line.lstrip().startswith("#"))
    raw = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    raw.columns = [c.strip() for c in raw.columns]
    missing = [c for c in _REQUIRED if c not in raw.columns]
    if missing:
        raise ValueError(f"capability table {path} lacks the column(s) {missing}; required: {list(_REQUIRED)}")
    raw = raw.apply(lambda col: col.str.strip())
    if (raw["model"] == "").any():
        rows = [int(i) + 2 for i in np.flatnonzero(raw["model"] == "")]
        raise ValueError(f"capability table {path}: rows {rows} (1 = header) have no model name")
    dupes = sorted(raw["model"][raw["model"].duplicated()].unique())
    if dupes:
        raise ValueError(f"capability table {path} lists these models more than once: {dupes}")
    table = raw.set_index("model")
    for bench in BENCHMARKS:
        source = SOURCE_COLUMNS[bench]
        values = pd.to_numeric(table[bench].replace("", np.nan), errors="coerce")
        bad = table.index[values.isna() & (table[bench] != "")]
        if len(bad):
            raise ValueError(f"capability table {path}: {bench} is not a number for {list(bad)}: "
                             f"{list(table.loc[bad, bench])}")
        out = values[(values < 0) | (values > 100)]
        if len(out):
            raise ValueError(f"capability table {path}: {bench} must be a percentage in [0, 100]; got "
                             f"{out.to_dict()}")
        unsourced = table.index[values.notna() & (table[source] == "")]
        if len(unsourced):
            raise ValueError(f"capability table {path}: {bench} values without a {source}: {list(unsourced)}")
        table[bench] = values.astype(np.float64)
    if "arc_shots" in table.columns:
        shots = pd.to_numeric(table["arc_shots"].replace("", np.nan), errors="coerce")
        bad = table.index[(shots.isna() & (table["arc_shots"] != "")) | (shots < 0)]
        if len(bad):
            raise ValueError(f"capability table {path}: arc_shots must be a non-negative number for {list(bad)}")
        table["arc_shots"] = shots
    return table


def capability_scores(table: pd.DataFrame, models: Sequence[str], *,
                      benchmarks: Sequence[str] = BENCHMARKS) -> pd.DataFrame:
    """Benchmark scores of ``models`` in the given order.

    Parameters
    ----------
    table : DataFrame
        From :func:`load_capability_table`.
    models : sequence of str
        Model ids (the table's index).
    benchmarks : sequence of str
        Columns to return (default :data:`BENCHMARKS`).

    Returns
    -------
    DataFrame of shape (len(models), len(benchmarks))
        NaN where the table has no value.

    Raises
    ------
    ValueError
        If a model is not in the table or a benchmark is not one of :data:`BENCHMARKS` (the message lists
        the unknown names and the valid ones).
    """
    unknown_b = [b for b in benchmarks if b not in BENCHMARKS]
    if unknown_b:
        raise ValueError(f"unknown benchmarks {unknown_b}; valid: {list(BENCHMARKS)}")
    unknown = [m for m in models if m not in table.index]
    if unknown:
        raise ValueError(f"models not in the capability table: {unknown}; the table has {list(table.index)}")
    return table.loc[list(models), list(benchmarks)].astype(np.float64)


def join_capabilities(table: pd.DataFrame, capabilities: pd.DataFrame, *, on: str = "language") -> pd.DataFrame:
    """``table`` with the benchmark columns of each row's model added (NaN for models not in ``capabilities``).

    Parameters
    ----------
    table : DataFrame
        E.g. :func:`alignment_table`; column ``on`` names the language model of each row.
    capabilities : DataFrame
        From :func:`load_capability_table`.
    on : str, default="language"

    Returns
    -------
    DataFrame
        A copy with the :data:`BENCHMARKS` columns appended (ladder models and other models outside the
        table get NaN, which :func:`correlate` leaves out).

    Raises
    ------
    ValueError
        If ``on`` is not a column of ``table``.
    """
    if on not in table.columns:
        raise ValueError(f"column {on!r} is not in the table; it has {list(table.columns)}")
    out = table.copy()
    for bench in BENCHMARKS:
        out[bench] = out[on].map(capabilities[bench]).astype(np.float64)
    return out


def missing_counts(table: pd.DataFrame, models: Sequence[str] | None = None) -> dict[str, int]:
    """Number of missing (NaN) values per benchmark, over ``models`` (default: every row)."""
    sub = table if models is None else capability_scores(table, models)
    return {b: int(sub[b].isna().sum()) for b in BENCHMARKS}


def describe_missing(table: pd.DataFrame, models: Sequence[str] | None = None) -> str:
    """One Markdown sentence: how many values of each benchmark are missing over ``models`` (default: all rows).

    Models that are not in the table count as missing for every benchmark and are named.
    """
    models = list(table.index) if models is None else list(models)
    known = [m for m in models if m in table.index]
    unknown = [m for m in models if m not in table.index]
    counts = missing_counts(table, known)
    parts = ", ".join(f"{b} {m + len(unknown)} of {len(models)}" for b, m in counts.items())
    scope = "in the table" if models == list(table.index) else "among the models of this run"
    extra = f" Not in the table: {', '.join(unknown)}." if unknown else ""
    return f"Missing values {scope} (no citable source with a matching protocol): {parts}.{extra}"


def capability_columns(table: pd.DataFrame, *, min_models: int = 3) -> list[str]:
    """``"bpb"`` and the benchmarks with at least ``min_models`` non-missing values in ``table``."""
    cols = ["bpb"] if "bpb" in table.columns else []
    return cols + [b for b in BENCHMARKS if b in table.columns and table[b].notna().sum() >= min_models]


# --------------------------------------------------------------------------------------------------------
# bits per byte


@dataclass(frozen=True)
class BitsPerByte:
    """Result of :func:`bits_per_byte`.

    Attributes
    ----------
    bpb : float
        ``sum(bits) / sum(n_bytes)`` over the corpus (lower = better language model).
    bits : ndarray of shape (n_texts,)
        Negative log2-likelihood of each text's scored tokens.
    n_bytes : ndarray of shape (n_texts,)
        UTF-8 bytes of the scored span of each text.
    n_tokens : int
        Tokens scored in all.
    context : {"bos", "first-token"}
        ``"bos"``: every token scored, the first conditioned on the BOS token; ``"first-token"``: the first
        token is context only and its bytes are not counted.
    """

    bpb: float
    bits: np.ndarray
    n_bytes: np.ndarray
    n_tokens: int
    context: str


def _check_texts(texts) -> list[str]:
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a sequence of str")
    texts = list(texts)
    if not texts:
        raise ValueError("texts is empty")
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    if empty:
        raise ValueError(f"texts {empty[:5]} are empty; bits per byte is undefined for them")
    return texts


def _tokenize_for_bpb(tokenizer, texts: list[str], use_bos: bool):
    """Token ids (no special tokens; BOS prepended if ``use_bos``) and the scored bytes of each text."""
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=not use_bos)
    ids, n_bytes = [], []
    for i, text in enumerate(texts):
        toks = list(enc["input_ids"][i])
        if use_bos:
            toks = [tokenizer.bos_token_id] + toks
            n_bytes.append(len(text.encode("utf-8")))
        else:
            if len(toks) < 2:
                raise ValueError(f"text {i} ({text!r}) is a single token; without a BOS token nothing is scored")
            first_end = enc["offset_mapping"][i][0][1]
            n_bytes.append(len(text[first_end:].encode("utf-8")))
        ids.append(toks)
    return ids, np.asarray(n_bytes, dtype=np.int64)


def bits_per_byte(lm: torch.nn.Module, tokenizer, texts: Sequence[str], *, batch_size: int = 16,
                  use_bos: bool | None = None, progress: bool = False) -> BitsPerByte:
    """Bits per UTF-8 byte of a causal language model on ``texts``.

    Each text is tokenised on its own without special tokens. With a BOS token (``use_bos``), the
    sequence is ``[BOS] + tokens`` and every text token is scored given the ones before it; the byte count
    is the whole text's. Without one, the first token is context only: tokens 2..T are scored and the
    bytes are those after the first token (from the tokenizer's offsets). Bits are summed over the corpus
    and divided by the bytes summed over the corpus. Batches are padded on the right and scored with the
    attention mask, so the result does not depend on ``batch_size`` (to float round-off).

    Parameters
    ----------
    lm : torch.nn.Module
        A causal LM whose ``forward(input_ids=, attention_mask=)`` returns ``logits`` of shape (B, T, V),
        e.g. ``transformers.AutoModelForCausalLM``.
    tokenizer : transformers tokenizer
        A fast tokenizer (offsets are needed when there is no BOS token).
    texts : sequence of str
        Non-empty texts.
    batch_size : int, default=16
    use_bos : bool, optional
        Default: True when the tokenizer has a BOS token.
    progress : bool, default=False
        Show a progress bar.

    Returns
    -------
    BitsPerByte
        ``bpb`` >= 0 (a uniform model over V tokens gives about ``log2(V) * tokens / bytes``).

    Raises
    ------
    TypeError
        If ``texts`` is not a sequence of str.
    ValueError
        If ``texts`` is empty or holds an empty text, ``batch_size < 1``, ``use_bos`` is True but the
        tokenizer has no BOS token, or a text is a single token and there is no BOS token.

    References
    ----------
    Huh et al. (2024), Sec. 3 (bits per byte as the language-model performance axis); Gao et al. (2020),
    "The Pile", Sec. 4 (bits per UTF-8 byte, tokenizer-independent).
    """
    from tqdm.auto import tqdm

    texts = _check_texts(texts)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    has_bos = getattr(tokenizer, "bos_token_id", None) is not None
    use_bos = has_bos if use_bos is None else bool(use_bos)
    if use_bos and not has_bos:
        raise ValueError("use_bos=True but the tokenizer has no BOS token")
    ids, n_bytes = _tokenize_for_bpb(tokenizer, texts, use_bos)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(lm.parameters()).device
    order = np.argsort([len(t) for t in ids], kind="stable")
    bits = np.zeros(len(texts), dtype=np.float64)
    n_tokens = 0
    for start in tqdm(range(0, len(texts), batch_size), disable=not progress, desc="bits per byte"):
        rows = order[start:start + batch_size]
        width = max(len(ids[i]) for i in rows)
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            input_ids[r, :len(ids[i])] = torch.as_tensor(ids[i])
            mask[r, :len(ids[i])] = 1
        with torch.inference_mode():
            logits = lm(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits
        # position j predicts token j + 1; score targets whose own position is real
        logits = logits[:, :-1].float()
        target = input_ids[:, 1:].to(logits.device)
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")  # nats
        scored = mask[:, 1:].to(logits.device).bool()
        per_text = nll.masked_fill(~scored, 0.0).sum(dim=1).double().cpu().numpy() / math.log(2.0)
        bits[rows] = per_text
        n_tokens += int(scored.sum())
    return BitsPerByte(float(bits.sum() / n_bytes.sum()), bits, n_bytes, n_tokens,
                       "bos" if use_bos else "first-token")


def heldout_captions(dataset, pairs, *, per_image: int = 1, max_texts: int | None = None) -> list[str]:
    """Captions of the pairs' images that are not the pairs' own texts: held-out text for bits per byte.

    Parameters
    ----------
    dataset : prh_lib.data.ImageCaptionDataset
        The dataset the pairs were drawn from (all captions of each image).
    pairs : prh_lib.data.Pairs
    per_image : int, default=1
        Captions taken per image, in the dataset's order, skipping any caption contained in the pair's
        text (so ``"first"``, ``"random"`` and ``"concat"`` policies all leave the aligned text out).
    max_texts : int, optional
        Keep the first ``max_texts`` captions (in the pairs' row order), to bound the cost.

    Returns
    -------
    list of str
        Up to ``per_image * len(pairs)`` captions (images with fewer spare captions contribute fewer).

    Raises
    ------
    ValueError
        If ``per_image`` or ``max_texts`` is below 1, a pair's sample is not in ``dataset``, or no caption
        is left.
    """
    if not isinstance(per_image, int) or per_image < 1:
        raise ValueError(f"per_image must be an int >= 1, got {per_image!r}")
    if max_texts is not None and (not isinstance(max_texts, int) or max_texts < 1):
        raise ValueError(f"max_texts must be an int >= 1 or None, got {max_texts!r}")
    index = {sid: i for i, sid in enumerate(dataset.sample_ids)}
    unknown = [s for s in pairs.sample_ids if s not in index]
    if unknown:
        raise ValueError(f"{len(unknown)} pair samples are not in dataset {dataset.name!r}: {unknown[:5]}")
    out = []
    for sid, text in zip(pairs.sample_ids, pairs.texts):
        spare = [c for c in dataset.captions[index[sid]] if c.strip() and c not in text]
        out.extend(spare[:per_image])
    if not out:
        raise ValueError("no held-out captions: every image's captions are used by the pairs")
    return out if max_texts is None else out[:max_texts]


#: Where the bits-per-byte texts come from (see :func:`bpb_corpus`).
BPB_SOURCES = ("auto", "heldout", "aligned")


def bpb_corpus(dataset, pairs, *, source: str = "auto", per_image: int = 1,
               max_texts: int | None = None) -> tuple[list[str], str]:
    """The texts to measure bits per byte on, and which source was used.

    Parameters
    ----------
    dataset : prh_lib.data.ImageCaptionDataset
    pairs : prh_lib.data.Pairs
    source : {"auto", "heldout", "aligned"}
        ``"heldout"``: :func:`heldout_captions` (other captions of the same images, not used for
        alignment); ``"aligned"``: the pairs' own texts (the captions themselves, as Huh et al. 2024);
        ``"auto"``: held-out captions when the dataset has any (COCO: four per image), else the aligned
        texts (WIT and DOCCI have one text per image).
    per_image, max_texts
        As in :func:`heldout_captions`; ``max_texts`` also bounds the aligned texts.

    Returns
    -------
    texts : list of str
    used : {"heldout", "aligned"}

    Raises
    ------
    ValueError
        If ``source`` is unknown, or ``"heldout"`` is asked for and there are no spare captions.
    """
    if source not in BPB_SOURCES:
        raise ValueError(f"unknown bits-per-byte source {source!r}; use one of {BPB_SOURCES}")
    if source in ("heldout", "auto"):
        try:
            return heldout_captions(dataset, pairs, per_image=per_image, max_texts=max_texts), "heldout"
        except ValueError as err:
            if source == "heldout" or "no held-out captions" not in str(err):
                raise
    if max_texts is not None and (not isinstance(max_texts, int) or max_texts < 1):
        raise ValueError(f"max_texts must be an int >= 1 or None, got {max_texts!r}")
    texts = list(pairs.texts)
    return (texts if max_texts is None else texts[:max_texts]), "aligned"


# --------------------------------------------------------------------------------------------------------
# causal LMs and the interpolation ladder


@dataclass
class CausalLM:
    """A causal LM with its head (for bits per byte) and the feature view of its base model.

    Attributes
    ----------
    lm : torch.nn.Module
        ``AutoModelForCausalLM`` model, eval mode, no gradients.
    loaded : prh_lib.models.LoadedModel
        The same weights as a LoadedModel whose ``module`` is ``lm.base_model`` (hidden states for
        :func:`prh_lib.extract.get_features`); its ``name`` and ``revision`` identify the weights.
    """

    lm: torch.nn.Module
    loaded: object

    @property
    def name(self) -> str:
        return self.loaded.name

    @property
    def tokenizer(self):
        return self.loaded.tokenizer


def _dtype(dtype) -> torch.dtype:
    from .extract import DTYPES

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def load_causal_lm(name: str, *, device: str = "cpu", dtype="float32") -> CausalLM:
    """Load a causal LM (zoo name, local folder or Hugging Face id) once, with its head.

    Parameters
    ----------
    name : str
        As for :func:`prh_lib.models.load_model`; must be a causal language model.
    device : str, default="cpu"
        ``"cuda"`` shards a large model over all visible GPUs, as :func:`prh_lib.models.load_model`.
    dtype : str or torch.dtype, default="float32"

    Returns
    -------
    CausalLM
        ``loaded`` has the name, revision, layer labels, pooling and tokenizer set-up that
        :func:`prh_lib.models.load_model` gives ``name``, so features share its cache.

    Raises
    ------
    ValueError
        If the model is not a causal language model or ``dtype`` is unknown.
    prh_lib.zoo.ModelNotAvailableError
        If the model cannot be found (the message says what provides it).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from . import zoo
    from .models import (LoadedModel, _dtype_kwarg, _freeze, _hf_config, _hf_labels, _input_device,
                         _is_causal_lm, _placement, resolve_identity)

    dtype = _dtype(dtype)
    ident = resolve_identity(name)
    if ident["modality"] != "language" or ident["family"] != "hf-text":
        raise ValueError(f"{name!r} is a {ident['modality']} model ({ident['family']}), not a causal language model")
    location = str(zoo.convert(name)) if name in zoo.ZOO else str(Path(name).expanduser()) if Path(
        name).expanduser().is_dir() else name
    config = _hf_config(name, location)
    if not _is_causal_lm(config):
        raise ValueError(f"{name!r} ({config.model_type}) is not a causal language model: "
                         f"architectures {getattr(config, 'architectures', None)}")
    lm = AutoModelForCausalLM.from_pretrained(location, **_dtype_kwarg(dtype), **_placement(device))
    lm = _freeze(lm, torch.device(device), dtype)
    tokenizer = AutoTokenizer.from_pretrained(location)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer of {name!r} has neither a pad nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    loaded = LoadedModel(
        name=ident["name"], modality="language", family="hf-text", module=lm.base_model,
        layer_labels=_hf_labels(config), pooling="mean", tokenizer=tokenizer, image_transform=None,
        revision=ident["revision"], source=f"{name} (AutoModelForCausalLM, base model for features)",
        device=_input_device(lm, device), dtype=dtype,
    )
    return CausalLM(lm, loaded)


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

    The base model comes from :func:`prh_lib.models.random_init` (the architecture's own initialiser,
    without touching the global RNG), so the ladder's ``t = 0`` end is exactly that random-init model. A
    separate output head (``tie_word_embeddings=False``) is initialised by the model's ``_init_weights``
    inside :func:`torch.random.fork_rng` seeded with ``seed + 1``; a tied head shares the random input
    embedding, as the trained model shares the trained one.

    Raises
    ------
    TypeError
        If ``seed`` is not an int.
    """
    import copy

    from .models import random_init

    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {seed!r}")
    base = random_init(model.loaded, seed=seed).module.state_dict()
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

    Float32 parameters are mixed in place as ``random * (1 - t) + trained * t``; other dtypes are mixed in
    float32 and cast back. Either way ``t = 1`` gives the trained weights and ``t = 0`` the random ones
    exactly. Buffers (e.g. rotary frequencies) are the trained model's; a tied head stays tied (it is the
    interpolated input embedding). The result's ``name`` is ``"<name>@interp:t=<t>:seed=<seed>"`` and its
    revision records ``t``, the seed and the trained revision, so its features cache apart.

    Parameters
    ----------
    model : CausalLM
        The trained model (left unchanged).
    random : RandomWeights
        From :func:`random_weights`; must hold every parameter.
    t : float in [0, 1]
    out : torch.nn.Module, optional
        A copy of ``model.lm`` (e.g. from an earlier call) whose parameters are overwritten, saving a deep
        copy per ladder point; a CausalLM returned earlier with the same ``out`` then holds the new weights.
        Default: a new deep copy.

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


# --------------------------------------------------------------------------------------------------------
# running models: features and bits per byte, both cached


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
    features : prh_lib.extract.LayerFeatures
        Layer-wise features on the pairs' texts.
    bpb : BitsPerByte
    """

    label: str
    name: str
    fraction: float | None
    features: object
    bpb: BitsPerByte

    def with_features(self, features) -> "LanguageModelResult":
        """The same result with other features (e.g. clipped by :func:`prh_lib.analysis.clip_features`)."""
        return dataclasses.replace(self, features=features)


def _bpb_cache_path(name: str, revision: str, dtype: str, texts: Sequence[str]) -> Path:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode() + b"\x01")
    key = json.dumps([name, revision, dtype, h.hexdigest(), BPB_FORMAT_VERSION])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[-80:]
    return paths.cache_dir("bpb") / safe / f"n{len(texts)}-{digest}.json"


def _cached_bpb(path: Path, compute) -> BitsPerByte:
    if path.is_file():
        d = json.loads(path.read_text())
        return BitsPerByte(d["bpb"], np.asarray(d["bits"]), np.asarray(d["n_bytes"], dtype=np.int64),
                           d["n_tokens"], d["context"])
    res = compute()
    with paths.atomic_path(path) as tmp:
        tmp.write_text(json.dumps({"bpb": res.bpb, "bits": res.bits.tolist(), "n_bytes": res.n_bytes.tolist(),
                                   "n_tokens": res.n_tokens, "context": res.context, "prh_lib": __version__}))
    return res


def _features_and_bpb(build, name: str, revision: str, pairs, bpb_texts, *, dtype: str, batch_size: int,
                      progress: bool):
    """Features and bpb of one model, each from its cache if present; ``build()`` -> CausalLM on a miss."""
    from .extract import features_cache_path, get_features, load_features

    fpath = features_cache_path(name, revision, "language", pairs, dtype=dtype, pooling="mean")
    bpath = _bpb_cache_path(name, revision, dtype, bpb_texts)
    built = []

    def model() -> CausalLM:
        if not built:
            built.append(build())
        return built[0]

    if fpath.is_file():
        feats = load_features(fpath, expected_sample_ids=pairs.sample_ids)
    else:
        feats = get_features(model().loaded, pairs, batch_size=batch_size, progress=progress)
    bpb = _cached_bpb(bpath, lambda: bits_per_byte(model().lm, model().tokenizer, bpb_texts,
                                                   batch_size=batch_size, progress=progress))
    return feats, bpb


def ladder_models(model: str, fractions: Sequence[float], *, seed: int, pairs, bpb_texts: Sequence[str],
                  device: str = "cpu", dtype: str = "float32", batch_size: int = 16,
                  progress: bool = False) -> list[LanguageModelResult]:
    """Features and bits per byte along the interpolation ladder of one trained causal LM.

    For each ``t`` in ``fractions`` the weights are ``(1 - t) theta_random(seed) + t theta_trained``
    (:func:`ladder_weights`); the same weights give the features (hidden states of the base model, on
    ``pairs``) and the bits per byte (with the LM head, on ``bpb_texts``). Both are cached (features as in
    :mod:`prh_lib.extract`, bits per byte as JSON under ``cache_dir("bpb")``) and a model is only built
    when a cache misses. ``t = 1`` is the trained model under its own identity (its weights are exactly
    the trained ones), so it shares the trained model's feature cache.

    Parameters
    ----------
    model : str
        A causal LM (zoo name, folder or Hugging Face id).
    fractions : sequence of float in [0, 1]
        Distinct interpolation fractions, in the order to report them.
    seed : int
        Seed of the random initialisation.
    pairs : prh_lib.data.Pairs
    bpb_texts : sequence of str
        Held-out texts for bits per byte (e.g. :func:`heldout_captions`).
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

    References
    ----------
    Herbst et al., Section 3.2 (capability versus alignment); the ladder is this package's offline proxy.
    """
    from .models import resolve_identity

    dtype = str(_dtype(dtype)).replace("torch.", "")  # one spelling in cache keys
    fractions = [float(t) for t in fractions]
    if not fractions:
        raise ValueError("fractions is empty")
    if len(set(fractions)) != len(fractions) or any(not 0.0 <= t <= 1.0 for t in fractions):
        raise ValueError(f"fractions must be distinct values in [0, 1], got {fractions}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {seed!r}")
    ident = resolve_identity(model)
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

    A model is loaded once (with its head, :func:`load_causal_lm`) only when its features or its bits per
    byte are not cached, and released before the next one.

    Raises
    ------
    ValueError
        If ``names`` is empty or has duplicates, or a model is not a causal LM.
    """
    from .models import resolve_identity

    dtype = str(_dtype(dtype)).replace("torch.", "")  # one spelling in cache keys
    names = list(names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"names must be a non-empty list of distinct models, got {names}")
    out = []
    for name in names:
        ident = resolve_identity(name)
        feats, bpb = _features_and_bpb(lambda name=name: load_causal_lm(name, device=device, dtype=dtype),
                                       ident["name"], ident["revision"], pairs, bpb_texts, dtype=dtype,
                                       batch_size=batch_size, progress=progress)
        out.append(LanguageModelResult(name, ident["name"], None, feats, bpb))
    return out


def bpb_table(language: Sequence[LanguageModelResult]) -> pd.DataFrame:
    """Bits per byte of each language model, indexed by ``label``: ``fraction``, ``bpb``, ``bits``, ``bytes``,
    ``tokens`` (scored) and ``context`` (see :class:`BitsPerByte`)."""
    df = pd.DataFrame([{"label": r.label, "fraction": r.fraction, "bpb": r.bpb.bpb, "bits": float(r.bpb.bits.sum()),
                        "bytes": int(r.bpb.n_bytes.sum()), "tokens": r.bpb.n_tokens, "context": r.bpb.context}
                       for r in language]).set_index("label")
    return df


def ladder_is_monotone(language: Sequence[LanguageModelResult]) -> bool | None:
    """Whether bits per byte falls strictly with ``t`` along the ladder (None with fewer than two ladder points)."""
    pts = sorted((r.fraction, r.bpb.bpb) for r in language if r.fraction is not None)
    if len(pts) < 2:
        return None
    return bool(np.all(np.diff([b for _, b in pts]) < 0))


def describe_ladder(bpb: pd.DataFrame) -> str:
    """One Markdown sentence on bits per byte along the ladder (rows of :func:`bpb_table` with a fraction);
    empty when there are fewer than two ladder points."""
    pts = bpb[bpb["fraction"].notna()].sort_values("fraction")
    if len(pts) < 2:
        return ""
    steps = np.diff(pts["bpb"].to_numpy(float))
    trend = ("falls at every step of t" if np.all(steps < 0) else
             f"does not fall at every step of t ({int(np.sum(steps >= 0))} of {len(steps)} steps rise)")
    first, last = pts.iloc[0], pts.iloc[-1]
    return (f"Along the ladder, bits per byte {trend}: {first['bpb']:.3f} at t = {first['fraction']:g}, "
            f"{last['bpb']:.3f} at t = {last['fraction']:g}.")


# --------------------------------------------------------------------------------------------------------
# alignment and correlation


def alignment_table(vision: dict, language: Sequence[LanguageModelResult], *, k: int = 10,
                    n_permutations: int = 200, alpha: float = 0.05, seed: int = 0, device=None) -> pd.DataFrame:
    """Alignment of every language model with every vision model, with each LM's bits per byte.

    Parameters
    ----------
    vision : dict of str to LayerFeatures
        Vision features (clipped as the caller wishes), all on the same pairs as the language features.
    language : sequence of LanguageModelResult
        Language features (pre-processed the same way) and bits per byte.
    k, n_permutations, alpha, seed, device
        Mutual k-NN neighbours and the permutation null of
        :func:`prh_lib.metrics.permutation_test_layerwise` (selection-aware for the maximum).

    Returns
    -------
    DataFrame
        One row per (vision, language) pair with columns ``vision``, ``language``, ``fraction``,
        ``bpb``, ``peak`` (max over layer pairs), ``peak layer v``, ``peak layer l``, ``final`` (last
        layer pair), ``calibrated (max)``, ``p (max)`` (selection-aware), ``calibrated (final)``,
        ``p (final)`` (the final pair against its own null: the same as
        :func:`prh_lib.metrics.permutation_test` with the same permutations).

    Raises
    ------
    prh_lib.extract.FeatureMismatchError
        If features hold other samples or another row order.

    References
    ----------
    Herbst et al., Section 3.2; Gröger et al. (2026), Sec. 5 (calibration).
    """
    from .analysis import layerwise_alignment
    from .metrics import permutation_test_layerwise

    rows = []
    for v_name, v in vision.items():
        for res in language:
            m = layerwise_alignment(v, res.features, metric="mutual_knn", k=k, device=device)
            cal = permutation_test_layerwise(v.values, res.features.values, metric="mutual_knn", k=k,
                                             n_permutations=n_permutations, alpha=alpha, seed=seed,
                                             selection_aware=True, device=device)
            i, j, best = m.peak
            rows.append({
                "vision": v_name, "language": res.label, "fraction": res.fraction, "bpb": res.bpb.bpb,
                "peak": best, "peak layer v": m.x_labels[i], "peak layer l": m.y_labels[j], "final": m.final,
                "calibrated (max)": cal.calibrated_max, "p (max)": cal.p_max,
                "calibrated (final)": float(cal.calibrated[-1, -1]), "p (final)": float(cal.p_value[-1, -1]),
            })
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class CorrelationResult:
    """Pearson correlation across models with a p-value and a bootstrap interval.

    Attributes
    ----------
    r : float in [-1, 1]
        NaN when fewer than 2 pairs remain or an input is constant.
    p_value : float
        Two-sided, from :func:`scipy.stats.pearsonr` (exact under bivariate normality). NaN when
        ``n < 3`` (with 2 points r is always +-1) or an input is constant; never 1 by convention.
    ci_low, ci_high : float
        Percentile bootstrap interval at level ``ci`` (models resampled with replacement; resamples in
        which either variable is constant are dropped). NaN when ``n < 3`` or ``n_boot == 0``.
    n : int
        Number of (x, y) pairs used (pairs with a NaN are dropped).
    n_boot, n_boot_valid : int
        Replicates drawn and replicates with a defined r.
    ci : float
    seed : int
    """

    r: float
    p_value: float
    ci_low: float
    ci_high: float
    n: int
    n_boot: int
    n_boot_valid: int
    ci: float
    seed: int


def _pearson_rows(xb: np.ndarray, yb: np.ndarray) -> np.ndarray:
    """Pearson r of each row of two (B, n) arrays; NaN where either row is constant (to round-off)."""
    xc = xb - xb.mean(axis=1, keepdims=True)
    yc = yb - yb.mean(axis=1, keepdims=True)
    sx, sy = np.sqrt((xc**2).sum(axis=1)), np.sqrt((yc**2).sum(axis=1))
    tol = 1e-12 * np.sqrt(xb.shape[1])
    ok = (sx > tol * np.abs(xb).max(axis=1)) & (sy > tol * np.abs(yb).max(axis=1))
    r = np.full(len(xb), np.nan)
    r[ok] = np.clip((xc[ok] * yc[ok]).sum(axis=1) / (sx[ok] * sy[ok]), -1.0, 1.0)
    return r


def correlate(x, y, *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> CorrelationResult:
    """Pearson's r between two per-model quantities, its p-value and a bootstrap interval over models.

    Parameters
    ----------
    x, y : array_like of shape (n_models,)
        E.g. alignment scores and capability scores. Pairs where either is NaN are left out.
    n_boot : int, default=1000
        Bootstrap replicates (0: no interval).
    ci : float in (0, 1), default=0.95
    seed : int, default=0
        Seeds ``numpy.random.default_rng`` for the resamples.

    Returns
    -------
    CorrelationResult
        With fewer than 3 pairs no p-value or interval is reported (NaN). A constant input gives NaN for
        r, p and the interval, with a :class:`scipy.stats.ConstantInputWarning`; the p-value is never
        reported as 1 for a degenerate input.

    Raises
    ------
    ValueError
        If ``x`` and ``y`` are not 1-D of the same length, hold infinite values, or ``n_boot`` / ``ci`` are
        out of range.

    References
    ----------
    Herbst et al., Section 3.2 and Figure 3 (Pearson r of alignment against capability);
    Efron & Tibshirani (1993), Ch. 13 (percentile interval).
    """
    from scipy import stats

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"x and y must be 1-D of the same length; got shapes {x.shape} and {y.shape}")
    if np.isinf(x).any() or np.isinf(y).any():
        raise ValueError("x and y must not hold infinite values")
    if not isinstance(n_boot, (int, np.integer)) or isinstance(n_boot, bool) or n_boot < 0:
        raise ValueError(f"n_boot must be an int >= 0, got {n_boot!r}")
    if not 0.0 < float(ci) < 1.0:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    n = int(x.size)
    nan = float("nan")

    def result(r, p, lo=nan, hi=nan, valid=0):
        return CorrelationResult(float(r), float(p), float(lo), float(hi), n, int(n_boot), int(valid), float(ci),
                                 int(seed))

    if n < 2:
        return result(nan, nan)
    const = [name for name, v in (("x", x), ("y", y)) if np.all(v == v[0])]
    if const:
        warnings.warn(f"correlate: {' and '.join(const)} is constant over the {n} models; Pearson r is "
                      "undefined (reported as NaN, no p-value)", stats.ConstantInputWarning, stacklevel=2)
        return result(nan, nan)
    if n < 3:
        return result(float(_pearson_rows(x[None], y[None])[0]), nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.NearConstantInputWarning)
        res = stats.pearsonr(x, y)
    r, p = float(res.statistic), float(res.pvalue)
    if n_boot == 0:
        return result(r, p)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(int(n_boot), n))
    reps = _pearson_rows(x[idx], y[idx])
    valid = reps[~np.isnan(reps)]
    if valid.size == 0:
        return result(r, p)
    a = (1.0 - float(ci)) / 2.0
    lo, hi = np.quantile(valid, [a, 1.0 - a])
    return result(r, p, lo, hi, valid.size)


def correlation_table(table: pd.DataFrame, *, alignment: Sequence[str], capability: Sequence[str],
                      by: str = "vision", n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """:func:`correlate` of each alignment column with each capability column, per group of rows.

    Parameters
    ----------
    table : DataFrame
        One row per (vision, language) model pair, e.g. :func:`alignment_table` joined with capability
        scores.
    alignment, capability : sequence of str
        Column names.
    by : str, default="vision"
        Rows are grouped by this column (one correlation per vision model).
    n_boot, ci, seed
        As in :func:`correlate`.

    Returns
    -------
    DataFrame
        Columns ``by``, ``alignment``, ``capability``, ``r``, ``p``, ``ci low``, ``ci high``, ``n``.

    Raises
    ------
    ValueError
        If a named column is not in ``table``.
    """
    missing = [c for c in [by, *alignment, *capability] if c not in table.columns]
    if missing:
        raise ValueError(f"columns {missing} are not in the table; it has {list(table.columns)}")
    rows = []
    for group, sub in table.groupby(by, sort=False):
        for a in alignment:
            for c in capability:
                res = correlate(sub[a].to_numpy(float), sub[c].to_numpy(float), n_boot=n_boot, ci=ci, seed=seed)
                rows.append({by: group, "alignment": a, "capability": c, "r": res.r, "p": res.p_value,
                             "ci low": res.ci_low, "ci high": res.ci_high, "n": res.n})
    return pd.DataFrame(rows)


def correlation_note(res) -> str:
    """``"r = 0.81 [0.42, 0.97], p = 0.02, n = 7"`` for a :class:`CorrelationResult` or a row of
    :func:`correlation_table` (undefined parts are written "n/a")."""
    if isinstance(res, CorrelationResult):
        res = {"r": res.r, "p": res.p_value, "ci low": res.ci_low, "ci high": res.ci_high, "n": res.n}

    def fmt(v, spec):
        return "n/a" if v is None or not np.isfinite(v) else format(v, spec)

    return (f"r = {fmt(res['r'], '.2f')} [{fmt(res['ci low'], '.2f')}, {fmt(res['ci high'], '.2f')}], "
            f"p = {fmt(res['p'], '.2g')}, n = {int(res['n'])}")


def describe_correlations(correlations: pd.DataFrame, *, by: str = "vision") -> str:
    """A Markdown line per row of :func:`correlation_table`, stating r, its interval, p and n.

    Bits per byte falls as capability rises, so a negative r against ``bpb`` means alignment grows with
    capability; against the benchmarks a positive r does.
    """
    lines = []
    for _, row in correlations.iterrows():
        sign = ""
        if np.isfinite(row["r"]) and row["r"] != 0:
            grows = (row["r"] < 0) if row["capability"] == "bpb" else (row["r"] > 0)
            sign = " (alignment grows with capability)" if grows else " (alignment falls as capability grows)"
        lines.append(f"- **{row[by]}**, {row['alignment']} vs {row['capability']}: {correlation_note(row)}{sign}.")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------
# figures


def scatter_with_labels(x, y, labels: Sequence[str], *, ax=None, xlabel: str = "", ylabel: str = "",
                        title: str | None = None, note: str | None = None, invert_x: bool = False):
    """Scatter of one point per model, each labelled, with a least-squares line (Figures 3 and 4).

    Parameters
    ----------
    x, y : array_like of shape (n_models,)
        NaN points are not drawn.
    labels : sequence of str, length n_models
    ax : matplotlib Axes, optional
    xlabel, ylabel, title : str
    note : str, optional
        Text in the upper-left corner (e.g. ``"r = 0.81, p = 0.02"``).
    invert_x : bool, default=False
        Draw the x axis decreasing (for bits per byte, so that capability grows to the right).

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    ValueError
        If ``x``, ``y`` and ``labels`` differ in length.
    """
    import matplotlib.pyplot as plt

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if not (x.shape == y.shape == (len(labels),)):
        raise ValueError(f"x {x.shape}, y {y.shape} and {len(labels)} labels must have the same length")
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 3.8))
    ok = ~(np.isnan(x) | np.isnan(y))
    ax.scatter(x[ok], y[ok], s=24, zorder=3)
    for xi, yi, lab in zip(x[ok], y[ok], np.asarray(labels, dtype=object)[ok]):
        ax.annotate(str(lab), (xi, yi), textcoords="offset points", xytext=(4, 3), fontsize=7)
    if ok.sum() >= 2 and np.ptp(x[ok]) > 0:
        slope, intercept = np.polyfit(x[ok], y[ok], 1)
        xs = np.linspace(x[ok].min(), x[ok].max(), 50)
        ax.plot(xs, slope * xs + intercept, color="grey", linestyle="--", linewidth=1)
    if invert_x:
        ax.invert_xaxis()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    if note:
        ax.text(0.02, 0.97, note, transform=ax.transAxes, va="top", fontsize=8,
                bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0})
    ax.grid(alpha=0.3)
    return ax


def scatter_grid(table: pd.DataFrame, *, x, ys: Sequence[str], by: str = "vision", label: str = "language",
                 correlations: pd.DataFrame | None = None, invert_bpb: bool = True,
                 panel_size: tuple[float, float] = (4.6, 3.6)):
    """One labelled scatter per (group, capability, alignment column) (Figures 3 and 4).

    Rows are (group, capability) combinations (vision models times ``x`` columns), columns are ``ys``.

    Parameters
    ----------
    table : DataFrame
        One row per (vision, language) pair with columns ``by``, ``label``, ``x`` and each of ``ys``.
    x : str or sequence of str
        Capability column(s) (e.g. ``"bpb"``, ``"mmlu_5shot"``).
    ys : sequence of str
        Alignment columns.
    correlations : DataFrame, optional
        From :func:`correlation_table`; the matching row is written in each panel.
    invert_bpb : bool, default=True
        Draw ``bpb`` decreasing, so that capability grows to the right in every panel.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        If a named column is missing.
    """
    import matplotlib.pyplot as plt

    xs = [x] if isinstance(x, str) else list(x)
    missing = [c for c in [by, label, *xs, *ys] if c not in table.columns]
    if missing:
        raise ValueError(f"columns {missing} are not in the table; it has {list(table.columns)}")
    rows = [(g, c) for g in dict.fromkeys(table[by]) for c in xs]
    fig, axes = plt.subplots(len(rows), len(ys), figsize=(panel_size[0] * len(ys), panel_size[1] * len(rows)),
                             squeeze=False)
    for ri, (group, cap) in enumerate(rows):
        sub = table[table[by] == group]
        for yi, y in enumerate(ys):
            note = None
            if correlations is not None:
                hit = correlations[(correlations[by] == group) & (correlations["alignment"] == y)
                                   & (correlations["capability"] == cap)]
                if len(hit):
                    note = correlation_note(hit.iloc[0])
            xlabel = f"{cap} (lower = more capable)" if cap == "bpb" else cap
            scatter_with_labels(sub[cap].to_numpy(float), sub[y].to_numpy(float), list(sub[label]), ax=axes[ri, yi],
                                xlabel=xlabel, ylabel=y, title=f"{group}: {y}", note=note,
                                invert_x=invert_bpb and cap == "bpb")
    fig.tight_layout()
    return fig
