"""`specmesh bench`'s schedule (specmesh/benchmark/harness.py): every method on every prompt,
prompt by prompt, the order reversed on every other prompt."""

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
