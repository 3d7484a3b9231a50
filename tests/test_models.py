"""load_model: the generic Hugging Face / timm paths on tiny random models saved to folders, the zoo models'
layer labels and widths on real data, and clear errors for models that are not available."""

import json

import pytest
import torch
from PIL import Image

from prh_lib import paths
from prh_lib.models import ModelNotAvailableError, load_model, resolve_identity

WORDS = "a man woman riding horse on the beach dog cat sits sat along grass two zebras".split()


def _tokenizer(pad_token):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "</s>"] + ([pad_token] if pad_token else [])
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(specials + WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    kwargs = {"pad_token": pad_token} if pad_token else {}
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>", **kwargs)


def _save_hf(model_cls, config, folder, seed=0, extra=()):
    torch.manual_seed(seed)
    model_cls(config).save_pretrained(folder)
    for obj in extra:
        obj.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Folders holding tiny randomly initialised models of each kind, with their preprocessing."""
    import timm
    from timm.models import save_for_hf
    from transformers import (BertConfig, BertModel, ConvNextConfig, ConvNextModel, ConvNextImageProcessor,
                              LlamaConfig, LlamaForCausalLM, ViTConfig, ViTImageProcessor, ViTModel)

    root = tmp_path_factory.mktemp("tiny")
    n_vocab = len(WORDS) + 3
    folders = {
        "bert": _save_hf(BertModel, BertConfig(vocab_size=n_vocab, hidden_size=32, num_hidden_layers=3,
                                               num_attention_heads=4, intermediate_size=64, pad_token_id=2),
                         root / "bert", extra=[_tokenizer("[PAD]")]),
        "bert-other-seed": _save_hf(BertModel, BertConfig(vocab_size=n_vocab, hidden_size=32, num_hidden_layers=3,
                                                          num_attention_heads=4, intermediate_size=64),
                                    root / "bert2", seed=1, extra=[_tokenizer("[PAD]")]),
        "llama": _save_hf(LlamaForCausalLM, LlamaConfig(vocab_size=n_vocab, hidden_size=32, num_hidden_layers=2,
                                                        num_attention_heads=4, num_key_value_heads=2,
                                                        intermediate_size=64, eos_token_id=1, bos_token_id=None,
                                                        pad_token_id=None),
                          root / "llama", extra=[_tokenizer(None)]),
        "vit": _save_hf(ViTModel, ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=64),
                        root / "vit", extra=[ViTImageProcessor(size={"height": 32, "width": 32})]),
        "convnext": _save_hf(ConvNextModel, ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1]),
                             root / "convnext", extra=[ConvNextImageProcessor(size={"shortest_edge": 32})]),
    }
    torch.manual_seed(0)
    save_for_hf(timm.create_model("resnet10t", pretrained=False, num_classes=10), str(root / "resnet"),
                safe_serialization=True)
    folders["resnet"] = root / "resnet"
    return folders


@pytest.fixture(scope="module")
def photos():
    names = ["000000281789.jpg", "000000019221.jpg"]
    return [Image.open(paths.data_root() / "images" / n) for n in names]


def _frozen(model):
    return not model.module.training and not any(p.requires_grad for p in model.module.parameters())


# ----------------------------------------------------------------------------------------------- generic paths


def test_hf_encoder_folder(tiny):
    from transformers import AutoModel

    model = load_model(str(tiny["bert"]))
    assert (model.modality, model.family, model.pooling) == ("language", "hf-text", "mean")
    assert model.layer_labels == ("embed", "layer.1", "layer.2", "layer.3")
    assert _frozen(model) and model.image_transform is None and model.tokenizer.pad_token == "[PAD]"
    enc = model.tokenizer(["a man riding a horse on the beach", "two zebras"], padding=True, return_tensors="pt")
    outputs = model.layer_outputs(**enc)
    reference = AutoModel.from_pretrained(tiny["bert"]).eval()(**enc, output_hidden_states=True).hidden_states
    assert len(outputs) == 4
    for ours, ref in zip(outputs, reference, strict=True):
        assert ours.shape == (2, enc["input_ids"].shape[1], 32)
        torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)
    assert model.revision.startswith("sha256:") and len(model.revision) == len("sha256:") + 16


def test_revision_identifies_the_weights(tiny):
    first, again = load_model(str(tiny["bert"])), load_model(str(tiny["bert"]))
    other = load_model(str(tiny["bert-other-seed"]))
    assert first.revision == again.revision != other.revision
    assert resolve_identity(str(tiny["bert"])) == {"name": str(tiny["bert"]), "revision": first.revision,
                                                   "modality": "language", "family": "hf-text", "pooling": "mean"}
    assert load_model(str(tiny["bert"]), revision=first.revision).revision == first.revision
    with pytest.raises(ValueError, match="not the requested sha256:0000"):
        load_model(str(tiny["bert"]), revision="sha256:0000")


def test_causal_lm_uses_its_base_model_and_pads_with_eos_on_the_right(tiny):
    from transformers import LlamaModel

    model = load_model(str(tiny["llama"]))
    assert type(model.module) is LlamaModel and model.family == "hf-text" and model.pooling == "mean"
    assert model.layer_labels == ("embed", "layer.1", "layer.2")
    assert model.tokenizer.pad_token == model.tokenizer.eos_token == "</s>"
    assert model.tokenizer.padding_side == "right"
    texts = ["a man riding a horse along the beach", "a dog sat"]
    batch = model.layer_outputs(**model.tokenizer(texts, padding=True, return_tensors="pt"))
    alone = model.layer_outputs(**model.tokenizer(texts[1:], return_tensors="pt"))
    n = alone[0].shape[1]
    for b, a in zip(batch, alone, strict=True):  # real tokens are unaffected by right padding
        torch.testing.assert_close(b[1, :n], a[0], rtol=0, atol=1e-5)


def test_vit_folder(tiny, photos):
    model = load_model(str(tiny["vit"]))
    assert (model.modality, model.family, model.pooling) == ("vision", "hf-vit", "cls")
    assert model.layer_labels == ("embed", "layer.1", "layer.2") and model.tokenizer is None and _frozen(model)
    pixels = model.image_transform(photos)
    assert pixels.shape == (2, 3, 32, 32) and pixels.dtype == torch.float32
    outputs = model.layer_outputs(pixel_values=pixels)
    assert [o.shape for o in outputs] == [(2, 1 + 16, 32)] * 3


def test_vision_model_without_cls_token_is_refused(tiny):
    with pytest.raises(ValueError, match="no CLS token"):
        load_model(str(tiny["convnext"]))


def test_timm_folder(tiny, photos):
    model = load_model(str(tiny["resnet"]))
    assert (model.modality, model.family, model.pooling) == ("vision", "timm-cnn", "gap")
    info = model.module.feature_info
    assert model.layer_labels == ("act1", "layer1", "layer2", "layer3", "layer4") == tuple(f["module"] for f in info)
    size = json.loads((tiny["resnet"] / "config.json").read_text())["pretrained_cfg"]["input_size"][-1]  # 176
    pixels = model.image_transform(photos)
    assert pixels.shape == (2, 3, size, size)
    outputs = model.layer_outputs(pixel_values=pixels)
    assert [o.shape for o in outputs] == [(2, f["num_chs"], -(-size // f["reduction"]), -(-size // f["reduction"])) for f in info]  # ceil
    assert resolve_identity(str(tiny["resnet"]))["revision"] == model.revision


def test_timm_cnn_runs_channels_last_with_the_contiguous_layouts_features(tiny, photos):
    """A timm CNN runs in channels-last layout (the faster oneDNN kernels); its features equal the contiguous
    layout's up to float32 round-off, and a module marked contiguous (the benchmark's reference) stays so."""
    fast, ref = load_model(str(tiny["resnet"])), load_model(str(tiny["resnet"]))
    ref.module._prh_memory_format = torch.contiguous_format
    pixels = fast.image_transform(photos)
    a, b = fast.layer_outputs(pixel_values=pixels), ref.layer_outputs(pixel_values=pixels)
    conv = next(m for m in fast.module.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last) and not conv.weight.is_contiguous()
    assert all(x.is_contiguous(memory_format=torch.channels_last) for x in a)
    ref_conv = next(m for m in ref.module.modules() if isinstance(m, torch.nn.Conv2d))
    assert ref_conv.weight.is_contiguous() and all(y.is_contiguous() for y in b)
    for x, y in zip(a, b):
        assert float((x - y).abs().max() / y.abs().max()) < 1e-5


def test_dtype_is_applied_to_weights_and_inputs(tiny, photos):
    model = load_model(str(tiny["vit"]), dtype=torch.float64)
    assert model.dtype == torch.float64 and model.device == torch.device("cpu")
    assert {p.dtype for p in model.module.parameters()} == {torch.float64}
    assert model.layer_outputs(pixel_values=model.image_transform(photos))[-1].dtype == torch.float64


# ----------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("name", ["no-such-model-xyz", "some-org/no-such-model"])
def test_unknown_model_error_names_it_and_the_way_out(name):
    for call in (load_model, resolve_identity):
        with pytest.raises(ModelNotAvailableError) as info:
            call(name)
        message = str(info.value)
        assert repr(name) in message and "HF_HUB_OFFLINE=1" in message
        assert "HF_HOME" in message and "local folder" in message
    if "/" not in name:
        assert "not a zoo model" in message and "minilm-l6" in message


@pytest.mark.parametrize("name,match", [
    ("timm:no_such_arch", "timm has no architecture 'no_such_arch'"),
    ("timm:resnet18", "'timm:resnet18'.*HF_HUB_OFFLINE=1"),  # a real arch whose weights are not cached
    ("./no/such/folder", "model folder './no/such/folder' does not exist"),
])
def test_unavailable_timm_models_and_missing_folders(name, match):
    with pytest.raises(ModelNotAvailableError, match=match):
        load_model(name)


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelNotAvailableError, match="no config.json"):
        load_model(str(tmp_path))


def test_modality_is_checked(tiny):
    with pytest.raises(ValueError, match="modality must be one of"):
        load_model(str(tiny["bert"]), modality="audio")
    with pytest.raises(ValueError, match="looks like a language model"):
        load_model(str(tiny["bert"]), modality="vision")
    with pytest.raises(ValueError, match="timm"):
        load_model(str(tiny["resnet"]), modality="language")


# ----------------------------------------------------------------------------------------------- zoo models

ZOO_LAYOUT = {
    # name: (modality, family, pooling, layer labels, per-layer width)
    "minilm-l6": ("language", "hf-text", "mean", ("embed",) + tuple(f"layer.{i}" for i in range(1, 7)), (384,) * 7),
    "smollm2-135m": ("language", "hf-text", "mean", ("embed",) + tuple(f"layer.{i}" for i in range(1, 31)), (576,) * 31),
    "dinov2-small": ("vision", "hf-vit", "cls", ("embed",) + tuple(f"layer.{i}" for i in range(1, 13)), (384,) * 13),
    "efficientnet-lite0": ("vision", "timm-cnn", "gap",
                           ("stem",) + tuple(f"stage.{i}" for i in range(1, 8)) + ("head",),
                           (32, 16, 24, 40, 80, 112, 192, 320, 1280)),
}


@pytest.fixture(scope="module")
def captions():
    data = json.loads((paths.data_root() / "captions.json").read_text())
    return [a["caption"] for a in data["annotations"][:3]]


@pytest.mark.parametrize("name", list(ZOO_LAYOUT))
def test_zoo_model_layers_on_real_data(name, zoo_model, captions, photos):
    modality, family, pooling, labels, widths = ZOO_LAYOUT[name]
    model = zoo_model(name)
    assert (model.name, model.modality, model.family, model.pooling) == (name, modality, family, pooling)
    assert model.layer_labels == labels and _frozen(model)
    if modality == "language":
        enc = model.tokenizer(captions, padding=True, return_tensors="pt")
        outputs = model.layer_outputs(**enc)
        assert [o.shape for o in outputs] == [(3, enc["input_ids"].shape[1], w) for w in widths]
    else:
        outputs = model.layer_outputs(pixel_values=model.image_transform(photos))
        if family == "hf-vit":
            assert [o.shape for o in outputs] == [(2, 1 + 16 * 16, w) for w in widths]
        else:
            spatial = (112, 112, 56, 28, 14, 14, 7, 7, 7)
            assert [o.shape for o in outputs] == [(2, w, s, s) for w, s in zip(widths, spatial)]
    assert all(torch.isfinite(o).all() for o in outputs)
    # layers differ from each other (a label scheme off by one would repeat or skip outputs)
    flat = [o.flatten(1).mean(1) for o in outputs]
    assert all(not torch.equal(a, b) for a, b in zip(flat, flat[1:]) if a.shape == b.shape)


def test_zoo_modality_mismatch(zoo_model):
    zoo_model("minilm-l6")  # skips if not installed
    with pytest.raises(ValueError, match="is a language model"):
        load_model("minilm-l6", modality="vision")
