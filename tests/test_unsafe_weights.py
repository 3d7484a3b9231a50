"""Pickle weights carrying code (issue 27, item 6): a model folder whose ``pytorch_model.bin`` calls a
function when unpickled is refused with a message naming the file and the callable; the code never runs."""

import json
import os

import pytest
import torch

from prh_lib.models import UnsafeWeightsError, load_model


class _Payload:
    """Unpickling this calls ``os.system("touch <marker>")``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _hf_folder(folder, marker):
    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     vocab_size=50)
    folder.mkdir()
    cfg.save_pretrained(folder)
    state = dict(BertModel(cfg).state_dict())
    state["payload"] = _Payload(marker)
    torch.save(state, folder / "pytorch_model.bin")
    return folder


def _timm_folder(folder, marker):
    import timm

    folder.mkdir()
    model = timm.create_model("resnet18", pretrained=False, num_classes=0)
    (folder / "config.json").write_text(json.dumps({
        "architecture": "resnet18", "num_classes": 0, "pretrained_cfg": {"input_size": [3, 32, 32], "mean": [0.5] * 3,
                                                                         "std": [0.5] * 3}}))
    state = dict(model.state_dict())
    state["payload"] = _Payload(marker)
    torch.save(state, folder / "pytorch_model.bin")
    return folder


@pytest.mark.parametrize("layout", ["hf", "timm"])
@pytest.mark.parametrize("suffix", ["", "@random-init:0"])
def test_pickle_that_runs_code_is_refused_and_the_code_never_runs(tmp_path, monkeypatch, layout, suffix):
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    marker = tmp_path / "CODE_RAN"
    folder = (_hf_folder if layout == "hf" else _timm_folder)(tmp_path / "model", marker)
    if suffix:  # a random-init model is built from its architecture alone: its weight file is never opened
        assert load_model(f"{folder}{suffix}").name.endswith(suffix)
        assert not marker.exists()
        return
    with pytest.raises(UnsafeWeightsError) as info:
        load_model(f"{folder}{suffix}")
    message = str(info.value)
    assert str(folder / "pytorch_model.bin") in message and "system" in message
    assert "did not run" in message and "safetensors" in message
    assert not marker.exists()
