"""prh_lib.data.benchmarks, prh_lib.lm and prh_lib.pages.sec3_2_capability: capability table, bits per byte, the interpolation ladder and the correlation helper."""

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from prh_lib import lm as L
from prh_lib.pages import sec3_2_capability as C
from prh_lib.analysis.capability import study as capability_study
from prh_lib.stats import correlation as stats_correlation
from prh_lib.data import benchmarks
from prh_lib.lm import ladder
from prh_lib.data import paper
from prh_lib.data import ImageCaptionDataset, Pairs
from tests.fixtures.tiny_models import tiny_llama

TEXTS = [
    "a man riding a horse on a beach",
    "two dogs play with a red ball in the park",
    "a plate of food with broccoli and rice",
    "a bus parked next to a tall building",
    "a cat sleeping on a laptop keyboard",
    "people walking on a busy city street at night",
]


# --------------------------------------------------------------------------------------------------------
# correlate


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [3, 5, 21])
def test_correlate_r_and_p_agree_with_scipy(seed, n):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = 0.5 * x + rng.normal(size=n)
    res = stats_correlation.correlate(x, y, n_boot=200, seed=seed)
    ref = stats.pearsonr(x, y)
    assert res.n == n
    assert res.r == pytest.approx(ref.statistic, abs=1e-12)
    assert res.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    # independent check: two-sided t test of r with n - 2 degrees of freedom
    t = res.r * math.sqrt((n - 2) / (1 - res.r**2))
    assert res.p_value == pytest.approx(2 * stats.t.sf(abs(t), n - 2), rel=1e-6)
    assert -1 <= res.ci_low <= res.ci_high <= 1


def test_correlate_hand_worked_example():
    # x = 1..4, y = (1, 3, 2, 4): centred products sum to 4, both centred norms are sqrt(5), so r = 4/5
    res = stats_correlation.correlate([1, 2, 3, 4], [1, 3, 2, 4], n_boot=0)
    assert res.r == pytest.approx(0.8)
    assert np.isnan(res.ci_low) and np.isnan(res.ci_high)


def test_correlate_bootstrap_interval_is_seeded_and_covers_a_strong_correlation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=12)
    y = x + 0.3 * rng.normal(size=12)
    a, b = stats_correlation.correlate(x, y, n_boot=500, seed=3), stats_correlation.correlate(x, y, n_boot=500, seed=3)
    c = stats_correlation.correlate(x, y, n_boot=500, seed=4)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)
    assert a.ci_low < a.r < a.ci_high and a.ci_low > 0.5
    assert a.n_boot == 500 and 0 < a.n_boot_valid <= 500


@pytest.mark.parametrize("n", [0, 1, 2])
def test_fewer_than_three_models_give_no_p_value(n):
    x, y = np.arange(n, dtype=float), np.array([3.0, 1.0][:n])
    res = stats_correlation.correlate(x, y)
    assert res.n == n
    assert np.isnan(res.p_value)  # scipy would report p = 1 for n = 2
    assert np.isnan(res.ci_low) and np.isnan(res.ci_high)
    if n == 2:
        assert res.r == pytest.approx(-1.0)
    else:
        assert np.isnan(res.r)


def test_constant_input_gives_nan_with_a_warning_never_p_one():
    with pytest.warns(stats.ConstantInputWarning, match="constant"):
        res = stats_correlation.correlate([0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0])
    assert np.isnan(res.r) and np.isnan(res.p_value) and res.p_value != 1


def test_nan_pairs_are_left_out():
    x = [1.0, 2.0, np.nan, 4.0, 5.0]
    y = [2.0, 1.0, 7.0, np.nan, 6.0]
    res = stats_correlation.correlate(x, y, n_boot=0)
    ref = stats.pearsonr([1.0, 2.0, 5.0], [2.0, 1.0, 6.0])
    assert res.n == 3 and res.r == pytest.approx(ref.statistic)


@pytest.mark.parametrize("x, y, kw, match", [
    ([1, 2, 3], [1, 2], {}, "same length"),
    (np.ones((2, 2)), np.ones((2, 2)), {}, "1-D"),
    ([1, 2, np.inf], [1, 2, 3], {}, "infinite"),
    ([1, 2, 3], [1, 2, 3], {"n_boot": -1}, "n_boot"),
    ([1, 2, 3], [1, 2, 3], {"ci": 1.0}, "ci"),
])
def test_correlate_validates(x, y, kw, match):
    with pytest.raises(ValueError, match=match):
        stats_correlation.correlate(x, y, **kw)


# --------------------------------------------------------------------------------------------------------
# capability table

_HEADER = "model,mmlu_5shot,mmlu_source,arc_challenge,arc_source,gsm8k_5shot,gsm8k_source,notes\n"


