"""Forward passes and pooling: one vector per sample and layer from a model's hidden states.

:mod:`prh_lib.extract` (the public entry point, with the feature cache) calls these:

- :func:`mean_pool` (language models: mean over real tokens, all but the first or the last), :func:`cls_pool` (ViTs:
  the CLS token), :func:`gap_pool` (CNNs: global average pool) and :func:`stack_layers` (layers of different widths);
- the text pass (length-sorted batches, positions from the attention mask so padding never shifts them),
  the text pass of a causal LM that shares token prefixes between texts (:func:`prefix_servers`), the
  chunked text pass of two-tower text towers, and the image pass.

References
----------
Huh et al. (2024), App. A (mean-pooled language-model hidden states, CLS / pooled vision features);
Herbst et al., Section 2 (features of every layer).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Sequence

import numpy as np
import torch

from prh_lib import models
from prh_lib.data.errors import DataError
from prh_lib.data.pairs import Pairs
from prh_lib.progress import bar as progress_bar


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str = "mean") -> torch.Tensor:
    """Mean over real tokens: ``hidden`` (B, T, d), ``attention_mask`` (B, T) of 0/1 -> (B, d) float32.

    ``pooling`` (:data:`prh_lib.models.spec.TOKEN_POOLINGS`) picks the real tokens, under left or right padding:
    ``"mean"`` all, ``"mean-nofirst"`` all but the first (a BOS token where the tokenizer adds one), ``"last"`` the
    last. Padded positions are excluded with ``masked_fill`` (not multiplication), so non-finite values that
    some attention kernels leave at fully masked positions cannot leak into the mean.
    """
    mask = attention_mask.to(torch.bool)
    rank = mask.long().cumsum(-1)  # 1 at the first real token, the number of real tokens from the last one on
    mask = {"mean": mask, "mean-nofirst": mask & (rank > 1), "last": mask & (rank == rank[:, -1:])}[pooling][..., None]
    summed = hidden.float().masked_fill(~mask, 0.0).sum(dim=1)
    return summed / mask.sum(dim=1).clamp(min=1).float()


def cls_pool(hidden: torch.Tensor) -> torch.Tensor:
    """CLS token (position 0): ``hidden`` (B, T, d) -> (B, d) float32."""
    return hidden[:, 0].float()


def stack_layers(pooled: Sequence[torch.Tensor]) -> tuple[torch.Tensor, tuple[int, ...]]:
    """Stack per-layer ``(B, d_l)`` features into ``(L, B, max d_l)``, zero-padding narrower layers.

    Returns the stack and the true widths ``d_l``.
    """
    dims = tuple(int(p.shape[-1]) for p in pooled)
    width = max(dims)
    return torch.stack([torch.nn.functional.pad(p, (0, width - p.shape[-1])) for p in pooled]), dims


def gap_pool(fmap: torch.Tensor) -> torch.Tensor:
    """Global average pool: ``fmap`` (B, C, H, W) -> (B, C) float32 (or (B, T, C) token maps -> mean over T)."""
    if fmap.ndim == 4:
        return fmap.float().mean(dim=(2, 3))
    if fmap.ndim == 3:
        return fmap.float().mean(dim=1)
    raise ValueError(f"cannot global-average-pool a tensor of shape {tuple(fmap.shape)}")


def _accepts(module: torch.nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def prefix_servers(token_ids: Sequence[Sequence[int]]) -> np.ndarray:
    """For each token sequence, the index of a sequence that starts with it and is not itself a prefix of another.

    A causal language model's hidden state at position t depends only on tokens 0..t, so the mean-pooled
    features of a text whose tokens are a prefix of another text's (a caption and the same caption with more
    captions appended; a truncation of a longer text) can be read off the longer text's forward pass. In
    lexicographic order a prefix is immediately followed by a sequence that starts with it, if any does, so one
    sort and one backward sweep find every maximal sequence.

    Parameters
    ----------
    token_ids : sequence of sequences of int, length n

    Returns
    -------
    ndarray of int, shape (n,)
        ``server[i]``: the sequence whose forward pass serves sequence i (``i`` itself when none extends it).
        Identical sequences share one server.
    """
    seqs = [tuple(t) for t in token_ids]
    order = sorted(range(len(seqs)), key=lambda i: seqs[i])
    server = np.arange(len(seqs))
    for a, b in zip(reversed(order[:-1]), reversed(order[1:])):
        longer = seqs[b]
        if longer[:len(seqs[a])] == seqs[a]:
            server[a] = server[b]
    return server


def shares_prefixes(model) -> bool:
    """Whether ``model`` is a causal language model whose mean-pooled features of a token prefix can be read off
    a longer sequence's forward pass (:func:`prefix_servers`): decoder-only, mean pooling, no text chunking."""
    if (getattr(model, "modality", None) != "language" or getattr(model, "pooling", None) != "mean"
            or getattr(model, "text_chunking", None) is not None):
        return False
    config = getattr(model.module, "config", None)
    return config is not None and models.spec.is_causal_lm(config)


