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
    __slots__ = ("request_id", "method", "context", "budget", "hidden", "trace_context")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    method: str
    context: _containers.RepeatedScalarFieldContainer[int]
    budget: int
    hidden: Features
    trace_context: _containers.ScalarMap[str, str]
    def __init__(self, request_id: _Optional[str] = ..., method: _Optional[str] = ..., context: _Optional[_Iterable[int]] = ..., budget: _Optional[int] = ..., hidden: _Optional[_Union[Features, _Mapping]] = ..., trace_context: _Optional[_Mapping[str, str]] = ...) -> None: ...

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
    __slots__ = ("tree", "error", "wants_recycling_rows")
    TREE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WANTS_RECYCLING_ROWS_FIELD_NUMBER: _ClassVar[int]
    tree: _common_pb2.DraftTree
    error: str
    wants_recycling_rows: bool
    def __init__(self, tree: _Optional[_Union[_common_pb2.DraftTree, _Mapping]] = ..., error: _Optional[str] = ..., wants_recycling_rows: _Optional[bool] = ...) -> None: ...