def _csv(tmp_path, body, header=_HEADER):
    path = tmp_path / "caps.csv"
    path.write_text(header + body)
    return path


def test_packaged_table_covers_the_paper_models_and_every_value_has_a_source():
    table = benchmarks.load_capability_table()
    assert set(paper.models("language")) <= set(table.index)
    assert "smollm2-135m" in table.index
    for bench in benchmarks.BENCHMARKS:
        values = table[bench]
        assert values.dtype == np.float64
        assert ((values >= 0) & (values <= 100) | values.isna()).all()
        assert (table.loc[values.notna(), benchmarks.SOURCE_COLUMNS[bench]].str.len() > 10).all()
    counts = benchmarks.missing_counts(table, paper.models("language"))
    assert set(counts) == set(benchmarks.BENCHMARKS) and all(0 <= n <= 21 for n in counts.values())


def test_empty_cells_are_missing_not_zero(tmp_path):
    path = _csv(tmp_path, "m1,50.5,card,,,,,\n# a comment line\nm2,,,30,https://x.org/a#b,1.0,lb,\n")
    table = benchmarks.load_capability_table(path)
    assert table.loc["m1", "mmlu_5shot"] == 50.5 and np.isnan(table.loc["m1", "arc_challenge"])
    assert table.loc["m2", "arc_source"] == "https://x.org/a#b" and list(table.index) == ["m1", "m2"]
    assert benchmarks.missing_counts(table) == {"mmlu_5shot": 1, "arc_challenge": 1, "gsm8k_5shot": 1}
    scores = benchmarks.capability_scores(table, ["m2", "m1"], benchmarks=["mmlu_5shot"])
    assert list(scores.index) == ["m2", "m1"] and np.isnan(scores.iloc[0, 0])


def test_missing_column_is_named(tmp_path):
    path = _csv(tmp_path, "m1,50,card,,,\n", header="model,mmlu_5shot,mmlu_source,arc_challenge,arc_source,notes\n")
    with pytest.raises(ValueError, match="gsm8k_5shot"):
        benchmarks.load_capability_table(path)


def test_describe_missing_counts_models_outside_the_table(tmp_path):
    table = benchmarks.load_capability_table(_csv(tmp_path, "m1,50,card,,,,,\nm2,,,30,paper,,,\n"))
    assert ("MMLU (5-shot) 1 of 2, ARC-Challenge 1 of 2, GSM8K (5-shot) 2 of 2"
            in benchmarks.describe_missing(table))
    text = benchmarks.describe_missing(table, ["m1", "other/model"])
    assert "MMLU (5-shot) 1 of 2" in text and "GSM8K (5-shot) 2 of 2" in text and "other/model" in text
    assert "mmlu_5shot" not in text  # pages name benchmarks in words


def test_unknown_model_is_named():
    table = benchmarks.load_capability_table()
    with pytest.raises(ValueError, match="no/such-model"):
        benchmarks.capability_scores(table, ["google/gemma-7b", "no/such-model"])
    with pytest.raises(ValueError, match="unknown benchmarks"):
        benchmarks.capability_scores(table, ["google/gemma-7b"], benchmarks=["hellaswag"])


@pytest.mark.parametrize("body, match", [
    ("m1,fifty,card,,,,,\n", "not a number"),
    ("m1,150,card,,,,,\n", r"\[0, 100\]"),
    ("m1,50,,,,,,\n", "without a mmlu_source"),
    ("m1,50,card,,,,,\nm1,51,card,,,,,\n", "more than once"),
    (",50,card,,,,,\n", "no model name"),
])
def test_malformed_tables_are_refused(tmp_path, body, match):
    with pytest.raises(ValueError, match=match):
        benchmarks.load_capability_table(_csv(tmp_path, body))


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        benchmarks.load_capability_table("/nonexistent/caps.csv")


# --------------------------------------------------------------------------------------------------------
# bits per byte


