"""Greedy text generation with a causal language model, sharing each row's common prompt prefix.

:func:`load_generator` loads the model with :func:`prh_lib.models.load_causal_lm` (the one causal-LM
loader); :func:`greedy_generate` decodes several prompts per row, computing the token prefix they share once."""

from __future__ import annotations

import inspect
import math
import os
from typing import Sequence

from prh_lib import models
from prh_lib.progress import bar as progress_bar


def load_generator(model: str, *, device: str = "cpu", dtype: str = "float32"):
    """A causal language model for generation and its tokenizer: ``(module, tokenizer, revision)``.

    ``model`` is a zoo name, a local folder or a Hugging Face id (e.g. ``"Qwen/Qwen3-8B"``, as in the paper),
    loaded by :func:`prh_lib.models.load_causal_lm` (``device="cuda"`` shards a large model over the visible
    GPUs). The tokenizer pads on the left; :func:`greedy_generate` pads its own batches either way.

    Raises
    ------
    ValueError
        If ``dtype`` is unknown or the model is not a causal language model.
    """
    causal = models.load_causal_lm(model, device=device, dtype=dtype)
    causal.tokenizer.padding_side = "left"
    return causal.lm, causal.tokenizer, causal.loaded.revision


def render_prompt(tok, system: str, user: str) -> str:
    """The prompt text: the tokenizer's chat template (system turn, user turn, generation prompt) if it has
    one, else ``system``, a blank line and ``user``."""
    if getattr(tok, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        # enable_thinking=False: Qwen3 answers directly; templates without the variable ignore it.
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    return (system + "\n\n" if system else "") + user + "\n"


def max_new_tokens_for(n_words: int, *, tokens_per_word: float = 1.5, slack: int = 4) -> int:
    """Generation budget for a target of ``n_words`` words: ``ceil(tokens_per_word * n_words) + slack``."""
    return int(math.ceil(tokens_per_word * n_words)) + int(slack)


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

    Every prompt is tokenized whole; the longest token prefix shared by a row's prompts (e.g. the instruction and the
    source text, when only a target length differs at the end) runs through the model once, its key-value cache is
    repeated for each prompt of the row, and the rest of each prompt and the decoding follow. Prompts are left-padded in
    both blocks, with explicit position ids from the attention mask, so each sequence sees exactly its own tokens at
    their own positions. Decoding is greedy (argmax) and stops per sequence at an end-of-sequence token or after its own
    budget of new tokens; finished sequences leave the batch.

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
    Equal, token for token up to floating-point ties, to ``module.generate(do_sample=False, max_new_tokens=budget)`` on
    each prompt alone (tested); the shared prefix saves its recomputation for every prompt but the first of a row.
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
    bar = progress_bar(total=len(prompts), desc="generating summaries", unit="text", show=progress)
    for s in range(0, len(prompts), batch_size):
        rows = prompts[s : s + batch_size]
        ids = [[tok(p, add_special_tokens=add_special_tokens)["input_ids"] for p in row] for row in rows]
        # os.path.commonprefix compares lists element by element: the token prefix every prompt of the row shares
        cut = [min(len(os.path.commonprefix(seqs)), min(len(q) for q in seqs) - 1) for seqs in ids]
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
        bar.update(len(rows))
    bar.close()
    return out
