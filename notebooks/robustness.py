# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Do the findings depend on the protocol?
#
# Every number in this book comes from one protocol: mutual k-NN at k = 10, features clipped at the 0.95
# quantile (one threshold per model's stack of layers), not centred, L2-normalised (mutual k-NN ranks neighbours
# by cosine), mean-pooled over real tokens for language models (the CLS token for ViTs, the global average for CNNs). A reviewer asks first whether the conclusions depend on
# those choices: Bangachev et al. ("Representation Alignment Rests on Linear Structure", arXiv 2605.28870)
# report that centring and normalisation consistently raise cross-model alignment, and the
# [displacement chapter](ch_displacement.ipynb) shows that centring decides the companion paper's headline.
#
# This page re-reads the main findings of Sections 3.1 and 3.3 under one change at a time, on the verdicts'
# dataset, with the verdicts' own machinery: held-out peaks (the layer pair chosen on one half of the images and
# scored on the other), 95 % intervals over images from half-samples, and each pair's floors (bag of words,
# random-init twins) preprocessed and scored exactly like the pair. Each cell holds, fails or is undecided by
# the symmetric rule: every test's interval on the finding's side, one off it, or otherwise.

# %% tags=["parameters"]
datasets = [  # the verdicts' dataset and the one whose k/N the matched-k alternatives borrow (one caption draw each)
    {"name": "flickr8k-1k", "source": "coco-folder", "location": "flickr8k-1k", "n_pairs": None, "repetitions": 1,
     "draws": "captions"},
    {"name": "coco-mini", "source": "coco-folder", "n_pairs": None, "repetitions": 1, "draws": "captions"},
]
n_draws = 1
comparisons = [  # two cross-modal pairs with a unimodal LM, and one same-modality pair for the regime order
    ["dinov2-small", "smollm2-135m"],
    ["efficientnet-lite0", "smollm2-135m"],
    ["dinov2-small", "efficientnet-lite0"],
]
alternatives = None  # names from prh_lib.analysis.robustness.ALTERNATIVES; None: all
heldout_splits = 10
heldout_boot = 50
device = "cpu"
dtype = "auto"
batch_size = 32

# %% tags=["remove-cell"]
from IPython.display import Markdown, display
from prh_lib import data, models
from prh_lib.analysis import robustness
from prh_lib.pages import front, report, robustness as page

CHAPTER = "robustness"
SEED = 0  # seeds the halvings, the half-samples and the random-init floors
params = report.setup_page(CHAPTER, globals())

# %% tags=["hide-input"]
draws = data.study_draws(datasets, n_draws=n_draws)
verdict = data.study.headline_dataset(draws)  # the dataset the verdicts read: flickr8k-1k by default
chosen = {a: robustness.ALTERNATIVES[a] for a in (alternatives or robustness.ALTERNATIVES)  # by default, those
          if alternatives or robustness.ALTERNATIVES[a].dataset in (None, *(d.dataset for d in draws))}  # with data
held = robustness.robustness_study(
    draws, comparisons, alternatives=chosen, dataset=verdict, chapter=CHAPTER, params=params,
    n_splits=heldout_splits, n_boot=heldout_boot, seed=SEED, device=device, dtype=dtype, batch_size=batch_size)
pca = robustness.pca_study(  # the PCA claims at the protocol's held-out peak layers, uncentred and centred
    next(d for d in draws if d.dataset == verdict), held[held["alternative"] == robustness.BASELINE],
    n_boot=heldout_boot, seed=SEED, device=device, dtype=dtype, batch_size=batch_size)
grid = page.grid(held, list(chosen), pca)

# %% tags=["remove-cell"]
record = report.record("robustness", page.changes(grid))

# %% tags=["hide-input"]
Markdown(page.headline(grid) + "\n" + front.robustness_markdown(record, link=False))  # as the front page says it

# %% [markdown]
# ## Findings × alternatives
#
# One cell per finding and alternative, coloured by its verdict (✓ holds, ? undecided, ✗ fails); "*" marks a
# verdict other than the protocol's. A blank cell was not run ("–": the PCA findings are read under the protocol
# and centred only; or a k too large for the halves of that N) or is not testable ("n/t": no pair beats its
# floors, so there is no peak to locate). For CKNNA, cycle k-NN and unbiased linear CKA the first finding is
# tested against its floors only: these metrics have no chance level k/(N−1).

# %% tags=["hide-input"]
_ = report.show_figure(page.grid_figure(grid), CHAPTER, params)

