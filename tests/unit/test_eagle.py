"""EAGLE: the EAGLE-2 dynamic tree, the drafter's KV rollback, lossless greedy decoding through
the engine, and the training pipeline (loss falls, a checkpoint resumes)."""

import json

import pytest
import torch
from tiny_models import build_tiny_model, random_eagle_head

from specmesh import Engine
from specmesh.drafting.dynamic_tree import Candidates, TreeShape
from specmesh.drafting.eagle import EagleDrafter
from specmesh.eagle.checkpoint import load_head
from specmesh.eagle.target_io import TargetIO
from specmesh.model.runner import ForwardItem

WORDS = ("<unk> the , . of and to a in is you that it for i are on with as be this can your or have "
         "an not by will from at what if we").split()


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("eagle-target"), vocab_size=len(WORDS), seed=3,
                            words=WORDS, initializer_range=0.5)


@pytest.fixture(scope="module")
def drafter(target, tmp_path_factory):
    head_dir = random_eagle_head(target, tmp_path_factory.mktemp("eagle-head"))
    return EagleDrafter(load_head(head_dir), TargetIO.from_checkpoint(target), top_k=4, depth=4)


def test_dynamic_tree_keeps_the_best_candidates_as_a_connected_tree():
    candidates = Candidates()
    lp = torch.log_softmax(torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]]), -1)
    frontier = candidates.add_layer(lp, [-1], 3)
    assert frontier == [0, 1, 2]
    children = torch.log_softmax(torch.tensor([[4.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0],
                                               [0.0, 0.0, 0.0, 0.0, 5.0]]), -1)
    frontier = candidates.add_layer(children, frontier, 3)
    tree = candidates.best_tree(5)
    assert tree.num_nodes == 5
    values = sorted(candidates.values, reverse=True)
    assert sorted(tree.scores, reverse=True) == pytest.approx(values[:5])
    for i, parent in enumerate(tree.parents):  # topological, and a child never beats its parent
        assert parent < i and (parent < 0 or tree.scores[parent] >= tree.scores[i])
    first_level = [s for s, p in zip(tree.scores, tree.parents) if p == -1]
    assert first_level == sorted(first_level, reverse=True)
    assert TreeShape.for_budget(3) == TreeShape(3, 3) and TreeShape.for_budget(60) == TreeShape(8, 6)
    assert TreeShape.for_budget(8) == TreeShape.for_budget(16) == TreeShape(4, 4)  # narrow up to 16 nodes


def test_greedy_with_eagle_is_token_identical_to_plain_decoding(target, drafter):
    plain = Engine.from_pretrained(str(target), drafter="none", dtype="float32", budget=0, max_context=128)
    speculative = Engine(plain.runner, plain.tokenizer, plain.model_config, drafter, 12, plain.prefill_chunk)
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5, 8, 9, 7], [2, 7, 1, 8, 2, 8, 1, 8]]
    for ids in prompts:
        expected = plain.generate(ids, max_new_tokens=40).token_ids
        result = speculative.generate(ids, max_new_tokens=40)
        assert result.token_ids == expected
        assert max(step.tree_size for step in result.stats.steps) == 12
    assert not drafter.sessions  # finished sequences leave no draft state behind


