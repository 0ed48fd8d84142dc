"""Which build of the per-event path runs: the mypyc-compiled one or the pure-Python source.

``setup.py`` compiles the per-event modules of ``detectors`` and ``sidecar`` with mypyc where
a C compiler is at hand: an extension module then sits beside each one's ``.py``, and Python
imports the extension first. They are the same source, so they give the same results
(the modules of ``setup.py``'s ``C_MODULES``, ``blocktokens`` and ``shinglecount``, are
written again in C to the same contract, and the tests compare each with its source).
:func:`select` (called by both packages' ``__init__``, before any of those modules is
imported) makes every one of them run from its source instead when

- ``RUNAWAY_SIDECAR_PURE`` is set (not empty, not ``0``): the fallback on demand, to compare
  the two or to rule the compiled one out;
- a compiled module is older than its source (an editable checkout edited since it was
  built): the extension would run the code as it was. ``pip install -e .`` builds anew.

It is all or nothing: compiled modules call each other directly, not through the module
that an import finds, so a mix would run partly compiled whatever the imports said.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

#: Set (not empty, not "0") to run the source of every compiled module.
PURE_ENV = "RUNAWAY_SIDECAR_PURE"
#: The packages whose modules may be compiled.
PACKAGES = ("detectors", "sidecar")
#: An extension written less than this many seconds before its source is not stale: an
#: installer writes a package's files one after the other, in any order.
_SLACK = 2.0
_ROOT = Path(__file__).resolve().parent.parent
_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)
_state: list[str] = []  # why the source runs ("" while the compiled modules may)


def compiled_sources(root: Path = _ROOT) -> list[Path]:
    """The ``.py`` files of :data:`PACKAGES` under ``root`` that have an extension beside
    them."""
    found = []
    for package in PACKAGES:
        for directory, _dirs, files in os.walk(root / package):
            for name in files:
                if name.endswith(_SUFFIXES):
                    source = Path(directory) / (name.split(".", 1)[0] + ".py")
                    if source.exists():
                        found.append(source)
    return sorted(found)


def _stale(sources: Sequence[Path], root: Path) -> list[str]:
    """The modules of ``sources`` whose extension is older than their source."""
    stale = []
    for source in sources:
        newest = max(p.stat().st_mtime for p in source.parent.glob(source.stem + ".*")
                     if p.name.endswith(_SUFFIXES))
        # A module written in C (``shinglecount.c``) is stale when either source is newer.
        written = max(p.stat().st_mtime for p in (source, source.with_suffix(".c"))
                      if p.exists())
        if written > newest + _SLACK:
            stale.append(str(source.relative_to(root)))
    return stale


@dataclass(frozen=True, slots=True)
class Choice:
    """Which build the packages of one checkout run, as :func:`choose` finds it before
    anything is imported (whether the extensions then import is not known yet)."""

    #: Extensions sit beside the source: a compiled build exists.
    built: bool
    #: The modules whose extension is older than their source (relative paths).
    stale: tuple[str, ...]
    #: Why the source runs; empty when the compiled modules may.
    reason: str


def pure_requested(env: Mapping[str, str]) -> bool:
    """Whether ``env`` asks for the source (:data:`PURE_ENV` set, not empty, not ``0``)."""
    return env.get(PURE_ENV, "") not in ("", "0")


def choose(root: Path, env: Mapping[str, str]) -> Choice:
    """The build that the packages under ``root`` run in a process with environment
    ``env``: the rule of the module docstring, which :func:`select` applies to this
    process (benchmarks apply it to the sidecars they start)."""
    sources = compiled_sources(root)
    if not sources:
        return Choice(built=False, stale=(), reason="not compiled")
    stale = tuple(_stale(sources, root))
    if pure_requested(env):
        reason = f"{PURE_ENV} is set"
    elif stale:
        reason = (f"the compiled {', '.join(stale)} older than the source: "
                  "pip install -e . builds it anew")
    else:
        reason = ""
    return Choice(built=True, stale=stale, reason=reason)


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds a module of :data:`PACKAGES` as its ``.py`` file, extension or not."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if path is None or fullname.partition(".")[0] not in PACKAGES:
            return None
        name = fullname.rpartition(".")[2] + ".py"
        for entry in path:
            source = os.path.join(entry, name)
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def select() -> None:
    """Decide once, before any compiled module is imported, which build runs (see the
    module docstring); later calls do nothing."""
    if _state:
        return
    choice = choose(_ROOT, os.environ)
    if choice.built and choice.reason:
        sys.meta_path.insert(0, _SourceFinder())
    _state.append(choice.reason)


def compiled() -> bool:
    """Whether the compiled modules run: :func:`select` kept them, and ``detectors.chain``
    (the one every stream runs) was imported as an extension."""
    select()
    if _state[0]:
        return False
    import detectors.chain  # noqa: PLC0415 (after ``select``: ``__init__`` imports this module first)

    return str(detectors.chain.__file__).endswith(_SUFFIXES)


def describe() -> str:
    """Which build runs, for ``--version``: ``compiled (mypyc)``, or ``pure Python`` and
    why."""
    if compiled():
        return "compiled (mypyc)"
    return f"pure Python ({_state[0] or 'the extensions are not importable'})"
