"""Trying a model (issue 45, item 3): a name that cannot be resolved gets one clear error whether the Hub is
marked offline or simply unreachable, and a ``@random-init`` model is built from its architecture alone, with
no network and no trained weights (timm, Hugging Face and zoo models alike)."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch

from prh_lib import paths
from prh_lib.models import load_model, zoo

RESOLVE = """
from prh_lib.models import load_model
from prh_lib.models.zoo import ModelNotAvailableError
try:
    load_model("dinov2-smal")
except ModelNotAvailableError as err:
    print("CLEAR:", err)
"""


@pytest.mark.parametrize("hub", ["unreachable", "offline"])
def test_an_unresolvable_name_gets_the_same_clear_error_with_the_hub_unreachable_or_offline(tmp_path, hub):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    # a closed local port: the Hub is unreachable but not marked offline, as on a machine without a route to it
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT="http://127.0.0.1:9", PYTHONPATH=str(paths.repo_root()))
    if hub == "offline":
        env["HF_HUB_OFFLINE"] = "1"
    proc = subprocess.run([sys.executable, "-c", RESOLVE], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    clear = [ln for ln in proc.stdout.splitlines() if ln.startswith("CLEAR:")]
    assert clear, (proc.stdout + proc.stderr)[-3000:]  # a ModelNotAvailableError, not a network traceback
    message = clear[0]
    assert "'dinov2-smal'" in message and "closest: dinov2-small" in message  # what was meant
    assert "not a zoo model" in message and "not a local folder" in message and "Hugging Face" in message
    assert "Traceback" not in proc.stderr


def _digest(module: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for key, value in sorted(module.state_dict().items()):
        h.update(key.encode())
        h.update(value.detach().float().numpy().tobytes())
    return h.hexdigest()


@pytest.fixture
def no_weights(monkeypatch, tmp_path):
    """Every way to trained weights raises: transformers' from_pretrained, timm's pretrained loading, and an
    empty Hugging Face cache with the Hub unreachable."""
    import timm
    import transformers

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))

    def refuse(*args, **kwargs):
        raise AssertionError("trained weights were read for a random-init model")

    for auto in (transformers.AutoModel, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(auto, "from_pretrained", refuse)
    create = timm.create_model

    def create_without_weights(*args, pretrained=False, **kwargs):
        if pretrained:
            refuse()
        return create(*args, pretrained=False, **kwargs)

    monkeypatch.setattr(timm, "create_model", create_without_weights)


def test_a_timm_random_init_model_needs_no_weights_and_depends_only_on_its_seed(no_weights):
    a, b = load_model("timm:resnet18@random-init:0"), load_model("timm:resnet18@random-init:0")
    c = load_model("timm:resnet18@random-init:1")
    assert a.name == "timm:resnet18@random-init:0" and a.revision.startswith("random-init:")
    assert _digest(a.module) == _digest(b.module) != _digest(c.module)
    with torch.no_grad():
        outs = a.layer_outputs(pixel_values=torch.zeros(1, 3, 64, 64))
    assert len(outs) == len(a.layer_labels)


def test_a_hugging_face_random_init_model_from_a_folder_without_weights(tmp_path, no_weights):
    from transformers import BertConfig

    folder = tmp_path / "tiny-bert"
    BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
               max_position_embeddings=32).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "dog", "cat"]))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True}))
    assert not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin"))
    m = load_model(f"{folder}@random-init:0")
    again = load_model(f"{folder}@random-init:0")
    assert m.modality == "language" and m.layer_labels == ("embed", "layer.1", "layer.2")
    assert _digest(m.module) == _digest(again.module)
    with pytest.raises(AssertionError, match="trained weights were read"):  # the trained model does need them
        load_model(str(folder))


@pytest.mark.parametrize("name", ["minilm-l6", "efficientnet-lite0"])
def test_a_zoo_random_init_model_reads_no_trained_weights(zoo_cache, monkeypatch, no_weights, name):
    if zoo.installed_version(name) is None:
        pytest.skip(f"zoo model {name!r} needs {zoo.ZOO[name].package}: {zoo.ZOO[name].install_command}")
    monkeypatch.setenv("PRH_CACHE_DIR", str(zoo_cache))
    m = load_model(f"{name}@random-init:0")
    assert m.name == f"{name}@random-init:0"
    assert m.revision.startswith("random-init:") and zoo.ZOO[name].sha256[:16] in m.revision
    assert _digest(m.module) == _digest(load_model(f"{name}@random-init:0").module)
