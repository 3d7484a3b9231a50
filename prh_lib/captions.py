"""Caption detail as a control (Section 3.2's caption argument; Appendices F and H).

If cross-modal alignment reflects shared *content*, it should grow when a caption says more about its image
and shrink when it says less, with the images unchanged. Two controls over the same images:

- **more detail**: concatenate the first 1 to 5 COCO captions of each image
  (:func:`prh_lib.data.sample_pairs` with ``caption_policy="concat"``);
- **less detail**: start from a detailed text (the 5 captions concatenated) and shorten it to a fraction of
  its words, either by a causal language model with a fixed prompt and greedy decoding
  (:func:`summarize_texts`; the paper used Qwen3-8B, the offline default is the zoo's SmolLM2-135M-Instruct),
  or by keeping the first words (:func:`truncate_texts`, the deterministic baseline).

Summaries are cached like features: one JSON file per (model and revision, prompt, fraction, decoding
options, source texts), written atomically, holding the prompt, the model, every raw generation and which
rows fell back to truncation and why. A summary is *degenerate* when it is empty after cleaning or not
shorter than its source; such rows are replaced by the truncation of the source to the same target length
and counted (:attr:`Summaries.n_fallback`), never silently.

Functions here never plot except :func:`plot_detail`, which takes a table.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from . import paths

#: Target lengths of the "less detail" control, as fractions of the source's words.
DEFAULT_FRACTIONS = (0.1, 0.25, 0.5, 0.75)

#: The fixed instruction (user turn). ``{text}`` is the source, ``{n_words}`` the target length in words. The
#: text comes first, so the prompts of one text for different fractions share a long token prefix, which is
#: computed once (:func:`greedy_generate`).
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
    """Tokens of each text under ``tokenizer``, without special tokens. Returns int array of shape (n_texts,)."""
    enc = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    return np.array([len(ids) for ids in enc], dtype=int)


def load_tokenizer(model: str):
    """The tokenizer of a language model given by zoo name, local folder or Hugging Face id (no weights loaded)."""
    from transformers import AutoTokenizer

    from . import zoo

    if model in zoo.ZOO:
        return AutoTokenizer.from_pretrained(str(zoo.convert(model, progress=False)))
    return AutoTokenizer.from_pretrained(str(model))


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
        ``""`` where the summary was used, else why the row fell back to truncation (``"empty"``,
        ``"not shorter"``).
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


def _texts_hash(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode() + b"\x00")
    return h.hexdigest()[:16]


def summaries_path(model: str, revision: str, *, prompt: str, system: str, fraction: float,
                   texts: Sequence[str], decoding: dict) -> Path:
    """Cache file of one set of summaries; the name hashes every option that changes the output.

    Key: model name and revision, prompt, system turn, fraction, decoding options, the source texts in row
    order, and :data:`SUMMARY_FORMAT_VERSION`; under ``paths.cache_dir("summaries")``.
    """
    key = json.dumps([model, revision, prompt, system, float(fraction), decoding, _texts_hash(texts),
                      SUMMARY_FORMAT_VERSION], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)[-80:]
    return paths.cache_dir("summaries") / safe / f"n{len(texts)}-f{fraction:g}-{digest}.json"


def load_generator(model: str, *, device: str = "cpu", dtype: str = "float32"):
    """A causal language model for generation and its tokenizer (left padding): ``(module, tokenizer, revision)``.

    ``model`` is a zoo name (its converted folder, which loads with ``AutoModelForCausalLM``), a local folder
    or a Hugging Face id (e.g. ``"Qwen/Qwen3-8B"``, as in the paper). ``device="cuda"`` places the model with
    ``device_map="auto"``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from . import zoo
    from .models import resolve_identity

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in dtypes:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(dtypes)}")
    source = str(zoo.convert(model, progress=False)) if model in zoo.ZOO else str(model)
    revision = resolve_identity(model)["revision"]
    kwargs = {"dtype": dtypes[dtype]}
    if str(device).startswith("cuda"):
        kwargs["device_map"] = "auto" if device == "cuda" else device
    module = AutoModelForCausalLM.from_pretrained(source, **kwargs).eval()
    if "device_map" not in kwargs:
        module.to(device)
    tok = AutoTokenizer.from_pretrained(source)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return module, tok, revision


