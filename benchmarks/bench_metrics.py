"""Benchmark of the layer-wise alignment metrics (a script that prints figures, not a test).

Cases, each run in its own subprocess so that peak memory is measured per case:

``layerwise``  ``mutual_knn_layerwise``: neighbours once per layer, all pair overlaps batched.
``loop``       a plain loop over layer pairs calling ``mutual_knn``, which recomputes both layers'
               neighbours for every pair (timed on ``--loop-pairs`` pairs and extrapolated to all).
``gram``       the floor: forming the ``L_x + L_y`` Gram matrices alone.
``null``       ``permutation_test_layerwise(metric="mutual_knn", selection_aware=True)`` with
               ``--permutations`` permutations (neighbour lists permuted, never recomputed).

Usage::

    python benchmarks/bench_metrics.py --quick              # small sizes, seconds
    python benchmarks/bench_metrics.py                      # 33 x 25 layers, N=1024, d 4096 / 1024, K=500
    python benchmarks/bench_metrics.py --device cuda

Peak memory is the peak resident set size of the case's process (CPU) or
``torch.cuda.max_memory_allocated`` (CUDA); "extra" subtracts what the inputs alone occupy.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

CASES = ("gram", "layerwise", "loop", "null")


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_case(args) -> dict:
    import torch

    from prh_lib.metrics import mutual_knn, mutual_knn_layerwise, permutation_test_layerwise

    device = torch.device(args.device)
    g = torch.Generator(device="cpu").manual_seed(0)
    X = torch.randn(args.lx, args.n, args.dx, generator=g).to(device)
    Y = torch.randn(args.ly, args.n, args.dy, generator=g).to(device)
    # warm-up on tiny inputs: first-call costs (thread pools, kernels) are not what we measure
    w = torch.randn(2, 16, 8, generator=g).to(device)
    mutual_knn_layerwise(w, w, k=3)
    mutual_knn(w[0], w[1], k=3)
    permutation_test_layerwise(w, w, k=3, n_permutations=19)
    _sync(device)
    base = _rss_mib() if device.type == "cpu" else torch.cuda.memory_allocated(device) / 2**20
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    out = {"pairs_timed": None}
    t0 = time.perf_counter()
    if args.case == "gram":
        for Z in (X, Y):
            for layer in range(Z.shape[0]):
                G = Z[layer] @ Z[layer].T
        del G
    elif args.case == "layerwise":
        mutual_knn_layerwise(X, Y, k=args.k)
    elif args.case == "loop":
        pairs = [(a, b) for a in range(args.lx) for b in range(args.ly)]
        m = len(pairs) if args.loop_pairs is None else min(args.loop_pairs, len(pairs))
        step = max(1, len(pairs) // m)
        for a, b in pairs[::step][:m]:
            mutual_knn(X[a], Y[b], k=args.k)
        out["pairs_timed"] = m
        out["pairs_total"] = len(pairs)
    elif args.case == "null":
        permutation_test_layerwise(X, Y, metric="mutual_knn", k=args.k, n_permutations=args.permutations, seed=0)
    _sync(device)
    out["seconds"] = time.perf_counter() - t0
    if out["pairs_timed"]:
        out["seconds_measured"] = out["seconds"]
        out["seconds"] *= out["pairs_total"] / out["pairs_timed"]
    if device.type == "cpu":
        out["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    else:
        out["peak_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    out["base_mib"] = base
    out["threads"] = torch.get_num_threads()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (6 x 5 layers, N=256, K=50)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--lx", type=int)
    p.add_argument("--ly", type=int)
    p.add_argument("--n", type=int)
    p.add_argument("--dx", type=int)
    p.add_argument("--dy", type=int)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--permutations", type=int)
    p.add_argument("--loop-pairs", type=int, help="time this many layer pairs of the loop and extrapolate")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--case", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    full = dict(lx=33, ly=25, n=1024, dx=4096, dy=1024, permutations=500, loop_pairs=25)
    quick = dict(lx=6, ly=5, n=256, dx=256, dy=128, permutations=50, loop_pairs=None)
    for key, val in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, val)

    if args.case:  # child process
        print(json.dumps(run_case(args)))
        return

    cases = [c for c in args.cases.split(",") if c]
    print(
        f"mutual k-NN layer-wise benchmark: L_x={args.lx}, L_y={args.ly}, N={args.n}, d_x={args.dx}, "
        f"d_y={args.dy}, k={args.k}, K={args.permutations}, device={args.device}"
    )
    res = {}
    for case in cases:
        cmd = [sys.executable, os.path.abspath(__file__), "--case", case] + [
            f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
            if k not in ("case", "quick", "cases") and v is not None
        ] + (["--quick"] if args.quick else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            print(f"{case}: failed\n{proc.stderr}", file=sys.stderr)
            continue
        res[case] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"  ran {case:<9} {res[case]['seconds']:9.2f} s", flush=True)

    lw = res.get("layerwise", {}).get("seconds")
    rows = {
        "gram": "Gram floor (L_x + L_y Gram matrices)",
        "layerwise": "mutual_knn_layerwise",
        "loop": "loop over pairs, recomputing neighbours",
        "null": f"selection-aware null, K={args.permutations}",
    }
    print()
    print(f"{'case':<58} {'time (s)':>10} {'vs layer-wise':>14} {'peak (MiB)':>11} {'extra (MiB)':>12}")
    for case in cases:
        if case not in res:
            continue
        r = res[case]
        ratio = f"{r['seconds'] / lw:13.2f}x" if lw else ""
        label = rows[case]
        if r.get("pairs_timed") and r["pairs_timed"] < r["pairs_total"]:
            label += f" [{r['pairs_timed']}/{r['pairs_total']} pairs, extrap.]"
        print(f"{label:<58} {r['seconds']:10.2f} {ratio:>14} {r['peak_mib']:11.0f} {r['peak_mib'] - r['base_mib']:12.0f}")
    if res:
        print(f"(torch threads: {next(iter(res.values()))['threads']}; ratios are time / layer-wise time)")


if __name__ == "__main__":
    main()
