"""The shared core of every analysis: features in, alignment over all layer pairs out.

- :func:`prepare_features`: the prologue of every chapter (the models of the comparisons -> cached
  features -> outliers clipped), in one call;
- :func:`layerwise_alignment`: one metric over all layer pairs of two models (:class:`AlignmentMatrix`),
  and :func:`find_peak`, the one place the best layer pair is found;
- :func:`score_pair`: one model pair scored as Section 3.1 does (all layer pairs, shuffled-pairs control,
  selection-aware permutation null, bootstrap interval at the peak), which every chapter builds on;
- :func:`clip_features`, :func:`shuffled_pairing`: named, visible preprocessing and controls.

Functions here take :class:`~prh_lib.extract.features.LayerFeatures` (or arrays) and return small result objects
and tables; they never load models (features come through :mod:`prh_lib.extract`) and never plot.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import torch

from prh_lib import extract
from prh_lib.results import score_cache
from prh_lib.extract.features import LayerFeatures, _remember_digest, check_aligned, values_digest
from prh_lib.progress import note
from prh_lib.results.score_cache import features_key
from prh_lib.stats.bootstrap import bootstrap_ci
from prh_lib.stats.calibration import permutation_test_layerwise
from prh_lib.metrics import get_layerwise_metric
from prh_lib.metrics.preprocess import _quantile_lastdim
from prh_lib.validation import check_model_pairs


def find_peak(scores) -> tuple[int, int, float]:
    """Row, column and value of the maximum of a score matrix, ignoring NaN (undefined layers).

    Parameters
    ----------
    scores : array_like of shape (n_layers_x, n_layers_y)

    Returns
    -------
    (int, int, float)
        The first maximum in row-major order if tied.

    Raises
    ------
    ValueError
        If every score is NaN.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if np.isnan(scores).all():
        raise ValueError(f"all {scores.size} scores of shape {scores.shape} are NaN")
    i, j = np.unravel_index(int(np.nanargmax(scores)), scores.shape)
    return int(i), int(j), float(scores[i, j])


@dataclass(frozen=True)
class AlignmentMatrix:
    """Scores of one metric over all layer pairs of two models.

    Attributes
    ----------
    scores : ndarray of shape (n_layers_x, n_layers_y)
    x_labels, y_labels : tuple of str
        Layer labels of the rows and columns.
    x_name, y_name : str
        Model names.
    metric : str
    options : dict
        Metric options (``k``, ...) and ``n`` (number of samples).
    """

    scores: np.ndarray
    x_labels: tuple[str, ...]
    y_labels: tuple[str, ...]
    x_name: str
    y_name: str
    metric: str
    options: dict = field(default_factory=dict)

    @property
    def peak(self) -> tuple[int, int, float]:
        """(row, column, score) of the maximum, ignoring NaN (undefined layers); the first in row-major order if tied."""
        if np.isnan(self.scores).all():
            raise ValueError(f"all scores of {self.x_name} × {self.y_name} are NaN")
        return find_peak(self.scores)

    @property
    def final(self) -> float:
        """Score of the last layer of x against the last layer of y."""
        return float(self.scores[-1, -1])

    def relative_depth(self) -> tuple[float, float]:
        """Depth of the peak as a fraction of each model's layers (0 = embedding output, 1 = last layer)."""
        i, j, _ = self.peak
        return i / max(len(self.x_labels) - 1, 1), j / max(len(self.y_labels) - 1, 1)


def layer_depths(n: int) -> np.ndarray:
    """Depth of each of ``n`` layers as a fraction of the model's layers (0 = embedding output, 1 = last layer)."""
    return np.arange(n) / max(n - 1, 1)


