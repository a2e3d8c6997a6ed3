"""Which verifier sessions get recycling rows computed (verifier_service/session.py): only those
whose linked drafter said, with its trees, that it learns from them."""

from specmesh.sampling import SamplingParams
from specmesh.tree import DraftTree
from verifier_service.session import Session, SessionSpec

TREE = DraftTree((5, 6), (-1, 0))


def hybrid_session() -> Session:
    spec = SessionSpec("r", [1, 2, 3], [], 64, SamplingParams(), "hybrid", "drafter:1", 4, 1)
    return Session(spec, emit=lambda event: None, speculating=True, linked=True)


def test_rows_follow_what_the_drafters_trees_say():
    session = hybrid_session()
    assert not session.wants_recycling_rows  # no tree yet: nothing said
    session.await_tree(4)
    session.take_tree(TREE, drafter_wants_rows=False)  # hybrid drafting with EAGLE
    assert not session.wants_recycling_rows
    session.await_tree(4)
    session.take_tree(TREE, drafter_wants_rows=True)  # hybrid on recycling (no EAGLE head), or recycling
    assert session.wants_recycling_rows


def test_no_rows_without_a_linked_drafter():
    session = hybrid_session()
    session.await_tree(4)
    session.take_tree(TREE, drafter_wants_rows=True)
    session.linked = False  # held at budget 0 before its link opened, or its drafter was lost
    assert not session.wants_recycling_rows
