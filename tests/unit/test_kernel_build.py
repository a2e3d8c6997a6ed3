"""The C kernels' build (specmesh/model/kernels): they compile wherever the CPU can run them, and
a build that fails says so in the log instead of leaving torch to do their work unnoticed (several
times slower, and other bits than the kernels give)."""

import logging
import sys

import pytest

from specmesh.model import kernels


@pytest.mark.skipif(sys.platform != "linux" or not kernels._wanted(), reason="the kernels do not apply on this machine")
def test_the_kernels_compile_where_the_cpu_can_run_them():
    assert kernels.library() is not None


@pytest.mark.parametrize("compiler, message", [("false", "did not compile"), ("/nonexistent/cc", "no C compiler")])
def test_a_failed_build_is_logged(tmp_path, monkeypatch, caplog, compiler, message):
    monkeypatch.setenv("CC", compiler)
    with caplog.at_level(logging.WARNING, logger=kernels.__name__):
        assert not kernels._build(tmp_path / "kernels.so")
    assert message in caplog.text and "torch does" in caplog.text
    assert not (tmp_path / "kernels.so").exists()
