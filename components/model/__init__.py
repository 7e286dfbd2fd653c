"""The inverse-folding network, its config and its file format.

The names below load on first use (PEP 562), so `invfold.components.model.config` (a light
dataclass the CLI builds its options from) imports without torch."""

from invfold.lazy import lazy_exports

_WHERE = {
    "ModelConfig": "invfold.components.model.config",
    "load_model": "invfold.components.model.io",
    "save_model": "invfold.components.model.io",
    "InverseFoldingModel": "invfold.components.model.network",
    "random_decoding_order": "invfold.components.model.network",
    "sampling_noise": "invfold.components.model.network",
}
__all__ = list(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
