# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 3.1b How many dimensions does alignment need? PCA compression
#
# Herbst et al. (Section 3.1, Figure 2, Appendix C) ask where in a representation the cross-modal
# alignment lives: compress one model's features to their top principal components, recompute mutual k-NN
# against the other modality, and watch how fast the score recovers. If a handful of high-variance
# directions carry it, alignment is a coarse, low-dimensional agreement rather than a match of fine
# structure.
#
# **What runs here by default.** The offline zoo models on the 239 COCO pairs (first caption), as on the
# [layer-wise page](sec3_1_layerwise.ipynb). Each comparison is compressed at two layer pairs: the **peak**
# of mutual k-NN over all layer pairs (after outlier clipping) and the **final** layers. Each side is
# compressed separately (the vision model's features with the language model's kept whole, and the
# reverse). PCA is scikit-learn's, fitted on one layer of one model at a time (exact SVD, deterministic
# signs); the number of components runs from 1 to min(N, d), never silently capped.
#
# **Where the projection lives.** The compressed layer is the rank-m reconstruction *in the layer's own
# coordinates* (mean plus the top-m principal directions; `pca_space = "original"`), so at full rank it is
# the uncompressed layer and the score equals the uncompressed score exactly. Mutual k-NN uses cosine
# similarity, which is not invariant to centring; `pca_space = "pca"` scores the centred PCA coordinates
# instead (whose full-rank reference is then the centred layer).

# %% tags=["parameters"]
dataset_source = "coco-folder"  # a name in prh_lib.data.SOURCES
data_location = None  # None: PRH_DATA_ROOT (default ../shared/data/coco-mini)
n_pairs = None  # None: every image of the dataset
seed = 0
caption_policy = "first"
k = 10
clip_q = 0.95  # clip outlying activations per layer before PCA and scoring; None: off
comparisons = [
    ["dinov2-small", "smollm2-135m"],
    ["dinov2-small", "minilm-l6"],
    ["efficientnet-lite0", "smollm2-135m"],
]
layer_roles = ["peak", "final"]  # layer pairs compressed: the mutual k-NN peak and/or the final layers
variance_grid = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0]
pca_dims = None  # None: every number of components up to 32, then a geometric grid to min(N, d)
pca_space = "original"  # "original" (rank-m reconstruction) or "pca" (centred PCA coordinates)
keep_fraction = 0.95  # report the smallest dimension keeping this fraction of the uncompressed score
device = "cpu"
dtype = "float32"
batch_size = 32

# %%
import pandas as pd
from IPython.display import Markdown

from prh_lib import analysis, data, figures, report
from prh_lib.analysis import compression
from prh_lib.metrics import knn

pd.set_option("display.precision", 3)

# %% [markdown]
# ## Data and features
# Cached features of each model (computed once for the whole book), clipped per layer as on the layer-wise
# page.

# %%
dataset = data.load_dataset(dataset_source, data_location)
pairs = data.sample_pairs(dataset, n=n_pairs, seed=seed, caption_policy=caption_policy)
chance = knn.mutual_knn_chance(len(pairs), k)
features = analysis.prepare_features(comparisons, pairs, clip_q=clip_q, device=device, dtype=dtype,
                                     batch_size=batch_size)
print(f"{len(pairs)} pairs from {dataset.name}; k = {k}; chance k/(N-1) = {chance:.4f}; "
      f"PCA keeps at most min(N, d) components per layer")

# %% [markdown]
# ## Compression sweeps
# For each comparison and layer pair: one sweep by the fraction of variance retained, one by the number of
# components kept, for each side. (A warning about DINOv2's layer 0 is expected: its `embed` CLS token is the
# same vector for every image, so that layer's scores are undefined and it never becomes the peak.)

# %%
sweeps = compression.compress_comparisons(
    features, comparisons, roles=layer_roles, k=k, variance=variance_grid, dims=pca_dims, space=pca_space,
    device=device if device != "cpu" else None,
)
table = compression.summary_table(sweeps, fraction=keep_fraction)
table

# %% [markdown]
# ## Alignment against variance retained
# One panel per comparison and layer pair; each line compresses one model and keeps the other whole. The
# dotted black line is the uncompressed score, the dashed grey line chance.

# %%
fig_variance = figures.plot_sweeps(sweeps, sweep="variance")

# %% [markdown]
# ## Alignment against the number of components
# The same on a log scale of components kept (every number up to 32, then a geometric grid to min(N, d)).

# %%
fig_dims = figures.plot_sweeps(sweeps, sweep="dims")

# %% [markdown]
# ## Measured on this build

# %%
Markdown(compression.describe(table, fraction=keep_fraction))

# %%
record = report.record("sec3_1b_pca", compression.to_record(sweeps, table, n=len(pairs), k=k, chance=chance,
                                                           space=pca_space, keep_fraction=keep_fraction))
