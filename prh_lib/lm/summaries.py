"""Shortened captions for the "less detail" control (Section 3.2's caption argument; Appendices F and H).

A detailed text is shortened to a fraction of its words, either by a causal language model with a fixed prompt and
greedy decoding (:func:`summarize_texts`; the paper used Qwen3-8B, the offline default is the zoo's
SmolLM2-135M-Instruct), or by keeping the first words (:func:`truncate_texts`, the deterministic baseline).

Summaries are cached like features: one JSON file per (model and revision, prompt, fraction, decoding options, source
texts), written atomically, holding the prompt, the model, every raw generation and the fallbacks. A summary is
*degenerate* when empty after cleaning or not shorter than its source; such rows fall back to the source's truncation to
the same length, counted (:attr:`Summaries.n_fallback`), never silently."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from prh_lib import models, paths
from prh_lib.extract import torch_threads
from prh_lib.lm.generate import greedy_generate, load_generator, max_new_tokens_for, render_prompt
from prh_lib.lm.quiet import quiet

#: Target lengths of the "less detail" control, as fractions of the source's words.
DEFAULT_FRACTIONS = (0.1, 0.25, 0.5, 0.75)

#: The fixed instruction (user turn): ``{text}`` the source, ``{n_words}`` the target length in words. The text comes
#: first, so one text's prompts for different fractions share a prefix computed once (:func:`greedy_generate`).
DEFAULT_PROMPT = (
    "Description of a photo: {text}\n\nShorten this description to at most {n_words} words. Keep the most "
    "important content. Reply with the shortened description only."
)

#: System turn used with chat templates (short, so that prompts stay cheap on a CPU).
DEFAULT_SYSTEM = "You write concise image descriptions."

#: Format version of the summary cache files (part of the key).
SUMMARY_FORMAT_VERSION = 1

_PREFIX = re.compile(r"^\s*(?:(?:shortened|short|concise)?\s*(?:description|summary|caption)\s*:\s*)", re.I)


def word_count(text: str) -> int:
    """Number of whitespace-separated words."""
    return len(text.split())


def target_words(text: str, fraction: float) -> int:
    """Target length of a shortened ``text``: ``max(1, round(fraction * words))``.

    Raises
    ------
    ValueError
        If ``fraction`` is not in (0, 1].
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1]; got {fraction}")
    return max(1, int(round(fraction * word_count(text))))


def truncate_text(text: str, fraction: float) -> str:
    """The first :func:`target_words` words of ``text``: the deterministic "less detail" baseline."""
    return " ".join(text.split()[: target_words(text, fraction)])


def truncate_texts(texts: Sequence[str], fraction: float) -> list[str]:
    """:func:`truncate_text` of each text."""
    return [truncate_text(t, fraction) for t in texts]


def token_counts(texts: Sequence[str], tokenizer) -> np.ndarray:
    """Tokens of each text under ``tokenizer``, without special tokens. Returns int array of shape (n_texts,).

    Counting only: a text longer than the model's context is counted in full, without the tokenizer's warning."""
    enc = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    return np.array([len(ids) for ids in enc], dtype=int)


