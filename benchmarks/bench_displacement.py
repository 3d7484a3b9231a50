"""Benchmark of the displacement-geometry measures (a script that prints figures, not a test).

Cases:

``whiten``     the ``L_x + L_y`` whitening fits alone (PCA of the training rows of each layer).
``layerwise``  ``displacement_layerwise``: whitening once per layer, then Procrustes and the six cosine
               measures for each of the ``L_x * L_y`` layer pairs.
``consensus``  ``consensus_subspaces`` + ``subspace_alignment`` of ``--models`` models at one layer each.
``reference``  ``reference_procedure`` (the public reference code's steps) for one layer pair, against
               ``displacement_similarity`` (ours) on the same pair.

Usage::

    python benchmarks/bench_displacement.py --quick          # small sizes, seconds
    python benchmarks/bench_displacement.py                  # 33 x 25 layers, N=1024, d 1024, r=100
    python benchmarks/bench_displacement.py --threads 0      # the BLAS libraries' default thread count

``--threads`` limits BLAS/OpenMP threads with ``threadpoolctl`` (default 1: every matrix here is small, and on
a shared CPU extra threads spin-wait; compare with ``--threads 0``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _timed(fn, repeat: int) -> tuple[float, object]:
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="7 x 5 layers, N=256, d=128, r=32")
    p.add_argument("--lx", type=int, default=33)
    p.add_argument("--ly", type=int, default=25)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--dx", type=int, default=1024)
    p.add_argument("--dy", type=int, default=1024)
    p.add_argument("--n-components", type=int, default=100)
    p.add_argument("--n-pairs", type=int, default=10_000)
    p.add_argument("--models", type=int, default=4)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads; 0: library default")
    args = p.parse_args(argv)
    if args.quick:
        args.lx, args.ly, args.n, args.dx, args.dy, args.n_components = 7, 5, 256, 128, 128, 32

    from threadpoolctl import threadpool_limits

    from prh_lib.analysis.displacement import consensus as C
    from prh_lib.analysis.displacement import reference as R
    from prh_lib.metrics import displacement as D
    from prh_lib.metrics._whitening import fit_whitening, split_indices

    with threadpool_limits(args.threads or None):
        rng = np.random.default_rng(0)
        S = rng.standard_normal((args.n, 16))  # a shared latent, so the measures are not all ~0
        XL = np.stack([S @ rng.standard_normal((16, args.dx)) + rng.standard_normal((args.n, args.dx))
                       for _ in range(args.lx)]).astype(np.float32)
        YL = np.stack([S @ rng.standard_normal((16, args.dy)) + rng.standard_normal((args.n, args.dy))
                       for _ in range(args.ly)]).astype(np.float32)
        opts = dict(n_components=args.n_components, n_pairs=args.n_pairs)
        D.displacement_layerwise(XL[:1, :64, :32], YL[:1, :64, :32], n_components=8, n_pairs=100)  # warm-up

        train, _ = split_indices(args.n)
        t_w, _ = _timed(lambda: [fit_whitening(L[train], n_components=args.n_components) for L in (*XL, *YL)],
                        args.repeat)
        t_l, out = _timed(lambda: D.displacement_layerwise(XL, YL, **opts), args.repeat)
        n_lp = args.lx * args.ly
        feats = [XL[i % args.lx] if i % 2 == 0 else YL[i % args.ly] for i in range(args.models)]
        r = min(args.n_components, args.n // 2 - 1)
        n_sh = max(1, min(10, r // 4))

        def consensus():
            res = C.consensus_subspaces(feats, n_components=args.n_components, n_shared=n_sh)
            return C.subspace_alignment(res, n_pairs=args.n_pairs, n_random=5)

        t_c, _ = _timed(consensus, args.repeat)
        r_ref = min(args.n_components, args.dx - 1, args.dy - 1)
        t_r, _ = _timed(lambda: R.reference_procedure(XL[0], YL[0], n_components=r_ref, train_size=args.n // 2),
                        args.repeat)
        t_o, _ = _timed(lambda: D.displacement_similarity(XL[0], YL[0], n_components=r_ref, n_pairs=args.n_pairs),
                        args.repeat)

    print(f"sizes: {args.lx} x {args.ly} layers, N={args.n}, d={args.dx}/{args.dy}, n_components={args.n_components}, "
          f"n_pairs={args.n_pairs}, threads={args.threads or 'default'}")
    print(f"whiten     {t_w:8.2f} s  ({args.lx + args.ly} PCA fits, {1e3 * t_w / (args.lx + args.ly):.1f} ms each)")
    print(f"layerwise  {t_l:8.2f} s  ({n_lp} layer pairs, {1e3 * (t_l - t_w) / n_lp:.1f} ms per pair after whitening)"
          f"; r = {int(out['n_components'].max())}, max cross_model {np.nanmax(out['cross_model']):.3f}")
    print(f"consensus  {t_c:8.2f} s  ({args.models} models, n_shared={n_sh}, with subspace_alignment)")
    print(f"reference  {t_r:8.2f} s  (one layer pair; ours {t_o:.2f} s with {args.n_pairs} pairs and shuffled controls)")


if __name__ == "__main__":
    main()
