"""Channels-last vs contiguous (NCHW) memory layout for the timm CNNs: speed and every score it could move.

``prh_lib.models.loaded.CNN_MEMORY_FORMAT`` runs timm CNNs (EfficientNet-Lite0/Lite2) in channels-last
layout, where oneDNN's depthwise convolutions are faster on a CPU. The arithmetic is the same; only the
order of floating-point operations changes. For each model (``--model``) on each dataset (``--data``) this
extracts its pooled features in float32 both ways (interleaved, best of ``--repeats``, ``--threads``
threads), and prints

- the speed ratio (contiguous seconds / channels-last seconds);
- the largest per-layer relative error of the pooled features (of the model and of its random-init twin);
- the change of every layer-pair mutual k-NN score (k = 10, the chapters' clipping) against each partner
  (default ``smollm2-135m`` and ``minilm-l6``), for the model and its random-init twin, and against TF-IDF:
  peak, final cell and the largest change of any cell; and the Cross-Model score of the final layers
  against the first partner.

The verdict line says whether every change is at most ``--tolerance`` (default 0.0005: a tenth of the
smallest bf16 threshold, 0.005, and half a k-NN neighbour swap on 1,000 images). Score caching is off
unless ``PRH_SCORE_CACHE`` is set. Run::

    python benchmarks/cnn_memory_format.py --data coco-mini flickr8k-1k --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bf16_extraction import (CLIP_Q, SEED, Partners, abs_change, clipped, cross_model_final,  # noqa: E402
                             load_datasets, matrix_scores, relative_errors, timed_features)

LAYOUTS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}


def set_layout(loaded, layout: str):
    """Mark a loaded timm CNN to run in ``layout`` (read by ``prh_lib.models.loaded._timm_layer_outputs``)."""
    loaded.module._prh_memory_format = LAYOUTS[layout]
    return loaded


def knn(x, y, k):
    from prh_lib.metrics import mutual_knn_layerwise

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*degenerate.*", category=RuntimeWarning)
        return np.asarray(mutual_knn_layerwise(x.values, y.values, k=k), dtype=np.float64)


def main() -> None:
    from prh_lib import models
    from prh_lib.analysis.controls import tfidf_features

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", default=None)
    ap.add_argument("--data", nargs="+", default=[None, "flickr8k-1k"])
    ap.add_argument("--partner", action="append", default=None)
    ap.add_argument("--n", type=int, default=None, help="pairs per dataset (default: all)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--r", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tolerance", type=float, default=0.0005)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("PRH_SCORE_CACHE", "0")
    names = args.model or ["efficientnet-lite0", "efficientnet-lite2"]
    partners = args.partner or ["smollm2-135m", "minilm-l6"]
    datasets = load_datasets(args.data, args.n, {})
    partner = Partners(datasets, batch_size=args.batch_size)
    bows = [tfidf_features(d.pairs) for d in datasets]  # never clipped, as in the chapters
    print(f"torch {torch.__version__}, {args.threads} thread(s), clip q = {CLIP_Q}, seed {SEED}")
    worst_all = 0.0
    for name in names:
        loaded = {lay: set_layout(models.load_model(name, dtype=torch.float32), lay) for lay in LAYOUTS}
        twins = {lay: set_layout(models.random_init(loaded[lay], seed=SEED), lay) for lay in LAYOUTS}
        for i, ds in enumerate(datasets):
            k = min(args.k, len(ds.pairs.sample_ids) - 1)
            feats, secs = timed_features(loaded, ds.pairs, repeats=args.repeats, batch_size=args.batch_size)
            twin, _ = timed_features(twins, ds.pairs, repeats=1, batch_size=args.batch_size)
            err = relative_errors(feats["contiguous"].values, feats["channels_last"].values).max()
            terr = relative_errors(twin["contiguous"].values, twin["channels_last"].values).max()
            mine = {lay: clipped(feats[lay]) for lay in LAYOUTS}
            tw = {lay: clipped(twin[lay]) for lay in LAYOUTS}
            rows = []
            for p in partners:
                fp = partner(p, i)
                rows += matrix_scores(f"knn x {p}", *(knn(mine[lay], fp, k) for lay in LAYOUTS))
                rows += matrix_scores(f"random-init x {p}", *(knn(tw[lay], fp, k) for lay in LAYOUTS))
            rows += matrix_scores("tfidf", *(knn(mine[lay], bows[i], k) for lay in LAYOUTS))
            fp = partner(partners[0], i)
            c = [cross_model_final(mine[lay], fp, r=args.r) for lay in LAYOUTS]
            rows.append((f"cross-model x {partners[0]}", "final", c[0], c[1], float(abs_change(*c))))
            worst = max(r[-1] for r in rows)
            worst_all = max(worst_all, worst)
            print(f"\n== {name} on {ds.name}: N = {len(ds.pairs.sample_ids)}, k = {k}")
            print(f"speed: contiguous {secs['contiguous']:.2f} s, channels-last {secs['channels_last']:.2f} s, "
                  f"ratio {secs['contiguous'] / secs['channels_last']:.2f}x")
            print(f"largest relative error per layer: model {err:.2e}, random-init twin {terr:.2e}")
            for kind, part, a, b, ch in rows:
                shown = f"{a:.4f} -> {b:.4f}" if np.isfinite(a) else "largest cell change"
                print(f"  {kind:<28} {part:<9} {shown:<18} |change| {ch:.5f}")
            print(f"largest score change: {worst:.5f}")
    ok = worst_all <= args.tolerance
    print(f"\nverdict: largest score change {worst_all:.5f} {'<=' if ok else '>'} tolerance {args.tolerance} "
          f"-> channels-last {'does not move' if ok else 'MOVES'} the scores")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