class _UniformLM(torch.nn.Module):
    """Logits all zero: every token has probability 1/V, so each scored token costs log2(V) bits."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask):
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, self.vocab))


@pytest.fixture(scope="module")
def tiny_lm_folder(tmp_path_factory):
    # seed 123: a model saved from seed 0 would equal its own random init for ladder seed 0
    return tiny_llama(tmp_path_factory.mktemp("tiny-llama"), TEXTS, hidden=16, layers=2, seed=123)


@pytest.fixture(scope="module")
def tiny_lm(tiny_lm_folder):
    return L.load_causal_lm(str(tiny_lm_folder))


def test_uniform_model_costs_log2_vocab_bits_per_token(tiny_lm):
    tok = tiny_lm.tokenizer
    V = len(tok)
    res = L.bits_per_byte(_UniformLM(V), tok, TEXTS[:3], batch_size=2, prefix=None)
    assert res.context == "first-token"  # the tiny tokenizer has no BOS token
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS[:3]]
    assert res.n_tokens == sum(len(i) - 1 for i in ids)
    # bytes after the first word (word-level tokens: the first token is the first word)
    expected_bytes = [len(t[len(t.split()[0]):].encode()) for t in TEXTS[:3]]
    assert list(res.n_bytes) == expected_bytes
    assert res.bpb == pytest.approx(res.n_tokens * math.log2(V) / sum(expected_bytes), rel=1e-6)


def test_bos_context_scores_every_token_and_every_byte(tiny_lm):
    tok = tiny_lm.tokenizer

    class WithBos:  # the tiny tokenizer with its EOS token standing in for a BOS token
        bos_token_id = tok.eos_token_id
        pad_token_id = tok.pad_token_id

        def __call__(self, texts, **kw):
            return tok(texts, **kw)

    res = L.bits_per_byte(_UniformLM(len(tok)), WithBos(), TEXTS[:2], prefix=None)
    assert res.context == "bos"
    assert res.n_tokens == sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in TEXTS[:2])
    assert list(res.n_bytes) == [len(t.encode()) for t in TEXTS[:2]]
    with pytest.raises(ValueError, match="no BOS"):
        L.bits_per_byte(_UniformLM(len(tok)), tok, TEXTS[:2], use_bos=True, prefix=None)


def test_default_prefix_scores_every_token_and_byte_of_every_text_with_or_without_bos(tiny_lm):
    # issue 24: the same conditioning for every model; a model without BOS no longer drops a first token
    tok = tiny_lm.tokenizer
    V = len(tok)
    res = L.bits_per_byte(_UniformLM(V), tok, TEXTS[:3])
    assert res.context == "prefix" and L.BPB_PREFIX == "Caption:\n"
    n_text = sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in TEXTS[:3])
    assert res.n_tokens == n_text  # every token of every text, none of the prefix's
    assert list(res.n_bytes) == [len(t.encode()) for t in TEXTS[:3]]
    assert res.bpb == pytest.approx(n_text * math.log2(V) / sum(len(t.encode()) for t in TEXTS[:3]), rel=1e-6)

    class WithBos:  # the same tokenizer with a BOS token: the same tokens are scored
        bos_token_id = tok.eos_token_id
        pad_token_id = tok.pad_token_id

        def __call__(self, texts, **kw):
            return tok(texts, **kw)

    res_bos = L.bits_per_byte(_UniformLM(V), WithBos(), TEXTS[:3])
    assert res_bos.n_tokens == res.n_tokens and list(res_bos.n_bytes) == list(res.n_bytes)
    with pytest.raises(ValueError, match="prefix=None"):
        L.bits_per_byte(_UniformLM(V), tok, TEXTS[:2], use_bos=True)


def test_bits_per_byte_equals_an_unbatched_loop_and_ignores_batch_size(tiny_lm):
    lm, tok = tiny_lm.lm, tiny_lm.tokenizer
    res1 = L.bits_per_byte(lm, tok, TEXTS, batch_size=1, prefix=None)
    res4 = L.bits_per_byte(lm, tok, TEXTS, batch_size=4, prefix=None)
    np.testing.assert_allclose(res4.bits, res1.bits, rtol=1e-5)
    bits = 0.0
    for text in TEXTS:  # plain reference: log-softmax of one unpadded sequence
        ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(lm(input_ids=ids).logits[0, :-1].double(), -1)
        bits -= float(logp.gather(1, ids[0, 1:, None]).sum()) / math.log(2)
    assert res1.bits.sum() == pytest.approx(bits, rel=1e-5)
    assert res4.bpb > 0


@pytest.mark.parametrize("texts, match", [([], "empty"), (["ok text", "  "], "empty"), (["single"], "single token")])
def test_bits_per_byte_validates(tiny_lm, texts, match):
    with pytest.raises(ValueError, match=match):
        L.bits_per_byte(tiny_lm.lm, tiny_lm.tokenizer, texts, prefix=None)
    with pytest.raises(TypeError):
        L.bits_per_byte(tiny_lm.lm, tiny_lm.tokenizer, "a string")


# --------------------------------------------------------------------------------------------------------
# the interpolation ladder


def test_random_weights_are_reproducible_from_their_seed_and_leave_the_global_rng_alone(tiny_lm):
    state = torch.random.get_rng_state()
    a, b = L.random_weights(tiny_lm, seed=0), L.random_weights(tiny_lm, seed=0)
    assert torch.equal(state, torch.random.get_rng_state())
    c = L.random_weights(tiny_lm, seed=1)
    names = [n for n, _ in tiny_lm.lm.named_parameters()]
    assert set(a.tensors) == set(names)  # including the untied head of the tiny model
    assert all(torch.equal(a.tensors[n], b.tensors[n]) for n in names)
    assert any(not torch.equal(a.tensors[n], c.tensors[n]) for n in names if "norm" not in n)
    assert "lm_head.weight" in names and not torch.equal(a.tensors["lm_head.weight"], c.tensors["lm_head.weight"])
    with pytest.raises(TypeError):
        L.random_weights(tiny_lm, seed=0.5)


def test_ladder_ends_are_exactly_random_init_and_trained(tiny_lm):
    from prh_lib.models import random_init

    rw = L.random_weights(tiny_lm, seed=0)
    before = {n: p.detach().clone() for n, p in tiny_lm.lm.named_parameters()}
    zero, one, half = (L.ladder_weights(tiny_lm, rw, t) for t in (0.0, 1.0, 0.5))
    base = random_init(tiny_lm.loaded, seed=0).module.state_dict()
    for name, p in zero.lm.base_model.named_parameters():
        assert torch.equal(p, base[name])
    for name, p in one.lm.named_parameters():
        assert torch.equal(p, before[name])
    for name, p in half.lm.named_parameters():
        torch.testing.assert_close(p, 0.5 * before[name] + 0.5 * rw.tensors[name])
    assert all(torch.equal(p, before[n]) for n, p in tiny_lm.lm.named_parameters())  # trained model untouched
    reused = L.ladder_weights(tiny_lm, rw, 0.5, out=zero.lm)  # overwrite an earlier copy in place
    assert reused.lm is zero.lm
    assert all(torch.equal(p, q) for p, q in zip(reused.lm.parameters(), half.lm.parameters()))
    assert half.name == f"{tiny_lm.name}@interp:t=0.5:seed=0" and half.loaded.revision.startswith("interp:t=0.5")
    assert half.loaded.module is half.lm.base_model and half.loaded.layer_labels == tiny_lm.loaded.layer_labels
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        L.ladder_weights(tiny_lm, rw, 1.5)


def test_tied_head_stays_tied_along_the_ladder(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tiny_llama(tmp_path / "untied", TEXTS)
    config = LlamaConfig.from_pretrained(folder)
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    model = L.load_causal_lm(str(folder))
    point = L.ladder_weights(model, L.random_weights(model, seed=0), 0.3)
    assert point.lm.lm_head.weight.data_ptr() == point.lm.model.embed_tokens.weight.data_ptr()
    assert "lm_head.weight" not in L.random_weights(model, seed=0).tensors


def test_ladder_models_cache_features_and_bpb_apart(tiny_lm_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    pairs = Pairs("d", tuple(str(i) for i in range(len(TEXTS))), tuple(f"{i}.jpg" for i in range(len(TEXTS))),
                  tuple(TEXTS))
    kw = dict(seed=0, pairs=pairs, bpb_texts=TEXTS[::-1], batch_size=4)
    first = L.ladder_models(str(tiny_lm_folder), [0.0, 0.5, 1.0], **kw)
    assert [r.label for r in first] == ["t=0", "t=0.5", "t=1"]
    assert len({r.name for r in first}) == 3 and first[2].name == str(tiny_lm_folder)
    assert all(np.isfinite(r.bpb.bpb) and r.bpb.bpb > 0 for r in first)
    assert len({float(r.features.values.sum()) for r in first}) == 3

    def boom(*a, **k):
        raise AssertionError("a model was built although everything is cached")

    monkeypatch.setattr(ladder, "load_causal_lm", boom)
    again = L.ladder_models(str(tiny_lm_folder), [0.0, 0.5, 1.0], **kw)
    for a, b in zip(first, again):
        assert a.bpb.bpb == pytest.approx(b.bpb.bpb) and torch.equal(a.features.values, b.features.values)
    assert [r.label for r in again] == ["t=0", "t=0.5", "t=1"] and all(r.bpb.n_bytes.sum() > 0 for r in again)
    with pytest.raises(ValueError, match="distinct"):
        L.ladder_models(str(tiny_lm_folder), [0.5, 0.5], **kw)


def test_load_causal_lm_refuses_encoders(tmp_path):
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    BertModel(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="not a causal language model"):
        L.load_causal_lm(str(tmp_path))


# --------------------------------------------------------------------------------------------------------
# near-constant series, exact permutation p, Fisher interval (issues 13 and 15)

from prh_lib.stats import correlation as R  # noqa: E402


@pytest.mark.parametrize("series", [
    1.0 + 1e-17 * np.arange(5),  # constant after rounding: every value is exactly 1.0
    1.0 + 1e-15 * np.arange(5),  # distinct values, but constant up to rounding (SciPy: near-constant)
    1e6 + 1e-11 * np.arange(5),
])
@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_near_constant_series_give_nan_with_a_warning_and_the_bootstrap_agrees(series, method):
    y = np.array([3.0, 1.0, 4.0, 1.5, 9.0])
    assert R.near_constant(series)
    kind = stats.ConstantInputWarning if np.all(series == series[0]) else stats.NearConstantInputWarning
    with pytest.warns(kind):
        res = stats_correlation.correlate(series, y, method=method, n_boot=200)
    assert np.isnan(res.r) and np.isnan(res.p_value) and np.isnan(res.ci_low) and np.isnan(res.ci_high)
    with pytest.warns(kind):
        res = stats_correlation.correlate(y, series, method=method, p_value="exact", interval="fisher")
    assert np.isnan(res.r) and np.isnan(res.p_value)
    # the bootstrap's resamples use the same test: every resample of the series is undefined
    assert np.isnan(R._r_rows(series[None].repeat(3, 0), y[None].repeat(3, 0), method)).all()


def test_near_constant_follows_scipys_rule_and_spares_real_variation():
    eps = np.finfo(float).eps
    assert R.NEAR_CONSTANT_RTOL == pytest.approx(eps ** 0.75)
    assert not R.near_constant(np.array([1.0, 1.0 + 1e-6, 1.0 + 2e-6]))
    assert not R.near_constant(np.array([-1e-300, 0.0, 1e-300]))  # tiny but zero-mean: real variation
    rows = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0], [5.0, 5.0 + 1e-14, 5.0]])
    assert R.near_constant(rows).tolist() == [True, False, True]
    # scipy computes r for a near-constant series (with a warning); we refuse it
    with pytest.warns(stats.NearConstantInputWarning):
        stats.pearsonr(1.0 + 1e-15 * np.arange(5), np.arange(5.0))


def test_exact_permutation_p_enumerates_every_ordering():
    x, y = [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]
    # a perfect rank agreement: 2 of the 24 orderings (identity and reversal) reach |rho| = 1
    assert R.exact_permutation_p(x, y, method="spearman") == pytest.approx(2 / 24)
    # by hand for Pearson on (1,3,2,4): |r| >= 0.8 for the orderings (1,3,2,4), (1,2,3,4), their reversals
    # and (2,1,4,3), (3,4,1,2)... count them independently with a plain loop
    import itertools

    base = np.array([1.0, 3.0, 2.0, 4.0])
    obs = abs(np.corrcoef(x, base)[0, 1])
    count = sum(abs(np.corrcoef(x, base[list(p)])[0, 1]) >= obs - 1e-12 for p in itertools.permutations(range(4)))
    assert R.exact_permutation_p(x, base) == pytest.approx(count / 24)
    res = stats_correlation.correlate(x, base, p_value="exact", interval="fisher")
    assert res.p_method == "exact" and res.p_value == pytest.approx(count / 24)
    with pytest.raises(ValueError, match="n <= 8"):
        stats_correlation.correlate(np.arange(9.0), np.arange(9.0) ** 2, p_value="exact")
    assert stats_correlation.correlate(np.arange(9.0), np.arange(9.0) ** 2, p_value="auto").p_method == "scipy"


def test_fisher_interval_matches_scipy_and_is_wide_at_n_4():
    rng = np.random.default_rng(1)
    x = rng.normal(size=10)
    y = x + rng.normal(size=10)
    res = stats_correlation.correlate(x, y, interval="fisher")
    ref = stats.pearsonr(x, y).confidence_interval(0.95)
    assert (res.ci_low, res.ci_high) == pytest.approx((ref.low, ref.high), rel=1e-9)
    lo, hi = R.fisher_interval(-0.9, 4)
    assert lo < -0.99 and hi > 0.0  # n = 4: the interval spans zero even for r = -0.9
    assert all(np.isnan(R.fisher_interval(1.0, 4))) and all(np.isnan(R.fisher_interval(0.5, 3)))
    s = stats_correlation.correlate([1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 5.0], method="spearman")
    assert s.r == pytest.approx(stats.spearmanr([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]).statistic)


# --------------------------------------------------------------------------------------------------------
# the study: held-out text, parents, correlations and verdicts


def _mini_dataset(n=6, caps=5):
    caps_ = tuple(tuple(f"image {i} caption {c}" for c in range(caps)) for i in range(n))
    return ImageCaptionDataset(name="mini", source="test", sample_ids=tuple(f"s{i}" for i in range(n)),
                               images=tuple(f"img{i}.jpg" for i in range(n)), captions=caps_)


def test_study_heldout_leaves_out_every_caption_any_draw_aligns():
    ds = _mini_dataset()
    from prh_lib.data import Draw, sample_pairs

    d0 = Draw("a", 0, 0, sample_pairs(ds, n=4, seed=0, caption_policy="first"))
    d1 = Draw("b", 0, 0, sample_pairs(ds, n=4, seed=1, caption_policy="concat", n_captions=3))
    texts, used = L.study_heldout([ds], [d0, d1], per_image=2)
    assert used == "heldout"
    aligned = set(d0.pairs.texts) | set(d1.pairs.texts)
    assert texts and not any(t in a for t in texts for a in aligned)
    # images in no draw give their first captions
    unused = set(ds.sample_ids) - set(d0.pairs.sample_ids) - set(d1.pairs.sample_ids)
    for sid in unused:
        assert f"image {sid[1:]} caption 0" in texts
    # caption draws over every caption of every image leave nothing: the aligned texts, said so
    every = [Draw("c", r, r, sample_pairs(ds, n=None, caption_policy="nth", caption_index=r)) for r in range(5)]
    texts, used = L.study_heldout([ds], every)
    assert used == "aligned" and texts == list(every[0].pairs.texts)


def _summary(peaks, bpbs, dataset="d", vision="v", family="independent"):
    n = len(peaks)
    return pd.DataFrame({"dataset": dataset, "vision": vision, "language": [f"m{i}" for i in range(n)],
                         "family": family, "fraction": np.nan, "n": 100, "chance": 0.1, "n_draws": 5,
                         "peak": peaks, "final": np.asarray(peaks) * 0.5 + 0.05, "calibrated peak": peaks,
                         "bpb": bpbs, "next_token_accuracy": -np.asarray(bpbs)})


def test_study_correlations_are_exact_for_four_models_and_spearman_only_for_the_ladder():
    s = _summary([0.20, 0.22, 0.25, 0.30], [1.4, 1.2, 1.1, 0.9])
    corr = C.study_correlations(s, capability=["bpb"], alignment=["peak"])
    pe = corr[corr["method"] == "pearson"].iloc[0]
    sp = corr[corr["method"] == "spearman"].iloc[0]
    assert pe["p method"] == "exact" and sp["p"] == pytest.approx(2 / 24)
    assert pe["r"] == pytest.approx(stats.pearsonr(s["peak"], s["bpb"]).statistic)
    assert pe["r (capability)"] == pytest.approx(-pe["r"]) and pe["r (capability)"] > 0
    lad = C.study_correlations(s.assign(family="ladder"), capability=["bpb"], alignment=["peak"], family="ladder")
    assert list(lad["method"]) == ["spearman"] and np.isnan(lad["p"]).all() and np.isnan(lad["ci low"]).all()
    assert "no p-value" in C.format_correlation(lad.iloc[0])
    disp = C.correlation_display(corr)
    assert {"pearson", "spearman"} <= set(disp.columns) and "exact p = 0.0833" in disp.iloc[0]["spearman"]


def _paper_correlations(mmlu_low, mmlu_high):
    """The paper path's benchmark correlations on DOCCI: 21 models whose peaks rise with MMLU (seeded)."""
    rng = np.random.default_rng(0)
    mmlu = rng.uniform(mmlu_low, mmlu_high, 21)
    paper_s = _summary(0.1 + 0.002 * mmlu + rng.normal(0, 0.01, 21), rng.uniform(0.8, 1.2, 21), dataset="docci",
                       vision="facebook/dinov3-vitl16").assign(mmlu_5shot=mmlu, arc_challenge=mmlu,
                                                              gsm8k_5shot=rng.uniform(0, 80, 21))
    return C.study_correlations(paper_s, capability=["mmlu_5shot", "arc_challenge", "gsm8k_5shot"])


