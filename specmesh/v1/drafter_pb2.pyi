from specmesh.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Features(_message.Message):
    __slots__ = ("data", "hidden_size", "dtype")
    DATA_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    hidden_size: int
    dtype: str
    def __init__(self, data: _Optional[bytes] = ..., hidden_size: _Optional[int] = ..., dtype: _Optional[str] = ...) -> None: ...

class DraftStart(_message.Message):
    __slots__ = ("request_id", "method", "context", "budget", "hidden")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    method: str
    context: _containers.RepeatedScalarFieldContainer[int]
    budget: int
    hidden: Features
    def __init__(self, request_id: _Optional[str] = ..., method: _Optional[str] = ..., context: _Optional[_Iterable[int]] = ..., budget: _Optional[int] = ..., hidden: _Optional[_Union[Features, _Mapping]] = ...) -> None: ...

class DraftFeedback(_message.Message):
    __slots__ = ("tree_tokens", "accepted_tokens", "recycling_rows", "recycling_k", "budget", "hidden")
    TREE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RECYCLING_ROWS_FIELD_NUMBER: _ClassVar[int]
    RECYCLING_K_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    tree_tokens: _containers.RepeatedScalarFieldContainer[int]
    accepted_tokens: _containers.RepeatedScalarFieldContainer[int]
    recycling_rows: bytes
    recycling_k: int
    budget: int
    hidden: Features
    def __init__(self, tree_tokens: _Optional[_Iterable[int]] = ..., accepted_tokens: _Optional[_Iterable[int]] = ..., recycling_rows: _Optional[bytes] = ..., recycling_k: _Optional[int] = ..., budget: _Optional[int] = ..., hidden: _Optional[_Union[Features, _Mapping]] = ...) -> None: ...

class DraftRequest(_message.Message):
    __slots__ = ("start", "feedback")
    START_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    start: DraftStart
    feedback: DraftFeedback
    def __init__(self, start: _Optional[_Union[DraftStart, _Mapping]] = ..., feedback: _Optional[_Union[DraftFeedback, _Mapping]] = ...) -> None: ...

class DraftResponse(_message.Message):
    __slots__ = ("tree", "wants_recycling_rows")
    TREE_FIELD_NUMBER: _ClassVar[int]
    WANTS_RECYCLING_ROWS_FIELD_NUMBER: _ClassVar[int]
    tree: _common_pb2.DraftTree
    wants_recycling_rows: bool
    def __init__(self, tree: _Optional[_Union[_common_pb2.DraftTree, _Mapping]] = ..., wants_recycling_rows: _Optional[bool] = ...) -> None: ...
