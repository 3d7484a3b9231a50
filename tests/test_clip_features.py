"""``analysis.clip_features``: the PRH reference's one threshold per model's stack (default) and per-layer clipping,
against values computed by hand."""

import numpy as np
import pytest
import torch

from prh_lib import analysis
from prh_lib.analysis.core import clip_threshold, preprocessing_label
from prh_lib.extract.features import LayerFeatures


def _features():
    # 2 layers x 2 samples; layer 0 has width 2 (zero-padded to 3), layer 1 width 3
    values = torch.tensor([[[1.0, -4.0, 0.0], [0.5, 6.0, 0.0]],
                           [[2.0, 8.0, -3.0], [1.0, -1.0, 10.0]]])
    return LayerFeatures(values, ("stage.0", "stage.1"), ("a", "b"), {"model": "toy"}, (2, 3))


def test_stack_threshold_by_hand():
    # sample a: |x| over both layers' true widths = 1, 4, 2, 8, 3 -> median 3; sample b: 0.5, 6, 1, 1, 10 -> 1
    assert clip_threshold(_features(), q=0.5) == pytest.approx(2.0)
    # q = 0.75: position 0.75 * 4 = 3 of the sorted values -> 4 and 6; mean 5
    assert clip_threshold(_features(), q=0.75) == pytest.approx(5.0)
    out = analysis.clip_features(_features(), q=0.5)  # default: clip="stack"
    expected = torch.tensor([[[1.0, -2.0, 0.0], [0.5, 2.0, 0.0]],
                             [[2.0, 2.0, -2.0], [1.0, -1.0, 2.0]]])
    torch.testing.assert_close(out.values, expected)
    assert out.meta["clip"] == "stack" and out.meta["clip_q"] == "0.5"


def test_layer_thresholds_by_hand():
    # layer 0: medians of |x| 2.5 (a) and 3.25 (b) -> t = 2.875; layer 1: medians 3 and 1 -> t = 2
    out = analysis.clip_features(_features(), q=0.5, clip="layer")
    expected = torch.tensor([[[1.0, -2.875, 0.0], [0.5, 2.875, 0.0]],
                             [[2.0, 2.0, -2.0], [1.0, -1.0, 2.0]]])
    torch.testing.assert_close(out.values, expected)
    assert out.meta["clip"] == "layer"


def test_stack_equals_the_reference_formula_on_equal_widths():
    # the reference clips a (N, L, D) tensor at mean over samples of torch.quantile(|x| of the sample, q)
    rng = np.random.default_rng(0)
    v = torch.from_numpy(rng.standard_t(3, size=(4, 30, 16))).float()
    f = LayerFeatures(v, tuple(f"l{i}" for i in range(4)), tuple(str(i) for i in range(30)), {"model": "t"})
    nld = v.permute(1, 0, 2)
    t = torch.quantile(nld.abs().flatten(start_dim=1).double(), 0.95, dim=1).mean().item()
    assert clip_threshold(f, q=0.95) == pytest.approx(t, rel=1e-6)
    torch.testing.assert_close(analysis.clip_features(f, q=0.95).values, v.clamp(-t, t))


def test_off_and_errors():
    f = _features()
    assert analysis.clip_features(f, q=None) is f
    assert analysis.clip_features(f, q=1) is f
    assert analysis.clip_features(f, q=0.5, clip=None) is f
    with pytest.raises(ValueError, match="clip must be one of"):
        analysis.clip_features(f, q=0.5, clip="global")
    with pytest.raises(ValueError, match="clip_q"):
        analysis.clip_features(f, q=1.5)
    assert preprocessing_label(0.95) == "clip(stack, q=0.95)"
    assert preprocessing_label(0.95, "layer") == "clip(layer, q=0.95)"
    assert preprocessing_label(None) == "none"


@pytest.mark.parametrize("shape", [(5, 1), (5, 2), (7, 13), (3, 100), (40, 1001)])
@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.7, 0.95, 0.999, 1.0])
def test_quantile_from_topk_is_numpys_linear_quantile(shape, q):
    from prh_lib.metrics.preprocess import _quantile_lastdim

    a = torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape) + shape[-1]), dtype=torch.float64)
    a[..., ::3] = a[..., :1].clone()  # ties
    np.testing.assert_allclose(_quantile_lastdim(a, q).numpy(), np.quantile(a.numpy(), q, axis=-1), rtol=0, atol=1e-12)


def _padded_stack(seed, n_layers=5, n=40, dim=24):
    rng = np.random.default_rng(seed)
    dims = tuple(int(d) for d in rng.integers(4, dim + 1, size=n_layers))
    v = torch.from_numpy(rng.standard_t(3, size=(n_layers, n, dim))).float()
    for i, d in enumerate(dims):
        v[i, :, d:] = 0  # narrower layers zero-padded
    return LayerFeatures(v, tuple(f"l{i}" for i in range(n_layers)), tuple(str(i) for i in range(n)),
                         {"model": f"t{seed}"}, dims)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_layer_clipping_gives_the_bytes_of_clip_outliers_per_layer(seed):
    """clip="layer" clamps at layer_clip_thresholds (memoised); the bytes must be those of clipping each
    layer's true width with metrics.clip_outliers(scope="prh"), the function it stands for."""
    from prh_lib.metrics import clip_outliers

    f = _padded_stack(seed)
    expected = f.values.clone()
    for i, d in enumerate(f.layer_dims):
        expected[i, :, :d] = clip_outliers(f.values[i, :, :d], q=0.9)
    got = analysis.clip_features(f, q=0.9, clip="layer").values
    assert torch.equal(got, expected)
    assert (got[:, :, :].abs() > 0).sum() == (f.values.abs() > 0).sum()  # padding stays zero, nothing else is


def test_clipped_stacks_carry_the_digest_of_their_bytes(tmp_path, monkeypatch):
    """The digest a clipped stack is given from _CLIPPED_DIGESTS (its second clipping on) must be the SHA-256
    of its bytes; other thresholds, another mode or other layer widths must not share it."""
    import hashlib

    from prh_lib.analysis import core
    from prh_lib.extract.features import values_digest

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(core, "_CLIPPED_DIGESTS", {})
    f, g = _padded_stack(3), _padded_stack(4)
    narrower = f.replace(f.values)  # same bytes, other layer widths: other layer thresholds
    object.__setattr__(narrower, "layer_dims", tuple(max(1, d - 2) for d in f.layer_dims))
    seen = {}
    for _ in range(2):
        for name, src in [("f", f), ("g", g), ("narrower", narrower)]:
            for clip in ("stack", "layer"):
                for q in (0.9, 0.95):
                    values = analysis.clip_features(src, q=q, clip=clip).values
                    truth = hashlib.sha256(values.numpy().astype("<f4").tobytes()).hexdigest()
                    assert values_digest(values) == truth, (name, clip, q)
                    seen.setdefault(truth, set()).add((name, clip, q))
    assert len(core._CLIPPED_DIGESTS) == 12 and all(len(v) == 1 for v in seen.values())
