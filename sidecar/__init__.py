"""runaway-sidecar: a streaming proxy that cuts runaway reasoning in front of vLLM."""

from importlib.metadata import PackageNotFoundError, version

from detectors.native import select

select()  # before the compiled modules of this package: they may have to run from source

try:
    __version__ = version("runaway-sidecar")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
