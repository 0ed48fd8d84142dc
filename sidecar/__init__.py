"""runaway-sidecar: a streaming proxy that cuts runaway reasoning in front of vLLM."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("runaway-sidecar")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
