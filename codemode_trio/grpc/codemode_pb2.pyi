from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OutputTruncation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_TRUNCATION_UNSPECIFIED: _ClassVar[OutputTruncation]
    OUTPUT_TRUNCATION_CLIENT: _ClassVar[OutputTruncation]
    OUTPUT_TRUNCATION_BOUNDED: _ClassVar[OutputTruncation]

class ToolKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_KIND_UNSPECIFIED: _ClassVar[ToolKind]
    TOOL_KIND_FUNCTION: _ClassVar[ToolKind]
    TOOL_KIND_FREEFORM: _ClassVar[ToolKind]

class ImageDetail(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_DETAIL_UNSPECIFIED: _ClassVar[ImageDetail]
    IMAGE_DETAIL_AUTO: _ClassVar[ImageDetail]
    IMAGE_DETAIL_LOW: _ClassVar[ImageDetail]
    IMAGE_DETAIL_HIGH: _ClassVar[ImageDetail]
    IMAGE_DETAIL_ORIGINAL: _ClassVar[ImageDetail]
OUTPUT_TRUNCATION_UNSPECIFIED: OutputTruncation
OUTPUT_TRUNCATION_CLIENT: OutputTruncation
OUTPUT_TRUNCATION_BOUNDED: OutputTruncation
TOOL_KIND_UNSPECIFIED: ToolKind
TOOL_KIND_FUNCTION: ToolKind
TOOL_KIND_FREEFORM: ToolKind
IMAGE_DETAIL_UNSPECIFIED: ImageDetail
IMAGE_DETAIL_AUTO: ImageDetail
IMAGE_DETAIL_LOW: ImageDetail
IMAGE_DETAIL_HIGH: ImageDetail
IMAGE_DETAIL_ORIGINAL: ImageDetail

class OpenSessionRequest(_message.Message):
    __slots__ = ("cell_execution_limits", "output_truncation", "max_pending_delegate_calls")
    CELL_EXECUTION_LIMITS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TRUNCATION_FIELD_NUMBER: _ClassVar[int]
    MAX_PENDING_DELEGATE_CALLS_FIELD_NUMBER: _ClassVar[int]
    cell_execution_limits: SessionCellExecutionLimits
    output_truncation: OutputTruncation
    max_pending_delegate_calls: int
    def __init__(self, cell_execution_limits: _Optional[_Union[SessionCellExecutionLimits, _Mapping]] = ..., output_truncation: _Optional[_Union[OutputTruncation, str]] = ..., max_pending_delegate_calls: _Optional[int] = ...) -> None: ...

class SessionCellExecutionLimits(_message.Message):
    __slots__ = ("max_yield_time_ms", "max_heap_size_bytes")
    MAX_YIELD_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_HEAP_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_yield_time_ms: int
    max_heap_size_bytes: int
    def __init__(self, max_yield_time_ms: _Optional[int] = ..., max_heap_size_bytes: _Optional[int] = ...) -> None: ...

class SessionEvent(_message.Message):
    __slots__ = ("opened", "tool_call_cancelled", "notification", "notification_cancelled", "cell_closed", "tool_result_delivered")
    OPENED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    NOTIFICATION_FIELD_NUMBER: _ClassVar[int]
    NOTIFICATION_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    CELL_CLOSED_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    opened: SessionOpened
    tool_call_cancelled: ToolCallCancelled
    notification: Notification
    notification_cancelled: NotificationCancelled
    cell_closed: CellClosed
    tool_result_delivered: ToolResultDelivered
    def __init__(self, opened: _Optional[_Union[SessionOpened, _Mapping]] = ..., tool_call_cancelled: _Optional[_Union[ToolCallCancelled, _Mapping]] = ..., notification: _Optional[_Union[Notification, _Mapping]] = ..., notification_cancelled: _Optional[_Union[NotificationCancelled, _Mapping]] = ..., cell_closed: _Optional[_Union[CellClosed, _Mapping]] = ..., tool_result_delivered: _Optional[_Union[ToolResultDelivered, _Mapping]] = ...) -> None: ...

class SessionOpened(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SubscribeToToolCallsRequest(_message.Message):
    __slots__ = ("session_id", "tool_names", "heartbeat_interval_s")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tool_names: _containers.RepeatedCompositeFieldContainer[ToolName]
    heartbeat_interval_s: int
    def __init__(self, session_id: _Optional[str] = ..., tool_names: _Optional[_Iterable[_Union[ToolName, _Mapping]]] = ..., heartbeat_interval_s: _Optional[int] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("session_id", "execution_id", "cell_id", "invocation_id", "runtime_tool_call_id", "tool_name", "tool_kind", "input_json", "sequence", "traceparent", "heartbeat")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_KIND_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    execution_id: str
    cell_id: str
    invocation_id: str
    runtime_tool_call_id: str
    tool_name: ToolName
    tool_kind: ToolKind
    input_json: bytes
    sequence: int
    traceparent: str
    heartbeat: Heartbeat
    def __init__(self, session_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., cell_id: _Optional[str] = ..., invocation_id: _Optional[str] = ..., runtime_tool_call_id: _Optional[str] = ..., tool_name: _Optional[_Union[ToolName, _Mapping]] = ..., tool_kind: _Optional[_Union[ToolKind, str]] = ..., input_json: _Optional[bytes] = ..., sequence: _Optional[int] = ..., traceparent: _Optional[str] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CompleteToolCallRequest(_message.Message):
    __slots__ = ("session_id", "invocation_id", "succeeded", "failed")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    invocation_id: str
    succeeded: ToolCallSucceeded
    failed: ToolCallFailed
    def __init__(self, session_id: _Optional[str] = ..., invocation_id: _Optional[str] = ..., succeeded: _Optional[_Union[ToolCallSucceeded, _Mapping]] = ..., failed: _Optional[_Union[ToolCallFailed, _Mapping]] = ...) -> None: ...

class ToolCallSucceeded(_message.Message):
    __slots__ = ("output_json",)
    OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    output_json: bytes
    def __init__(self, output_json: _Optional[bytes] = ...) -> None: ...

class ToolCallFailed(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class CompleteToolCallResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ToolCallCancelled(_message.Message):
    __slots__ = ("invocation_id",)
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    def __init__(self, invocation_id: _Optional[str] = ...) -> None: ...

class Notification(_message.Message):
    __slots__ = ("notification_id", "execution_id", "cell_id", "call_id", "text")
    NOTIFICATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    notification_id: str
    execution_id: str
    cell_id: str
    call_id: str
    text: str
    def __init__(self, notification_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., cell_id: _Optional[str] = ..., call_id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class NotificationCancelled(_message.Message):
    __slots__ = ("notification_id",)
    NOTIFICATION_ID_FIELD_NUMBER: _ClassVar[int]
    notification_id: str
    def __init__(self, notification_id: _Optional[str] = ...) -> None: ...

class ToolResultDelivered(_message.Message):
    __slots__ = ("cell_id", "runtime_tool_call_id", "delivered")
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    cell_id: str
    runtime_tool_call_id: str
    delivered: bool
    def __init__(self, cell_id: _Optional[str] = ..., runtime_tool_call_id: _Optional[str] = ..., delivered: _Optional[bool] = ...) -> None: ...

class AcknowledgeNotificationRequest(_message.Message):
    __slots__ = ("session_id", "notification_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NOTIFICATION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    notification_id: str
    def __init__(self, session_id: _Optional[str] = ..., notification_id: _Optional[str] = ...) -> None: ...

class AcknowledgeNotificationResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CellClosed(_message.Message):
    __slots__ = ("execution_id", "cell_id", "final_tool_call_sequence")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    FINAL_TOOL_CALL_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    cell_id: str
    final_tool_call_sequence: int
    def __init__(self, execution_id: _Optional[str] = ..., cell_id: _Optional[str] = ..., final_tool_call_sequence: _Optional[int] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("session_id", "execution_id", "tool_call_id", "source", "enabled_tools", "yield_time_ms", "max_output_tokens")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ENABLED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    YIELD_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    execution_id: str
    tool_call_id: str
    source: str
    enabled_tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    yield_time_ms: int
    max_output_tokens: int
    def __init__(self, session_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., source: _Optional[str] = ..., enabled_tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ..., yield_time_ms: _Optional[int] = ..., max_output_tokens: _Optional[int] = ...) -> None: ...

class ExecuteEvent(_message.Message):
    __slots__ = ("started", "outcome")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    started: ExecutionStarted
    outcome: ExecutionOutcome
    def __init__(self, started: _Optional[_Union[ExecutionStarted, _Mapping]] = ..., outcome: _Optional[_Union[ExecutionOutcome, _Mapping]] = ...) -> None: ...

class ExecutionStarted(_message.Message):
    __slots__ = ("execution_id", "cell_id")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    cell_id: str
    def __init__(self, execution_id: _Optional[str] = ..., cell_id: _Optional[str] = ...) -> None: ...

class WaitRequest(_message.Message):
    __slots__ = ("session_id", "cell_id", "wait_id", "yield_time_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_ID_FIELD_NUMBER: _ClassVar[int]
    YIELD_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    cell_id: str
    wait_id: str
    yield_time_ms: int
    def __init__(self, session_id: _Optional[str] = ..., cell_id: _Optional[str] = ..., wait_id: _Optional[str] = ..., yield_time_ms: _Optional[int] = ...) -> None: ...

class WaitResponse(_message.Message):
    __slots__ = ("live_cell", "missing_cell")
    LIVE_CELL_FIELD_NUMBER: _ClassVar[int]
    MISSING_CELL_FIELD_NUMBER: _ClassVar[int]
    live_cell: ExecutionOutcome
    missing_cell: ExecutionOutcome
    def __init__(self, live_cell: _Optional[_Union[ExecutionOutcome, _Mapping]] = ..., missing_cell: _Optional[_Union[ExecutionOutcome, _Mapping]] = ...) -> None: ...

class CancelWaitRequest(_message.Message):
    __slots__ = ("session_id", "wait_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    wait_id: str
    def __init__(self, session_id: _Optional[str] = ..., wait_id: _Optional[str] = ...) -> None: ...

class CancelWaitResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class YieldObservationRequest(_message.Message):
    __slots__ = ("session_id", "execution_id", "wait_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    execution_id: str
    wait_id: str
    def __init__(self, session_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., wait_id: _Optional[str] = ...) -> None: ...

class YieldObservationResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TerminateRequest(_message.Message):
    __slots__ = ("session_id", "cell_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    cell_id: str
    def __init__(self, session_id: _Optional[str] = ..., cell_id: _Optional[str] = ...) -> None: ...

class ExecutionOutcome(_message.Message):
    __slots__ = ("cell_id", "content_items", "yielded", "terminated", "completed", "code_mode_host_duration_ns")
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_ITEMS_FIELD_NUMBER: _ClassVar[int]
    YIELDED_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    CODE_MODE_HOST_DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    cell_id: str
    content_items: _containers.RepeatedCompositeFieldContainer[ContentItem]
    yielded: ExecutionYielded
    terminated: ExecutionTerminated
    completed: ExecutionCompleted
    code_mode_host_duration_ns: int
    def __init__(self, cell_id: _Optional[str] = ..., content_items: _Optional[_Iterable[_Union[ContentItem, _Mapping]]] = ..., yielded: _Optional[_Union[ExecutionYielded, _Mapping]] = ..., terminated: _Optional[_Union[ExecutionTerminated, _Mapping]] = ..., completed: _Optional[_Union[ExecutionCompleted, _Mapping]] = ..., code_mode_host_duration_ns: _Optional[int] = ...) -> None: ...

class ExecutionYielded(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExecutionTerminated(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExecutionCompleted(_message.Message):
    __slots__ = ("error_text",)
    ERROR_TEXT_FIELD_NUMBER: _ClassVar[int]
    error_text: str
    def __init__(self, error_text: _Optional[str] = ...) -> None: ...

class ToolName(_message.Message):
    __slots__ = ("name", "namespace")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    def __init__(self, name: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class ToolDefinition(_message.Message):
    __slots__ = ("name", "tool_name", "description", "kind", "input_schema_json", "output_schema_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    tool_name: ToolName
    description: str
    kind: ToolKind
    input_schema_json: bytes
    output_schema_json: bytes
    def __init__(self, name: _Optional[str] = ..., tool_name: _Optional[_Union[ToolName, _Mapping]] = ..., description: _Optional[str] = ..., kind: _Optional[_Union[ToolKind, str]] = ..., input_schema_json: _Optional[bytes] = ..., output_schema_json: _Optional[bytes] = ...) -> None: ...

class ContentItem(_message.Message):
    __slots__ = ("text", "image", "audio")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    text: TextContent
    image: ImageContent
    audio: AudioContent
    def __init__(self, text: _Optional[_Union[TextContent, _Mapping]] = ..., image: _Optional[_Union[ImageContent, _Mapping]] = ..., audio: _Optional[_Union[AudioContent, _Mapping]] = ...) -> None: ...

class TextContent(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ImageContent(_message.Message):
    __slots__ = ("image_url", "detail")
    IMAGE_URL_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    image_url: str
    detail: ImageDetail
    def __init__(self, image_url: _Optional[str] = ..., detail: _Optional[_Union[ImageDetail, str]] = ...) -> None: ...

class AudioContent(_message.Message):
    __slots__ = ("audio_url",)
    AUDIO_URL_FIELD_NUMBER: _ClassVar[int]
    audio_url: str
    def __init__(self, audio_url: _Optional[str] = ...) -> None: ...
