import numpy as np
import pytest

from specmesh.tree import DraftTree, TreeTopology


def test_topology_from_parents():
    #        root
    #       /    \
    #      a(0)   b(1)
    #     /   \      \
    #   c(2)  d(3)   e(4)
    #    |
    #   f(5)
    tree = DraftTree(tokens=(10, 11, 12, 13, 14, 15), parents=(-1, -1, 0, 0, 1, 2))
    topo = tree.topology
    assert topo.depths.tolist() == [0, 1, 1, 2, 2, 2, 3]
    assert topo.children[0] == (1, 2) and topo.children[1] == (3, 4) and topo.children[3] == (6,)
    assert topo.path_to(6) == [0, 1, 3, 6]
    assert sorted(topo.leaf_paths()) == sorted([[0, 1, 3, 6], [0, 1, 4], [0, 2, 5]])
    expected = np.zeros((7, 7), dtype=bool)
    for leaf in topo.leaf_paths():
        for i, node in enumerate(leaf):
            expected[node, leaf[: i + 1]] = True
    assert (topo.ancestor_mask == expected).all()


def test_chain_and_empty():
    assert DraftTree.chain([5, 6, 7]).topology.depths.tolist() == [0, 1, 2, 3]
    empty = DraftTree.empty().topology
    assert empty.size == 1 and empty.ancestor_mask.tolist() == [[True]]


@pytest.mark.parametrize("parents", [(0,), (-1, 1), (-2,), (-1, 3, 0)])
def test_bad_parents_are_rejected(parents):
    with pytest.raises(ValueError, match="parents"):
        DraftTree(tokens=tuple(range(len(parents))), parents=parents)


def test_mismatched_lengths_rejected():
    with pytest.raises(ValueError, match="same length"):
        DraftTree(tokens=(1, 2), parents=(-1,))
