"""Analyses: arrays and tables in, numbers and tidy frames out (computation only; pages read them).

The core (:mod:`~prh_lib.analysis.core`, re-exported here): :func:`prepare_features` (the models of the
comparisons -> cached features -> clipped), :func:`layerwise_alignment` (:class:`AlignmentMatrix`),
:func:`find_peak`, :func:`score_pair` and :func:`clip_features`; :mod:`~prh_lib.analysis.controls` (floors:
random-init twins, TF-IDF, shuffled pairs) and :mod:`~prh_lib.analysis.heldout` (held-out peaks and their
intervals over images). One module or subpackage per chapter:

- :mod:`~prh_lib.analysis.layerwise`: Section 3.1, where alignment emerges;
- :mod:`~prh_lib.analysis.compression`: Section 3.1 / App. C, PCA compression;
- :mod:`~prh_lib.analysis.capability`: Section 3.2, alignment versus language-model capability;
- :mod:`~prh_lib.analysis.captions`: Section 3.2 / App. F, caption detail;
- :mod:`~prh_lib.analysis.regimes`: Section 3.3, the four regimes;
- :mod:`~prh_lib.analysis.ablation`: App. G, k and N;
- :mod:`~prh_lib.analysis.displacement`: the displacement-geometry companion chapter;
- :mod:`~prh_lib.analysis.concepts`: concept subspaces, hierarchy and controllability.

Analyses never load models (features come through :mod:`prh_lib.extract`, language-model runs through
:mod:`prh_lib.lm`), never plot and never write page text: tables, prose, claims and figures are
:mod:`prh_lib.pages`.
"""


from prh_lib.analysis.core import (AlignmentMatrix, PairResult, check_comparisons, clip_features, find_peak,
    layerwise_alignment, model_names, prepare_features, score_pair, shuffled_pairing)

__all__ = ["AlignmentMatrix", "PairResult", "check_comparisons", "clip_features", "find_peak", "layerwise_alignment",
           "model_names", "prepare_features", "score_pair", "shuffled_pairing"]
