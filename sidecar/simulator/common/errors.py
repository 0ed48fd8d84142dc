"""The errors of the simulated node's routes. Pure.

:class:`ApiError` is answered as a JSON body before any stream starts, worded by the API
and server that answer it; :class:`ClientGoneError` stops a generation whose client went
away. Request-model errors of the agent APIs are
:class:`~sidecar.simulator.common.validation.BodyValidationError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ApiError(Exception):
    """An error answered as a JSON body before any stream starts."""

    status: int
    message: str
    err_type: str = "BadRequestError"
    param: str | None = None
    #: Extra fields of the error object (llama.cpp's context overflow names the sizes).
    details: Mapping[str, int] | None = None


class ClientGoneError(Exception):
    """The client closed the connection; generation must stop."""


def known_model(model: str, known: tuple[str, ...]) -> None:
    """Raise vLLM's 404 for a model the node does not serve."""
    if model not in known:
        raise ApiError(404, f"The model `{model}` does not exist. "
                            f"Valid aliases: {', '.join(known)}.", "NotFoundError", "model")


def in_dialect(dialect: str, err: ApiError, body: object) -> ApiError:
    """The error as the node's server words it (Ollama names a missing model its way)."""
    if dialect == "ollama" and err.status == 404 and err.param == "model":
        model = body.get("model") if isinstance(body, dict) else None
        return ApiError(404, f'model "{model}" not found, try pulling it first')
    return err
