"""Huge pages: the tunable reaches every process that runs a model, and it takes effect."""

import os
import subprocess
import sys

import pytest

from specmesh import huge_pages
from specmesh.stack import LocalStack, StackConfig

REEXEC_AND_ALLOCATE = """
import os, torch
from specmesh import huge_pages
huge_pages.reexec_with_huge_pages()
weights = torch.ones(64 << 18)  # 64 MiB, touched
rollup = open("/proc/self/smaps_rollup").read()
print(os.environ["GLIBC_TUNABLES"])
print(int(rollup.split("AnonHugePages:")[1].split()[0]))
"""


def test_the_tunable_joins_other_tunables_and_an_explicit_setting_wins():
    assert huge_pages.environment({})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    assert huge_pages.environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})["GLIBC_TUNABLES"] == \
        "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert huge_pages.environment({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"


@pytest.mark.skipif(not sys.platform.startswith("linux") or not huge_pages.available(), reason="needs Linux with THP")
def test_a_process_reexecutes_itself_once_and_its_tensors_sit_on_huge_pages():
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", REEXEC_AND_ALLOCATE], env=env, capture_output=True, text=True, check=True)
    tunables, huge_kib = out.stdout.split()
    assert tunables == "glibc.malloc.hugetlb=1"
    assert int(huge_kib) >= 32 << 10  # most of the 64 MiB tensor

    env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=0"  # opted out: left as it is
    out = subprocess.run([sys.executable, "-c", REEXEC_AND_ALLOCATE], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "glibc.malloc.hugetlb=0"


def test_the_local_stack_starts_its_services_with_the_tunable():
    stack = LocalStack(StackConfig(port=0, verifier_port=0, drafter_port=0))
    assert "glibc.malloc.hugetlb=1" in stack._env()["GLIBC_TUNABLES"]
