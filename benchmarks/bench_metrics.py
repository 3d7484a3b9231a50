"""Benchmark of the layer-wise k-NN metrics and their permutation nulls (a script that prints figures).

Every case runs in its own subprocess (so peak memory is per case) on the same synthetic stacks, and is
timed ``--repeat`` times, keeping the minimum (the machine may be shared: the minimum is the least
disturbed run). Ratios are taken against the floor measured in the same run.

``gram``       the floor: forming the ``L_x + L_y`` Gram matrices ``Z Z^T`` (float32) and nothing else.
``layerwise``  ``mutual_knn_layerwise``.
``reference``  the algorithm of the PRH reference code (github.com/minyoungg/platonic-rep,
               ``measure_alignment.compute_score`` and ``metrics.AlignmentMetrics.mutual_knn``), written
               here from reading it: for every layer pair, L2-normalise both layers, form both Gram
               matrices, set the diagonal to -1e8, sort every row fully (``argsort``), keep the first
               ``k`` columns, build two dense 0/1 masks and average their row overlaps. Timed on
               ``--ref-pairs`` evenly spaced pairs and extrapolated to all pairs.
``null``       ``permutation_test_layerwise(metric="mutual_knn", selection_aware=True)`` with ``K``
               permutations (Gram matrices and neighbours once; all pairs of every permutation from
               relabelled neighbour lists).
``null_<m>``   the same for ``m`` in ``jaccard_knn``, ``cycle_knn``, ``cknna`` (``--other-nulls``), with
               ``--other-permutations`` permutations, extrapolated to ``K``.
``bootstrap``  ``bootstrap_ci(X[-1], Y[-1], metric="mutual_knn")`` with ``--boot`` replicates (one layer pair):
               every replicate's neighbours read off each row's best full-sample candidates, the replicates
               scored as one stack.
``bootstrap_loop``  the same, one replicate at a time (each resampled similarity matrix gathered and
               selected with ``topk``): the way it was done before, kept as the reference path.
``check``      not timed: for a few permutations, the null's matrix against ``mutual_knn_layerwise`` on
               ``Y[perm]`` (recomputed from features) and against the reference algorithm on a few
               pairs; prints whether they are identical bit for bit.

Usage::

    python benchmarks/bench_metrics.py --quick              # small sizes, seconds
    python benchmarks/bench_metrics.py                      # 33 x 25 layers, N=1024, d 4096 / 1024, K=500
    python benchmarks/bench_metrics.py --device cuda
    python benchmarks/bench_metrics.py --ties-fpr           # false-positive rate on tied independent data

``--ties-fpr`` measures how often the calibrated mutual k-NN test rejects at ``alpha = 0.05`` on
independent data with exact ties (duplicates, quantised, categorical, all-zero rows, and untied data
as control), over ``--datasets`` data sets per kind. It uses only the public API, so running it with
``PYTHONPATH`` pointing at an older checkout measures that version.

Peak memory is the peak resident set size of the case's process (CPU) or
``torch.cuda.max_memory_allocated`` (CUDA); "extra" subtracts what the inputs alone occupy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

CASES = ("gram", "layerwise", "reference", "null", "bootstrap", "bootstrap_loop", "check")
OTHER = ("jaccard_knn", "cycle_knn", "cknna")


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _data(args, device):
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    X = torch.randn(args.lx, args.n, args.dx, generator=g).to(device)
    Y = torch.randn(args.ly, args.n, args.dy, generator=g).to(device)
    return X, Y


def reference_mutual_knn(x, y, k):
    """Mutual k-NN as the PRH reference code computes it for one layer pair (full sort per row)."""
    import torch
    import torch.nn.functional as F

    def knn(z):
        z = F.normalize(z, p=2, dim=-1)
        return (z @ z.T).fill_diagonal_(-1e8).argsort(dim=1, descending=True)[:, :k]

    a, b = knn(x), knn(y)
    n = a.shape[0]
    rows = torch.arange(n, device=a.device)[:, None]
    ma = torch.zeros(n, n, device=a.device)
    mb = torch.zeros(n, n, device=a.device)
    ma[rows, a] = 1.0
    mb[rows, b] = 1.0
    return ((ma * mb).sum(1) / k).mean().item()


def _pairs(args):
    pairs = [(a, b) for a in range(args.lx) for b in range(args.ly)]
    m = min(args.ref_pairs, len(pairs))
    step = max(1, len(pairs) // m)
    return pairs, pairs[::step][:m]


def run_case(args) -> dict:
    import numpy as np
    import torch

    from prh_lib.stats import bootstrap_ci, permutation_test_layerwise
    from prh_lib.metrics import mutual_knn_layerwise
    from prh_lib.metrics import knn as _knn

    if args.case == "bootstrap_loop":  # the engine without its stacked-replicate path: one at a time
        from dataclasses import replace

        from prh_lib.metrics import _engines

        _engines.ENGINES["mutual_knn"] = replace(_engines.ENGINES["mutual_knn"], resample_state=None)
    if args.threads:
        torch.set_num_threads(args.threads)  # benchmark process only (the library never does this)
    device = torch.device(args.device)
    X, Y = _data(args, device)
    # warm-up on tiny inputs: first-call costs (thread pools, kernels) are not what we measure
    w = torch.randn(2, 16, 8).to(device)
    mutual_knn_layerwise(w, w, k=3)
    permutation_test_layerwise(w, w, k=3, n_permutations=19)
    reference_mutual_knn(w[0], w[1], 3)
    _sync(device)
    base = _rss_mib() if device.type == "cpu" else torch.cuda.memory_allocated(device) / 2**20
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    out = {"scale": 1.0}
    if args.case == "check":
        return _check(args, X, Y)

    def floor():
        for Z in (X, Y):
            for layer in range(Z.shape[0]):
                G = Z[layer] @ Z[layer].T
        del G
        _sync(device)

    def once():
        # the library memoises neighbourhoods per input tensor (prh_lib.metrics.knn._HOODS_MEMO); every timed
        # run starts without them, so each one measures the whole computation
        _knn._HOODS_MEMO.clear()
        if args.case == "gram":
            floor()
        elif args.case == "layerwise":
            mutual_knn_layerwise(X, Y, k=args.k)
        elif args.case == "reference":
            pairs, timed = _pairs(args)
            for a, b in timed:
                reference_mutual_knn(X[a], Y[b], args.k)
            out["scale"] = len(pairs) / len(timed)
            out["pairs"] = f"{len(timed)}/{len(pairs)} pairs, extrapolated"
        elif args.case == "null":
            permutation_test_layerwise(X, Y, metric="mutual_knn", k=args.k, n_permutations=args.permutations, seed=0)
        elif args.case in ("bootstrap", "bootstrap_loop"):
            bootstrap_ci(X[-1], Y[-1], metric="mutual_knn", k=args.k, n_boot=args.boot, seed=0)
        elif args.case.startswith("null_"):
            metric = args.case[5:]
            K = args.other_permutations
            permutation_test_layerwise(X, Y, metric=metric, k=args.k, n_permutations=K, seed=0, alpha=1 / (K + 1))
            out["scale"] = 1.0  # the fixed cost (Gram matrices, neighbours) is not extrapolated; see below
            out["permutations_timed"] = K
        _sync(device)

    def timed(f):
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0

    # the floor is timed again in every case's process, interleaved with the case: on a shared machine
    # the ratio of the two minima is far more stable than a ratio across processes
    times, floors = [], []
    for _ in range(args.repeat):
        floors.append(timed(floor))
        times.append(timed(once))
    out["seconds"] = min(times) * out["scale"]
    out["all_seconds"] = times
    out["floor_seconds"] = min(floors)
    out["peak_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 if device.type == "cpu"
                       else torch.cuda.max_memory_allocated(device) / 2**20)
    out["base_mib"] = base
    out["threads"] = torch.get_num_threads()
    return out


def _check(args, X, Y) -> dict:
    import numpy as np
    import torch

    from prh_lib.metrics import mutual_knn_layerwise
    from prh_lib.stats import permutation_test_layerwise

    rng = np.random.default_rng(1)
    perms = np.stack([rng.permutation(args.n) for _ in range(2)])
    res = permutation_test_layerwise(X, Y, metric="mutual_knn", k=args.k, permutations=perms, alpha=0.5)
    same_recompute = all(
        np.array_equal(res.null[t], mutual_knn_layerwise(X, Y[:, torch.from_numpy(p).to(Y.device)], k=args.k))
        for t, p in enumerate(perms)
    )
    _, timed = _pairs(args)
    p0 = torch.from_numpy(perms[0]).to(Y.device)
    # the reference averages in float32: equal up to its rounding
    same_reference = all(
        abs(res.null[0, a, b] - reference_mutual_knn(X[a], Y[b][p0], args.k)) < 1e-6 for a, b in timed[:3]
    ) and all(abs(res.observed[a, b] - reference_mutual_knn(X[a], Y[b], args.k)) < 1e-6 for a, b in timed[:3])
    return {"identical_to_recomputation": bool(same_recompute), "equal_to_reference": bool(same_reference)}


# --------------------------------------------------------------------------------------------------
# false-positive rate on tied independent data
# --------------------------------------------------------------------------------------------------

TIE_KINDS = ("untied", "duplicates", "quantised", "categorical", "zero_rows")


def tied_data(kind, n, rng):
    """One representation of ``n`` samples with exact ties of the given kind (independent draws)."""
    import numpy as np

    if kind == "untied":
        return rng.normal(size=(n, 8))
    if kind == "duplicates":  # every sample appears about three times
        base = rng.normal(size=(n // 3, 8))
        return base[rng.integers(0, len(base), size=n)]
    if kind == "quantised":  # 3 features rounded to integers: many equal cosines
        return np.round(rng.normal(size=(n, 3)))
    if kind == "categorical":  # one-hot of 5 categories: cosine 1 within, 0 across
        return np.eye(5)[rng.integers(0, 5, size=n)]
    if kind == "zero_rows":  # 30 % all-zero rows, the rest continuous
        Z = rng.normal(size=(n, 8))
        Z[rng.random(n) < 0.3] = 0.0
        return Z
    raise ValueError(kind)


def ties_fpr(args):
    import warnings

    import numpy as np

    from prh_lib.stats import permutation_test

    warnings.simplefilter("ignore", RuntimeWarning)
    print(f"false-positive rate of the calibrated mutual k-NN test, alpha={args.alpha}, N={args.fpr_n}, "
          f"k={args.k_fpr}, K={args.fpr_permutations}, {args.datasets} independent data sets per kind")
    print(f"{'kind':<12} {'rejections':>11} {'FPR':>7} {'95% CI':>15} {'mean observed':>14} {'mean null':>10}")
    for kind in TIE_KINDS:
        rng = np.random.default_rng(12345)
        rej, obs, nul = 0, [], []
        for d in range(args.datasets):
            X, Y = tied_data(kind, args.fpr_n, rng), tied_data(kind, args.fpr_n, rng)
            r = permutation_test(X, Y, metric="mutual_knn", k=args.k_fpr, n_permutations=args.fpr_permutations,
                                 alpha=args.alpha, seed=d)
            rej += r.p_value <= args.alpha
            obs.append(r.observed)
            nul.append(float(np.mean(r.null)))
        p = rej / args.datasets
        half = 1.96 * np.sqrt(max(p * (1 - p), 1e-12) / args.datasets)
        print(f"{kind:<12} {rej:>5}/{args.datasets:<5} {p:7.3f} [{max(p - half, 0):.3f}, {min(p + half, 1):.3f}]"
              f" {np.mean(obs):14.4f} {np.mean(nul):10.4f}", flush=True)
    print(f"(chance level k/(N-1) = {args.k_fpr / (args.fpr_n - 1):.4f})")


# --------------------------------------------------------------------------------------------------


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
    p.add_argument("--boot", type=int, default=100, help="bootstrap replicates (bootstrap cases)")
    p.add_argument("--ref-pairs", type=int, help="time this many layer pairs of the reference and extrapolate")
    p.add_argument("--repeat", type=int, default=3, help="repeats per case; the minimum is reported")
    p.add_argument("--threads", type=int, help="torch threads in the case processes (default: torch's)")
    p.add_argument("--other-nulls", default="", help=f"comma-separated, from {OTHER}, or 'all'")
    p.add_argument("--other-permutations", type=int, default=20)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--ties-fpr", action="store_true", help="measure the test's level on tied data instead")
    p.add_argument("--datasets", type=int, default=300)
    p.add_argument("--fpr-n", type=int, default=60)
    p.add_argument("--k-fpr", type=int, default=5)
    p.add_argument("--fpr-permutations", type=int, default=99)
    p.add_argument("--alpha", type=float, default=0.05)
    args = p.parse_args(argv)
    if args.ties_fpr:
        return ties_fpr(args)
    full = dict(lx=33, ly=25, n=1024, dx=4096, dy=1024, permutations=500, ref_pairs=25)
    quick = dict(lx=6, ly=5, n=256, dx=256, dy=128, permutations=50, ref_pairs=30)
    for key, val in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, val)

    if args.case:  # child process
        print(json.dumps(run_case(args)))
        return

    others = list(OTHER) if args.other_nulls == "all" else [m for m in args.other_nulls.split(",") if m]
    cases = [c for c in args.cases.split(",") if c] + [f"null_{m}" for m in others]
    import torch

    print(f"k-NN layer-wise benchmark: L_x={args.lx}, L_y={args.ly}, N={args.n}, d_x={args.dx}, d_y={args.dy}, "
          f"k={args.k}, K={args.permutations}, device={args.device}, repeat={args.repeat} (min)")
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    print(f"machine: {cpu}, {os.cpu_count()} CPUs, {mem:.0f} GiB, torch "
          f"{torch.__version__} ({args.threads or torch.get_num_threads()} threads)"
          + (f", {torch.cuda.get_device_name(0)}" if args.device.startswith("cuda") else ""))
    print(f"load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min)")
    res = {}
    for case in cases:
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                 if k not in ("case", "quick", "cases", "other_nulls", "ties_fpr") and v is not None
                 and not isinstance(v, bool)]
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--case", case] + flags,
                              capture_output=True, text=True)
        if proc.returncode:
            print(f"{case}: failed\n{proc.stderr}", file=sys.stderr)
            continue
        res[case] = json.loads(proc.stdout.strip().splitlines()[-1])
        if case == "check":
            print(f"  check: null identical to recomputation: {res[case]['identical_to_recomputation']}; "
                  f"equal to the reference algorithm (float32 rounding): {res[case]['equal_to_reference']}", flush=True)
        else:
            print(f"  ran {case:<16} {res[case]['seconds']:9.2f} s  (runs: "
                  f"{', '.join(f'{t:.2f}' for t in res[case]['all_seconds'])})", flush=True)

    print(f"load average at end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    lw = res.get("layerwise", {}).get("seconds")
    labels = {
        "gram": f"Gram floor ({args.lx + args.ly} Gram matrices)",
        "layerwise": "mutual_knn_layerwise",
        "reference": "PRH reference algorithm (per pair, full sort)",
        "null": f"selection-aware null, mutual_knn, K={args.permutations}",
        "bootstrap": f"bootstrap_ci, one layer pair, {args.boot} replicates",
        "bootstrap_loop": f"bootstrap_ci, one replicate at a time ({args.boot})",
    }
    for m in others:
        labels[f"null_{m}"] = f"selection-aware null, {m}, K={args.other_permutations}"
    print()
    print(f"{'case':<52} {'time (s)':>10} {'x floor':>8} {'peak (MiB)':>11} {'extra (MiB)':>12}"
          "   (x floor: against the floor timed in the same process, interleaved)")
    for case in cases:
        if case not in res or case == "check":
            continue
        r = res[case]
        label = labels[case] + (f" [{r['pairs']}]" if "pairs" in r else "")
        ratio = f"{r['seconds'] / r['floor_seconds']:7.2f}x"
        extra = r["peak_mib"] - r["base_mib"]
        print(f"{label:<52} {r['seconds']:10.2f} {ratio:>8} {r['peak_mib']:11.0f} {extra:12.0f}")
    if lw and "reference" in res:
        print(f"(reference / mutual_knn_layerwise = {res['reference']['seconds'] / lw:.0f}x)")
    for m in others if args.other_permutations != args.permutations else ():
        c = f"null_{m}"
        if c in res and lw:
            r = res[c]
            fixed = lw / res["layerwise"]["floor_seconds"] * r["floor_seconds"]  # layer-wise cost, this process
            per = max(r["seconds"] - fixed, 0) / args.other_permutations
            total = per * args.permutations + fixed
            print(f"({m}: about {total:.0f} s extrapolated to K={args.permutations}, {total / r['floor_seconds']:.1f}x "
                  "floor, taking its fixed cost to be that of mutual_knn_layerwise)")


if __name__ == "__main__":
    main()