def test_findings_follow_the_numbers():
    grows = C.study_correlations(_summary([0.20, 0.22, 0.25, 0.30], [1.4, 1.2, 1.1, 0.9]), capability=["bpb"])
    rows = {r["id"]: r for r in C.findings(grows, main_dataset="d")}
    # the paper's sign, but no exact p over four models can be below 0.05 (Spearman's smallest = 2/4! = 1/12):
    # underpowered with these models (inconclusive, the reason in numbers), the direction kept as a note
    assert rows["3.2/capability-trend"]["verdict"] == "inconclusive"
    assert "n = 4 independent language models" in rows["3.2/capability-trend"]["note"]
    assert "direction: the paper's" in rows["3.2/capability-trend"]["note"]
    six = C.study_correlations(_summary([0.20, 0.22, 0.25, 0.30, 0.31, 0.35], [1.4, 1.2, 1.1, 0.9, 0.8, 0.7]),
                               capability=["bpb"])
    rows6 = {r["id"]: r for r in C.findings(six, main_dataset="d")}
    assert rows6["3.2/capability-trend"]["verdict"] == "reproduces in kind"  # six models in order: exact p = 2/720
    # final = peak correlates exactly as the peak does: not "less predictive"
    same = C.study_correlations(_summary([0.20, 0.22, 0.25, 0.30, 0.31, 0.35], [1.4, 1.2, 1.1, 0.9, 0.8, 0.7])
                                .assign(final=lambda d: d["peak"]), capability=["bpb"])
    assert {r["id"]: r for r in C.findings(same, main_dataset="d")}["3.2/final-less"]["verdict"] == "differs"
    falls = C.study_correlations(_summary([0.30, 0.25, 0.22, 0.20, 0.18], [1.4, 1.2, 1.1, 0.9, 0.8]),
                                 capability=["bpb"])
    assert {r["id"]: r for r in C.findings(falls, main_dataset="d")}["3.2/capability-trend"]["verdict"] == "differs"
    few = C.study_correlations(_summary([0.2, 0.3], [1.4, 1.2]), capability=["bpb"])
    rows = C.findings(few, main_dataset="d", missing_models=["gemma3-270m"])
    assert all(r["verdict"].startswith("not testable offline") and "gemma3-270m" in r["verdict"] for r in rows)
    # paper path: benchmark correlations on DOCCI
    corr = _paper_correlations(30, 80)
    assert set(corr["p method"]) == {"scipy"}
    rows = {r["id"]: r for r in C.findings(corr, main_dataset="docci", comparable=True)}
    assert rows["3.2/mmlu-docci"]["verdict"] in ("reproduces", "reproduces in kind")
    assert rows["3.2/mmlu-docci"]["this build"].startswith("facebook/dinov3-vitl16, docci")


