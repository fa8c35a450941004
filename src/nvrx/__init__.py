"""nvrx: resilient large-scale training on Slurm."""

from __future__ import annotations


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
