"""Two-tower image-text models (family "hf-joint"): towers, the joint-space "projection" layer, chunked text
embedding of long captions, identity without loading, and random initialisation. Tiny randomly initialised
CLIP and SigLIP models are built from configs and saved to folders (no Hub access); their word-level
tokenizers come from the ``tokenizers`` package."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from prh_lib import extract
from prh_lib.data import Pairs
from prh_lib.extract import mean_pool
from prh_lib.models import TextChunking, load_model, resolve_identity

WORDS = "a man woman riding horse on the beach dog cat sits sat along grass two zebras photo of".split()
SPECIALS = ["<unk>", "<bos>", "<eos>", "<pad>"]
CONTEXT = 11  # text context of the tiny models, special tokens included


def _tokenizer(*, template: str, input_names: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single=template, special_tokens=[("<bos>", 1), ("<eos>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", model_max_length=CONTEXT, model_input_names=input_names)


def _tower_configs():
    text = dict(vocab_size=len(SPECIALS) + len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=CONTEXT, bos_token_id=1, eos_token_id=2, pad_token_id=3)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2, image_size=28,
                  patch_size=14)
    return text, vision


def tiny_clip(folder: Path, seed: int = 0) -> Path:
    """CLIP: <bos> caption <eos>, dynamic padding with an attention mask, CLS-pooled vision tower."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    text, vision = _tower_configs()
    torch.manual_seed(seed)
    CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=8)).save_pretrained(folder)
    _tokenizer(template="<bos> $A <eos>", input_names=["input_ids", "attention_mask"]).save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}).save_pretrained(folder)
    return folder


def tiny_siglip(folder: Path, seed: int = 0) -> Path:
    """SigLIP: caption <eos>, padded to the full context without an attention mask, no CLS token."""
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    text, vision = _tower_configs()
    text.pop("bos_token_id")
    text["projection_size"] = 16
    torch.manual_seed(seed)
    SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).save_pretrained(folder)
    _tokenizer(template="$A <eos>", input_names=["input_ids"]).save_pretrained(folder)
    SiglipImageProcessor(size={"height": 28, "width": 28}).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("joint")
    return {"clip": tiny_clip(root / "clip"), "siglip": tiny_siglip(root / "siglip")}


def _pairs(texts):
    rng = np.random.default_rng(0)
    images = tuple(Image.fromarray(rng.integers(0, 255, (30, 40, 3), dtype=np.uint8)) for _ in texts)
    return Pairs(dataset="tiny", sample_ids=tuple(f"s{i}" for i in range(len(texts))), images=images,
                 texts=tuple(texts))


# the last caption fills the CLIP context exactly (9 words + <bos> + <eos>)
SHORT = ["a man riding a horse", "two zebras", "a dog on the beach", "cat", "a woman sits on the grass along a dog"]


def _plain_text_features(model, texts, *, kind):
    """The plain path: the tokenizer's own encoding of each caption, no chunking (one caption per batch)."""
    rows = []
    for text in texts:
        enc = model.tokenizer([text], return_tensors="pt", **({"padding": "max_length", "max_length": CONTEXT}
                                                              if kind == "siglip" else {}))
        real = (enc["input_ids"] != model.tokenizer.pad_token_id).long()
        inputs = {k: v for k, v in enc.items() if k in model.tokenizer.model_input_names}
        layers = model.layer_outputs(**inputs)
        rows.append([mean_pool(h, real) if h.ndim == 3 else h.float() for h in layers])
    return extract.stack_layers([torch.cat([r[i] for r in rows]) for i in range(len(rows[0]))])[0]


