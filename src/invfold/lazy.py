"""Names a package exports without importing the modules that define them (PEP 562), so a light
module of the package (a config dataclass the CLI builds its flags from) imports without torch while
`from invfold.components.model import InverseFoldingModel` still works."""

import importlib


def lazy_exports(package: str, where: dict[str, str]):
    """The package's module-level `__getattr__`: each name in `where` is imported from the module
    `where` names on first use."""

    def __getattr__(name: str):
        if name in where:
            return getattr(importlib.import_module(where[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