def layerwise_alignment(x: LayerFeatures, y: LayerFeatures, *, metric: str = "mutual_knn", **options) -> AlignmentMatrix:
    """Alignment of every layer of ``x`` with every layer of ``y``.

    Parameters
    ----------
    x, y : LayerFeatures
        Features of two models on the same samples in the same row order.
    metric : str
        Name in :data:`prh_lib.metrics.LAYERWISE_METRICS` (default ``"mutual_knn"``, Huh et al. 2024).
    **options
        Passed to the metric (e.g. ``k=10``).

    Returns
    -------
    AlignmentMatrix
        ``scores`` of shape (x.n_layers, y.n_layers), float64.

    Raises
    ------
    FeatureMismatchError
        If the rows of ``x`` and ``y`` are not the same samples in the same order.
    """
    check_aligned(x, y)
    fn = get_layerwise_metric(metric)

    def compute():
        scores = np.asarray(fn(x.values, y.values, **options), dtype=np.float64)
        return AlignmentMatrix(scores, tuple(x.layer_labels), tuple(y.layer_labels), x.name, y.name, metric,
                               {**options, "n": len(x.sample_ids)})

    return score_cache.cached("layerwise_alignment", {"x": features_key(x), "y": features_key(y), "metric": metric,
                                                      "options": options}, compute)


CLIP_MODES = ("stack", "layer")


@score_cache.memoize("clip_threshold")  # a quantile over every entry: 10-15 ms a stack, on every run
def clip_threshold(features: LayerFeatures, *, q: float = 0.95) -> float:
    """The PRH reference's clipping threshold for a model's whole stack of layers.

    For every sample, the ``q``-quantile (linear interpolation, as ``torch.quantile``) of the absolute values of all its
    entries over every layer and every feature of that layer (the ``L x D`` entries of the sample's ``(L, D)`` slice; a
    narrower, zero-padded CNN stage contributes only its true width), then the mean of these per-sample quantiles over
    the samples. This is ``remove_outliers(feats, q, exact=False)`` of the PRH ``metrics.py`` on a model's ``(N, L, D)``
    feature tensor, the path ``measure_alignment.py`` takes by default (without ``--precise``).

    Parameters
    ----------
    features : LayerFeatures
        ``values`` of shape (n_layers, n_samples, dim).
    q : float in (0, 1)

    Returns
    -------
    float
        The threshold t > 0 (0 only for an all-zero stack).

    References
    ----------
    Huh et al. (2024), App. A; ``remove_outliers`` and ``prepare_features`` in github.com/minyoungg/platonic-rep.
    """
    v = features.values
    per_sample = torch.cat([v[i, :, :d].abs() for i, d in enumerate(features.layer_dims)], dim=1)  # (N, sum d)
    return float(_quantile_lastdim(per_sample.to(torch.float64), float(q)).mean())


def clip_features(features: LayerFeatures, *, q: float | None = 0.95, clip: str | None = "stack") -> LayerFeatures:
    """Clip outlying activations before scoring (Huh et al. 2024, App. A).

    Parameters
    ----------
    features : LayerFeatures
        ``values`` of shape (n_layers, n_samples, dim); narrower layers zero-padded (``layer_dims``).
    q : float in (0, 1] or None
        Quantile level (the PRH default 0.95). ``None`` or ``1`` returns ``features`` unchanged.
    clip : {"stack", "layer"} or None, default "stack"
        - ``"stack"`` (the PRH reference, the default): one threshold ``t`` for the model's whole stack of
          layers (:func:`clip_threshold`); every entry of every layer is clamped to ``[-t, t]``. On a
          model whose layers all have the same width this equals the reference exactly.
        - ``"layer"``: every layer its own threshold, the same statistic computed on that layer alone
          (:func:`layer_clip_thresholds`). Not what the reference does: the
          scale of a residual stream grows with depth, so one shared threshold clips deep layers hardest
          and barely touches early ones; per layer clips every layer at the same relative level.
        - ``None``: no clipping.

    Returns
    -------
    LayerFeatures
        Same labels and rows; ``meta["clip_q"]`` and ``meta["clip"]`` record the choice.

    Raises
    ------
    ValueError
        If ``clip`` is not one of :data:`CLIP_MODES` or None, or ``q`` is outside (0, 1].

    References
    ----------
    Huh et al. (2024), App. A; ``remove_outliers`` in the PRH ``metrics.py`` (github.com/minyoungg/platonic-rep).
    """
    if clip is not None and clip not in CLIP_MODES:
        raise ValueError(f"clip must be one of {CLIP_MODES} or None; got {clip!r}")
    if q is not None and not 0 < float(q) <= 1:
        raise ValueError(f"clip_q must be in (0, 1] or None; got {q!r}")
    if clip is None or q is None or q == 1:
        return features
    if clip == "stack":
        thresholds = (clip_threshold(features, q=float(q)),)
        values = features.values.clamp(-thresholds[0], thresholds[0])  # zero padding stays zero
    else:
        thresholds = tuple(layer_clip_thresholds(features, q=float(q)))
        values = features.values.clone()
        for i, (d, t) in enumerate(zip(features.layer_dims, thresholds)):
            values[i, :, :d] = features.values[i, :, :d].clamp(-t, t)
    out = features.replace(values, clip_q=str(q), clip=clip)
    _clipped_digest(features, out, clip, thresholds)
    return out