def clean_generation(text: str) -> str:
    """First non-empty paragraph of a generation, without a leading "Summary:"-style label or wrapping quotes."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n|\n", text) if p.strip()]
    out = paragraphs[0] if paragraphs else ""
    out = _PREFIX.sub("", out).strip()
    if len(out) >= 2 and out[0] == out[-1] and out[0] in "\"'":
        out = out[1:-1].strip()
    return out


# --------------------------------------------------------------------------------------------------------
# summaries


@dataclass(frozen=True)
class Summaries:
    """Shortened texts of one fraction, with how they were made.

    Attributes
    ----------
    texts : tuple of str
        The text of each row: the cleaned summary, or the truncation of the source where it fell back.
    raw : tuple of str
        Each row's generation as decoded (before cleaning).
    fallback : tuple of str
        ``""`` where the summary was used, else why the row fell back to truncation (``"empty"``, ``"not shorter"``).
    fraction : float
    model, revision : str
        The generating model and its weight revision.
    prompt, system : str
        The instruction template and the system turn.
    path : Path or None
        The cache file (None when caching is off).
    meta : dict
        Decoding options, target words per row, library versions, timing.
    """

    texts: tuple[str, ...]
    raw: tuple[str, ...]
    fallback: tuple[str, ...]
    fraction: float
    model: str
    revision: str
    prompt: str
    system: str
    path: Path | None = None
    meta: dict = field(default_factory=dict, compare=False)

    @property
    def n_fallback(self) -> int:
        """Rows replaced by truncation."""
        return sum(bool(r) for r in self.fallback)

    @property
    def fallback_counts(self) -> dict[str, int]:
        """Fallback reasons and how often each occurred."""
        out: dict[str, int] = {}
        for r in self.fallback:
            if r:
                out[r] = out.get(r, 0) + 1
        return out


def summaries_path(model: str, revision: str, *, prompt: str, system: str, fraction: float,
                   texts: Sequence[str], decoding: dict) -> Path:
    """Cache file of one set of summaries; the name hashes every option that changes the output.

    Key: model name and revision, prompt, system turn, fraction, decoding options, the source texts in row order, and
    :data:`SUMMARY_FORMAT_VERSION`; under ``paths.cache_dir("summaries")``. Frozen by ``tests/test_cache_keys.py``."""
    key = [model, revision, prompt, system, float(fraction), decoding, paths.digest_texts(texts), SUMMARY_FORMAT_VERSION]
    return paths.cache_file("summaries", model, key, prefix=f"n{len(texts)}-f{fraction:g}", suffix=".json")


def finalize_summaries(sources: Sequence[str], raw: Sequence[str], fraction: float) -> tuple[list[str], list[str]]:
    """Clean each generation and replace degenerate ones by truncation of the source.

    Parameters
    ----------
    sources : sequence of str
        The texts that were summarised.
    raw : sequence of str
        The generations, same rows.
    fraction : float in (0, 1]
        Target fraction (the length of the truncation fallback, :func:`truncate_text`).

    Returns
    -------
    texts : list of str
        :func:`clean_generation` of each generation, or the truncated source where it is degenerate.
    reasons : list of str
        ``""`` (summary kept), ``"empty"`` (nothing left after cleaning) or ``"not shorter"`` (at least as many
        words as the source).
    """
    if len(sources) != len(raw):
        raise ValueError(f"{len(sources)} sources but {len(raw)} generations")
    texts, fallback = [], []
    for src, r in zip(sources, raw):
        text = clean_generation(r)
        reason = "empty" if not text else ("not shorter" if word_count(text) >= word_count(src) else "")
        texts.append(truncate_text(src, fraction) if reason else text)
        fallback.append(reason)
    return texts, fallback


def _load_cached(path: Path) -> Summaries:
    doc = json.loads(path.read_text())
    return Summaries(tuple(doc["texts"]), tuple(doc["raw"]), tuple(doc["fallback"]), doc["fraction"], doc["model"],
                     doc["revision"], doc["prompt"], doc["system"], path, doc["meta"])


def summarize_texts(texts: Sequence[str], *, fractions: Sequence[float] = DEFAULT_FRACTIONS,
                    model: str = "smollm2-135m", prompt: str = DEFAULT_PROMPT, system: str = DEFAULT_SYSTEM,
                    device: str = "cpu", dtype: str = "float32", batch_size: int = 16, tokens_per_word: float = 1.5,
                    cache: bool = True, progress: bool = False, generator=None,
                    num_threads: int | None = None) -> dict[float, Summaries]:
    """Shorten each text to about each fraction of its words with a causal language model (cached per fraction).

    Each (text, fraction) gets ``prompt.format(text=text, n_words=target_words(text, fraction))`` in the model's
    chat template, greedy decoding within :func:`max_new_tokens_for` tokens (:func:`greedy_generate`), then
    :func:`clean_generation`; degenerate rows fall back to truncation (:func:`finalize_summaries`).

    Parameters
    ----------
    texts : sequence of str
        Source texts (the offline notebook uses the five COCO captions of each image, concatenated).
    fractions : sequence of float in (0, 1)
        Target lengths as fractions of each source's words.
    model : str
        Zoo name, local folder or Hugging Face id of a causal LM (the paper: ``"Qwen/Qwen3-8B"``).
    prompt, system : str
        Template with ``{text}`` and ``{n_words}`` fields (text first, so prompts share a prefix); system turn.
    device, dtype : str
        Where and in which precision the generator runs (only when generating).
    batch_size : int >= 1
        Texts whose prompts run together (times the number of fractions in the decoding batch).
    tokens_per_word : float > 0
        Sets the generation budget (:func:`max_new_tokens_for`).
    cache : bool
        Read and write the summary cache (:func:`summaries_path`, one file per fraction).
    progress : bool
        Print a line per batch while generating.
    generator : (module, tokenizer, revision) or callable returning it, optional
        An already loaded :func:`load_generator` result, or a function called only when a fraction is not cached.
    num_threads : int, optional
        Torch intra-op threads while generating (:func:`torch_threads`; restored afterwards). None: unchanged.

    Returns
    -------
    dict of float to Summaries
        Per fraction, texts in the input order; every text has fewer words than its source unless the source
        has one word.

    Raises
    ------
    ValueError
        If a fraction is not in (0, 1) or repeated, the prompt lacks ``{n_words}`` or ``{text}``, ``texts`` is
        empty or holds an empty text, or ``batch_size < 1``.

    References
    ----------
    Herbst et al., Section 3.2 and Appendices F and H (caption detail; summaries by Qwen3-8B).
    """
    texts = [str(t) for t in texts]
    fractions = [float(f) for f in np.atleast_1d(fractions)]
    if not fractions or any(not 0 < f < 1 for f in fractions) or len(set(fractions)) != len(fractions):
        raise ValueError(f"fractions must be distinct values in (0, 1); got {fractions}")
    if "{n_words}" not in prompt or "{text}" not in prompt:
        raise ValueError("prompt must contain the fields {n_words} and {text}")
    if not texts or any(not t.strip() for t in texts):
        raise ValueError("texts must be a non-empty sequence of non-empty strings")
    if int(batch_size) < 1 or tokens_per_word <= 0:
        raise ValueError(f"need batch_size >= 1 and tokens_per_word > 0; got {batch_size}, {tokens_per_word}")
    targets = {f: [target_words(t, f) for t in texts] for f in fractions}
    budgets = {f: [max_new_tokens_for(n, tokens_per_word=tokens_per_word) for n in targets[f]] for f in fractions}
    decoding = {"strategy": "greedy", "max_new_tokens": f"ceil({tokens_per_word} * n_words) + 4",
                "chat_template": "if the tokenizer has one", "padding": "left"}
    revision = generator[2] if isinstance(generator, tuple) else models.resolve_identity(model)["revision"]
    where = {f: summaries_path(model, revision, prompt=prompt, system=system, fraction=f, texts=texts,
                               decoding=decoding) for f in fractions}
    out = {f: _load_cached(where[f]) for f in fractions if cache and where[f].is_file()}
    todo = [f for f in fractions if f not in out]
    if not todo:
        return out
    import time

    import torch
    import transformers

    from prh_lib import __version__

    versions = {"prh_lib": __version__, "torch": torch.__version__, "transformers": transformers.__version__}
    if callable(generator):
        generator = generator()
    if generator is None:
        with quiet(not progress):
            generator = load_generator(model, device=device, dtype=dtype)
    module, tok, revision = generator
    chat = bool(getattr(tok, "chat_template", None))
    prompts = [[render_prompt(tok, system, prompt.format(n_words=targets[f][i], text=t)) for f in todo]
               for i, t in enumerate(texts)]
    start = time.perf_counter()
    with torch_threads(num_threads), quiet(not progress):
        raw = greedy_generate(module, tok, prompts, [[budgets[f][i] for f in todo] for i in range(len(texts))],
                              batch_size=int(batch_size), add_special_tokens=not chat, progress=progress)
    seconds = round(time.perf_counter() - start, 2)
    for j, f in enumerate(todo):
        gen = [r[j] for r in raw]
        final, fallback = finalize_summaries(texts, gen, f)
        meta = {"decoding": decoding, "target_words": targets[f], "max_new_tokens": budgets[f],
                "device": str(device), "dtype": dtype, "seconds_all_fractions": seconds, "generated_with": todo,
                "versions": versions, "source_texts_sha256": paths.digest_texts(texts), "format": SUMMARY_FORMAT_VERSION}
        out[f] = Summaries(tuple(final), tuple(gen), tuple(fallback), f, model, revision, prompt, system,
                           where[f] if cache else None, meta)
        if cache:
            doc = {"model": model, "revision": revision, "prompt": prompt, "system": system, "fraction": f,
                   "texts": final, "raw": gen, "fallback": fallback, "sources": texts, "meta": meta}
            with paths.atomic_path(where[f]) as tmp:
                tmp.write_text(json.dumps(doc, indent=1))
    return {f: out[f] for f in fractions}
