"""Target features on the wire between verifier and drafter (verifier_service/convert.py →
drafter_service/convert.py): bf16 bytes that come back as the same bf16 values, whatever the
layout or dtype the verifier's tensor had, and messages that break the contract rejected with the
field named."""

from __future__ import annotations

import pytest
import torch

from drafter_service.convert import features
from specmesh.v1 import drafter_pb2
from verifier_service.convert import features_to_proto

HIDDEN = 48


def sent(hidden: torch.Tensor) -> torch.Tensor:
    return features(drafter_pb2.Features.FromString(features_to_proto(hidden).SerializeToString()))


@pytest.mark.parametrize("layout", ["bf16", "bf16 rows of a wider tensor", "bf16 transposed", "fp32"])
def test_features_arrive_as_the_verifiers_values_in_bf16(layout):
    base = torch.randn(5, HIDDEN * 2, generator=torch.Generator().manual_seed(0))
    hidden = {
        "bf16": base[:, :HIDDEN].contiguous().bfloat16(),
        "bf16 rows of a wider tensor": base.bfloat16()[:, :HIDDEN],  # not contiguous
        "bf16 transposed": base.bfloat16().t()[:HIDDEN].t(),
        "fp32": base[:, :HIDDEN],
    }[layout]
    received = sent(hidden)
    assert received.dtype == torch.bfloat16 and received.shape == (5, HIDDEN)
    assert torch.equal(received, hidden.to(torch.bfloat16))


def test_no_rows_arrive_as_an_empty_matrix():
    assert sent(torch.empty(0, HIDDEN, dtype=torch.bfloat16)).shape == (0, HIDDEN)


@pytest.mark.parametrize("message, problem", [
    (drafter_pb2.Features(data=b"\0" * 6, hidden_size=4, dtype="bfloat16"), "hidden.data holds 6 bytes"),
    (drafter_pb2.Features(data=b"\0" * 8, hidden_size=4, dtype="float16"), "hidden.dtype must be one of"),
])
def test_a_malformed_message_is_rejected_naming_the_field(message, problem):
    with pytest.raises(ValueError, match=problem):
        features(message)
