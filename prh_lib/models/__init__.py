"""Language and vision models with their preprocessing and layer labels, loaded by one function.

A model name is parsed once into a :class:`ModelSpec` (:func:`parse_model_name`: zoo name, Hugging Face id,
local folder, ``timm:<arch>``, one tower ``":vision"``/``":text"`` of a two-tower model, any of them with
``"@random-init:<seed>"``). The same spec gives the identity that keys the feature cache
(:func:`resolve_identity`, no weights loaded) and the loaded model (:func:`load_model`), a
:class:`LoadedModel` whose :meth:`~LoadedModel.layer_outputs` are aligned with its ``layer_labels``.
Pooling is named, not applied here: the extraction code pools.

Modules: :mod:`~prh_lib.models.spec` (names, identities), :mod:`~prh_lib.models.loaded` (the loaded
model, dtypes, placement), :mod:`~prh_lib.models.hf`, :mod:`~prh_lib.models.timm_cnn`,
:mod:`~prh_lib.models.two_tower` (loaders), :mod:`~prh_lib.models.random_init`, :mod:`~prh_lib.models.load`
(the dispatcher), :mod:`~prh_lib.models.zoo` and :mod:`~prh_lib.models.zoo.converters` (the offline zoo)."""

from prh_lib.models.hf import CausalLM, load_causal_lm  # noqa: F401
from prh_lib.models.load import UnsafeWeightsError, describe, load_model, load_tokenizer  # noqa: F401
from prh_lib.models.loaded import DTYPES, LoadedModel, dtype_bytes, dtype_name, torch_dtype  # noqa: F401
from prh_lib.models.random_init import random_init  # noqa: F401
from prh_lib.models.spec import ModelSpec, parse_model_name, resolve_identity  # noqa: F401
from prh_lib.models.two_tower import TextChunking  # noqa: F401
from prh_lib.models.zoo import ModelNotAvailableError  # noqa: F401
from prh_lib.models.zoo.registry import ZOO  # noqa: F401