def test_rollback_after_a_rejected_tree_equals_a_fresh_drafter(target, drafter):
    """Accept part of a proposed tree (a path of two nodes, the other branches rejected) plus a
    bonus token: the next proposal equals that of a new drafter started on the accepted context."""
    from specmesh.drafting import Feedback

    engine = Engine.from_pretrained(str(target), drafter="none", dtype="float32", budget=0, max_context=128)
    prompt = [4, 8, 15, 16, 23, 5, 9]
    drafter.start("incremental", prompt + [11], features(engine.runner, prompt))
    tree = drafter.propose("incremental", prompt + [11], 10)
    child = tree.parents.index(0)  # the first node's first child: a path of two nodes
    assert tree.num_nodes == 10 and child > 0
    accepted = (tree.tokens[0], tree.tokens[child], 7)  # two accepted nodes, then a bonus token
    context = prompt + [11] + list(accepted)
    full = features(engine.runner, context[:-1])
    drafter.observe("incremental", Feedback((11, *tree.tokens), accepted, hidden=full[len(prompt):]))
    drafter.start("fresh", context, full)
    incremental, fresh = drafter.propose("incremental", context, 10), drafter.propose("fresh", context, 10)
    assert fresh.tokens == incremental.tokens and fresh.parents == incremental.parents
    assert fresh.scores == pytest.approx(incremental.scores, abs=1e-4)
    drafter.finish("incremental"), drafter.finish("fresh")


def test_merged_feedback_of_several_steps_equals_observing_them_one_by_one(target, drafter):
    """Steps at budget 0 reach the drafter together (verifier_service/loop.py): after one merged
    feedback the drafter proposes what it proposes after the same steps one by one."""
    from specmesh.drafting import Feedback, merge_feedback

    engine = Engine.from_pretrained(str(target), drafter="none", dtype="float32", budget=0, max_context=128)
    prompt = [4, 8, 15, 16, 23, 5, 9]
    context = prompt + [11]
    for name in ("one-by-one", "merged"):
        drafter.start(name, context, features(engine.runner, prompt))
        tree = drafter.propose(name, context, 10)
    accepted = [(tree.tokens[0], 7), (3,), (12,)]  # a step with a tree, then two at budget 0
    roots = [(11, *tree.tokens), (7,), (3,)]
    final = context + [t for step in accepted for t in step]
    full = features(engine.runner, final[:-1])  # the features of the roots and accepted nodes, in order
    steps, offset = [], len(prompt)
    for root_and_tree, tokens in zip(roots, accepted):
        steps.append(Feedback(root_and_tree, tokens, hidden=full[offset : offset + len(tokens)]))
        offset += len(tokens)
    for step in steps:
        drafter.observe("one-by-one", step)
    drafter.observe("merged", merge_feedback(steps))
    one_by_one, merged = drafter.propose("one-by-one", final, 10), drafter.propose("merged", final, 10)
    assert merged.tokens == one_by_one.tokens and merged.parents == one_by_one.parents
    assert merged.scores == pytest.approx(one_by_one.scores, abs=1e-4)
    drafter.finish("one-by-one"), drafter.finish("merged")


def features(runner, token_ids):
    """The target's features [len, hidden] of a token sequence (one prefill in a spare slot)."""
    slot = runner.allocate_slot()
    try:
        return runner.forward([ForwardItem(slot, token_ids, logits="none", hidden=True)])[0].hidden
    finally:
        runner.release_slot(slot)


@pytest.mark.parametrize("inference", [True, False], ids=["kernels", "autograd"])
def test_the_heads_tree_forward_in_place_equals_each_branch_run_alone(drafter, monkeypatch, inference):
    """Two commits, then two tree levels written after them in the same KV buffers (grown on the
    way: a capacity of 4): every node's output equals the head run from scratch over the committed
    inputs and its own branch, and a commit after the tree overwrites its scratch entries."""
    import specmesh.eagle.head as head_module

    monkeypatch.setattr(head_module, "MIN_KV_CAPACITY", 4)
    head, io = drafter.head, drafter.io
    torch.manual_seed(0)
    hidden = head.config.hidden_size
    features, tokens = torch.randn(1, 12, hidden), torch.randint(0, len(WORDS), (1, 12))

    def run(index, positions, mask=None, past=None):
        return head(features[:, index], io.embed(tokens[:, index]), torch.tensor([positions]), mask, past)

    def alone(branch):  # the committed inputs 0-6, then the branch's inputs, causally from scratch
        return run([*range(7), *branch], list(range(7 + len(branch))))[0][0, -1]

    head.requires_grad_(not inference)  # training's path: torch ops, q/k/v and gate/up concatenated per call
    try:
        check_in_place_tree_forward(run, alone, inference)
    finally:
        head.requires_grad_(False)


