"""nvrx: resilient large-scale training on Slurm."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A facade package's `__getattr__`: each name imported from its module (`where`) on first
    use and kept, so importing one module of the package loads that module only."""
    space = importlib.import_module(package).__dict__

    def get(name: str) -> Any:
        try:
            module = where[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = space[name] = getattr(importlib.import_module(module), name)
        return value

    return get


def __getattr__(name: str) -> str:
    # The version is looked up when asked for: importlib.metadata costs a tenth of a second at
    # start-up, and `nvrx --help` must feel instant.
    if name != "__version__":
        raise AttributeError(f"module 'nvrx' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("nvrx")
    except PackageNotFoundError:  # running from a source tree without an install
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
