"""GPU readiness check (issue 12): run this first on a lent GPU machine; it prints one table in under 5 minutes.

Checks, each one row of the table:

1. ``bf16 vs fp32``: features of one small real model (a zoo model, default ``dinov2-small``, and a text zoo
   model, default ``minilm-l6``) on the device in bfloat16 against float32: per-layer relative error
   ``||a - b|| / ||b||`` and mutual k-NN between the two (1.0: same neighbours);
2. ``device fp32 vs CPU fp32``: the same against the CPU's float32 features;
3. ``throughput``: images (captions) per second of bfloat16 extraction on the device, and peak memory
   (``torch.cuda.max_memory_allocated``, or the process's peak RSS on a CPU);
4. ``layer-pair metric``: the vision x text mutual k-NN matrix and its selection-aware calibrated maximum
   (permutation null) computed on the device against the CPU result (same permutations, so equal up to
   float round-off);
5. ``shard plan``: accelerate's ``infer_auto_device_map`` of the largest paper model
   (DeepSeek-R1-Distill-Qwen-32B) on empty weights built from its known dimensions (no download), in
   bfloat16, over the visible GPUs (or over ``--plan-gpus`` hypothetical 80 GB GPUs on a CPU).

Usage::

    python benchmarks/gpu_check.py                  # the GPU (cuda) if there is one
    python benchmarks/gpu_check.py --device cpu     # smoke check of the script itself
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prh_lib import extract, metrics  # noqa: E402
from prh_lib.data import load_dataset, sample_pairs  # noqa: E402
from prh_lib.models import load_model  # noqa: E402

#: Dimensions of deepseek-ai/DeepSeek-R1-Distill-Qwen-32B (its config.json: Qwen2 architecture).
LARGEST = dict(model_id="deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", vocab_size=152064, hidden_size=5120,
               intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40, num_key_value_heads=8,
               max_position_embeddings=131072, tie_word_embeddings=False)


def _rel(a, b):
    return [float(torch.linalg.norm(x - y) / torch.linalg.norm(y).clamp(min=1e-12)) for x, y in zip(a, b)]


def _knn(a, b, k):
    return [metrics.mutual_knn(x, y, k=k) for x, y in zip(a, b)]


def _peak_reset(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def _peak_gb(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _features(name, pairs, device, dtype, batch_size):
    model = load_model(name, device=device, dtype=dtype)
    _peak_reset(torch.device(device))
    t0 = time.perf_counter()
    feats = extract.extract_features(model, pairs, batch_size=batch_size, progress=False)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return feats, time.perf_counter() - t0, _peak_gb(torch.device(device))


def shard_plan(n_gpus: int, gpu_gb: float) -> str:
    """Devices of accelerate's ``infer_auto_device_map`` for the largest paper model, in bfloat16."""
    from accelerate import infer_auto_device_map, init_empty_weights
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(**{k: v for k, v in LARGEST.items() if k != "model_id"})
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    max_memory = {i: f"{gpu_gb:.0f}GiB" for i in range(n_gpus)} | {"cpu": "512GiB"}
    dmap = infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=["Qwen2DecoderLayer"],
                                 dtype=torch.bfloat16)
    from prh_lib.batch import gpus_needed

    used = sorted({str(v) for v in dmap.values()})
    n_layers = LARGEST["num_hidden_layers"]
    layers = {d: (n_layers if "" in dmap else sum(1 for k, v in dmap.items() if str(v) == d and ".layers." in k))
              for d in used}
    asked = gpus_needed(LARGEST["model_id"], dtype="bfloat16", gpu_mem_gb=gpu_gb)
    return (f"{LARGEST['model_id']}: {n_params / 1e9:.1f} B params, {n_params * 2 / 2**30:.0f} GiB bf16 -> "
            f"accelerate: {len(used)} device(s) {used}, decoder layers per device {layers}, of {n_gpus} x "
            f"{gpu_gb:.0f} GiB; prh-batch requests {asked} GPU(s) (weights x 1.3 headroom)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--vision-model", default="dinov2-small")
    parser.add_argument("--text-model", default="minilm-l6")
    parser.add_argument("--n-pairs", type=int, default=128)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--permutations", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--plan-gpus", type=int, default=None, help="GPUs of the shard plan (default: visible, else 2)")
    parser.add_argument("--plan-gpu-gb", type=float, default=None, help="memory per GPU (default: device's, else 80)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    t_start = time.perf_counter()
    pairs = sample_pairs(load_dataset("coco-folder"), n=args.n_pairs, seed=0)
    rows = []  # (check, model, value, note)

    feats = {}
    for role, name in (("vision", args.vision_model), ("text", args.text_model)):
        cpu32, _, _ = _features(name, pairs, "cpu", torch.float32, args.batch_size)
        dev32, _, _ = _features(name, pairs, device, torch.float32, args.batch_size)
        dev16, secs, peak = _features(name, pairs, device, torch.bfloat16, args.batch_size)
        feats[role] = (cpu32, dev32)
        e16, k16 = _rel(dev16.values, dev32.values), _knn(dev16.values, dev32.values, args.k)
        ecpu, kcpu = _rel(dev32.values, cpu32.values), _knn(dev32.values, cpu32.values, args.k)
        rows.append(("bf16 vs fp32 (rel. error, max over layers)", name, f"{np.nanmax(e16):.4f}",
                     "per layer: " + " ".join(f"{e:.3f}" for e in e16)))
        rows.append(("bf16 vs fp32 (mutual k-NN, min over layers)", name, f"{np.nanmin(k16):.3f}",
                     "per layer: " + " ".join(f"{k:.2f}" for k in k16)))
        rows.append((f"{device.type} fp32 vs cpu fp32 (rel. error, max)", name, f"{np.nanmax(ecpu):.2e}",
                     f"mutual k-NN min {np.nanmin(kcpu):.3f} (NaN: a layer with identical rows, e.g. a CLS embedding)"))
        rows.append(("throughput bf16", name, f"{len(pairs) / secs:.1f}/s",
                     f"{len(pairs)} {'images' if role == 'vision' else 'captions'}, batch {args.batch_size}, "
                     f"peak {'GPU' if device.type == 'cuda' else 'RSS'} {peak:.2f} GiB"))

    X_cpu, Y_cpu = feats["vision"][0].values, feats["text"][0].values
    kw = dict(metric="mutual_knn", k=args.k, n_permutations=args.permutations, seed=0)
    t0 = time.perf_counter()
    on_cpu = metrics.calibration.permutation_test_layerwise(X_cpu.numpy(), Y_cpu.numpy(), **kw)
    t_cpu = time.perf_counter() - t0
    t0 = time.perf_counter()
    on_dev = metrics.calibration.permutation_test_layerwise(X_cpu.to(device), Y_cpu.to(device), device=device, **kw)
    t_dev = time.perf_counter() - t0
    diff = float(np.nanmax(np.abs(on_dev.observed - on_cpu.observed)))
    rows.append((f"layer-pair mutual k-NN: {device.type} vs cpu (max |diff|)", "vision x text", f"{diff:.2e}",
                 f"{on_cpu.observed.shape[0]}x{on_cpu.observed.shape[1]} layers; {t_dev:.2f} s vs cpu {t_cpu:.2f} s"))
    rows.append(("calibrated max: device / cpu", "vision x text",
                 f"{on_dev.calibrated_max:.4f} / {on_cpu.calibrated_max:.4f}",
                 f"argmax {on_dev.argmax} / {on_cpu.argmax}; p {on_dev.p_max:.3f} / {on_cpu.p_max:.3f}; "
                 f"K={args.permutations}"))

    n_gpus = args.plan_gpus or (torch.cuda.device_count() if device.type == "cuda" else 2)
    gpu_gb = args.plan_gpu_gb or (torch.cuda.get_device_properties(0).total_memory / 2**30
                                  if device.type == "cuda" else 80.0)
    try:
        rows.append(("shard plan (accelerate, empty weights)", "largest paper model", "", shard_plan(n_gpus, gpu_gb)))
    except Exception as err:  # report, do not hide the other rows
        rows.append(("shard plan (accelerate, empty weights)", "largest paper model", "FAILED", f"{type(err).__name__}: {err}"))

    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    print(f"\nGPU readiness check on {device} ({name}); torch {torch.__version__}; N={len(pairs)}, k={args.k}; "
          f"{time.perf_counter() - t_start:.0f} s")
    widths = [max(len(str(r[i])) for r in rows) for i in range(3)]
    for r in rows:
        print(f"  {r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
