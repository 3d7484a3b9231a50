"""Held-out peaks (:func:`prh_lib.stats.selection.crossfit_peaks`): halves' neighbourhoods read off full-sample
candidates against selecting on every half, on stacks of the offline models' shapes at the paper's N.

Prints the time of each path (interleaved, best of ``--repeats``), the speed-up, and whether every field of
every :class:`~prh_lib.stats.selection.CrossFitPeak` is equal (it must be: the candidate path changes no bit).
Synthetic stacks share a latent signal (so that the peaks are not at chance) and have the offline models' layer
counts and widths: DINOv2-S (13 x 384, one stack for all caption draws), SmolLM2-135M (31 x 576) and MiniLM-L6
(7 x 384), one stack per caption draw. Nothing is asserted; tests/test_selection.py checks the equality.

    python benchmarks/heldout_speed.py --n 1000 --draws 5 --n-boot 100 --threads 1
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import numpy as np
import torch


def stacks(n: int, draws: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 64, generator=g)

    def stack(L, d):
        W = torch.randn(64, d, generator=g)
        return torch.stack([base @ W + (layer + 1) * 0.5 * torch.randn(n, d, generator=g) for layer in range(L)])

    vision = [stack(13, 384)] * draws
    smol = [stack(31, 576) for _ in range(draws)]
    mini = [stack(7, 384) for _ in range(draws)]
    return [(vision, smol), (vision, mini), (smol, mini)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--n-splits", type=int, default=10)
    parser.add_argument("--n-boot", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from prh_lib.stats import selection
    from prh_lib.metrics import _engines as metrics_engines

    comps = stacks(args.n, args.draws)
    fast_engine = metrics_engines.get_engine("mutual_knn")
    plain_engine = dataclasses.replace(fast_engine, subsample_state=None, subsample_candidates=None)
    real = metrics_engines.get_engine
    times, out = {"candidates": [], "every half": []}, {}
    for _ in range(args.repeats):
        for label, engine in (("candidates", fast_engine), ("every half", plain_engine)):
            metrics_engines.get_engine = lambda name, e=engine: e
            try:
                t0 = time.perf_counter()
                out[label] = selection.crossfit_peaks(comps, k=10, n_splits=args.n_splits, n_boot=args.n_boot, seed=0)
                times[label].append(time.perf_counter() - t0)
            finally:
                metrics_engines.get_engine = real
    equal = all(np.array_equal(np.asarray(getattr(a, f.name)), np.asarray(getattr(b, f.name)), equal_nan=True)
                for a, b in zip(out["candidates"], out["every half"]) for f in dataclasses.fields(a)
                if not isinstance(getattr(a, f.name), str))
    print(f"crossfit_peaks of 3 comparisons (DINOv2-S x SmolLM2, DINOv2-S x MiniLM, SmolLM2 x MiniLM shapes), "
          f"N = {args.n}, {args.draws} draws, {args.n_splits} splits, {args.n_boot} half-samples, "
          f"{torch.get_num_threads()} thread(s), load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for label, t in times.items():
        print(f"  {label:>10}: {min(t):7.1f} s (best of {len(t)})")
    print(f"  speed-up {min(times['every half']) / min(times['candidates']):.2f}x; every field equal: {equal}")


if __name__ == "__main__":
    main()
