"""Records the acceptance traces tests/unit/test_acceptance.py replays: the real default model
(bf16) speculating with token recycling and n-gram drafting, in process, on MT-Bench and
HumanEval prompts, each prompt at several budgets. Rerun after a drafter change:

    .venv/bin/python tests/data/record_acceptance_traces.py
"""

import json
from pathlib import Path

import torch

from specmesh import Engine
from specmesh.datasets import chat_token_ids, load_prompts

BUDGETS = (2, 8, 32)
NEW_TOKENS = 64


def main() -> None:
    torch.set_num_threads(1)
    base = Engine.from_pretrained(drafter="recycling", dtype="bfloat16", threads=1)
    prompts = load_prompts("mtbench", 4) + load_prompts("humaneval", 4)
    traces = []
    for method in ("recycling", "ngram"):
        engine = base.with_drafter(method, BUDGETS[0])
        for prompt in prompts:
            ids = chat_token_ids(engine.tokenizer, prompt.text)
            for budget in BUDGETS:
                engine.budget = budget
                steps = engine.generate(ids, max_new_tokens=NEW_TOKENS).stats.steps
                traces.append({"method": method, "prompt": f"{prompt.dataset}/{prompt.id}", "budget": budget,
                               "steps": [[s.budget, s.tree_size, s.accepted] for s in steps]})
    out = Path(__file__).with_name("acceptance_traces.json")
    out.write_text(json.dumps(traces, separators=(",", ":")))
    print(f"wrote {len(traces)} traces to {out}")


if __name__ == "__main__":
    main()
