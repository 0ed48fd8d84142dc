"""The optional compiled build of the per-event path; all else is in pyproject.toml.

``pip install .`` (and ``pip install -e .``) compiles the modules in :data:`COMPILED` with
mypyc, the compiler that ships with mypy, and those of :data:`C_MODULES` from their C
source, into C extensions that sit beside their ``.py`` files; Python imports an extension
before the source of the same name. The mypyc ones are the same source, type-checked by
mypy strict; a C one implements its module's contract again (``blocktokens.c``: a block's
tokens; ``shinglecount.c``: the recurrence detector's per-key loop), and a test compares
the two. ``tests/test_build.py`` feeds every trace through both builds and compares the
verdicts.

The source alone is installed, and runs, when:

- no C compiler is on the PATH (``$CC``, else ``cc``), checked before anything is compiled;
- ``RUNAWAY_SIDECAR_PURE=1`` is set at install time;
- the compilation fails: the extensions already built are removed, since the compiled
  modules call each other directly and cannot run beside missing ones.

``runaway-sidecar --version`` says which one runs (``detectors.native``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: The per-event path: the detectors' block analysis, the SSE and template decoding, the
#: attempts' bookkeeping. Every module that subclasses a class of these is in the list as
#: well (a compiled class cannot be subclassed by interpreted code).
COMPILED = [
    "detectors/analyzer.py",
    "detectors/base.py",
    "detectors/blocks.py",
    "detectors/budget.py",
    "detectors/chain.py",
    "detectors/degeneration.py",
    "detectors/periodic.py",
    "detectors/recurrence.py",
    "detectors/restatement.py",
    "detectors/sentences.py",
    "detectors/shingles.py",
    "detectors/tokenize.py",
    "sidecar/codecs/sse.py",
    "sidecar/core/attempt.py",
    "sidecar/core/events.py",
    "sidecar/core/kept.py",
    "sidecar/apis/templates.py",
    "sidecar/apis/sse_events.py",
    "sidecar/apis/openai/attempt.py",
    "sidecar/apis/openai/chunks.py",
    "sidecar/apis/messages/api.py",
    "sidecar/apis/messages/attempt.py",
    "sidecar/apis/messages/fold.py",
    "sidecar/apis/messages/splice.py",
    "sidecar/apis/ollama/attempt.py",
    "sidecar/apis/responses/api.py",
    "sidecar/apis/responses/attempt.py",
    "sidecar/apis/responses/fold.py",
    "sidecar/apis/responses/splice.py",
]
#: Modules written in C beside their pure-Python source (same name, same contract), built
#: with the mypyc ones and under the same rules: both or neither.
C_MODULES = ["detectors/blocktokens.c", "detectors/shinglecount.c"]
#: The name of the shared library that holds the compiled modules.
GROUP = "runaway_sidecar_native"
#: The setuptools commands that build extensions: the others (metadata, sdist) need none,
#: and an install runs this file three times, each mypyc run taking most of a minute.
_BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


def _wanted() -> str | None:
    """Why the source alone is installed, or None when the modules are to be compiled."""
    if os.environ.get("RUNAWAY_SIDECAR_PURE", "") not in ("", "0"):
        return "RUNAWAY_SIDECAR_PURE is set"
    compiler = (os.environ.get("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}) on the PATH"
    return None


class OptionalBuildExt(build_ext):
    """``build_ext`` that falls back to the source when the compilation fails."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 (any failure: the source still works)
            for ext in self.extensions:
                path = Path(self.get_ext_fullpath(ext.name))
                path.unlink(missing_ok=True)
            self.extensions = []
            print(f"runaway-sidecar: compiling failed ({exc}); installing the pure-Python "
                  "source", file=sys.stderr)


def _remove_built() -> None:
    """Remove the extensions an earlier build left beside the source (an editable
    checkout): they would run instead of it."""
    root = Path(__file__).resolve().parent
    for path in COMPILED + C_MODULES:
        for built in (root / path).parent.glob(Path(path).stem + ".*.so"):
            built.unlink()
    for built in root.glob(GROUP + "__mypyc.*.so"):
        built.unlink()


def _options() -> dict[str, Any]:
    if not _BUILDS.intersection(sys.argv[1:]):
        return {}
    reason = _wanted()
    if reason is None:
        try:
            from mypyc.build import mypycify  # noqa: PLC0415 (only to compile)

            modules = mypycify(COMPILED, opt_level="3", debug_level="0", group_name=GROUP)
            modules += [Extension(path.removesuffix(".c").replace("/", "."), [path],
                                  extra_compile_args=["-O3"]) for path in C_MODULES]
        except (Exception, SystemExit) as exc:  # noqa: BLE001 (the source still works)
            # mypyc exits (SystemExit) when its type check fails: it has printed why.
            reason = f"mypyc failed ({exc!r})"
        else:
            return {"ext_modules": modules, "cmdclass": {"build_ext": OptionalBuildExt}}
    print(f"runaway-sidecar: {reason}; installing the pure-Python source", file=sys.stderr)
    _remove_built()
    return {}


setup(**_options())
