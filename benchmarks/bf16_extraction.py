"""bf16 vs fp32 feature extraction on a CPU: the evidence behind ``prh_lib/resources/bf16_allowed.json``.

For each model: extract its layer-wise pooled features on the same pairs in float32 and in bfloat16 (no
cache, interleaved runs, best of ``--repeats`` timed), then print

- the speed ratio (fp32 seconds / bf16 seconds);
- the per-layer relative error of the pooled features, ``||F_bf16 - F_fp32||_F / ||F_fp32||_F`` per layer;
- the change of the headline scores it feeds against a partner model extracted in float32: the layer-wise
  mutual k-NN matrix's peak and final-layer score, and the largest change of any cell of that matrix
  (which bounds the change of any peak picked from it, held-out peaks included);
- the row for the table: ``allowed`` only if the CPU has native bf16 and the largest change is below the
  threshold ``min(halfwidth / 4, 0.005)``.

Not measured here yet (issue 25, item 3 asks for them): the lexical floors and displacement scores, and the
image-level interval half-widths, which come from the chapters' own runs (pass one with ``--halfwidth``;
without it the threshold is 0.005). Run it on both offline datasets before allowing a model.

    nice -n 10 python benchmarks/bf16_extraction.py --model minilm-l6 --partner dinov2-small --n 48 --threads 1

Needs the zoo models (``prh-zoo install``) and ``PRH_DATA_ROOT`` (default ``../shared/data/coco-mini``);
``--data`` names another COCO caption folder (e.g. ``../shared/data/flickr8k-1k``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
import torch


def relative_errors(ref: torch.Tensor, test: torch.Tensor) -> np.ndarray:
    """Per-layer relative Frobenius error, shape (n_layers,), of stacked features (n_layers, n, d)."""
    num = torch.linalg.vector_norm((test.double() - ref.double()).flatten(1), dim=1)
    den = torch.linalg.vector_norm(ref.double().flatten(1), dim=1).clamp_min(1e-300)
    return (num / den).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--partner", default="dinov2-small", help="model scored against, always in float32")
    parser.add_argument("--data", default=None, help="COCO caption folder (default PRH_DATA_ROOT)")
    parser.add_argument("--n", type=int, default=48, help="pairs (seed 0)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per dtype (best is kept)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--halfwidth", type=float, default=None,
                        help="image-level interval half-width of the headline score (threshold: a quarter, <= 0.005)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from prh_lib import data, extract, models
    from prh_lib.metrics import mutual_knn_layerwise
    from prh_lib.models.precision import MAX_SCORE_CHANGE, cpu_has_native_bf16

    ds = data.load_dataset("coco-folder", args.data)
    pairs = data.sample_pairs(ds, n=args.n, seed=0)
    native = cpu_has_native_bf16()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, native bf16: {native}, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"data: {ds.name}, N = {len(pairs)} pairs (seed 0); model {args.model}, partner {args.partner} (float32)")

    partner = extract.get_features(args.partner, pairs, dtype="float32", batch_size=args.batch_size,
                                   progress=False, cache=False)
    loaded = {d: models.load_model(args.model, dtype=models.torch_dtype(d)) for d in ("float32", "bfloat16")}
    feats, secs = {}, {d: [] for d in loaded}
    for _ in range(args.repeats):  # interleaved, so drifting machine load hits both dtypes alike
        for d, model in loaded.items():
            t0 = time.perf_counter()
            feats[d] = extract.get_features(model, pairs, batch_size=args.batch_size, progress=False, cache=False)
            secs[d].append(time.perf_counter() - t0)
    ref, low = feats["float32"].values, feats["bfloat16"].values
    errors = relative_errors(ref, low)
    k = min(args.k, len(pairs) - 1)
    s32 = mutual_knn_layerwise(ref, partner.values, k=k)
    s16 = mutual_knn_layerwise(low, partner.values, k=k)
    # NaN cells (a degenerate layer, e.g. a CNN's constant stem or a partner's embedding layer) are left out
    changes = {"peak": abs(float(np.nanmax(s16)) - float(np.nanmax(s32))),
               "final": abs(float(s16[-1, -1]) - float(s32[-1, -1])), "any cell": float(np.nanmax(np.abs(s16 - s32)))}
    threshold = MAX_SCORE_CHANGE if args.halfwidth is None else min(args.halfwidth / 4, MAX_SCORE_CHANGE)
    ratio = min(secs["float32"]) / min(secs["bfloat16"])
    print(f"speed: fp32 {min(secs['float32']):.2f} s, bf16 {min(secs['bfloat16']):.2f} s, ratio {ratio:.2f}x")
    print("relative error per layer: " + ", ".join(f"{lab} {e:.4f}" for lab, e in
                                                   zip(feats["float32"].layer_labels, errors)))
    print(f"mutual k-NN (k = {k}) vs {args.partner}: peak fp32 {np.nanmax(s32):.4f} bf16 {np.nanmax(s16):.4f}; final fp32 "
          f"{s32[-1, -1]:.4f} bf16 {s16[-1, -1]:.4f}; changes " + ", ".join(f"{n} {v:.4f}" for n, v in changes.items()))
    worst = max(changes.values())
    if not np.isfinite(worst):
        raise SystemExit(f"a score change is not finite ({changes}): cannot judge {args.model}")
    row = {"allowed": bool(native and worst < threshold), "speed_ratio": round(ratio, 3),
           "max_rel_error": round(float(errors.max()), 5), "max_score_change": round(worst, 5),
           "threshold": threshold, "benchmark": f"benchmarks/bf16_extraction.py on {ds.name}, N = {len(pairs)}, "
                                                f"partner {args.partner}, k = {k} (floors, displacement: not yet)"}
    print(f"row for prh_lib/resources/bf16_allowed.json ({args.model}): {json.dumps(row)}")
    print("note: one dataset only; allow a model only after both offline datasets and every headline score "
          "(floors, displacement) stay below the threshold")


if __name__ == "__main__":
    main()