def test_summary_table_aggregates_the_results_rows(tmp_path):
    from prh_lib import results

    rows = []
    for draw, (a, b) in enumerate([(0.2, 0.1), (0.3, 0.12), (0.25, 0.14)]):
        for q, score in (("peak", a), ("final", b)):
            rows.append({"dataset": "d", "draw": draw, "seed": draw, "n": 100, "k": 10, "metric": "mutual_knn",
                         "model_x": "v", "model_y": "m", "quantity": q, "score": score, "calibrated": score - 0.1,
                         "p": 0.01 * (draw + 1), "family": "independent", "fraction": np.nan})
    rows += [{"dataset": "held-out captions", "draw": 0, "model_x": "m", "metric": "bits_per_byte", "quantity": "bpb",
              "score": 1.1, "family": "independent"},
             {"dataset": "held-out captions", "draw": 0, "model_x": "m", "metric": "next_token_accuracy",
              "quantity": "next_token_accuracy", "score": 0.4, "family": "independent"}]
    results.write(rows, chapter="t", params={"a": 1}, root=tmp_path)
    df = results.load(root=tmp_path, expand_extra=True)
    s = C.summary_table(df).iloc[0]
    assert s["peak"] == pytest.approx(0.25) and s["peak std"] == pytest.approx(np.std([0.2, 0.3, 0.25], ddof=1))
    assert s["p peak (max)"] == pytest.approx(0.03) and s["chance"] == pytest.approx(10 / 99)
    assert s["bpb"] == 1.1 and s["next_token_accuracy"] == 0.4 and s["n_draws"] == 3
    # the page's view: a benchmark measured for some models only reads "not measured", never NaN; words, not ids
    summary = C.summary_table(df)
    two = pd.concat([summary, summary.assign(language="m2", gsm8k_5shot=np.nan)]).assign(
        gsm8k_5shot=[0.31, np.nan])
    shown = C.summary_display(two)
    assert list(shown["GSM8K (5-shot)"]) == ["0.310", "not measured"]
    assert "bits per byte" in shown and "next-token accuracy" in shown and "bpb" not in shown
    assert not shown.isna().any().any()
    # every row has 3 draws: said once in the header, not in every cell
    assert "peak (mean ± std, 3 draws)" in shown and "(3 draws)" not in " ".join(shown.astype(str).values.ravel())


