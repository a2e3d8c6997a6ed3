"""The machine and code a benchmark names in its report (specmesh/benchmark/machine.py)."""

import re
import subprocess
from pathlib import Path

import pytest

import specmesh
from specmesh.benchmark.machine import CHECKOUT, code_version, cpu_name


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo")
def test_the_cpu_name_says_family_model_and_native_bf16():
    assert re.fullmatch(r".+ \(CPU family \d+, model \d+\), (AMX|AVX-512 BF16|no native bf16)", cpu_name())


def test_the_code_is_the_checkouts_commit_and_says_when_the_code_differs_from_it(tmp_path):
    git = lambda *args: subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True).stdout.strip()
    git("init", "-q")
    (tmp_path / "engine.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("notes\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    commit = git("rev-parse", "--short", "HEAD")
    assert code_version(tmp_path) == commit
    (tmp_path / "README.md").write_text("more notes\n")  # markdown and results are not code
    assert code_version(tmp_path) == commit
    (tmp_path / "engine.py").write_text("x = 2\n")
    assert code_version(tmp_path) == f"{commit} with uncommitted changes"


def test_outside_a_checkout_the_code_is_the_package_version(tmp_path):
    assert code_version(tmp_path) == f"specmesh {specmesh.__version__}"
    subprocess.run(["git", "-C", str(tmp_path), "init", "-q"], check=True)
    (tmp_path / "site-packages").mkdir()  # an installed copy inside some other repository
    assert code_version(tmp_path / "site-packages") == f"specmesh {specmesh.__version__}"


def test_the_source_checkout_is_the_repository_root():
    assert (CHECKOUT / "specmesh" / "benchmark" / "machine.py").is_file()