def check_in_place_tree_forward(run, alone, inference: bool):
    with torch.inference_mode(inference), torch.set_grad_enabled(not inference):
        _, kv = run(list(range(4)), [0, 1, 2, 3])
        _, kv = run([4, 5, 6], [4, 5, 6], past=kv)
        visible = torch.ones(1, 1, 3, 10, dtype=torch.bool)
        visible[..., 7:] = torch.eye(3, dtype=torch.bool)
        level1, scratch = run([7, 8, 9], [7, 7, 7], visible, kv)  # three siblings after input 6
        visible = torch.zeros(1, 1, 2, 12, dtype=torch.bool)
        visible[..., :7] = True
        visible[0, 0, 0, [7, 10]] = visible[0, 0, 1, [9, 11]] = True
        level2, _ = run([10, 11], [8, 8], visible, scratch)  # a child of the first and of the third
        for output, branch in zip([*level1[0], *level2[0]], [[7], [8], [9], [7, 10], [9, 11]]):
            torch.testing.assert_close(output.detach(), alone(branch).detach(), rtol=1e-5, atol=1e-5)
        after, _ = run([8, 10], [7, 8], past=kv)  # the second sibling's branch, committed
        torch.testing.assert_close(after[0, -1].detach(), alone([8, 10]).detach(), rtol=1e-5, atol=1e-5)
        assert kv.length == 7 and scratch.length == 10


def test_eagle_needs_the_target_features(drafter):
    with pytest.raises(ValueError, match="features of 3 tokens"):
        drafter.start("r", [1, 2, 3, 4], None)


def test_training_loss_falls_and_a_checkpoint_resumes(target, tmp_path):
    from specmesh.eagle.objective import Weights
    from specmesh.eagle.train import TrainConfig, train_eagle

    def config(epochs):
        return TrainConfig(out=str(tmp_path), model=str(target), conversations=16, heldout=4, max_length=48,
                           epochs=epochs, batch_size=4, lr=3e-3, warmup_steps=2, eval_every=4, dtype="float32",
                           threads=2, weights=Weights(topk=1.0))

    head_dir = train_eagle(config(epochs=3))
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [4, 8, 12]
    assert log[-1]["loss"] < log[0]["loss"]
    train_eagle(config(epochs=5))  # resumes from step 12, does not start over
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [4, 8, 12, 16, 20]
    assert log[-1]["loss"] < log[0]["loss"]
    saved = json.loads((head_dir / "config.json").read_text())
    assert saved["target_name"] == target.name and saved["last_eval"]["step"] == 20
    assert 0.0 <= saved["last_eval"]["heldout_acc1"] <= 1.0
    assert "| 20 | 5.00 |" in (head_dir / "README.md").read_text()  # the model card has every evaluation


def test_a_draft_vocabulary_limits_what_is_drafted_not_what_is_generated(target, tmp_path):
    head = load_head(random_eagle_head(target, tmp_path))
    head.draft_vocab = torch.arange(0, len(WORDS), 2)  # even token ids only
    restricted = EagleDrafter(head, TargetIO.from_checkpoint(target), top_k=4, depth=3)
    plain = Engine.from_pretrained(str(target), drafter="none", dtype="float32", budget=0, max_context=128)
    proposed = []
    original = restricted.propose
    restricted.propose = lambda *args: proposed.append(original(*args)) or proposed[-1]
    speculative = Engine(plain.runner, plain.tokenizer, plain.model_config, restricted, 8, plain.prefill_chunk)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    assert speculative.generate(ids, max_new_tokens=30).token_ids == plain.generate(ids, max_new_tokens=30).token_ids
    drafted = {t for tree in proposed for t in tree.tokens}
    assert drafted and all(t % 2 == 0 for t in drafted)