#: (digest of the source stack, its dtype and layer widths, clip mode, thresholds) -> SHA-256 of the clipped stack.
#: Clamping is elementwise, so the same source bytes clamped at the same thresholds give the same bytes: a chapter clips
#: the same stack once per draw and variant, and the score cache keys each clipped stack by its digest, which is then
#: computed once a process (``tests/test_clip_features.py`` checks it against hashing the clipped values).
_CLIPPED_DIGESTS: dict[tuple, str] = {}


def _clipped_digest(source: LayerFeatures, clipped: LayerFeatures, clip: str, thresholds: tuple) -> None:
    """Give ``clipped.values`` its digest (:func:`prh_lib.extract.features.values_digest`) from :data:`_CLIPPED_DIGESTS`,
    or record it there; nothing when the score cache is off (then no digest is needed)."""
    if not score_cache.enabled():
        return
    key = (values_digest(source.values), str(source.values.dtype), tuple(source.layer_dims),
           tuple(source.values.shape), clip, thresholds)
    known = _CLIPPED_DIGESTS.get(key)
    if known is None:
        if len(_CLIPPED_DIGESTS) > 4096:
            _CLIPPED_DIGESTS.clear()
        _CLIPPED_DIGESTS[key] = values_digest(clipped.values)
    else:
        _remember_digest(clipped.values, known)


@score_cache.memoize("layer_clip_thresholds")  # one quantile per layer and sample, on every draw otherwise
def layer_clip_thresholds(features: LayerFeatures, *, q: float = 0.95) -> list[float]:
    """The thresholds of ``clip_features(..., clip="layer")``: one per layer, that layer alone.

    For layer ``i`` of true width ``d_i``: the mean over samples of each sample's ``q``-quantile of ``|x|``
    over the layer's ``d_i`` features, computed in float32 exactly as
    :func:`prh_lib.metrics.clip_outliers` (``scope="prh"``) computes it on that layer, so clamping at these
    values gives the same bytes as that function.

    Parameters
    ----------
    features : LayerFeatures
        ``values`` of shape (n_layers, n_samples, dim), float32.
    q : float in (0, 1)

    Returns
    -------
    list of float, length n_layers
        Each >= 0 (0 only for an all-zero layer); a float32 value held exactly as a Python float.
    """
    return [float(_quantile_lastdim(features.values[i, :, :d].abs(), float(q)).mean())
            for i, d in enumerate(features.layer_dims)]


def preprocessing_label(clip_q: float | None, clip: str | None = "stack") -> str:
    """The ``preprocessing`` column of the results table for a clipping choice, e.g. ``"clip(stack, q=0.95)"``."""
    if clip is None or clip_q is None or clip_q == 1:
        return "none"
    return f"clip({clip}, q={clip_q})"


def shuffled_pairing(y: LayerFeatures, *, seed: int = 0) -> LayerFeatures:
    """``y`` with its rows permuted (seeded) but its sample ids kept: the broken-pairing control.

    Comparing ``x`` with the result measures what the metric gives when images and captions are paired at
    random; it should sit at the chance level.
    """
    perm = np.random.default_rng(seed).permutation(len(y.sample_ids))
    return y.replace(y.values[:, perm], control=f"shuffled:{seed}")


def _pair_of(item) -> tuple[str, str]:
    return (item.x, item.y) if hasattr(item, "x") and hasattr(item, "y") else tuple(item)


def model_names(comparisons: Iterable) -> list[str]:
    """Every model named in ``comparisons`` (``(x, y)`` pairs or objects with ``x`` and ``y``), sorted, once each."""
    return sorted({m for item in comparisons for m in _pair_of(item)})


