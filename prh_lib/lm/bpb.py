"""Bits per byte of a causal language model on a list of texts: the capability axis of Huh et al. (2024).

:func:`bits_per_byte` needs no benchmark download; :func:`study_heldout` picks the texts (captions no draw aligns,
else the aligned captions); :func:`cached_bits_per_byte` caches the result under ``cache_dir("bpb")``.

References
----------
Huh, Cheung, Wang, Isola (2024). "The Platonic Representation Hypothesis", ICML, Sec. 3 (alignment versus
language-model performance measured in bits per byte). Gao et al. (2020), "The Pile", Sec. 4.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from prh_lib import __version__, paths
from prh_lib.progress import bar as progress_bar
from prh_lib.validation import check_texts

#: Bump when a change to :func:`bits_per_byte` changes its numbers; part of every cache key.
BPB_FORMAT_VERSION = 2

#: The fixed text every caption is scored after, by every model (after its BOS token where it has one), so every token
#: of every caption is scored under the same conditioning: models without a BOS token (Qwen) lose no first token.
BPB_PREFIX = "Caption:\n"


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
    context : {"prefix", "bos", "first-token"}
        ``"prefix"`` (the default): every token of the text scored after the fixed :data:`BPB_PREFIX` (itself
        after the BOS token where the tokenizer has one); ``"bos"``: every token scored, the first conditioned on
        the BOS token alone; ``"first-token"``: the first token is context only and its bytes are not counted.
    n_correct : int or None
        Scored tokens whose top-1 prediction (argmax of the logits) is the actual next token; None for a
        result cached before it was recorded.
    """

    bpb: float
    bits: np.ndarray
    n_bytes: np.ndarray
    n_tokens: int
    context: str
    n_correct: int | None = None

    @property
    def accuracy(self) -> float:
        """Next-token accuracy: ``n_correct / n_tokens`` in [0, 1] (NaN when not recorded).

        Tokenizer-dependent (a larger vocabulary makes each token longer and harder to guess), unlike :attr:`bpb`."""
        if self.n_correct is None or self.n_tokens == 0:
            return float("nan")
        return self.n_correct / self.n_tokens