def _render(tok, system: str, user: str) -> str:
    if getattr(tok, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        # enable_thinking=False: Qwen3 answers directly; templates without the variable ignore it.
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    return (system + "\n\n" if system else "") + user + "\n"


def max_new_tokens_for(n_words: int, *, tokens_per_word: float = 1.5, slack: int = 4) -> int:
    """Generation budget for a target of ``n_words`` words: ``ceil(tokens_per_word * n_words) + slack``."""
    return int(math.ceil(tokens_per_word * n_words)) + int(slack)


@contextmanager
def torch_threads(n: int | None):
    """Run the body with ``torch.set_num_threads(n)`` and restore the previous count afterwards (None: no change).

    Token-by-token decoding runs many small operations; on a shared CPU with other busy processes, one intra-op
    thread can be several times faster than two. The setting is scoped, never left behind.
    """
    import torch

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


def _common_prefix(seqs: list[list[int]]) -> int:
    n = min(len(q) for q in seqs)
    for i in range(n):
        if any(q[i] != seqs[0][i] for q in seqs[1:]):
            return i
    return n


def _left_pad(seqs: list[list[int]], pad_id: int, device):
    import torch

    width = max(len(q) for q in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, q in enumerate(seqs):
        if q:
            ids[i, width - len(q):] = torch.tensor(q, dtype=torch.long)
            mask[i, width - len(q):] = 1
    return ids.to(device), mask.to(device)


def greedy_generate(module, tok, prompts: Sequence[Sequence[str]], budgets: Sequence[Sequence[int]], *,
                    batch_size: int = 16, add_special_tokens: bool = False, progress: bool = False) -> list[list[str]]:
    """Greedy continuations of several prompts per row, sharing each row's common token prefix.

    Every prompt is tokenized whole; the longest token prefix shared by a row's prompts (e.g. the instruction
    and the source text, when only a target length differs at the end) runs through the model once, its
    key-value cache is repeated for each prompt of the row, and the rest of each prompt and the decoding
    follow. Prompts are left-padded in both blocks, with explicit position ids from the attention mask, so
    each sequence sees exactly its own tokens at their own positions. Decoding is greedy (argmax) and stops
    per sequence at an end-of-sequence token or after its own budget of new tokens; finished sequences leave
    the batch.

    Parameters
    ----------
    module : transformers causal LM
        Must accept ``attention_mask``, ``position_ids``, ``cache`` (or ``past_key_values`` in older
        transformers) and ``logits_to_keep``.
    tok : tokenizer
        With ``pad_token_id`` and ``eos_token_id``.
    prompts : sequence of sequences of str, shape (n_rows, n_per_row)
    budgets : sequence of sequences of int >= 1, same shape
        Maximum new tokens of each prompt.
    batch_size : int >= 1
        Rows whose prefixes run together (the decoding batch holds up to ``batch_size * n_per_row`` sequences).
    add_special_tokens : bool
        Passed to the tokenizer (False for prompts rendered by a chat template, which hold their own).

    Returns
    -------
    list of lists of str, shape (n_rows, n_per_row)
        The decoded continuations without special tokens.

    Notes
    -----
    Equal, token for token up to floating-point ties, to ``module.generate(do_sample=False,
    max_new_tokens=budget)`` on each prompt alone (tested); the shared prefix saves its recomputation for every
    prompt but the first of a row.
    """
    import torch
    from transformers import DynamicCache

    n_per = {len(p) for p in prompts}
    if len(n_per) != 1 or [len(b) for b in budgets] != [len(p) for p in prompts]:
        raise ValueError("prompts and budgets must be rectangular and of the same shape")
    (F,) = n_per
    eos = tok.eos_token_id
    eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
    gen_eos = getattr(getattr(module, "generation_config", None), "eos_token_id", None)
    eos_ids |= set(gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]) - {None}
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else next(iter(eos_ids))
    device = next(module.parameters()).device
    # transformers >= 5.2x names the cache argument ``cache`` (``past_key_values`` is deprecated there)
    cache_kw = "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"
    out: list[list[str]] = []
    for s in range(0, len(prompts), batch_size):
        rows = prompts[s : s + batch_size]
        ids = [[tok(p, add_special_tokens=add_special_tokens)["input_ids"] for p in row] for row in rows]
        cut = [min(_common_prefix(seqs), min(len(q) for q in seqs) - 1) for seqs in ids]
        pre_ids, pre_mask = _left_pad([seqs[0][:c] for seqs, c in zip(ids, cut)], pad_id, device)
        suf_ids, suf_mask = _left_pad([q[c:] for seqs, c in zip(ids, cut) for q in seqs], pad_id, device)
        cache = DynamicCache()
        with torch.inference_mode():
            if pre_ids.shape[1] > 0 and bool(pre_mask.any()):
                pos = (pre_mask.cumsum(-1) - 1).clamp_min(0)
                module(input_ids=pre_ids, attention_mask=pre_mask, position_ids=pos, use_cache=True,
                       logits_to_keep=1, **{cache_kw: cache})
                cache.batch_repeat_interleave(F)
                mask = torch.cat([pre_mask.repeat_interleave(F, 0), suf_mask], dim=1)
            else:
                mask = suf_mask
            pos = (mask.cumsum(-1) - 1).clamp_min(0)[:, -suf_ids.shape[1]:]
            logits = module(input_ids=suf_ids, attention_mask=mask, position_ids=pos, use_cache=True,
                            logits_to_keep=1, **{cache_kw: cache}).logits[:, -1]
            budget = torch.tensor([b for row in budgets[s : s + batch_size] for b in row], device=device)
            active = torch.arange(len(budget), device=device)
            new_tokens: list[list[int]] = [[] for _ in range(len(budget))]
            last = pos[:, -1]
            while True:
                nxt = logits.argmax(-1)
                done = torch.zeros_like(active, dtype=torch.bool)
                for a, (seq, t) in enumerate(zip(active.tolist(), nxt.tolist())):
                    if t in eos_ids:
                        done[a] = True
                    else:
                        new_tokens[seq].append(t)
                        done[a] = len(new_tokens[seq]) >= int(budget[seq])
                if bool(done.all()):
                    break
                if bool(done.any()):
                    keep = (~done).nonzero().squeeze(1)
                    cache.batch_select_indices(keep)
                    active, nxt, mask, last = active[keep], nxt[keep], mask[keep], last[keep]
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                last = last + 1
                logits = module(input_ids=nxt[:, None], attention_mask=mask, position_ids=last[:, None],
                                use_cache=True, logits_to_keep=1, **{cache_kw: cache}).logits[:, -1]
        texts = tok.batch_decode(new_tokens, skip_special_tokens=True)
        out += [texts[i * F:(i + 1) * F] for i in range(len(rows))]
        if progress:
            print(f"[summaries] {min(s + batch_size, len(prompts))}/{len(prompts)} texts", flush=True)
    return out


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


def _versions() -> dict:
    import torch
    import transformers

    from . import __version__

    return {"prh_lib": __version__, "torch": torch.__version__, "transformers": transformers.__version__}


def summarize_texts(texts: Sequence[str], *, fractions: Sequence[float] = DEFAULT_FRACTIONS,
                    model: str = "smollm2-135m", prompt: str = DEFAULT_PROMPT, system: str = DEFAULT_SYSTEM,
                    device: str = "cpu", dtype: str = "float32", batch_size: int = 16, tokens_per_word: float = 1.5,
                    cache: bool = True, progress: bool = False, generator=None,
                    num_threads: int | None = None) -> dict[float, Summaries]:
    """Shorten each text to about each fraction of its words with a causal language model (cached per fraction).

    Each (text, fraction) gets the prompt ``prompt.format(text=text, n_words=target_words(text, fraction))`` in
    the model's chat template (with ``system``; a model without one gets the plain prompt), greedy decoding
    (deterministic) with at most :func:`max_new_tokens_for` ``(n_words)`` new tokens (:func:`greedy_generate`,
    which runs the part of a text's prompts shared by all fractions once). Each generation is cleaned
    (:func:`clean_generation`); degenerate rows (empty, or not shorter than the source in words) fall back to
    :func:`truncate_text` and are recorded in :attr:`Summaries.fallback` (:func:`finalize_summaries`).

    Parameters
    ----------
    texts : sequence of str
        Source texts (the offline notebook uses the five COCO captions of each image, concatenated).
    fractions : sequence of float in (0, 1)
        Target lengths as fractions of each source's words.
    model : str
        Zoo name, local folder or Hugging Face id of a causal LM (the paper: ``"Qwen/Qwen3-8B"``).
    prompt : str
        Template with ``{text}`` and ``{n_words}`` fields (text first, so prompts share a prefix).
    system : str
        System turn ("" for none).
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
        An already loaded :func:`load_generator` result, or a function called only when some fraction is not
        cached (so that cached summaries never load the model).
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
    from .models import resolve_identity

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
    revision = generator[2] if isinstance(generator, tuple) else resolve_identity(model)["revision"]
    where = {f: summaries_path(model, revision, prompt=prompt, system=system, fraction=f, texts=texts,
                               decoding=decoding) for f in fractions}
    out = {f: _load_cached(where[f]) for f in fractions if cache and where[f].is_file()}
    todo = [f for f in fractions if f not in out]
    if not todo:
        return out
    import time

    if callable(generator):
        generator = generator()
    module, tok, revision = generator if generator is not None else load_generator(model, device=device, dtype=dtype)
    chat = bool(getattr(tok, "chat_template", None))
    prompts = [[_render(tok, system, prompt.format(n_words=targets[f][i], text=t)) for f in todo]
               for i, t in enumerate(texts)]
    start = time.perf_counter()
    with torch_threads(num_threads):
        raw = greedy_generate(module, tok, prompts, [[budgets[f][i] for f in todo] for i in range(len(texts))],
                              batch_size=int(batch_size), add_special_tokens=not chat, progress=progress)
    seconds = round(time.perf_counter() - start, 2)
    for j, f in enumerate(todo):
        gen = [r[j] for r in raw]
        final, fallback = finalize_summaries(texts, gen, f)
        meta = {"decoding": decoding, "target_words": targets[f], "max_new_tokens": budgets[f],
                "device": str(device), "dtype": dtype, "seconds_all_fractions": seconds, "generated_with": todo,
                "versions": _versions(), "source_texts_sha256": _texts_hash(texts), "format": SUMMARY_FORMAT_VERSION}
        out[f] = Summaries(tuple(final), tuple(gen), tuple(fallback), f, model, revision, prompt, system,
                           where[f] if cache else None, meta)
        if cache:
            doc = {"model": model, "revision": revision, "prompt": prompt, "system": system, "fraction": f,
                   "texts": final, "raw": gen, "fallback": fallback, "sources": texts, "meta": meta}
            with paths.atomic_path(where[f]) as tmp:
                tmp.write_text(json.dumps(doc, indent=1))
    return {f: out[f] for f in fractions}


# --------------------------------------------------------------------------------------------------------
# the two controls


def detail_variants(dataset, *, n: int | None = None, seed: int = 0, max_captions: int = 5,
                    fractions: Sequence[float] = DEFAULT_FRACTIONS, summary_model: str | None = "smollm2-135m",
                    summary_rows: Sequence[int] | None = None, **summary_options) -> tuple[dict, dict]:
    """The caption variants of both controls, as :class:`~prh_lib.data.Pairs` over the same images.

    Parameters
    ----------
    dataset : ImageCaptionDataset
    n, seed
        Pairs as in :func:`prh_lib.data.sample_pairs`.
    max_captions : int
        "More detail": 1 to ``max_captions`` captions concatenated; the "less detail" source is the
        concatenation of ``max_captions`` captions.
    fractions : sequence of float in (0, 1)
        Target lengths of the "less detail" control.
    summary_model : str or None
        Generator of the summaries (None: truncation only).
    summary_rows : sequence of int, optional
        Rows of the pairs used by the "less detail" control (default all); summaries cost a generation each.
        When given, the "more detail" variants are repeated on these rows (control ``"more detail (subset)"``),
        so that all controls can also be compared on the same images.
    **summary_options
        Passed to :func:`summarize_texts` (``device``, ``batch_size``, ``prompt``, ...).

    Returns
    -------
    variants : dict of str to dict
        Name -> ``{"control", "level", "pairs"}``: ``"more detail"`` with ``level`` = captions concatenated,
        ``"truncation"`` and ``"summary"`` with ``level`` = fraction (1.0 = the full source).
    summaries : dict of float to Summaries
        The summaries per fraction (with their fallback counts).
    """
    from . import data

    variants: dict[str, dict] = {}
    for j in range(1, max_captions + 1):
        p = data.sample_pairs(dataset, n=n, seed=seed, caption_policy="concat", n_captions=j)
        variants[f"concat-{j}"] = {"control": "more detail", "level": float(j), "pairs": p}
    source = variants[f"concat-{max_captions}"]["pairs"]
    if summary_rows is not None:
        source = source.subset(summary_rows)
        for j in range(1, max_captions + 1):  # the "more detail" texts on the same images as "less detail"
            variants[f"concat-{j} (subset)"] = {"control": "more detail (subset)", "level": float(j),
                                                "pairs": variants[f"concat-{j}"]["pairs"].subset(summary_rows)}
    for control in ("truncation", "summary"):
        variants[f"{control}-1"] = {"control": control, "level": 1.0, "pairs": source}
    for f in fractions:
        variants[f"truncation-{f:g}"] = {"control": "truncation", "level": float(f),
                                         "pairs": source.with_texts(truncate_texts(source.texts, f),
                                                                    policy=f"truncate-{f:g}")}
    summaries: dict[float, Summaries] = {}
    if summary_model is not None:
        summaries = summarize_texts(source.texts, fractions=fractions, model=summary_model,
                                    generator=_lazy_generator(summary_model, summary_options), **summary_options)
        for f, s in summaries.items():
            variants[f"summary-{f:g}"] = {"control": "summary", "level": float(f),
                                          "pairs": source.with_texts(s.texts, policy=f"summary-{f:g}")}
    return variants, summaries


def _lazy_generator(model: str, options: dict):
    """A zero-argument callable that loads the generator on first use and then returns the same one."""
    held = []

    def get():
        if not held:
            held.append(load_generator(model, device=options.get("device", "cpu"),
                                       dtype=options.get("dtype", "float32")))
        return held[0]

    return get


def detail_alignment(vision: dict, variants: dict, language_models: Sequence[str], *, k: int = 10,
                     clip_q: float | None = 0.95, tokenizers: dict | None = None, num_threads: int | None = None,
                     **feature_options) -> pd.DataFrame:
    """Mutual k-NN of a vision model with each language model on every caption variant.

    For each language model and variant, features of the variant's texts are extracted (cached; the cache key
    includes the texts) or, when every (sample, text) of the variant occurs in a variant extracted before, taken
    from its rows (features are computed text by text, so this is the same); the vision features are restricted
    to the variant's rows, both are clipped per layer (:func:`prh_lib.analysis.clip_features`, on those rows)
    and all layer pairs are scored.

    Parameters
    ----------
    vision : dict of str to LayerFeatures
        Vision model name -> features on a superset of every variant's images.
    variants : dict of str to dict
        From :func:`detail_variants`.
    language_models : sequence of str
    k : int
        Neighbours (the paper: 10).
    clip_q : float or None
        Outlier clipping quantile (None: off).
    tokenizers : dict of str to tokenizer, optional
        Tokenizer per language model for the token counts (default :func:`load_tokenizer`).
    num_threads : int, optional
        Torch intra-op threads while extracting features (:func:`torch_threads`, restored afterwards).
    **feature_options
        Passed to :func:`prh_lib.extract.get_features` (``device``, ``dtype``, ``batch_size``, ``progress``).

    Returns
    -------
    DataFrame
        One row per (vision model, language model, variant): ``vision model``, ``language model``, ``variant``,
        ``control``, ``level``, ``n``,
        ``words`` and ``tokens`` (mean per text), ``peak`` (max over layer pairs), ``peak layers``, ``final``,
        ``chance`` (``k/(n-1)``), ``corrected peak`` and ``corrected final``
        (:func:`prh_lib.ablation.chance_corrected`).

    References
    ----------
    Herbst et al., Section 3.2, Appendices F and H.
    """
    from . import analysis, extract
    from .ablation import chance_corrected

    tokenizers = dict(tokenizers or {})
    loaded: dict = {}

    def language_features(lm, pairs):
        # Load each language model at most once, and only if some variant is not cached yet.
        dtype = feature_options.get("dtype", "float32")
        if extract.features_path(lm, pairs, dtype=dtype, max_length=feature_options.get("max_length")).is_file():
            return extract.get_features(lm, pairs, **feature_options)
        if lm not in loaded:
            from .models import load_model

            if dtype not in extract.DTYPES:
                raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(extract.DTYPES)}")
            loaded[lm] = load_model(lm, device=feature_options.get("device", "cpu"), dtype=extract.DTYPES[dtype])
        with torch_threads(num_threads):
            return extract.get_features(loaded[lm], pairs, **feature_options)

    def reuse_rows(done, pairs):
        # Features are computed per text, so a variant whose (sample, text) pairs all occur in an extracted
        # variant takes those rows instead of a new extraction.
        for feats, text_of in done:
            if all(text_of.get(sid) == t for sid, t in zip(pairs.sample_ids, pairs.texts)):
                row_of = {sid: i for i, sid in enumerate(feats.sample_ids)}
                return feats.rows([row_of[sid] for sid in pairs.sample_ids])
        return None

    rows = []
    for lm in language_models:
        tok = tokenizers.get(lm) or load_tokenizer(lm)
        done: list = []
        for name, v in variants.items():
            pairs = v["pairs"]
            raw = reuse_rows(done, pairs)
            if raw is None:
                raw = language_features(lm, pairs)
                done.append((raw, dict(zip(pairs.sample_ids, pairs.texts))))
            lang = analysis.clip_features(raw, q=clip_q)
            n_tokens = float(np.mean(token_counts(pairs.texts, tok)))
            for vname, vfeat in vision.items():
                row_of = {sid: i for i, sid in enumerate(vfeat.sample_ids)}
                missing = [s for s in pairs.sample_ids if s not in row_of]
                if missing:
                    raise ValueError(f"variant {name!r} has {len(missing)} samples without {vname} features, "
                                     f"e.g. {missing[:3]}")
                vis = analysis.clip_features(vfeat.rows([row_of[s] for s in pairs.sample_ids]), q=clip_q)
                m = analysis.layerwise_alignment(vis, lang, k=k)
                i, j, peak = m.peak
                n = len(pairs)
                rows.append({"vision model": vname, "language model": lm, "variant": name, "control": v["control"],
                             "level": v["level"], "n": n,
                             "words": float(np.mean([word_count(t) for t in pairs.texts])), "tokens": n_tokens,
                             "peak": peak, "peak layers": f"{m.x_labels[i]} × {m.y_labels[j]}", "final": m.final,
                             "chance": k / (n - 1), "corrected peak": chance_corrected(peak, n, k),
                             "corrected final": chance_corrected(m.final, n, k)})
    return pd.DataFrame(rows)


def plot_detail(table: pd.DataFrame, *, score: str = "peak", panel_size: tuple[float, float] = (5.2, 3.8)):
    """Alignment against mean caption length in tokens, one line per control, one panel per model pair.

    Parameters
    ----------
    table : DataFrame
        From :func:`detail_alignment`.
    score : str
        Column to plot (``"peak"``, ``"final"``, ``"corrected peak"``, ...). For raw scores each control's chance
        level ``k/(n-1)`` is drawn as a dotted line in its colour (controls on fewer pairs have a higher one).

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    from . import plots

    if score not in table.columns:
        raise ValueError(f"no column {score!r}; have {list(table.columns)}")
    panels = list(dict.fromkeys(zip(table["vision model"], table["language model"])))
    ncols = min(len(panels), 2)
    nrows = int(np.ceil(len(panels) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size[0] * ncols, panel_size[1] * nrows), squeeze=False)
    raw = not score.startswith("corrected")
    order = list(dict.fromkeys(table["control"]))  # the same colour for a control in every panel
    for ax, (vm, lm) in zip(axes.flat, panels):
        sub = table[(table["vision model"] == vm) & (table["language model"] == lm)].sort_values("tokens")
        controls = [c for c in order if c in set(sub["control"])]
        xs = {c: sub.loc[sub["control"] == c, "tokens"].to_numpy() for c in controls}
        ys = {c: sub.loc[sub["control"] == c, score].to_numpy() for c in controls}
        plots.line_plot(xs, ys, ax=ax, xlabel=f"mean caption length (tokens, {lm})",
                        ylabel=f"mutual k-NN ({score})", title=f"{vm} × {lm}", chance=None if raw else 0.0)
        if raw:
            colors = {line.get_label(): line.get_color() for line in ax.get_lines()}
            for c in controls:
                ch = float(sub.loc[sub["control"] == c, "chance"].iloc[0])
                ax.axhline(ch, color=colors.get(c, "grey"), linestyle=":", linewidth=1.2)
            ax.plot([], [], color="grey", linestyle=":", label="chance k/(n-1)")
            ax.legend(fontsize=7)
        ax.title.set_fontsize(9)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def summary_report(summaries: dict, sources: Sequence[str]) -> pd.DataFrame:
    """How the summaries came out, per fraction: lengths reached, and fallbacks to truncation with reasons.

    Parameters
    ----------
    summaries : dict of float to Summaries
        From :func:`detail_variants`.
    sources : sequence of str
        The source texts (same rows as the summaries).

    Returns
    -------
    DataFrame
        Indexed by ``fraction``: ``rows``, ``source words``, ``target words``, ``summary words`` (means),
        ``achieved fraction`` (mean of summary words / source words), ``fallbacks`` (count) and ``reasons``,
        ``model``, ``cached file``.
    """
    src_words = np.array([word_count(t) for t in sources], dtype=float)
    rows = []
    for f, s in sorted(summaries.items()):
        if len(s.texts) != len(sources):
            raise ValueError(f"summaries at fraction {f} have {len(s.texts)} rows, sources {len(sources)}")
        words = np.array([word_count(t) for t in s.texts], dtype=float)
        rows.append({"fraction": f, "rows": len(s.texts), "source words": src_words.mean(),
                     "target words": float(np.mean([target_words(t, f) for t in sources])),
                     "summary words": words.mean(), "achieved fraction": float(np.mean(words / src_words)),
                     "fallbacks": s.n_fallback, "reasons": ", ".join(f"{k}: {v}" for k, v in s.fallback_counts.items()),
                     "model": s.model, "cached file": s.path.name if s.path else ""})
    return pd.DataFrame(rows).set_index("fraction")