def check_comparisons(features: dict, comparisons) -> None:
    """Raise KeyError unless every model named in ``comparisons`` (pairs of names) has features."""
    missing = sorted({m for pair in comparisons for m in _pair_of(pair)} - set(features))
    if missing:
        raise KeyError(f"no features for {missing}; have {sorted(features)}")


def prepare_features(comparisons, pairs, *, clip_q: float | None = 0.95, clip: str | None = "stack",
                     device: str = "cpu",
                     dtype: str = "float32", batch_size: int = 32, progress: bool = False,
                     models: Sequence[str] = ()) -> dict[str, LayerFeatures]:
    """The features every chapter starts from: each model of ``comparisons`` on ``pairs``, cached, clipped.

    Parameters
    ----------
    comparisons : sequence of (str, str) or of objects with ``x`` and ``y``
        Model pairs; every model named is extracted once (:func:`prh_lib.extract.get_features`).
    pairs : prh_lib.data.Pairs
    clip_q : float in (0, 1] or None
        Outlier clipping quantile of :func:`clip_features` (None: off).
    clip : {"stack", "layer"} or None, default "stack"
        One threshold per model's stack of layers (the PRH reference) or one per layer; see :func:`clip_features`.
    device, dtype, batch_size, progress
        As in :func:`prh_lib.extract.get_features`.
    models : sequence of str
        Further models to extract (e.g. vision models scored against language models built elsewhere).

    Returns
    -------
    dict of str to LayerFeatures
        Model name -> clipped features, names sorted.

    Raises
    ------
    ValueError
        If a comparison is not a pair of model names.
    prh_lib.models.ModelNotAvailableError
        If a model is neither cached nor obtainable.
    """
    check_model_pairs([_pair_of(c) for c in comparisons])
    names = sorted(set(model_names(comparisons)) | set(models))
    return {name: clip_features(extract.get_features(name, pairs, device=device, dtype=dtype, batch_size=batch_size,
                                                     progress=progress), q=clip_q, clip=clip) for name in names}


def prefetch_features(comparisons, draws, *, models: Sequence[str] = (), device: str = "cpu",
                      dtype: str = "float32", batch_size: int = 32, num_threads: int | None = None) -> None:
    """Extract (or find cached) every model of ``comparisons`` on every draw before a study loop runs.

    Each model is loaded once for all draws and datasets; draws with the same data (the images of caption draws) are
    extracted once; a causal LM runs texts that are token prefixes of other draws'
    texts only once, and pools them the ways its ``@pool:`` names ask from the same passes
    (:func:`prh_lib.extract.features_for_pairs`). The loop's :func:`prepare_features` then
    reads the cache. Nothing is returned: the features are on disk.

    Parameters
    ----------
    comparisons : sequence of (str, str) or of objects with ``x`` and ``y``
    draws : sequence of prh_lib.data.study.Draw
    models : sequence of str
        Further models, as in :func:`prepare_features`.
    device, dtype, batch_size, num_threads
        As in :func:`prh_lib.extract.features_for_pairs`.
    """
    names = sorted(set(model_names(comparisons)) | set(models))
    extract.fill_cache([(name, d.pairs) for name in names for d in draws], device=device, dtype=dtype,
                       batch_size=batch_size, num_threads=num_threads)


@dataclass(frozen=True)
class PairResult:
    """One model pair scored as Section 3.1 does (:func:`score_pair`).

    Attributes
    ----------
    label : str
        ``"x × y"``.
    matrix : AlignmentMatrix
        Mutual k-NN over all layer pairs.
    control : AlignmentMatrix or None
        The same with the pairing shuffled (seeded).
    calibration : prh_lib.stats.LayerwiseCalibration or None
        Permutation null (Groeger et al. 2026), selection-aware for the maximum over layer pairs.
    peak_ci : prh_lib.stats.BootstrapCI or None
        Bootstrap interval of the score at the peak layer pair.
    """

    label: str
    matrix: AlignmentMatrix
    control: AlignmentMatrix | None
    calibration: object
    peak_ci: object


