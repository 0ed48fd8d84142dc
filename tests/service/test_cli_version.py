"""``runaway-sidecar --version``: on stdout, naming the build that runs."""

from __future__ import annotations

import pytest

from sidecar.service.cli import build_parser


def test_version_is_printed_on_stdout_with_the_build(capsys: pytest.CaptureFixture[str]) -> None:
    """Scripts read it as ``$(runaway-sidecar --version)``: it goes to stdout, not stderr,
    and says which build runs (compiled or pure Python)."""
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--version"])
    assert exit_info.value.code == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith("runaway-sidecar ")
    assert "compiled (mypyc)" in out or "pure Python" in out