# %% [markdown]
# ## The alternatives
#
# Each is a named step composed before scoring (`prh_lib.analysis.robustness.ALTERNATIVES`), applied to the
# pair and to its floors alike. Centring subtracts each layer's mean over the images, after the clipping or
# before it (then clipped as the book clips; the bag of words, never clipped, is centred only). Clipping off and
# clipping per layer (each layer its own threshold) apply to the random-init floors too. Without
# normalisation, mutual k-NN ranks neighbours by the raw inner product, as the PRH code does without its
# `F.normalize` (cosine ranking is blind to each row's length, so "normalisation off" has to change the ranking).
# CKNNA and cycle k-NN are scored by the same held-out procedure; so is unbiased linear CKA, by the kernel
# engine: the held-out selection (`prh_lib.stats.selection.crossfit_peak`) now takes any metric of the library,
# so CKA's peak is chosen and scored on opposite halves like the others. The matched-k alternatives hold k/N
# fixed across the datasets: k = 42 on flickr8k-1k has the k/(N−1) = 0.042 of coco-mini at k = 10, and k = 2
# on coco-mini has 0.008, near flickr8k-1k's 0.010 at k = 10 (k = 3 would give 0.013). Only the metrics of the
# mutual k-NN kind have a chance level k/(N−1); for the others the first finding rests on the floors alone
# ("floors only" in its table). On coco-mini's halves of 120 images, k = 2 becomes k = 1 (the halves keep k/N):
# its intervals are wide, and an undecided there says that 239 images are too few, not that the finding moved.
# The protocol's own numbers here differ a little from the chapters' (one caption draw and 50 half-samples here,
# five caption draws and 100 half-samples there).

# %% tags=["hide-input"]
Markdown(page.study_note(draws, verdict, comparisons, chosen, heldout_splits, heldout_boot) + "\n\n"
         + models.precision.dtype_statement(sorted({m for c in comparisons for m in c}), dtype, device))

# %% [markdown]
# ## Each finding, row by row
#
# Per finding, one row per alternative: the verdict, the weakest test (the one nearest to, or furthest past,
# its threshold) with its 95 % interval over images, and every test with its numbers.

# %% tags=["hide-input"]
for f in list(page.FINDINGS)[:4]:
    display(Markdown(f"**{f}**: {page.FINDINGS[f]}."), page.finding_table(grid, f))

# %% [markdown]
# The PCA claims of Section 3.1b are read at each cross-modal pair's held-out peak layer pair under the protocol,
# compressing the language side, in two spaces only: the layer's own, uncentred coordinates (the book's
# `pca_space = "original"`) and the centred PCA coordinates against the centred layer (`pca_space = "pca"`, in
# the column "centred after clipping"); half-sampled paired intervals of the ratio, as on that page. Section 3.1b
# counts rows over layer pairs, sides and datasets; here every cross-modal pair at its held-out peak must pass.

# %% tags=["hide-input"]
for f in list(page.FINDINGS)[4:]:
    display(Markdown(f"**{f}**: {page.FINDINGS[f]}."), page.finding_table(grid, f))

# %% [markdown]
# ## Feature choices the paper fixes
#
# Which choices the paper makes and which its companion (the displacement geometry of arXiv 2609.24209, on
# the [displacement page](ch_displacement.ipynb)) makes, as their summaries in `../shared/papers/` state them
# (paraphrased: the summaries are not the papers), and the alternative above that varies each.
#
# | choice | this book | the paper (Herbst et al., Sec. 2) | the companion (arXiv 2609.24209) | varied above by |
# | --- | --- | --- | --- | --- |
# | pooling | CLS token (ViT), mean over real tokens (LM), global average (CNN) | CLS token for vision, mean pooling for language | not stated in its summary | not varied here (Section 3.1 compares LM poolings) |
# | outlier clipping | 0.95 quantile, one threshold per model's stack (the PRH code) | not stated in its summary (the PRH code it builds on clips) | none stated | clipping off; clipping per layer |
# | centring | none | none stated: features L2-normalised, not centred | each model's mean subtracted, then whitened | centred after clipping; centred before clipping |
# | normalisation | L2 (cosine neighbourhoods) | every representation L2-normalised | whitening by the inverse square root of the covariance | not normalised (inner-product neighbours) |
# | measure | mutual k-NN, k = 10 | mutual k-NN and its calibrated form, k = 10, N = 1024 | cosines of displacement vectors after orthogonal Procrustes | CKNNA; cycle k-NN; unbiased linear CKA; k at matched k/N |
#
# Where the two differ, the centring rows of the grid say what changes when this book's features are centred
# as the companion's are; no alternative here whitens, so the companion's whitening is not tested (dropping L2
# normalisation is not whitening). For the PCA claims of Section 3.1b, which project uncentred features
# (`pca_space = "original"`), the two PCA rows say what centring changes.
