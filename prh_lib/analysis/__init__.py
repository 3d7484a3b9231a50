"""Analyses that turn layer-wise features into the paper's numbers: a shared core and one module per chapter.

The core (:mod:`~prh_lib.analysis.core`, re-exported here): :func:`prepare_features` (the models of the
comparisons -> cached features -> clipped), :func:`layerwise_alignment` (:class:`AlignmentMatrix`),
:func:`find_peak`, :func:`score_pair` and :func:`clip_features`. Chapters, each built on it:

- :mod:`~prh_lib.analysis.layerwise`: Section 3.1, where alignment emerges (re-exported here);
- :mod:`~prh_lib.analysis.compression`: Section 3.1 / App. C, PCA compression;
- :mod:`~prh_lib.analysis.capability`: Section 3.2, alignment versus language-model capability;
- :mod:`~prh_lib.analysis.captions`: Section 3.2 / App. F, caption detail;
- :mod:`~prh_lib.analysis.regimes`: Section 3.3, the four regimes;
- :mod:`~prh_lib.analysis.ablation`: App. G, k and N;
- :mod:`~prh_lib.analysis.displacement`: the displacement-geometry companion chapter.

A long chapter is two modules: ``<chapter>_study`` (the computation: scores on one draw, the study loop over
datasets x draws, results-table rows) and ``<chapter>`` (the page: aggregates read back, tables, findings,
prose, records), which re-exports the study's names; notebooks import ``<chapter>`` only.

Analyses never load models (features come through :mod:`prh_lib.extract`, language-model runs through
:mod:`prh_lib.lm`) and never plot (figures: :mod:`prh_lib.figures`).
"""

from .core import (AlignmentMatrix, PairResult, check_comparisons, clip_features, describe_features, find_peak,
                   layerwise_alignment, model_names, prepare_features, score_pair, shuffled_pairing)
from .layerwise import compare_pairs, describe_peaks, peak_table, summary_table

__all__ = ["AlignmentMatrix", "PairResult", "check_comparisons", "clip_features", "describe_features", "find_peak",
           "layerwise_alignment", "model_names", "prepare_features", "score_pair", "shuffled_pairing",
           "compare_pairs", "describe_peaks", "peak_table", "summary_table"]