def test_degenerate_layers_are_collected_into_one_sentence_and_other_warnings_pass():
    import warnings

    from prh_lib.analysis.core import score_pair
    from prh_lib.extract.features import LayerFeatures

    rng = np.random.default_rng(0)
    X = torch.tensor(rng.standard_normal((3, 30, 8)), dtype=torch.float32)
    X[0] = 1.0  # the embedding layer: every sample the same vector
    Y = torch.tensor(rng.standard_normal((2, 30, 8)), dtype=torch.float32)
    ids = tuple(f"s{i}" for i in range(30))
    fx = LayerFeatures(X, ("embed", "layer.1", "layer.2"), ids, {}, None)
    fy = LayerFeatures(Y, ("embed", "layer.1"), ids, {}, None)
    dl = capability_study.DegenerateLayers()
    with warnings.catch_warnings(record=True) as outer:
        warnings.simplefilter("always")
        with dl:
            score_pair(fx, fy, k=3, n_permutations=20, n_boot=0, control=False)
            dl.add_model("vis", "lang", fx.layer_labels, fy.layer_labels)
            warnings.warn("something else", UserWarning)
    assert dl.found == {"vis": {"embed"}} and "vis: embed" in dl.sentence()
    assert [str(w.message) for w in outer] == ["something else"]
    assert capability_study.DegenerateLayers().sentence() == ""


