"""How much faster can two cores do the main job's kinds of work than one? (prints figures; issue 42, item 4)

The cold main job's speed-up from one core to two is bounded by how much work one core still does while the
other core is busy. This script measures that bound directly, per kind of work the job does, with no scheduling in
the way: each workload runs once alone in a process pinned to one core, then as two copies at once, one per core,
started together. The ceiling for that work is ``2 * alone / paired`` (2.0: the cores do not slow each other).

Workloads (each a few seconds on one core of the 2-core CI machine, one torch thread):

- ``forward-lm``: SmolLM2-135M forward passes over captions, as the extraction step runs them (the zoo's
  weights, bfloat16 where the machine and the model's bf16 row allow it, else float32; falls back to a
  random-init twin when the zoo is not installed);
- ``forward-cnn``: EfficientNet-Lite0's forward passes on 224 px random images (float32);
- ``mutual-knn``: the layer-wise mutual k-NN of two (13, 1000, 384) and (31, 1000, 576) feature stacks (Gram
  matrices, top-k, overlap), as the chapters score;
- ``read-features``: reading a 155 MB float32 safetensors feature file from the page cache and summing it, 20 times.

``--speed`` times each workload alone on one core only and prints it against the same workload on the
reference machine (:data:`REFERENCE`), so that a build's wall time on another machine, or on the same VM kind on a
slower day, can be read against the README's. ``.ci/run`` prints this line before the main job.

Usage::

    python benchmarks/core_scaling.py [--repeats 3] [--workloads forward-lm mutual-knn]
    python benchmarks/core_scaling.py --speed --repeats 1 --workloads forward-lm mutual-knn

Needs two cores this process may use (``os.sched_getaffinity``). Measured: ``benchmarks/README.md`` (scaling).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time

import numpy as np
import torch


def _lm_dtype() -> str:
    from prh_lib.models import precision
    return precision.feature_dtype("smollm2-135m", "auto", "cpu")


def _forward_lm(state):
    if "model" not in state:
        from prh_lib.models import ModelNotAvailableError, load_model
        name = "smollm2-135m"
        dtype = _lm_dtype()
        try:
            state["model"] = load_model(name, dtype=getattr(torch, dtype))
        except ModelNotAvailableError:
            state["model"] = load_model(f"{name}@random-init:0", dtype=getattr(torch, dtype))
        words = "a man in a red shirt rides a bicycle down the street past two dogs near the water".split()
        rng = np.random.default_rng(0)
        state["texts"] = [" ".join(rng.choice(words, size=rng.integers(8, 18))) for _ in range(256)]
    from prh_lib.extract.forward import _extract_text
    _extract_text(state["model"], state["texts"], batch_size=32, padding_side="right", max_length=None,
                  progress=False)


def _forward_cnn(state):
    if "model" not in state:
        from prh_lib.models import ModelNotAvailableError, load_model
        try:
            state["model"] = load_model("efficientnet-lite0")
        except ModelNotAvailableError:
            state["model"] = load_model("efficientnet-lite0@random-init:0")
        state["x"] = torch.randn(32, 3, 224, 224)
    for _ in range(4):
        state["model"].layer_outputs(pixel_values=state["x"])


def _mutual_knn(state):
    if "x" not in state:
        g = torch.Generator().manual_seed(0)
        # NumPy inputs: the neighbourhood memo of prh_lib.metrics.knn holds torch tensors only, so every call scores
        state["x"] = torch.randn(13, 1000, 384, generator=g).numpy()
        state["y"] = torch.randn(31, 1000, 576, generator=g).numpy()
    from prh_lib.metrics import mutual_knn_layerwise
    mutual_knn_layerwise(state["x"], state["y"], k=10)


def _read_features(state):
    if "path" not in state:
        from safetensors.torch import save_file
        state["dir"] = tempfile.TemporaryDirectory()
        state["path"] = os.path.join(state["dir"].name, f"features-{os.getpid()}.safetensors")
        save_file({"values": torch.randn(31, 1250, 1000)}, state["path"])
    from safetensors.torch import load_file
    for _ in range(20):
        float(load_file(state["path"])["values"].sum())


WORKLOADS = {"forward-lm": _forward_lm, "forward-cnn": _forward_cnn, "mutual-knn": _mutual_knn,
             "read-features": _read_features}
# seconds per repeat, alone on core 0, on the project's 2-core Xeon VM with native bf16, idle, 2026-12-06 (the
# machine of the README's times; benchmarks/README.md, "Scaling")
REFERENCE = {"forward-lm": 1.73, "forward-cnn": 2.92, "mutual-knn": 0.49, "read-features": 0.18}
#: The dtype the reference machine (native bf16) ran ``forward-lm`` in; a CPU without native bf16 runs float32.
REFERENCE_LM_DTYPE = "bfloat16"


def _worker(name: str, core: int, repeats: int, start, out) -> None:
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    state: dict = {}
    WORKLOADS[name](state)  # warm-up: load, allocate, first-call overheads
    start.wait()  # every copy warmed up: all start together
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        WORKLOADS[name](state)
        times.append(time.perf_counter() - t0)
    out.put((core, statistics.median(times)))


def run(name: str, cores: list[int], repeats: int) -> list[float]:
    """Median seconds per repeat of workload ``name`` in one process per core of ``cores``, started together."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(len(cores)), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(name, c, repeats, start, out)) for c in cores]
    for p in procs:
        p.start()
    try:
        got = [out.get(timeout=3600) for _ in cores]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()
    return [t for _, t in sorted(got)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument("--speed", action="store_true",
                    help="each workload alone on one core, against the reference machine's time")
    args = ap.parse_args(argv)
    cores = sorted(os.sched_getaffinity(0))
    if args.speed:
        cells = []
        for name in args.workloads:
            t = run(name, cores[:1], args.repeats)[0]
            cells.append(f"{name} {t:.2f} s ({t / REFERENCE[name]:.2f}x the reference's {REFERENCE[name]:.2f} s)")
            if name == "forward-lm" and (dtype := _lm_dtype()) != REFERENCE_LM_DTYPE:  # no native bf16
                cells[-1] += f" in {dtype}, the reference's in {REFERENCE_LM_DTYPE}"
        print("one core, one torch thread: " + "; ".join(cells), flush=True)
        return
    if len(cores) < 2:
        raise SystemExit(f"needs two cores; this process may use {cores}")
    a, b = cores[:2]
    print(f"cores {a} and {b}; {args.repeats} repeats each, median per repeat; one torch thread per process")
    print(f"| workload | alone, core {a} | alone, core {b} | two at once (each) | ceiling 2 x alone / paired |")
    print("|---|---:|---:|---:|---:|")
    for name in args.workloads:
        alone = [run(name, [c], args.repeats)[0] for c in (a, b)]
        paired = run(name, [a, b], args.repeats)
        ceiling = 2 * statistics.mean(alone) / max(paired)
        print(f"| {name} | {alone[0]:.2f} s | {alone[1]:.2f} s | {paired[0]:.2f} / {paired[1]:.2f} s | "
              f"{ceiling:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