def score_pair(x: LayerFeatures, y: LayerFeatures, *, k: int = 10, n_permutations: int = 200, alpha: float = 0.05,
               n_boot: int = 200, seed: int = 0, control: bool = True, device=None,
               label: str | None = None) -> PairResult:
    """Mutual k-NN of one model pair over all layer pairs, with its controls: the loop every chapter shares.

    Parameters
    ----------
    x, y : LayerFeatures
        Two models' features on the same pairs (checked).
    k : int
        Neighbours (the paper: 10).
    n_permutations, alpha : int, float
        Selection-aware permutation null of :func:`prh_lib.stats.permutation_test_layerwise`; 0: skipped.
    n_boot : int
        Bootstrap replicates for the interval of the peak score (:func:`prh_lib.stats.bootstrap_ci`); 0: skipped.
    seed : int
        Seeds the shuffled control, the permutations and the bootstrap.
    control : bool
        Score the shuffled-pairs control (:func:`shuffled_pairing`).
    device : str or torch.device, optional
    label : str, optional
        Default ``"<x.name> × <y.name>"``.

    Returns
    -------
    PairResult
        ``control``, ``calibration`` and ``peak_ci`` are None when skipped.

    Raises
    ------
    FeatureMismatchError
        If ``x`` and ``y`` hold other samples or another row order.

    Notes
    -----
    The three computations are cached apart (:mod:`prh_lib.results.score_cache`), each by the content of ``x`` and ``y``
    and exactly the options it reads: the layer-pair matrix (``k``, ``device`` as given), the permutation null (``k``,
    ``n_permutations``, ``seed``; not ``alpha``) and the bootstrap at the peak (``k``, ``n_boot``, ``seed``, the peak's
    layers). A call that asks for fewer replicates (``n_boot=0``) is therefore served the null another chapter computed
    with a bootstrap, and the reverse. A rerun at another ``alpha`` recalibrates the stored null
    (:meth:`~prh_lib.stats.LayerwiseCalibration.at_alpha`), which gives the same bits as computing it afresh. ``label``
    and ``control`` select what is returned, not what is computed, so they are in no key.

    References
    ----------
    Herbst et al., Section 3.1; Huh et al. (2024), App. A (mutual k-NN); Groeger et al. (2026), Sec. 5.
    """
    check_aligned(x, y)
    label = label or f"{x.name} × {y.name}"
    matrix = layerwise_alignment(x, y, metric="mutual_knn", k=k, device=device)
    # None computes on the CPU: one entry for both
    base = {"x": features_key(x), "y": features_key(y), "metric": "mutual_knn", "k": k, "seed": seed,
            "device": "cpu" if device is None else str(device)}
    cal = None
    if n_permutations:
        def null():
            note(f"scoring {label} on {len(x.sample_ids)} pairs: {x.n_layers} × {y.n_layers} layers, "
                 f"a null of {n_permutations} permutations")
            return permutation_test_layerwise(x.values, y.values, metric="mutual_knn", k=k,
                                              n_permutations=n_permutations, alpha=alpha, seed=seed,
                                              selection_aware=True, device=device)

        # alpha is not in the key: it only sets the threshold, which the stored null gives at any level
        cal = score_cache.cached("permutation_null_layerwise", {**base, "n_permutations": n_permutations,
                                                                 "selection_aware": True}, null).at_alpha(alpha)
    ctrl = None
    if control and cal is not None:
        # the null's first permutation is the control's (both the first draw of default_rng(seed)), and a
        # null matrix equals the metric recomputed on the re-paired rows bit for bit: no second neighbour search
        ctrl = dataclasses.replace(matrix, scores=np.array(cal.null[0], dtype=np.float64))
    elif control:
        ctrl = layerwise_alignment(x, shuffled_pairing(y, seed=seed), metric="mutual_knn", k=k, device=device)
    ci = None
    if n_boot:
        i, j, _ = matrix.peak

        def boot():
            note(f"bootstrap of {label} at its peak ({x.layer_labels[i]} × {y.layer_labels[j]}): "
                 f"{n_boot} replicates")
            return bootstrap_ci(x.values[i], y.values[j], metric="mutual_knn", k=k, n_boot=n_boot, seed=seed,
                                device=device)

        ci = score_cache.cached("peak_bootstrap", {**base, "n_boot": n_boot, "layers": [i, j]}, boot)
    return PairResult(label, matrix, ctrl, cal, ci)