# ------------------------------------------------------------------------------------------ towers, identity


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_towers_end_with_the_joint_space_projection(folders, kind):
    text = load_model(f"{folders[kind]}:text")
    vision = load_model(f"{folders[kind]}:vision")
    assert (text.modality, vision.modality) == ("language", "vision")
    assert text.family == vision.family == "hf-joint"
    assert text.layer_labels == ("embed", "layer.1", "layer.2", "projection")
    assert vision.layer_labels == ("embed", "layer.1", "layer.2", "layer.3", "projection")
    assert vision.pooling == {"clip": "cls", "siglip": "mean"}[kind]
    assert text.text_chunking.context_length == CONTEXT
    assert text.text_chunking.pad_to_context is (kind == "siglip")

    pixels = vision.image_transform(_pairs(SHORT[:3]).load_images())
    outs = vision.layer_outputs(pixel_values=pixels)
    joint = vision.module.get_image_features(pixel_values=pixels)
    joint = getattr(joint, "pooler_output", joint)
    assert outs[-1].shape == joint.shape and outs[-1].ndim == 2
    torch.testing.assert_close(outs[-1], joint, rtol=0, atol=0)
    feats = extract.extract_features(vision, _pairs(SHORT[:3]), progress=False)
    torch.testing.assert_close(feats.layer("projection"), joint.float(), rtol=0, atol=1e-6)
    if kind == "siglip":  # no CLS token: hidden states are the mean over patches
        torch.testing.assert_close(feats.layer("layer.2"), outs[2].float().mean(dim=1), rtol=0, atol=1e-6)
    else:
        torch.testing.assert_close(feats.layer("layer.2"), outs[2][:, 0].float(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("suffix", [":text", ":vision", ":text@random-init:3", ":vision@random-init:0"])
def test_identity_without_loading_matches_the_loaded_model(folders, suffix):
    name = f"{folders['clip']}{suffix}"
    ident = resolve_identity(name)
    model = load_model(name)
    assert ident == {"name": model.name, "revision": model.revision, "modality": model.modality,
                     "family": model.family, "pooling": model.pooling}
    assert ident["name"] == name


def test_tower_caches_apart(folders):
    pairs = _pairs(SHORT)
    paths = {extract.features_path(f"{folders['clip']}{s}", pairs) for s in (":text", ":vision", ":text@random-init:0")}
    assert len(paths) == 3


def test_errors_name_the_problem(folders, tmp_path):
    from transformers import BertConfig, BertModel

    with pytest.raises(ValueError, match=":vision' or ':text'"):
        resolve_identity(str(folders["clip"]))
    with pytest.raises(ValueError, match="text tower .*not vision"):
        load_model(f"{folders['clip']}:text", modality="vision")
    BertModel(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=16)).save_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError, match="not a supported two-tower"):
        load_model(f"{tmp_path / 'bert'}:text")
    with pytest.raises(ValueError, match="no room"):
        TextChunking(context_length=2, prefix=(1,), suffix=(2,), pad_id=3, pad_to_context=False, attention_mask=True)


# --------------------------------------------------------------------------------------------------- chunking