def detail_summary(table: pd.DataFrame, *, score: str = "peak") -> pd.DataFrame:
    """Per (vision model, language model, control): the score at the shortest and the longest captions and the
    rank correlation of score with caption length.

    Returns
    -------
    DataFrame
        Columns ``n``, ``tokens short``/``long``, ``{score} short``/``long``, ``corrected short``/``long``,
        ``spearman`` (Spearman rank correlation of score and tokens over the control's levels).
    """
    from scipy.stats import spearmanr

    corrected = "corrected " + score if not score.startswith("corrected") else score
    rows = []
    for (vm, lm, control), sub in table.groupby(["vision model", "language model", "control"], sort=False):
        sub = sub.drop_duplicates("level").sort_values("tokens")
        lo, hi = sub.iloc[0], sub.iloc[-1]
        rho = float(spearmanr(sub["tokens"], sub[score]).statistic) if len(sub) > 2 else np.nan
        rows.append({"vision model": vm, "language model": lm, "control": control, "n": int(lo["n"]),
                     "tokens short": lo["tokens"], "tokens long": hi["tokens"],
                     f"{score} short": lo[score], f"{score} long": hi[score],
                     "corrected short": lo[corrected], "corrected long": hi[corrected], "spearman": rho})
    return pd.DataFrame(rows).set_index(["vision model", "language model", "control"])


def describe(summary: pd.DataFrame, *, score: str = "peak") -> str:
    """A Markdown line per row of :func:`detail_summary`, in figures."""
    lines = []
    for (vm, lm, control), r in summary.iterrows():
        lines.append(f"- **{vm} × {lm}**, {control} (N = {int(r['n'])}): {r['tokens short']:.0f} → "
                     f"{r['tokens long']:.0f} tokens, {score} {r[f'{score} short']:.3f} → {r[f'{score} long']:.3f} "
                     f"(chance-corrected "
                     f"{r['corrected short']:.3f} → {r['corrected long']:.3f}; Spearman ρ = {r['spearman']:.2f}).")
    return "\n".join(lines)
