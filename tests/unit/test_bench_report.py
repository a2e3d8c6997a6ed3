"""The benchmark report's distributed section (specmesh/benchmark/report.py): each run through a
stack is compared with the in-process run of the same drafter and budget, per stack."""

from specmesh.benchmark.report import _distributed_sections, distributed_prefix


def row(method: str, tokens_per_s: float) -> dict:
    return {"dataset": "mtbench", "method": method, "tokens_per_s": tokens_per_s}


def test_each_stack_is_compared_with_the_same_method_in_process():
    summary = [row("none", 40.0), row("hybrid@4", 60.0), row(distributed_prefix(0) + "none", 34.0),
               row(distributed_prefix(0) + "hybrid@4", 48.0), row(distributed_prefix(100) + "none", 38.0),
               row(distributed_prefix(100) + "hybrid@4", 54.0)]
    lines = _distributed_sections({"summary": summary}).splitlines()
    assert "| mtbench | none | every step | 0.85× |" in lines
    assert "| mtbench | hybrid@4 | every step | 0.80× |" in lines
    assert "| mtbench | none | 100 ms stream interval | 0.95× |" in lines
    assert "| mtbench | hybrid@4 | 100 ms stream interval | 0.90× |" in lines