def test_the_benchmark_table_says_missing_values_in_words():
    from prh_lib.data import benchmarks

    table = benchmarks.load_capability_table()
    shown = benchmarks.display_table(table)
    assert list(shown.columns) == ["MMLU (5-shot)", "ARC-Challenge", "ARC shots", "GSM8K (5-shot)"]
    assert not shown.isna().any().any() and shown.index.name == "model"
    for model, row in table.iterrows():
        assert shown.loc[model, "MMLU (5-shot)"] == ("not published" if np.isnan(row["mmlu_5shot"])
                                                     else f"{row['mmlu_5shot']:.1f}")
        if np.isfinite(row["arc_challenge"]) and np.isfinite(row["arc_shots"]):
            assert shown.loc[model, "ARC shots"] == str(int(row["arc_shots"]))  # 25, not 25.0


@pytest.mark.parametrize("n", [3, 4, 5])
@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_exact_p_floor_is_the_smallest_exact_p_and_is_reached(n, method):
    """Pearson's exact p reaches 1/n! (x against itself: no other ordering reaches r = 1 for uneven spacing);
    Spearman's reaches only 2/n! (reversed ranks give -rho). No random data goes below the floor."""
    from prh_lib.stats.correlation import exact_p_floor, exact_permutation_p

    floor = exact_p_floor(n, method)
    x = np.cumsum(np.arange(1, n + 1) ** 2, dtype=float)  # uneven spacing
    assert exact_permutation_p(x, x, method=method) == pytest.approx(floor)
    rng = np.random.default_rng(n)
    assert min(exact_permutation_p(rng.normal(size=n), rng.normal(size=n), method=method)
               for _ in range(100)) >= floor - 1e-12


