"""Token recycling and n-gram drafting."""

import numpy as np

from specmesh.drafting import Feedback, NgramDrafter, RecyclingDrafter, RecyclingTable, make_drafter, merge_feedback
from specmesh.drafting.template import TEMPLATE_2_2_2, pruned_template


def test_template_is_the_80_node_2_2_2_tree():
    sizes = [sum(len(node) == depth for node in TEMPLATE_2_2_2) for depth in range(1, 7)]
    assert sizes == [8, 21, 25, 15, 8, 3]
    assert len(set(TEMPLATE_2_2_2)) == 80
    assert all(len(node) == 1 or node[:-1] in TEMPLATE_2_2_2 for node in TEMPLATE_2_2_2)


def test_pruned_template_keeps_the_likeliest_nodes_as_a_tree():
    for budget in (1, 5, 16, 80, 200):
        template = pruned_template(budget)
        assert template.num_nodes == min(budget, 80)
        assert all(p < i for i, p in enumerate(template.parents))
    assert pruned_template(3).ranks.tolist() == [0, 0, 0]  # the rank-0 chain is likeliest
    assert pruned_template(0).num_nodes == 0


def full_table(vocab: int = 50) -> RecyclingTable:
    table = RecyclingTable(vocab)
    tokens = np.arange(vocab)
    table.update(tokens, (tokens[:, None] + np.arange(1, 9)[None, :]) % vocab)
    return table


def test_recycling_drafts_by_bfs_over_the_table():
    drafter = RecyclingDrafter(full_table())
    tree = drafter.propose("r", [10, 20], budget=80)
    assert tree.num_nodes == 80
    template = pruned_template(80)
    for i, (parent, rank) in enumerate(zip(tree.parents, template.ranks)):
        parent_token = 20 if parent < 0 else tree.tokens[parent]
        assert tree.tokens[i] == (parent_token + 1 + rank) % 50


def test_recycling_skips_rows_that_were_never_filled():
    table = RecyclingTable(50)
    drafter = RecyclingDrafter(table)
    assert drafter.propose("r", [7], budget=16).num_nodes == 0
    rows = np.array([[8, 9, 10, 11, 12, 13, 14, 15]])
    drafter.observe("r", Feedback(tree_tokens=(7,), accepted_tokens=(8,), recycling_rows=rows))
    tree = drafter.propose("r", [7], budget=16)
    assert set(tree.tokens) <= {8, 9, 10, 11, 12, 13, 14, 15} and all(p == -1 for p in tree.parents)
    assert tree.num_nodes == len(pruned_template(16).levels[0])


def test_recycling_table_update_overwrites_rows_and_round_trips(tmp_path):
    table = full_table()
    rows = np.tile(np.arange(8), (3, 1))
    table.update(np.array([4, 4, 9]), np.stack([rows[0], rows[1] + 10, rows[2] + 20]))
    assert table.successors[4].tolist() == list(range(10, 18))  # last write wins
    assert table.successors[9].tolist() == list(range(20, 28))
    table.save(tmp_path / "table.npz")
    loaded = RecyclingTable.load(tmp_path / "table.npz")
    assert (loaded.successors == table.successors).all() and (loaded.filled == table.filled).all()


def test_merged_feedback_updates_the_table_as_its_steps_one_by_one():
    """Steps at budget 0 reach the drafter as one feedback; a token in several steps keeps the
    row of the latest."""
    rng = np.random.default_rng(0)
    steps = [Feedback(tuple(rng.integers(0, 12, n).tolist()), (1,), rng.integers(0, 50, (n, 8))) for n in (5, 1, 1, 3, 1)]
    one_by_one, merged = RecyclingDrafter(RecyclingTable(50)), RecyclingDrafter(RecyclingTable(50))
    for step in steps:
        one_by_one.observe("r", step)
    merged.observe("r", merge_feedback(steps))
    assert (merged.table.successors == one_by_one.table.successors).all()
    assert (merged.table.filled == one_by_one.table.filled).all()


