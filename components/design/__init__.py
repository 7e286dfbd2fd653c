"""Sequence design for a backbone with a trained model (checkpoint or ONNX).

The names below load on first use (PEP 562), so `invfold.components.design.config` imports
without torch (the CLI builds its options from it). `design` is both a function and the module
that defines it: the package's `design` attribute is the function (as it was when this file
imported it eagerly), whether or not the module has been imported; the module is
`invfold.components.design.design` in sys.modules."""

import importlib
import sys
import types

from invfold.lazy import lazy_exports

_WHERE = {
    "Design": "invfold.components.design.design",
    "DesignConfig": "invfold.components.design.config",
    "design": "invfold.components.design.design",
    "design_record": "invfold.components.design.design",
    "load_backend": "invfold.components.design.design",
    "parse_positions": "invfold.components.design.positions",
}
__all__ = list(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)


class _DesignPackage(types.ModuleType):
    @property
    def design(self):
        return importlib.import_module("invfold.components.design.design").design

    @design.setter
    def design(self, module) -> None:
        """The import system binds the submodule here on import: the function stays the name."""


sys.modules[__name__].__class__ = _DesignPackage
