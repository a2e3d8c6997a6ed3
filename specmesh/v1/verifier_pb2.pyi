from specmesh.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionStart(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "generated_token_ids", "max_new_tokens", "sampling", "drafter_method", "drafter_address", "budget", "epoch", "stream_interval_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    DRAFTER_METHOD_FIELD_NUMBER: _ClassVar[int]
    DRAFTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STREAM_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    generated_token_ids: _containers.RepeatedScalarFieldContainer[int]
    max_new_tokens: int
    sampling: _common_pb2.SamplingParams
    drafter_method: str
    drafter_address: str
    budget: int
    epoch: int
    stream_interval_ms: int
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., generated_token_ids: _Optional[_Iterable[int]] = ..., max_new_tokens: _Optional[int] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., drafter_method: _Optional[str] = ..., drafter_address: _Optional[str] = ..., budget: _Optional[int] = ..., epoch: _Optional[int] = ..., stream_interval_ms: _Optional[int] = ...) -> None: ...

class BudgetUpdate(_message.Message):
    __slots__ = ("budget",)
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    budget: int
    def __init__(self, budget: _Optional[int] = ...) -> None: ...

class SessionCancel(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("start", "budget", "cancel")
    START_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    start: SessionStart
    budget: BudgetUpdate
    cancel: SessionCancel
    def __init__(self, start: _Optional[_Union[SessionStart, _Mapping]] = ..., budget: _Optional[_Union[BudgetUpdate, _Mapping]] = ..., cancel: _Optional[_Union[SessionCancel, _Mapping]] = ...) -> None: ...

class StepEvent(_message.Message):
    __slots__ = ("index", "token_ids", "steps", "kv_length")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    KV_LENGTH_FIELD_NUMBER: _ClassVar[int]
    index: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    steps: _containers.RepeatedCompositeFieldContainer[_common_pb2.StepStats]
    kv_length: int
    def __init__(self, index: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., steps: _Optional[_Iterable[_Union[_common_pb2.StepStats, _Mapping]]] = ..., kv_length: _Optional[int] = ...) -> None: ...

class SessionFinished(_message.Message):
    __slots__ = ("finish_reason",)
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    finish_reason: str
    def __init__(self, finish_reason: _Optional[str] = ...) -> None: ...

class SessionEvent(_message.Message):
    __slots__ = ("step", "finished")
    STEP_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    step: StepEvent
    finished: SessionFinished
    def __init__(self, step: _Optional[_Union[StepEvent, _Mapping]] = ..., finished: _Optional[_Union[SessionFinished, _Mapping]] = ...) -> None: ...
