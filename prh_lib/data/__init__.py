"""Image-caption data: datasets from named sources, and N pairs drawn from one.

``load_dataset(source, location)`` -> :class:`ImageCaptionDataset` (every image with all its captions) ->
``sample_pairs(dataset, n=, seed=, caption_policy=)`` -> :class:`Pairs` (sample ids in row order), which
is all that extraction reads.

Modules: :mod:`~prh_lib.data.pairs` (datasets, pairs, caption policies), :mod:`~prh_lib.data.coco` (COCO
caption files), :mod:`~prh_lib.data.tables` (tables read with ``datasets``), :mod:`~prh_lib.data.sources`
(the paper's datasets and the :data:`SOURCES` registry), :mod:`~prh_lib.data.text_only` (caption sets
without images, e.g. the COCO val2017 captions, and disjoint draws)."""

from prh_lib.data.coco import load_coco_folder, load_coco_official, read_coco_captions
from prh_lib.data.pairs import CAPTION_POLICIES, DataError, DataWarning, ImageCaptionDataset, Pairs, sample_pairs
from prh_lib.data.sources import (DEFAULTS, DREAMLIP_COLUMNS, DREAMLIP_LONG, SOURCES, load_cc3m_dreamlip,
    load_coco_captions, load_dataset, load_docci, load_wit)
from prh_lib.data.study import DRAW_KINDS, DatasetSpec, Draw, study_draws, study_pairs
from prh_lib.data.tables import TableImage, load_hf_table, open_table, table_to_dataset
from prh_lib.data.text_only import TextOnlyImage, disjoint_pairs, heldout_texts, is_text_only, load_coco_captions_text

__all__ = ["CAPTION_POLICIES", "DataError", "DataWarning", "ImageCaptionDataset", "Pairs", "sample_pairs",
           "load_coco_folder", "load_coco_official", "read_coco_captions", "DRAW_KINDS", "DatasetSpec", "Draw",
           "study_draws", "study_pairs", "TableImage", "open_table", "table_to_dataset", "load_hf_table", "DEFAULTS",
           "DREAMLIP_COLUMNS", "DREAMLIP_LONG", "SOURCES", "load_dataset", "load_wit", "load_coco_captions",
           "load_docci", "load_cc3m_dreamlip", "TextOnlyImage", "is_text_only", "load_coco_captions_text",
           "disjoint_pairs", "heldout_texts"]
