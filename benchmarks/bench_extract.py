"""Feature extraction of caption variants: each set on its own against shared token prefixes.

App. F (caption detail) and Section 3.2 (capability) extract a causal LM on several caption sets of the same
images: 1..5 captions concatenated, truncations of the five, first caption and three. A caption set whose
texts are token prefixes of another's needs no forward pass of its own (``prh_lib.extract``,
``share_prefixes``). This script times both ways on the coco-mini images, no cache, and prints the forward
passes, tokens run, wall time and the largest difference between the two results.

    python benchmarks/bench_extract.py [--model smollm2-135m] [--n 239] [--threads 2]

Needs the zoo model (``prh-zoo install``) and ``PRH_DATA_ROOT`` (default ``../shared/data/coco-mini``).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n", type=int, default=239, help="images (coco-mini has 239)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from prh_lib import data, extract, models
    from prh_lib.analysis.captions import study as captions_study

    ds = data.load_dataset("coco-folder")
    variants, _ = captions_study.detail_variants(ds, n=args.n, seed=0, max_captions=5,
                                                 fractions=[0.1, 0.25, 0.5, 0.75], summary_model=None)
    sets = [v["pairs"] for name, v in variants.items() if "(subset)" not in name]
    model = models.load_model(args.model)
    texts = list(dict.fromkeys(t for p in sets for t in p.texts))
    ids = model.tokenizer(texts)["input_ids"]
    lengths = np.array([len(t) for t in ids])
    runs = np.unique(extract.prefix_servers(ids))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
          f"{torch.__version__} ({torch.get_num_threads()} threads), load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{args.model}: {len(sets)} caption sets of {args.n} images, {sum(map(len, sets))} texts "
          f"({len(texts)} distinct, {lengths.sum()} tokens)")

    t0 = time.perf_counter()
    alone = extract.features_for_pairs(model, sets, batch_size=args.batch_size, progress=False, cache=False,
                                       share_prefixes=False)
    t_alone = time.perf_counter() - t0
    t0 = time.perf_counter()
    shared = extract.features_for_pairs(model, sets, batch_size=args.batch_size, progress=False, cache=False)
    t_shared = time.perf_counter() - t0
    err = max(float((a.values - b.values).abs().max() / a.values.abs().max()) for a, b in zip(alone, shared))

    print()
    print("| extraction | forward passes (texts) | tokens run | time (s) |")
    print("|---|---:|---:|---:|")
    n_tokens = dict(zip(texts, lengths))
    print(f"| each set on its own | {sum(map(len, sets))} | {sum(n_tokens[t] for p in sets for t in p.texts)} | "
          f"{t_alone:.1f} |")
    print(f"| shared token prefixes | {len(runs)} (+1 check) | {lengths[runs].sum()} | {t_shared:.1f} |")
    print(f"\nspeed-up {t_alone / t_shared:.1f}x; largest difference / largest value: {err:.1e} (float32 round-off); "
          f"load average after {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
