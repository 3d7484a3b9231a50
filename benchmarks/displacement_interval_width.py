"""How wide are the displacement chapter's held-out intervals against the true sampling spread? (prints figures)

:func:`prh_lib.analysis.displacement.heldout.heldout_best_pair` gives each held-out measure a 95 % interval by
subsampling the images without replacement (half of each half) and rescaling the replicates' spread by
``sqrt(m / n)``. That rescaling assumes a variance proportional to 1 / (sample size); the measures whiten on their
own rows, so at a few hundred rows their variance can fall faster, and the interval can be too wide or too narrow.

This script draws ``--samples`` independent samples of ``n`` rows from a known synthetic population (two views of
one Gaussian latent with different means, one layer each), computes the held-out estimate and its interval on
each, and prints per measure: the true standard deviation of the estimate over samples, the standard deviation
implied by the mean interval half-width (``half / 1.96``), their ratio (> 1: conservative), and how often the
interval holds the mean of all estimates (a proxy for the true value).

Usage::

    python benchmarks/displacement_interval_width.py            # n = 128 and 256, 60 samples each (about 2 min)
    python benchmarks/displacement_interval_width.py --n 64 128 --samples 30

Measured (stop 33, Xeon, 2 cores): n = 128: Cross-Model ratio 1.89, Pointwise 1.90, Cross-Model − Pointwise
4.08; n = 256: 4.54, 4.22, 2.92. The intervals are conservative (wider than the sampling spread) here.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv=None) -> None:
    from prh_lib.analysis.displacement.heldout import heldout_best_pair, subsample_interval

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[128, 256], help="rows per sample")
    ap.add_argument("--samples", type=int, default=60, help="independent samples per n")
    ap.add_argument("--n-boot", type=int, default=40, help="subsampling replicates per sample")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    d_lat, dx, dy = 16, 48, 40
    A, B = rng.normal(size=(d_lat, dx)), rng.normal(size=(d_lat, dy))
    mx, my = 2 * rng.normal(size=dx), 2 * rng.normal(size=dy)

    def sample(n):
        Z = rng.normal(size=(n, d_lat))
        return ((Z @ A + 1.5 * rng.normal(size=(n, dx)) + mx)[None], (Z @ B + 1.5 * rng.normal(size=(n, dy)) + my)[None])

    print(f"{'n':>5} {'measure':<26} {'true sd':>8} {'implied sd':>10} {'ratio':>6} {'coverage':>8}")
    for n in a.n:
        t0 = time.perf_counter()
        est = {"Cross-Model": [], "Pointwise": [], "Cross-Model − Pointwise": []}
        ivs = {k: [] for k in est}
        for s in range(a.samples):
            X, Y = sample(n)
            h = heldout_best_pair(X, Y, n_splits=5, n_boot=a.n_boot, n_candidates=1, n_components=16, seed=s)
            vals = {"Cross-Model": (h.heldout["cross_model"], h.reps["cross_model"]),
                    "Pointwise": (h.heldout["pointwise"], h.reps["pointwise"]),
                    "Cross-Model − Pointwise": (h.heldout["cross_model"] - h.heldout["pointwise"],
                                                h.reps["cross_model"] - h.reps["pointwise"])}
            for m, (e, r) in vals.items():
                est[m].append(e)
                ivs[m].append(subsample_interval(e, r, h.subsample_ratio))
        for m in est:
            e, iv = np.array(est[m]), np.array(ivs[m])
            sd, implied = e.std(ddof=1), ((iv[:, 1] - iv[:, 0]) / 2).mean() / 1.96
            cover = np.mean((iv[:, 0] <= e.mean()) & (e.mean() <= iv[:, 1]))
            print(f"{n:>5} {m:<26} {sd:>8.4f} {implied:>10.4f} {implied / sd:>6.2f} {cover:>8.0%}")
        print(f"      ({a.samples} samples in {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
