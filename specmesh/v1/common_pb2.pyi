from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "seed")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    seed: int
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., seed: _Optional[int] = ...) -> None: ...

class DraftTree(_message.Message):
    __slots__ = ("tokens", "parents", "scores")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    parents: _containers.RepeatedScalarFieldContainer[int]
    scores: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., parents: _Optional[_Iterable[int]] = ..., scores: _Optional[_Iterable[float]] = ...) -> None: ...

class StepStats(_message.Message):
    __slots__ = ("tree_size", "accepted", "batch_size", "budget", "draft_ms", "verify_ms", "forward_index", "batch_tree_tokens", "batch_kv_tokens", "path_probs", "batch_speculating", "cycle_ms")
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    DRAFT_MS_FIELD_NUMBER: _ClassVar[int]
    VERIFY_MS_FIELD_NUMBER: _ClassVar[int]
    FORWARD_INDEX_FIELD_NUMBER: _ClassVar[int]
    BATCH_TREE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BATCH_KV_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PATH_PROBS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SPECULATING_FIELD_NUMBER: _ClassVar[int]
    CYCLE_MS_FIELD_NUMBER: _ClassVar[int]
    tree_size: int
    accepted: int
    batch_size: int
    budget: int
    draft_ms: float
    verify_ms: float
    forward_index: int
    batch_tree_tokens: int
    batch_kv_tokens: int
    path_probs: _containers.RepeatedScalarFieldContainer[float]
    batch_speculating: int
    cycle_ms: float
    def __init__(self, tree_size: _Optional[int] = ..., accepted: _Optional[int] = ..., batch_size: _Optional[int] = ..., budget: _Optional[int] = ..., draft_ms: _Optional[float] = ..., verify_ms: _Optional[float] = ..., forward_index: _Optional[int] = ..., batch_tree_tokens: _Optional[int] = ..., batch_kv_tokens: _Optional[int] = ..., path_probs: _Optional[_Iterable[float]] = ..., batch_speculating: _Optional[int] = ..., cycle_ms: _Optional[float] = ...) -> None: ...
