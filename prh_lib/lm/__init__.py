"""Running language models beyond feature extraction: bits per byte, generation, summaries, the capability ladder.

Every causal LM is loaded by :func:`prh_lib.models.load_causal_lm`, the one causal-LM loader, which
:func:`prh_lib.models.load_model` shares; its features therefore share the feature cache. Bits per byte and
summaries are cached like features (:func:`prh_lib.paths.cache_file`).

Modules: :mod:`~prh_lib.lm.bpb` (bits per byte and its texts), :mod:`~prh_lib.lm.ladder` (features and
bits per byte of the capability study's models, the interpolation ladder), :mod:`~prh_lib.lm.generate`
(greedy generation), :mod:`~prh_lib.lm.summaries` (shortened captions, truncation baseline)."""

from prh_lib.models.hf import load_causal_lm  # noqa: F401
from prh_lib.models.load import load_tokenizer  # noqa: F401
from prh_lib.lm.bpb import BPB_PREFIX, bits_per_byte, bpb_cache_path, study_heldout  # noqa: F401
from prh_lib.lm.generate import greedy_generate, load_generator, max_new_tokens_for  # noqa: F401
from prh_lib.lm.ladder import (available_models, ladder_models, ladder_weights, pretrained_models,  # noqa: F401
    random_weights)
from prh_lib.lm.quiet import quiet  # noqa: F401
from prh_lib.lm.summaries import (DEFAULT_FRACTIONS, DEFAULT_PROMPT, DEFAULT_SYSTEM, Summaries,  # noqa: F401
    clean_generation, finalize_summaries, summaries_path, summarize_texts, target_words, token_counts, truncate_text,
    truncate_texts, word_count)
