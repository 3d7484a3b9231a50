"""Running language models beyond feature extraction: bits per byte, generation, summaries, the capability ladder.

Every causal LM is loaded by :func:`prh_lib.models.load_causal_lm`, the one causal-LM loader, which
:func:`prh_lib.models.load_model` shares; its features therefore share the feature cache. Bits per byte and
summaries are cached like features (:func:`prh_lib.paths.cache_file`).

Modules: :mod:`~prh_lib.lm.bpb` (bits per byte and its texts), :mod:`~prh_lib.lm.ladder` (features and
bits per byte of the capability study's models, the interpolation ladder), :mod:`~prh_lib.lm.generate`
(greedy generation), :mod:`~prh_lib.lm.summaries` (shortened captions, truncation baseline)."""

from prh_lib.models import CausalLM, load_causal_lm, load_tokenizer
from prh_lib.lm.bpb import (BPB_FORMAT_VERSION, BPB_PREFIX, BitsPerByte, bits_per_byte, bpb_cache_path,
    cached_bits_per_byte, study_heldout)
from prh_lib.lm.generate import greedy_generate, load_generator, max_new_tokens_for, render_prompt
from prh_lib.lm.ladder import (LanguageModelResult, RandomWeights, available_models, install_hint, ladder_models,
    ladder_tag, ladder_weights, pretrained_models, random_weights)
from prh_lib.lm.quiet import quiet
from prh_lib.lm.summaries import (DEFAULT_FRACTIONS, DEFAULT_PROMPT, DEFAULT_SYSTEM, SUMMARY_FORMAT_VERSION,
    Summaries, clean_generation, finalize_summaries, summaries_path, summarize_texts, target_words, token_counts,
    truncate_text, truncate_texts, word_count)

__all__ = ["CausalLM", "load_causal_lm", "load_tokenizer", "BPB_FORMAT_VERSION", "BPB_PREFIX", "BitsPerByte",
           "bits_per_byte", "bpb_cache_path", "cached_bits_per_byte", "study_heldout", "quiet", "available_models",
           "install_hint", "greedy_generate", "load_generator", "max_new_tokens_for", "render_prompt",
           "LanguageModelResult", "RandomWeights", "ladder_models", "ladder_tag", "ladder_weights",
           "pretrained_models", "random_weights", "DEFAULT_FRACTIONS", "DEFAULT_PROMPT", "DEFAULT_SYSTEM",
           "SUMMARY_FORMAT_VERSION", "Summaries", "clean_generation", "finalize_summaries", "summaries_path",
           "summarize_texts", "target_words", "token_counts", "truncate_text", "truncate_texts", "word_count"]