def test_stopping_expansion_early_keeps_the_same_tree(target, drafter, monkeypatch):
    engine = Engine.from_pretrained(str(target), drafter="none", dtype="float32", budget=0, max_context=128)
    trees = {}
    for early in (True, False):
        if not early:
            monkeypatch.setattr(Candidates, "can_improve", lambda self, frontier, budget: True)
        for budget in (2, 5, 12):
            for i, prompt in enumerate(([4, 8, 15, 16, 23], [1, 2, 3], [9, 9, 8, 7, 6, 5])):
                drafter.start("r", prompt + [11], features(engine.runner, prompt))
                trees[early, budget, i] = drafter.propose("r", prompt + [11], budget)
                drafter.finish("r")
    assert all(trees[True, b, i] == trees[False, b, i] for (_, b, i) in trees)


def test_tokenized_conversations_are_read_back_from_their_cache(tmp_path):
    from specmesh.eagle.sharegpt import Split, tokenized

    data = [[1, 2, 3], [60000, 5], [7, 8, 9, 10]]
    calls = []

    def stream():
        calls.append(1)
        return iter(data)

    cache, split = tmp_path / "conversations-train.safetensors", Split(max_length=4)
    assert tokenized(cache, stream, split, total=2) == data[:2] and len(calls) == 1
    assert tokenized(cache, stream, split, total=2) == data[:2] and len(calls) == 1  # from the file
    assert tokenized(cache, stream, split, total=1) == data[:1] and len(calls) == 1
    assert tokenized(cache, stream, split, total=3) == data and len(calls) == 2  # more than it holds
    assert tokenized(cache, stream, Split(max_length=8), total=3) == data and len(calls) == 3  # another cut
    assert tokenized(cache, stream, Split(max_length=8), total=5) == data and len(calls) == 4  # the whole stream,
    assert tokenized(cache, stream, Split(max_length=8), total=9) == data and len(calls) == 4  # so it has no more


def test_the_model_card_thins_a_long_log_and_says_when_a_run_stopped_early(tmp_path):
    from specmesh.eagle.card import write_model_card

    head = tmp_path / "head"
    head.mkdir()
    training = {"conversations": 100, "batch_size": 10, "epochs": 5.0}
    (head / "config.json").write_text(json.dumps({"hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
                                                  "intermediate_size": 16, "training": training, "hardware": "a GPU"}))
    log = [{"step": s, "epoch": s / 10, "seconds": s, "loss": 1.0, "heldout_acc1": 0.5, "heldout_acc2": 0.5} for s in range(1, 41)]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    card = write_model_card(tmp_path, head, 1000, 10, 0.9).read_text()
    rows = [line for line in card.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert 10 <= len(rows) <= 17 and rows[0].startswith("| 1 |") and rows[-1].startswith("| 40 |")
    assert "stopped at step 40 of a planned 50" in card and "on a GPU" in card


def test_a_data_set_smaller_than_asked_trains_on_what_it_has_and_says_so(target, tmp_path):
    from specmesh.eagle.sharegpt import Split, tokenized
    from specmesh.eagle.train import TrainConfig, train_eagle

    split = Split(max_length=48)
    for name, convs in {"train": [[i % 30 + 1] * 40 for i in range(6)], "heldout": [[5] * 40]}.items():
        tokenized(tmp_path / f"conversations-{name}.safetensors", lambda c=convs: iter(c), split, total=len(convs) + 1)
    head_dir = train_eagle(TrainConfig(out=str(tmp_path), model=str(target), conversations=12, heldout=1, max_length=48,
                                       epochs=1, batch_size=2, eval_every=100, dtype="float32", threads=2))
    assert json.loads((head_dir / "config.json").read_text())["training"]["conversations"] == 6
    card = (head_dir / "README.md").read_text()
    assert "Data: 6 ShareGPT conversations" in card and "stopped at step" not in card