def test_ngram_proposes_the_continuation_of_the_longest_suffix_match():
    drafter = NgramDrafter(max_n=3, max_continuation=3)
    context = [1, 2, 3, 4, 5, 6, 9, 9, 2, 3, 4, 7, 1, 2, 3]
    drafter.start("r", context)
    assert drafter.propose("r", context, budget=3).tokens == (4, 5, 6)  # "1 2 3" beats "2 3"
    tree = drafter.propose("r", context, budget=5)
    # then the 2-gram match "2 3" -> [4, 7, 1] shares the node 4 and branches at 7
    assert tree.tokens == (4, 5, 6, 7, 1) and tree.parents == (-1, 0, 1, 0, 3)


def test_ngram_merges_several_matches_into_a_tree():
    drafter = NgramDrafter(max_n=2, max_matches=4)
    context = [5, 6, 1, 5, 6, 2, 3, 5, 6]
    tree = drafter.propose("r", context, budget=10)
    # continuations of "5 6": [2, 3, 5, 6] and [1, 5, 6, 2, ...] share no prefix: two branches
    assert tree.tokens[:4] == (2, 3, 5, 6)
    assert 1 in tree.tokens and tree.parents[tree.tokens.index(1)] == -1
    assert tree.num_nodes <= 10


def test_ngram_without_a_match_proposes_nothing_and_respects_budget_zero():
    drafter = NgramDrafter()
    assert drafter.propose("r", [1, 2, 3], budget=8).num_nodes == 0
    assert drafter.propose("r", [1, 2, 1, 2], budget=0).num_nodes == 0


def test_ngram_index_follows_a_growing_context():
    drafter = NgramDrafter(max_n=2)
    context = [1, 2, 3]
    drafter.propose("r", context, budget=4)
    context += [9, 1, 2]
    assert drafter.propose("r", context, budget=4).tokens[:2] == (3, 9)
    drafter.finish("r")


def test_make_drafter_rejects_unknown_names():
    import pytest

    with pytest.raises(ValueError, match="drafter must be one of"):
        make_drafter("medusa", 10)


def test_merged_trees_share_common_prefixes_and_respect_the_budget():
    from specmesh.drafting.hybrid import merge_trees
    from specmesh.tree import DraftTree

    match = DraftTree.chain([5, 6, 7])
    primary = DraftTree((5, 9, 6, 8), (-1, -1, 0, 1))  # 5 -> 6 shared with the match
    merged = merge_trees(match, primary, budget=5)
    assert merged.tokens == (5, 6, 7, 9, 8) and merged.parents == (-1, 0, 1, -1, 3)
    small = merge_trees(match, primary, budget=4)
    assert small.tokens == (5, 6, 7, 9) and small.parents == (-1, 0, 1, -1)  # 8 lost its place, not its parent
    assert merge_trees(DraftTree.empty(), primary, budget=2).tokens == (5, 9)


def test_hybrid_puts_the_ngram_match_first_and_fills_with_recycling():
    drafter = make_drafter("hybrid", 50)
    drafter.primary.table.update(np.arange(50), (np.arange(50)[:, None] + np.arange(1, 9)[None, :]) % 50)
    context = [40, 41, 42, 30, 31, 40, 41]
    drafter.start("r", context)
    tree = drafter.propose("r", context, 8)
    assert tree.num_nodes == 8 and tree.tokens[:3] == (42, 30, 31) and tree.parents[:3] == (-1, 0, 1)
    roots_children = [t for t, p in zip(tree.tokens, tree.parents) if p == -1]
    assert roots_children.count(42) == 1 and len(roots_children) > 1  # recycling's 41 -> 42 is shared
    assert drafter.wants_recycling_rows and not drafter.wants_hidden
    assert drafter.propose("r", context, 0).num_nodes == 0
