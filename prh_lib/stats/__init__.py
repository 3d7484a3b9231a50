"""Statistics of alignment scores: what a score means against chance, a null, and other images.

- :mod:`~prh_lib.stats.calibration`: permutation-calibrated scores and selection-aware nulls (Gröger et al.
  2026), Benjamini-Hochberg
- :mod:`~prh_lib.stats.bootstrap`: bootstrap intervals over samples
- :mod:`~prh_lib.stats.selection`: held-out (cross-fit) peak selection, half-sample and paired intervals,
  the detectable difference
- :mod:`~prh_lib.stats.intervals`: percentile and basic intervals
- :mod:`~prh_lib.stats.correlation`: rank and linear correlation across models with exact permutation p

Pure functions on arrays and scores; they import only :mod:`prh_lib.metrics` and the loose helpers.
"""

from prh_lib.stats.bootstrap import BootstrapCI, bootstrap_ci
from prh_lib.stats.calibration import (CalibratedScore, LayerwiseCalibration, benjamini_hochberg, calibrate,
                                       min_permutations, permutation_test, permutation_test_layerwise)

__all__ = ["BootstrapCI", "bootstrap_ci", "CalibratedScore", "LayerwiseCalibration", "benjamini_hochberg",
           "calibrate", "min_permutations", "permutation_test", "permutation_test_layerwise"]