def _tokenize_with_prefix(tokenizer, texts: list[str], prefix: str):
    """Token ids of ``[BOS] + prefix + text`` (BOS where the tokenizer has one), each text's first token and bytes.

    Raises
    ------
    ValueError
        If a token spans the end of the prefix and the start of the text (the prefix must end on a token
        boundary for this tokenizer; a newline does for every tokenizer of the zoo).
    """
    enc = tokenizer([prefix + t for t in texts], add_special_tokens=False, return_offsets_mapping=True)
    bos = getattr(tokenizer, "bos_token_id", None)
    ids, starts, n_bytes = [], [], []
    cut = len(prefix)
    for i, text in enumerate(texts):
        offsets = enc["offset_mapping"][i]
        first = next((j for j, (a, b) in enumerate(offsets) if b > cut), None)
        if first is None or offsets[first][0] < cut:
            raise ValueError(f"text {i} ({text!r}): a token spans the end of the prefix {prefix!r} and the text; "
                             "choose a prefix that ends on a token boundary")
        toks = list(enc["input_ids"][i])
        lead = [bos] if bos is not None else []
        ids.append(lead + toks)
        starts.append(len(lead) + first)
        n_bytes.append(len(text.encode("utf-8")))
    return ids, np.asarray(starts, dtype=np.int64), np.asarray(n_bytes, dtype=np.int64)


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
                  use_bos: bool | None = None, prefix: str | None = BPB_PREFIX, progress: bool = False) -> BitsPerByte:
    """Bits per UTF-8 byte of a causal language model on ``texts``.

    By default every model is conditioned the same way: each text is scored after the fixed text ``prefix``
    (:data:`BPB_PREFIX`, after the tokenizer's BOS token where it has one) and all its tokens and bytes count. With
    ``prefix=None`` each text is tokenised alone without special tokens: with a BOS token (``use_bos``) the sequence is
    ``[BOS] + tokens`` and all tokens and bytes count; without one the first token is context only (tokens 2..T scored,
    bytes after the first token, from the tokenizer's offsets). Bits and bytes are each summed over the corpus, then
    divided. Batches are right-padded and masked, so the result does not depend on ``batch_size`` (to float round-off).

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
        With ``prefix=None`` only. Default: True when the tokenizer has a BOS token.
    prefix : str or None, default :data:`BPB_PREFIX`
        The fixed context of every text (None: the BOS / first-token conventions).
    progress : bool, default=False
        Show a progress bar.

    Returns
    -------
    BitsPerByte
        ``bpb`` >= 0 (a uniform model over V tokens gives about ``log2(V) * tokens / bytes``), and the
        top-1 next-token accuracy of the same scored tokens (:attr:`BitsPerByte.accuracy`).

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
    texts = check_texts(texts, why="bits per byte is undefined for them")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    has_bos = getattr(tokenizer, "bos_token_id", None) is not None
    if prefix is not None:
        if use_bos is not None:
            raise ValueError("use_bos applies with prefix=None only (with a prefix, BOS is used where it exists)")
        ids, starts, n_bytes = _tokenize_with_prefix(tokenizer, texts, str(prefix))
        context = "prefix"
    else:
        use_bos = has_bos if use_bos is None else bool(use_bos)
        if use_bos and not has_bos:
            raise ValueError("use_bos=True but the tokenizer has no BOS token")
        ids, n_bytes = _tokenize_for_bpb(tokenizer, texts, use_bos)
        starts = np.ones(len(ids), dtype=np.int64)  # position 0 is context (BOS or the first token)
        context = "bos" if use_bos else "first-token"
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(lm.parameters()).device
    order = np.argsort([len(t) for t in ids], kind="stable")
    bits = np.zeros(len(texts), dtype=np.float64)
    n_tokens = n_correct = 0
    bar = progress_bar(total=len(texts), desc="bits per byte", unit="text", show=progress)
    for start in range(0, len(texts), batch_size):
        bar.update(min(batch_size, len(texts) - start))
        rows = order[start:start + batch_size]
        width = max(len(ids[i]) for i in rows)
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        target_mask = torch.zeros((len(rows), width), dtype=torch.bool)  # the text's tokens, scored
        for r, i in enumerate(rows):
            input_ids[r, :len(ids[i])] = torch.as_tensor(ids[i])
            mask[r, :len(ids[i])] = 1
            target_mask[r, int(starts[i]):len(ids[i])] = True
        with torch.inference_mode():
            logits = lm(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits
        # position j predicts token j + 1; score targets whose own position is real
        logits = logits[:, :-1].float()
        target = input_ids[:, 1:].to(logits.device)
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")  # nats
        scored = target_mask[:, 1:].to(logits.device)
        per_text = nll.masked_fill(~scored, 0.0).sum(dim=1).double().cpu().numpy() / math.log(2.0)
        bits[rows] = per_text
        n_tokens += int(scored.sum())
        n_correct += int(((logits.argmax(-1) == target) & scored).sum())
    bar.close()
    return BitsPerByte(float(bits.sum() / n_bytes.sum()), bits, n_bytes, n_tokens, context, n_correct)


def study_heldout(datasets, draws, *, per_image: int = 1, max_texts: int | None = None) -> tuple[list[str], str]:
    """Captions that no draw of the study aligns: held-out text for bits per byte across datasets and draws.

    A caption of an image is *used* when it is in the text of that image in any draw of any dataset on the same source
    (so caption draws, concatenations and seeded subsets are all left out). The others are held out: ``per_image`` per
    image, in each dataset's order, at most ``max_texts`` in all. When every caption is used, the first draw's own texts
    are returned with ``"aligned"`` (as Huh et al. 2024 measure it), and the caller should say so.

    Parameters
    ----------
    datasets : sequence of ImageCaptionDataset
        The study's datasets (duplicates by name are read once).
    draws : sequence of prh_lib.data.Draw
        Every draw of the study (:func:`prh_lib.data.study_draws`).
    per_image : int >= 1
    max_texts : int >= 1, optional

    Returns
    -------
    texts : list of str
    used : {"heldout", "aligned"}

    Raises
    ------
    ValueError
        If ``per_image`` or ``max_texts`` is below 1, or ``draws`` is empty.
    """
    if not isinstance(per_image, int) or per_image < 1:
        raise ValueError(f"per_image must be an int >= 1, got {per_image!r}")
    if max_texts is not None and (not isinstance(max_texts, int) or max_texts < 1):
        raise ValueError(f"max_texts must be an int >= 1 or None, got {max_texts!r}")
    draws = list(draws)
    if not draws:
        raise ValueError("no draws given")
    aligned: dict[tuple[str, str], list[str]] = {}
    for d in draws:
        for sid, text in zip(d.pairs.sample_ids, d.pairs.texts):
            aligned.setdefault((d.pairs.dataset, sid), []).append(text)
    out: list[str] = []
    seen = set()
    for ds in datasets:
        if ds.name in seen:
            continue
        seen.add(ds.name)
        for sid, caps in zip(ds.sample_ids, ds.captions):
            texts = aligned.get((ds.name, sid), [])
            spare = [c for c in caps if c.strip() and not any(c in t for t in texts)]
            out.extend(spare[:per_image])
    if not out:
        texts = list(draws[0].pairs.texts)
        return (texts if max_texts is None else texts[:max_texts]), "aligned"
    return (out if max_texts is None else out[:max_texts]), "heldout"


def bpb_cache_path(name: str, revision: str, dtype: str, texts: Sequence[str]) -> Path:
    """Cache file of one model's (name, revision, dtype) bits per byte on ``texts`` (in order); frozen by
    ``tests/test_cache_keys.py``."""
    key = [name, revision, dtype, paths.digest_texts(texts, separator=b"\x01", length=64), BPB_FORMAT_VERSION]
    return paths.cache_file("bpb", name, key, prefix=f"n{len(texts)}", suffix=".json")


def cached_bits_per_byte(path: Path, compute: Callable[[], BitsPerByte]) -> BitsPerByte:
    """The result cached at ``path``, else ``compute()``, written there atomically. A file without ``n_correct``
    (written before next-token accuracy was recorded) is recomputed, so both measures come from the same pass."""
    d = json.loads(path.read_text()) if path.is_file() else None
    if d is not None and d.get("n_correct") is not None:
        return BitsPerByte(d["bpb"], np.asarray(d["bits"]), np.asarray(d["n_bytes"], dtype=np.int64),
                           d["n_tokens"], d["context"], d.get("n_correct"))
    res = compute()
    with paths.atomic_path(path) as tmp:
        tmp.write_text(json.dumps({"bpb": res.bpb, "bits": res.bits.tolist(), "n_bytes": res.n_bytes.tolist(),
                                   "n_tokens": res.n_tokens, "context": res.context, "n_correct": res.n_correct,
                                   "prh_lib": __version__}))
    return res
