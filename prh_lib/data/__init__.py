"""Image-caption data: datasets from named sources, and N pairs drawn from one.

``load_dataset(source, location)`` -> :class:`ImageCaptionDataset` (every image with all its captions) ->
``sample_pairs(dataset, n=, seed=, caption_policy=)`` -> :class:`Pairs` (sample ids in row order), which
is all that extraction reads.

Modules: :mod:`~prh_lib.data.pairs` (datasets, pairs, caption policies), :mod:`~prh_lib.data.coco` (COCO
caption files), :mod:`~prh_lib.data.tables` (tables read with ``datasets``), :mod:`~prh_lib.data.sources`
(the paper's datasets and the :data:`SOURCES` registry), :mod:`~prh_lib.data.text_only` (caption sets
without images, e.g. the COCO val2017 captions, and disjoint draws)."""

from prh_lib.data.coco import load_coco_folder, read_coco_captions  # noqa: F401
from prh_lib.data.errors import DataError, DataWarning  # noqa: F401
from prh_lib.data.pairs import ImageCaptionDataset, Pairs, sample_pairs  # noqa: F401
from prh_lib.data.sources import SOURCES, load_cc3m_dreamlip, load_dataset  # noqa: F401
from prh_lib.data.study import DatasetSpec, Draw, study_draws  # noqa: F401
from prh_lib.data.tables import TableImage, table_to_dataset  # noqa: F401
from prh_lib.data.text_only import disjoint_pairs, heldout_texts, is_text_only  # noqa: F401