@pytest.mark.parametrize("kind", ["clip", "siglip"])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_chunked_text_equals_plain_embedding_for_short_captions(folders, kind, batch_size):
    model = load_model(f"{folders[kind]}:text")
    assert all(len(model.tokenizer(t)["input_ids"]) <= CONTEXT for t in SHORT)
    feats = extract.extract_features(model, _pairs(SHORT), batch_size=batch_size, progress=False)
    plain = _plain_text_features(model, SHORT, kind=kind)
    assert feats.values.shape == plain.shape
    if batch_size == 1:  # identical inputs: bit-identical features
        assert torch.equal(feats.values, plain)
    else:  # CLIP pads to the longest chunk in the batch; masked positions change sums by round-off only
        torch.testing.assert_close(feats.values, plain, rtol=0, atol=1e-6)
    assert feats.meta["text_chunking"].startswith(f"context {CONTEXT}")


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_long_caption_chunks_cover_every_token_once(folders, kind):
    model = load_model(f"{folders[kind]}:text")
    ch = model.text_chunking
    long_text = " ".join(WORDS * 2)  # 36 caption tokens, context 11
    ids = model.tokenizer(long_text, add_special_tokens=False)["input_ids"]
    chunks, owner, n_tokens = ch.encode(model.tokenizer, ["cat", long_text])
    own = [c for c, o in zip(chunks, owner) if o == 1]
    assert len(own) == -(-len(ids) // ch.window) > 1
    assert all(len(c) <= CONTEXT for c in own)
    body = [c[len(ch.prefix) : len(c) - len(ch.suffix)] for c in own]
    assert all(c[: len(ch.prefix)] == list(ch.prefix) and c[len(c) - len(ch.suffix):] == list(ch.suffix) for c in own)
    assert [t for b in body for t in b] == ids  # every token, in order, exactly once
    assert n_tokens[owner == 1].sum() == len(ids)

    # the caption's features are the token-weighted mean of its chunks' features
    feats = extract.extract_features(model, _pairs(["cat", long_text]), batch_size=2, progress=False)
    per_chunk = []
    for c in own:
        inputs, real = ch.collate([c])
        per_chunk.append(extract.stack_layers([mean_pool(h, real) if h.ndim == 3 else h.float()
                                               for h in model.layer_outputs(**inputs)])[0])
    w = torch.tensor([len(b) for b in body], dtype=torch.float32) / len(ids)
    expected = sum(wi * f for wi, f in zip(w, per_chunk))[:, 0]
    torch.testing.assert_close(feats.values[:, 1], expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(feats.values[:, 1], per_chunk[0][:, 0])  # not just the first chunk


def test_split_and_collate_edge_cases():
    ch = TextChunking(context_length=5, prefix=(1,), suffix=(2,), pad_id=3, pad_to_context=False, attention_mask=True)
    assert ch.window == 3
    assert ch.split([]) == [[1, 2]]
    assert ch.split([7, 8, 9]) == [[1, 7, 8, 9, 2]]
    assert ch.split([7, 8, 9, 10]) == [[1, 7, 8, 9, 2], [1, 10, 2]]
    inputs, real = ch.collate([[1, 7, 2], [1, 7, 8, 9, 2]])
    assert inputs["input_ids"].tolist() == [[1, 7, 2, 3, 3], [1, 7, 8, 9, 2]]
    assert torch.equal(inputs["attention_mask"], real) and real.sum().item() == 8
    padded = TextChunking(context_length=6, prefix=(), suffix=(2,), pad_id=0, pad_to_context=True, attention_mask=False)
    inputs, real = padded.collate([[5, 2]])
    assert inputs == {"input_ids": inputs["input_ids"]} and inputs["input_ids"].tolist() == [[5, 2, 0, 0, 0, 0]]


def test_max_length_truncates_caption_tokens_before_chunking(folders):
    model = load_model(f"{folders['clip']}:text")
    chunks, owner, n_tokens = model.text_chunking.encode(model.tokenizer, [" ".join(WORDS)], max_length=12)
    assert n_tokens.tolist() == [9, 3] and len(chunks) == 2  # window 9 = 11 - <bos> - <eos>


# ----------------------------------------------------------------------------------------------- random init


@pytest.mark.parametrize("tower", ["text", "vision"])
def test_random_init_towers_are_reproducible_from_their_seed(folders, tower):
    name = f"{folders['clip']}:{tower}"
    trained = load_model(name)
    a, b, c = (load_model(f"{name}@random-init:{s}") for s in (5, 5, 6))
    sa, sb, sc, st = (m.module.state_dict() for m in (a, b, c, trained))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa if sa[k].is_floating_point())
    assert not all(torch.equal(sa[k], st[k]) for k in sa if sa[k].is_floating_point())
    assert a.layer_labels == trained.layer_labels and a.pooling == trained.pooling
    assert a.text_chunking == trained.text_chunking
    pairs = _pairs(SHORT)
    fa, fb = (extract.extract_features(m, pairs, progress=False) for m in (a, b))
    assert torch.equal(fa.values, fb.values)
