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
# # Appendix G. The neighbourhood size k and the number of pairs N
#
# Mutual k-NN has two knobs that have nothing to do with the models: the number of neighbours k and the
# number of image-caption pairs N. Its chance level is k/(N-1), so a larger k or a smaller N raises the
# floor every score starts from, and the maximum over layer pairs picks up more selection noise when N is
# small. Herbst et al. (Appendix G) vary both; this page does the same and shows every score three ways,
# so that the metric's effects can be told from the models':
#
# - **raw**: mutual k-NN as computed;
# - **chance-corrected**: (score - c) / (1 - c) with c = k/(N-1), which is 0 at chance and 1 for identical
#   neighbourhoods;
# - **calibrated**: the permutation-calibrated score of Gröger et al. (2026) at the fixed layer pair (the
#   score minus the null's 95 % quantile, rescaled), which also accounts for the spread of the null.
#
# Scores are read at a **fixed** layer pair (the peak at k = 10 on all pairs), at the **max** over all
# layer pairs (re-selected in every setting, so it includes selection), and at the final layers (in the
# tables). The N sweep draws several random subsets per size; bands are ± one standard deviation over them.
# Two N regimes: **fixed k** (k = 10 at every N, so chance rises as N shrinks) and **fixed k/N** (k scaled
# with N, so chance stays at about 10/238).

# %% tags=["parameters"]
dataset_source = "coco-folder"  # a name in prh_lib.data.SOURCES
data_location = None  # None: PRH_DATA_ROOT (default ../shared/data/coco-mini)
n_pairs = None  # None: every image of the dataset
seed = 0
caption_policy = "first"
k = 10  # the reference k (fixed layer pair, fixed-k N sweep)
ks = None  # None: 1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200 below N - 1
n_sizes = None  # None: 10 %, 15 %, 20 %, 30 %, ..., 100 % of the pairs
n_seeds = 5  # random subsets per size
n_permutations = 100  # permutation null of the calibrated score; 0: skip
clip_q = 0.95
comparisons = [
    ["dinov2-small", "smollm2-135m"],
    ["dinov2-small", "minilm-l6"],
]
device = "cpu"
dtype = "float32"
batch_size = 32

# %%
import pandas as pd
from IPython.display import Markdown

from prh_lib import analysis, data, figures, report
from prh_lib.analysis import ablation

pd.set_option("display.precision", 3)

# %% [markdown]
# ## Data and features

# %%
dataset = data.load_dataset(dataset_source, data_location)
pairs = data.sample_pairs(dataset, n=n_pairs, seed=seed, caption_policy=caption_policy)
features = analysis.prepare_features(comparisons, pairs, clip_q=clip_q, device=device, dtype=dtype,
                                     batch_size=batch_size)
print(f"{len(pairs)} pairs from {dataset.name}; reference k = {k}")

# %% [markdown]
# ## Sweeps
# (A warning about DINOv2's layer 0 is expected: its `embed` CLS token is the same vector for every image, so
# that layer's scores are undefined and never enter the maximum.)

# %%
results = ablation.run_ablation(features, comparisons, ks=ks, ns=n_sizes, k=k, n_seeds=n_seeds, seed=seed,
                                n_permutations=n_permutations, device=device if device != "cpu" else None)

# %% [markdown]
# ## Varying k on all pairs
# Left: raw scores with the chance level k/(N-1), which rises linearly with k. Middle: chance-corrected.
# Right (with permutations): the calibrated score at the fixed layer pair.

# %%
fig_k = figures.plot_sweep(results["k"], x="k")

# %% [markdown]
# ## Varying N at fixed k

# %%
fig_n = figures.plot_sweep(results["n fixed k"], x="n")

# %% [markdown]
# ## Varying N at fixed k/N

# %%
fig_nk = figures.plot_sweep(results["n fixed k/N"], x="n")

# %% [markdown]
# ## Measured on this build
# Fixed-pair scores at both ends of every sweep (means over the random subsets).

# %%
table = ablation.summary_table(results)
table

# %%
Markdown(ablation.describe(table))

# %%
record = report.record("appg_k_n_ablation", ablation.to_record(results, table, n=len(pairs), k=k))