def prefix_tolerance(dtype: torch.dtype) -> float:
    """Largest relative difference between a prefix read off a longer text and the prefix run alone that is
    round-off: ``max(1e-3, 4 eps)`` of the weights' dtype (float32 1e-3, float16 3.9e-3, bfloat16 3.1e-2).

    Float32 round-off is ~1e-6 here, bfloat16 weights ~2e-3 (other GEMM shapes); a non-causal model order 1."""
    return max(1e-3, 4 * torch.finfo(dtype).eps)


def _extract_text(model, texts: Sequence[str], *, batch_size: int, padding_side: str, max_length: int | None,
                  progress: bool):
    """Each text's features pooled the model's way: ``(Tensor (n_layers, n_texts, dim), layer widths)``. Batches are
    sorted by length (little padding wasted) and positions count real tokens only, so padding never shifts them."""
    out, dims = _extract_text_shared(model, texts, batch_size=batch_size, padding_side=padding_side, check=False,
                                     max_length=max_length, progress=progress, share=False)
    return out[model.pooling], dims


@torch.inference_mode()
def _extract_text_shared(model, texts: Sequence[str], *, batch_size: int, max_length: int | None, progress: bool,
                         check: bool = True, poolings=None, share: bool = True, padding_side: str = "right"):
    """:func:`_extract_text` for a causal LM, running only the texts that no other text extends, pooled one or more ways.

    Each text is served by the forward pass of a text whose tokens start with its tokens
    (:func:`prefix_servers`): its features are read off the first ``len(text tokens)`` hidden states of that pass, per
    layer: their mean (a cumulative sum over positions), their mean without the first (``"mean-nofirst"``), the last
    (``"last"``). A text served by itself is pooled exactly as in :func:`_extract_text`. With ``check``, the first
    text served by a longer one is also run on its own, and a difference beyond round-off (:func:`prefix_tolerance`:
    the model is not causal after all) raises RuntimeError. ``share=False``: every text runs itself, padded on
    ``padding_side`` (:func:`_extract_text`).

    Parameters
    ----------
    poolings : mapping of str to sequence of int, optional
        The rows of ``texts`` to pool each way (:data:`prh_lib.models.spec.TOKEN_POOLINGS`); default every text,
        the model's pooling. One forward pass serves them all.

    Returns
    -------
    (dict of str to Tensor of shape (n_layers, n_rows, dim), tuple of int)
        Per pooling, its rows in the order given; equal to :func:`_extract_text` of a model pooling that way up to
        float32 round-off.
    """
    tok = model.tokenizer
    tok.padding_side = padding_side
    enc_kwargs = {"truncation": True, "max_length": max_length} if max_length is not None else {"truncation": False}
    ids = tok(list(texts), **enc_kwargs)["input_ids"]
    lengths = np.array([len(t) for t in ids])
    if lengths.min(initial=1) == 0:
        rows = np.flatnonzero(lengths == 0).tolist()
        raise DataError(f"{len(rows)} texts tokenize to no token for {model.name!r} (rows {rows[:5]}, e.g. "
                        f"{texts[rows[0]]!r:.60}); they would pool to all-zero feature rows")
    need = {p: np.asarray(r, dtype=np.int64) for p, r in (poolings or {model.pooling: range(len(texts))}).items()}
    slot = {p: np.full(len(texts), -1) for p in need}  # text -> its row in out[p]
    for p, r in need.items():
        slot[p][r] = np.arange(len(r))
    server = prefix_servers(ids) if share else np.arange(len(texts))
    runs = np.unique(server)
    served = {int(r): np.flatnonzero(server == r) for r in runs}
    runs = runs[np.argsort(lengths[runs], kind="stable")]  # length-sorted batches waste little padding
    pass_positions = _accepts(model.module, "position_ids")
    out, dims, checked = {}, None, not check
    bar = progress_bar(total=len(texts), desc=f"{model.name} (text{', shared prefixes' if share else ''})",
                       unit="caption", show=progress)
    for start in range(0, len(runs), batch_size):
        rows = runs[start : start + batch_size]
        enc = tok([texts[i] for i in rows], padding=True, return_tensors="pt", **enc_kwargs)
        inputs = {k: enc[k].to(model.device) for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}
        if pass_positions:  # positions count real tokens only, so left padding does not shift them
            inputs["position_ids"] = (inputs["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)
        layers = model.layer_outputs(**inputs)
        # per pooling, (text, batch row, tokens) of every text served by this batch that it pools
        who = [(int(i), b, int(lengths[i])) for b, r in enumerate(rows) for i in served[int(r)]]
        picks = {p: [w for w in who if slot[p][w[0]] >= 0] for p in need}
        full = [int(lengths[r]) for r in rows]
        pooled = {p: [] for p in need}
        for h in layers:  # pooled where it lives (a sharded model spreads layers over GPUs)
            mask = inputs["attention_mask"].to(h.device)
            real = None
            for p, sel in picks.items():
                if not sel:
                    continue
                if h.ndim == 2:  # (B, d): already pooled (the last-token "projection" of a decoder-embedding VLM)
                    pooled[p].append(h.float().cpu()[[b for _, b, _ in sel]])
                    continue
                own = mean_pool(h, mask, p).cpu()  # (B, d): each run text on its own tokens
                if all(n == full[b] for _, b, n in sel):
                    pooled[p].append(torch.stack([own[b] for _, b, _ in sel]))
                    continue
                real = h.float().masked_fill(~mask.bool().unsqueeze(-1), 0.0) if real is None else real
                if p == "last":
                    at = real.cpu()
                    part = [own[b] if n == full[b] else at[b, n - 1] for _, b, n in sel]
                elif p == "mean":
                    csum = real.cumsum(dim=1).cpu()
                    part = [own[b] if n == full[b] else csum[b, n - 1] / n for _, b, n in sel]
                else:  # "mean-nofirst": positions 1..n-1 (none for a one-token text: zeros, as mean_pool gives)
                    csum = real[:, 1:].cumsum(dim=1).cpu()
                    part = [own[b] if n == full[b] else (csum[b, n - 2] / (n - 1) if n > 1 else torch.zeros_like(own[b]))
                            for _, b, n in sel]
                pooled[p].append(torch.stack(part))
        for p, per_layer in pooled.items():
            if not per_layer:
                continue
            stacked, dims = stack_layers(per_layer)
            if p not in out:
                out[p] = torch.empty(len(layers), len(need[p]), stacked.shape[-1], dtype=torch.float32)
            out[p][:, torch.as_tensor(slot[p][[i for i, _, _ in picks[p]]])] = stacked
        if not checked:
            prefix = next(((p, i) for p, sel in picks.items() for i, b, n in sel if n < full[b]), None)
            if prefix is not None:
                p, i = prefix
                alone, _ = _extract_text(model if p == model.pooling else dataclasses.replace(model, pooling=p),
                                         [texts[i]], batch_size=1, padding_side="right", max_length=max_length,
                                         progress=None)  # None: no bar of its own
                mine = out[p][:, slot[p][i]]
                err = float((alone[:, 0] - mine).abs().max() / alone[:, 0].abs().max().clamp(min=1e-12))
                if err > prefix_tolerance(model.dtype):
                    raise RuntimeError(f"{model.name!r}: features of a token prefix read off a longer text differ "
                                       f"from the prefix run alone (relative error {err:.2g}); the model is not "
                                       "causal, so prefixes cannot be shared")
                checked = True
        bar.update(len(who))
    bar.close()
    return out, dims


@torch.inference_mode()
def _extract_text_chunked(model, texts: Sequence[str], *, batch_size: int, max_length: int | None, progress: bool):
    """Text towers of two-tower models (``model.text_chunking``, Herbst et al. Section 3.3).

    Each caption is split into consecutive token windows that fit the text context (each with the model's
    special tokens; :class:`prh_lib.models.TextChunking`), every chunk is embedded, and each layer's pooled
    chunk features are averaged per caption, weighted by the caption tokens in each chunk. Hidden states
    are mean-pooled over the chunk's real tokens; the ``"projection"`` output (B, d) is already pooled.
    A caption that fits is a single chunk with weight exactly 1, so its features equal the plain path's.
    """
    chunking = model.text_chunking
    chunks, owner, n_tokens = chunking.encode(model.tokenizer, texts, max_length=max_length)
    weight = torch.as_tensor(n_tokens / np.bincount(owner, weights=n_tokens)[owner], dtype=torch.float32)
    order = np.argsort([len(c) for c in chunks], kind="stable")
    out = None
    bar = progress_bar(total=len(chunks), desc=f"{model.name} (text chunks)", unit="chunk", show=progress)
    for start in range(0, len(chunks), batch_size):
        rows = torch.as_tensor(order[start : start + batch_size])
        inputs, real = chunking.collate([chunks[i] for i in rows.tolist()])
        layers = model.layer_outputs(**inputs)
        pooled, dims = stack_layers([(mean_pool(h, real.to(h.device)) if h.ndim == 3 else h.float()).cpu()
                                     for h in layers])
        if out is None:
            out = torch.zeros(len(layers), len(texts), pooled.shape[-1], dtype=torch.float32)
        out.index_add_(1, torch.as_tensor(owner)[rows], pooled * weight[rows].view(1, -1, 1))
        bar.update(len(rows))
    bar.close()
    return out, dims


@torch.inference_mode()
def _extract_images(model, pairs: Pairs, *, batch_size: int, progress: bool):
    pool = {"cls": lambda h: cls_pool(h), "gap": gap_pool, "mean": gap_pool}[model.pooling]
    out = None
    n = len(pairs)
    bar = progress_bar(total=n, desc=f"{model.name} (images)", unit="image", show=progress)
    for start in range(0, n, batch_size):
        rows = list(range(start, min(start + batch_size, n)))
        pixels = model.image_transform(pairs.load_images(rows)).to(model.device, model.dtype)
        layers = model.layer_outputs(pixel_values=pixels)
        # a (B, d) output (the "projection" of a two-tower model) is already pooled
        pooled, dims = stack_layers([(pool(h) if h.ndim > 2 else h.float()).cpu() for h in layers])
        if out is None:
            out = torch.empty(len(layers), n, pooled.shape[-1], dtype=torch.float32)
        out[:, start : start + len(rows)] = pooled
        bar.update(len(rows))
    bar.close()
    return out, dims


def _check_texts(pairs: Pairs) -> None:
    """Refuse empty texts: a caption without tokens would pool to an all-zero feature row."""
    blank = [sid for sid, text in zip(pairs.sample_ids, pairs.texts) if not isinstance(text, str) or not text.strip()]
    if blank:
        raise DataError(f"{len(blank)} of the {len(pairs)} texts of {pairs.dataset!r} ({pairs.caption_policy}) are "
                        f"empty or not strings (samples {blank[:5]}); an empty text has no tokens to pool and "
                        "would become an all-zero feature row")
