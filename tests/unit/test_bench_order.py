"""`specmesh bench`'s schedule (specmesh/benchmark/harness.py): every method on every prompt,
prompt by prompt, the order reversed on every other prompt; with stacks, each in-process method
right before its runs through them (specmesh/benchmark/distributed.py)."""

from specmesh.benchmark.distributed import paired
from specmesh.benchmark.harness import BenchConfig, run_methods
from specmesh.benchmark.methods import Method


class WordTokenizer:
    def apply_chat_template(self, messages, **_) -> str:
        return messages[-1]["content"]

    def encode(self, text: str, **_) -> list[int]:
        return [len(word) for word in text.split()]


def test_methods_run_prompt_by_prompt_in_alternating_order():
    ran: list[str] = []

    def method(name: str) -> Method:
        def generate(ids: list[int]) -> tuple[list[int], int]:
            ran.append(name)
            return ids[:2], 1

        return Method(name, generate)

    names = ["a", "b", "c"]
    records = run_methods([method(n) for n in names], BenchConfig(datasets=("mtbench",), prompts=3), WordTokenizer())
    assert ran == names + names + names[::-1] + names  # warm-up, then prompt 0, 1 (reversed), 2
    assert [(r["prompt"], r["method"]) for r in records] == [(p, n) for p, order in zip(
        dict.fromkeys(r["prompt"] for r in records), (names, names[::-1], names)) for n in order]


def test_each_in_process_method_is_followed_by_its_runs_through_the_stacks():
    def named(*names: str) -> list[Method]:
        return [Method(n, lambda ids: (ids, 1)) for n in names]

    local = named("hf-greedy", "none", "eagle@4")
    remote = named("distributed none", "distributed eagle@4", "streamed none", "streamed eagle@4", "streamed[100ms] none")
    assert [m.name for m in paired(local, remote)] == [
        "hf-greedy", "none", "distributed none", "streamed none", "streamed[100ms] none",
        "eagle@4", "distributed eagle@4", "streamed eagle@4"]
