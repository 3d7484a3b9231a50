"""The rehearsal (issue 12): every paper id has a stand-in of its architecture, and every family extracts right.

Per family: number and labels of hidden states; mean pooling over real tokens invariant to batch size and
padding side; the CLS index with DINOv3's register tokens; MAE without masking (deterministic); text longer
than CLIP's 77 / SigLIP's 64 tokens chunked; the projection layer of two-tower models; SigLIP's forced right
padding without a mask; Qwen3-VL's two inputs; NV-Embed-v2's remote-code refusal; bfloat16 weights with
float32 pooling against float32 (per-layer relative error and mutual k-NN, printed as a table).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from prh_lib import extract, metrics
from prh_lib.data import paper
from prh_lib.run import rehearsal
from prh_lib.data import Pairs
from prh_lib.models import load_model, parse_model_name, resolve_identity, standins
from prh_lib.models.zoo import ModelNotAvailableError

PAPER_IDS = paper.models()
TEXTS = ["a cat", "two dogs run on the wet sand at dusk", "a man riding a red bicycle down a narrow street",
         "x", "an airport filled with large passenger jets parked next to each other on a sunny day"]


def _names(model_id: str) -> list[str]:
    return paper.expand_towers(standins.standin_name(model_id))


def _pairs(n=len(TEXTS), texts=TEXTS):
    from tests.fixtures import hf_data

    return Pairs(dataset="rehearsal-unit", sample_ids=tuple(f"s{i}" for i in range(n)),
                 images=tuple(hf_data.images(n, seed=4)), texts=tuple(texts[:n]))


def _text_names():
    return [n for m in PAPER_IDS for n in _names(m) if paper.model_info(m)["modality"] != "vision"
            and not n.endswith(":vision")]


def _vision_names():
    return [n for m in PAPER_IDS for n in _names(m) if paper.model_info(m)["modality"] == "vision"
            or n.endswith(":vision")]


# ------------------------------------------------------------------------------------------- stand-ins


@pytest.mark.parametrize("model_id", PAPER_IDS)
def test_standin_class_labels_and_visible_name(model_id):
    import json

    from transformers import AutoConfig

    folder = standins.ensure_standin(model_id)
    meta = json.loads((folder / "standin.json").read_text())
    assert meta["paper_id"] == model_id
    family = paper.model_info(model_id)["family"]
    assert AutoConfig.from_pretrained(folder).architectures == [standins.STANDINS[family].arch]
    for name in _names(model_id):
        ident = resolve_identity(name)
        assert ident["name"] == name and "~rehearsal" in name  # the paper id stays visible, marked
        assert parse_model_name(name).folder == folder.resolve()
        model = load_model(name)
        tower = name.endswith((":vision", ":text"))
        assert model.layer_labels == ("embed", "layer.1", "layer.2") + (("projection",) if tower else ())
        assert (model.name, model.revision, model.modality, model.pooling) == \
            (ident["name"], ident["revision"], ident["modality"], ident["pooling"])
        feats = extract.extract_features(model, _pairs(3), batch_size=2, progress=False)
        assert feats.values.shape[:2] == (len(model.layer_labels), 3)
        assert torch.isfinite(feats.values).all() and feats.values.dtype == torch.float32
        path = extract.features_path(name, _pairs(3))
        assert "rehearsal" in path.parent.name


def test_standin_names_and_mapping():
    assert standins.standin_name("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B~rehearsal"
    assert standins.standin_name("openai/clip-vit-large-patch14:text") == "openai/clip-vit-large-patch14~rehearsal:text"
    with pytest.raises(ValueError, match="not a paper model"):
        standins.standin_name("gpt2")
    mapped = rehearsal.map_models({"a": [["facebook/dinov2-large", "Qwen/Qwen3-8B"]], "b": "smollm2-135m"})
    assert mapped == {"a": [["facebook/dinov2-large~rehearsal", "Qwen/Qwen3-8B~rehearsal"]], "b": "smollm2-135m"}
    assert set(standins.STANDINS) == {m["family"] for m in paper.MODELS}


# ------------------------------------------------------------------------------------------- language


@pytest.mark.parametrize("name", _text_names())
def test_mean_pooling_invariant_to_batch_size_and_padding_side(name):
    model = load_model(name)
    pairs = _pairs()
    ref = extract.extract_features(model, pairs, batch_size=1, progress=False).values
    for batch_size, side in ((5, "right"), (5, "left"), (2, "left")):
        got = extract.extract_features(model, pairs, batch_size=batch_size, padding_side=side, progress=False).values
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name}: batch_size={batch_size} padding_side={side}")


@pytest.mark.parametrize("model_id", ["bigscience/bloomz-1b1", "huggyllama/llama-7b", "meta-llama/Llama-3.1-8B",
                                      "mistralai/Mistral-7B-v0.1", "Qwen/Qwen3-8B", "google/gemma-2b",
                                      "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "Qwen/Qwen3-Embedding-8B"])
def test_family_tokenizer_quirks_are_handled(model_id):
    """The stand-in tokenizers keep the families' traps (no pad token, left padding, BOS added); the loader pads
    right with a pad token, and the BOS the family adds is part of every text."""
    from transformers import AutoTokenizer

    st = standins.STANDINS[paper.model_info(model_id)["family"]]
    raw = AutoTokenizer.from_pretrained(standins.ensure_standin(model_id))
    assert raw.padding_side == st.tok.padding_side
    assert (raw.pad_token is None) == (st.tok.pad is None)
    model = load_model(standins.standin_name(model_id))
    assert model.tokenizer.pad_token is not None and model.tokenizer.padding_side == "right"
    ids = model.tokenizer("a cat")["input_ids"]
    assert (ids[0] == model.tokenizer.bos_token_id) is st.tok.add_bos
    assert (ids[-1] == model.tokenizer.eos_token_id) is st.tok.add_eos


# ------------------------------------------------------------------------------------------- vision


def test_dinov3_cls_index_with_register_tokens():
    model = load_model("facebook/dinov3-vitl16-pretrain-lvd1689m~rehearsal")
    cfg = model.module.config
    assert cfg.num_register_tokens == 4
    pixels = model.image_transform(list(_pairs(2).images))
    out = model.module(pixel_values=pixels, output_hidden_states=True)
    n_patches = (cfg.image_size // cfg.patch_size) ** 2
    assert out.last_hidden_state.shape[1] == 1 + cfg.num_register_tokens + n_patches
    feats = extract.extract_features(model, _pairs(2), progress=False)
    # the model's own pooler output is the normed CLS token: position 0 is the CLS, not a register
    torch.testing.assert_close(model.module.norm(feats.values[-1]), out.pooler_output, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(feats.values[-1], out.hidden_states[-1][:, 0], rtol=1e-5, atol=1e-6)


def test_mae_without_masking_is_deterministic_and_sees_every_patch():
    model = load_model("facebook/vit-mae-large~rehearsal")
    assert model.module.config.mask_ratio == 0.0
    cfg = model.module.config
    pixels = model.image_transform(list(_pairs(2).images))
    out = model.module(pixel_values=pixels)
    assert out.last_hidden_state.shape[1] == 1 + (cfg.image_size // cfg.patch_size) ** 2
    a = extract.extract_features(model, _pairs(), batch_size=2, progress=False).values
    b = extract.extract_features(model, _pairs(), batch_size=5, progress=False).values
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------- two towers


@pytest.mark.parametrize("model_id,context", [("openai/clip-vit-large-patch14", 77),
                                              ("google/siglip2-so400m-patch14-384", 64)])
def test_text_longer_than_context_is_chunked(model_id, context):
    model = load_model(f"{model_id}~rehearsal:text")
    ch = model.text_chunking
    assert ch.context_length == context
    long = ("a long description of a busy street with many people " * 6).strip()
    window = ch.window
    assert len(long) > 2 * window  # one token per character: at least 3 chunks
    pieces = [long[i : i + window] for i in range(0, len(long), window)]
    both = extract.extract_features(model, _pairs(1 + len(pieces), [long, *pieces]), progress=False).values
    weights = torch.tensor([len(p) for p in pieces], dtype=torch.float32) / len(long)
    expected = (both[:, 1:] * weights.view(1, -1, 1)).sum(1)
    torch.testing.assert_close(both[:, 0], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model_id", ["openai/clip-vit-large-patch14", "google/siglip2-so400m-patch14-384"])
def test_projection_layer_of_two_tower_models(model_id):
    model = load_model(f"{model_id}~rehearsal:vision")
    pairs = _pairs(3)
    feats = extract.extract_features(model, pairs, progress=False)
    assert feats.layer_labels[-1] == "projection"
    pixels = model.image_transform(list(pairs.images))
    m = model.module
    with torch.no_grad():
        pooled = m.vision_model(pixel_values=pixels).pooler_output
        expected = m.visual_projection(pooled) if hasattr(m, "visual_projection") else pooled  # SigLIP: its head
    d = expected.shape[-1]
    torch.testing.assert_close(feats.values[-1][:, :d], expected, rtol=1e-4, atol=1e-5)


def test_siglip_text_is_right_padded_to_64_without_mask_although_its_tokenizer_pads_left():
    from transformers import AutoTokenizer

    model_id = "google/siglip2-so400m-patch14-384"
    raw = AutoTokenizer.from_pretrained(standins.ensure_standin(model_id))
    assert raw.padding_side == "left" and "attention_mask" in raw.model_input_names  # the trap is there
    model = load_model(f"{model_id}~rehearsal:text")
    ch = model.text_chunking
    assert ch.pad_to_context and not ch.attention_mask
    caption = "two dogs run"
    feats = extract.extract_features(model, _pairs(1, [caption]), progress=False).values
    ids = raw(caption)["input_ids"]
    pad = [raw.pad_token_id] * (64 - len(ids))
    with torch.no_grad():
        right = model.module.get_text_features(input_ids=torch.tensor([ids + pad])).pooler_output
        left = model.module.get_text_features(input_ids=torch.tensor([pad + ids])).pooler_output
    torch.testing.assert_close(feats[-1], right, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(feats[-1], left, atol=1e-3)  # left padding would give another embedding


# ------------------------------------------------------------------------------------------- VLM, remote code


def test_qwen3_vl_embedding_both_inputs():
    vision = load_model("Qwen/Qwen3-VL-Embedding-8B~rehearsal:vision")
    text = load_model("Qwen/Qwen3-VL-Embedding-8B~rehearsal:text")
    assert (vision.modality, text.modality) == ("vision", "language")
    pairs = _pairs(3)
    fv = extract.extract_features(vision, pairs, batch_size=2, progress=False)
    ft = extract.extract_features(text, pairs, batch_size=2, progress=False)
    assert fv.layer_labels == ft.layer_labels == ("embed", "layer.1", "layer.2", "projection")
    # the projection is the last position of the last hidden state (the model's own embedding)
    one = extract.extract_features(text, _pairs(1, [TEXTS[1]]), progress=False).values
    ids = text.tokenizer(TEXTS[1], return_tensors="pt")
    with torch.no_grad():
        last = text.module(**ids, output_hidden_states=True).hidden_states[-1][:, -1]
    torch.testing.assert_close(one[-1], last, rtol=1e-4, atol=1e-5)


def test_nv_embed_refuses_remote_code_unless_allowed(monkeypatch):
    monkeypatch.delenv(paper.TRUST_REMOTE_CODE_ENV, raising=False)
    with pytest.raises(ModelNotAvailableError, match="trust_remote_code") as err:
        resolve_identity("nvidia/NV-Embed-v2")
    assert "CC-BY-NC-4.0" in str(err.value) and paper.TRUST_REMOTE_CODE_ENV in str(err.value)
    from prh_lib.models.spec import remote_code_kwargs

    monkeypatch.setenv(paper.TRUST_REMOTE_CODE_ENV, "1")
    assert remote_code_kwargs("nvidia/NV-Embed-v2") == {"trust_remote_code": True}
    assert remote_code_kwargs("mistralai/Mistral-7B-v0.1") == {}
    # its stand-in (the Mistral encoder) needs no remote code
    monkeypatch.delenv(paper.TRUST_REMOTE_CODE_ENV)
    assert resolve_identity("nvidia/NV-Embed-v2~rehearsal")["modality"] == "language"


# ------------------------------------------------------------------------------------------- bf16 vs fp32


def _relative_errors(a, b):
    return [float(torch.linalg.norm(x - y) / torch.linalg.norm(y).clamp(min=1e-12)) for x, y in zip(a, b)]


def test_bfloat16_weights_float32_pooling(capsys):
    rows = []
    pairs = _pairs()
    for name in [n for m in PAPER_IDS for n in _names(m)]:
        f32 = extract.extract_features(load_model(name), pairs, progress=False)
        b16 = extract.extract_features(load_model(name, dtype=torch.bfloat16), pairs, progress=False)
        assert b16.values.dtype == torch.float32 and b16.meta["dtype"] == "bfloat16"
        assert torch.isfinite(b16.values).all(), name
        errs = _relative_errors(b16.values, f32.values)
        knn = [metrics.mutual_knn(b16.values[i], f32.values[i], k=2) for i in range(len(errs))]
        rows.append((name, errs, knn))
        assert max(errs) < 0.1, (name, errs)
    with capsys.disabled():
        print("\nbfloat16 weights vs float32 (float32 pooling), per layer: relative error | mutual k-NN (k=2, N=5)")
        for name, errs, knn in rows:
            cells = "  ".join(f"{e:.4f}|{k:.2f}" for e, k in zip(errs, knn))
            print(f"  {name:58s} {cells}")


# ------------------------------------------------------------------------------------------- datasets, plan


def test_dataset_copies_in_the_sources_formats():
    from prh_lib.data import load_dataset
    from prh_lib.data.study import study_draws

    locations = rehearsal.build_data()
    wit = load_dataset("wit", locations["wit-1024"])
    coco = load_dataset("coco-captions", locations["coco"])
    docci = load_dataset("docci", locations["docci"])
    cc3m = load_dataset("cc3m-dreamlip", locations["cc3m-dreamlip"])
    n = rehearsal.FIXTURE_IMAGES
    assert (len(wit), len(coco), len(docci), len(cc3m)) == (n, n, n - 2, n - 1)
    assert min(len(c) for c in coco.captions) >= 5
    assert max(len(c[0]) for c in docci.captions) > 77  # long descriptions: CLIP chunks them
    specs = rehearsal.profile_from_paper(paper_profile())["study_datasets"]
    draws = study_draws(specs)
    by = {}
    for d in draws:
        by.setdefault(d.dataset, []).append(d)
    assert {k: len(v) for k, v in by.items()} == {"wit-1024": 1, "coco": 2, "docci": 2, "cc3m-dreamlip": 2}
    assert all(len(d.pairs) == rehearsal.N_PAIRS for d in draws if d.dataset != "wit-1024")


def paper_profile():
    from prh_lib.run.profiles import PROFILES

    return PROFILES["paper"]


def test_paper_vlms_plan_both_towers():
    from prh_lib.batch import _expand_models
    from prh_lib.batch.plan import study_from_profile

    models, _, _ = study_from_profile(paper_profile())
    assert "openai/clip-vit-large-patch14" in models  # the profile names them bare ...
    expanded = [t for m in models for t in paper.expand_towers(m)]  # ... and planning expands them
    for vlm in paper.models("vlm"):
        assert vlm not in expanded and f"{vlm}:vision" in expanded and f"{vlm}:text" in expanded
    assert _expand_models(["vlm"]) == paper.feature_models("vlm")
    assert paper.expand_towers("openai/clip-vit-large-patch14~rehearsal") == [
        "openai/clip-vit-large-patch14~rehearsal:vision", "openai/clip-vit-large-patch14~rehearsal:text"]


# ------------------------------------------------------------------------------------------- capability


def test_lm_eval_capability_job_on_a_standin(tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from prh_lib.batch import capability

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    tasks_dir = capability.write_rehearsal_tasks(tmp_path / "tasks")
    model = "Qwen/Qwen3-4B~rehearsal"
    out = capability.run_capability_jobs([model], capability.REHEARSAL_TASKS, include_path=str(tasks_dir),
                                         device="cpu", dtype="float32", batch_size=4)
    assert not out[model].startswith("FAILED"), out
    table = capability.capability_table([model], capability.REHEARSAL_TASKS)
    assert list(table["task"]) == ["prh_rehearsal_mc", "prh_rehearsal_gen"]
    assert table["value"].between(0, 1).all() and (table["lm_eval_version"] != "").all()
    assert all("dataset_kwargs" in c for c in table["task_config"])  # the resolved task config is recorded
    assert table["published"].isna().all()  # stand-ins have no published value
