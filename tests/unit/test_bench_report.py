"""The benchmark report's distributed section (specmesh/benchmark/report.py): each run through a
stack (whole answers, and streamed per stack) is compared with the in-process run of the same
drafter and budget, with the ratio's interval over the prompts."""

from specmesh.benchmark.report import WHOLE, _distributed_sections, streamed_prefix, summarise, write_results


def row(method: str, tokens_per_s: float) -> dict:
    return {"dataset": "mtbench", "method": method, "tokens_per_s": tokens_per_s}


def test_each_way_through_a_stack_is_compared_with_the_same_method_in_process():
    summary = [row("none", 40.0), row("hybrid@4", 60.0), row(WHOLE + "none", 38.0), row(WHOLE + "hybrid@4", 57.0),
               row(streamed_prefix(0) + "none", 34.0), row(streamed_prefix(0) + "hybrid@4", 48.0),
               row(streamed_prefix(100) + "none", 36.0), row(streamed_prefix(100) + "hybrid@4", 54.0)]
    lines = _distributed_sections({"summary": summary}).splitlines()
    assert "| mtbench | none | whole answer | 0.95× |  |" in lines
    assert "| mtbench | hybrid@4 | whole answer | 0.95× |  |" in lines
    assert "| mtbench | none | streamed, every step | 0.85× |  |" in lines
    assert "| mtbench | hybrid@4 | streamed, every step | 0.80× |  |" in lines
    assert "| mtbench | none | streamed, 100 ms interval | 0.90× |  |" in lines
    assert "| mtbench | hybrid@4 | streamed, 100 ms interval | 0.90× |  |" in lines


def run(method: str, prompt: str, tokens: int, seconds: float) -> dict:
    return {"dataset": "mtbench", "prompt": prompt, "method": method, "tokens": [0] * tokens, "seconds": seconds,
            "steps": tokens}


def test_the_ratio_interval_comes_from_the_prompts_runs():
    stack = WHOLE + "none"
    steady = [run("none", p, 100, 2.0) for p in "abcd"] + [run(stack, p, 100, 2.5) for p in "abcd"]
    assert "| mtbench | none | whole answer | 0.80× | 0.80–0.80× |" in _report(steady)
    seconds = {"a": 2.0, "b": 3.0, "c": 2.2, "d": 2.8}  # the stack's run of each prompt
    varied = [run("none", p, 100, 2.0) for p in "abcd"] + [run(stack, p, 100, s) for p, s in seconds.items()]
    (line,) = [line for line in _report(varied) if "whole answer" in line]
    low, high = (float(x) for x in line.split("|")[5].strip(" ×").split("–"))
    assert 0.67 <= low < 0.8 < high <= 1.0  # the ratio 8 s / 10 s lies inside, the one-prompt extremes bound it


def _report(runs: list[dict]) -> list[str]:
    return _distributed_sections({"summary": summarise(runs), "runs": runs}).splitlines()


def test_the_command_names_stream_intervals_only_beyond_the_default(tmp_path):
    config = {"target": "distributed", "dtype": "bfloat16", "prompts": 2, "max_new_tokens": 16, "budgets": (4,),
              "drafters": ("recycling",), "datasets": ("mtbench",)}
    machine = {"cpu": "cpu", "threads": 2, "torch": "2"}
    for intervals, flag in (((0,), ""), ((0, 100), " --stream-intervals 0,100")):
        write_results({"config": {**config, "stream_intervals": intervals}, "machine": machine, "summary": []}, tmp_path, "run")
        command = (tmp_path / "run.md").read_text().split("`")[1]
        assert command.endswith("--datasets mtbench" + flag)