def test_paper_profile_trend_reads_the_interval_over_images_of_the_mmlu_correlation():
    """Paper path: a significant r over the 21 models' draw means still needs its interval over images above 0;
    an interval that holds 0 makes 3.2/capability-trend (and final-less) inconclusive."""
    corr = _paper_correlations(25, 75)

    def img(low):
        return pd.DataFrame([{"dataset": "docci", "vision": "facebook/dinov3-vitl16", "capability": "mmlu_5shot",
                              "method": "pearson", "r": 0.6, "ci low": low, "ci high": 0.8,
                              "r (capability)": 0.6, "low (capability)": low, "high (capability)": 0.8,
                              "peak − final (capability)": 0.2, "peak − final low": low - 0.4,
                              "peak − final high": 0.5}])

    wide = {r["id"]: r for r in C.findings(corr, main_dataset="docci", comparable=True, image_corr=img(-0.1))}
    assert wide["3.2/capability-trend"]["verdict"] == "inconclusive"
    assert "interval over images" in wide["3.2/capability-trend"]["note"]
    assert wide["3.2/final-less"]["verdict"] in ("inconclusive", "differs")
    tight = {r["id"]: r for r in C.findings(corr, main_dataset="docci", comparable=True, image_corr=img(0.4))}
    assert tight["3.2/capability-trend"]["verdict"] in ("reproduces", "reproduces in kind")
    assert "over images (held-out peak): +0.60 [+0.40, +0.80]" in tight["3.2/capability-trend"]["this build"]
    none = {r["id"]: r for r in C.findings(corr, main_dataset="docci", comparable=True)}
    assert "no interval over images" in none["3.2/capability-trend"]["note"]


def test_the_study_prose_says_when_the_capability_claims_cannot_be_tested():
    s = _summary([0.20, 0.22, 0.25], [1.4, 1.2, 1.1])
    corr = C.study_correlations(s, capability=["bpb"])
    text = C.describe_study(corr, pd.DataFrame(), s, main_dataset="d")
    assert "3.2/capability-trend and 3.2/final-less needs both p below 0.05" in text and "takes 16 models" in text
    six = _summary([0.20, 0.22, 0.25, 0.30, 0.31, 0.35], [1.4, 1.2, 1.1, 0.9, 0.8, 0.7])
    assert "not testable" not in C.describe_study(C.study_correlations(six, capability=["bpb"]), pd.DataFrame(), six,
                                                  main_dataset="d")
