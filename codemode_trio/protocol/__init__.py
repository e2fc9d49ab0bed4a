"""The sans-IO core of codemode-trio: messages, codec, framing, handshake and both machines.

Bytes in, messages out; messages in, bytes out. This package never imports trio and never
performs I/O, so it can drive any transport and serve as the executable form of the wire spec.
"""

from ._wire import unknown_field_counts as unknown_field_counts
from .client_events import *  # noqa: F403  (what ClientProtocol tells its user)
from .client_events import __all__ as _client_events_all
from .client_protocol import ClientProtocol as ClientProtocol
from .codec import decode_client_message as decode_client_message
from .codec import decode_host_message as decode_host_message
from .codec import encode_client_frame as encode_client_frame
from .codec import encode_client_message as encode_client_message
from .codec import encode_host_frame as encode_host_frame
from .codec import encode_host_message as encode_host_message
from .content import AudioItem as AudioItem
from .content import CellLimits as CellLimits
from .content import ContentItem as ContentItem
from .content import ImageItem as ImageItem
from .content import Notification as Notification
from .content import RuntimeResponse as RuntimeResponse
from .content import TextItem as TextItem
from .content import ToolCall as ToolCall
from .content import ToolDefinition as ToolDefinition
from .content import WaitOutcome as WaitOutcome
from .errors import ClientProtocolViolation as ClientProtocolViolation
from .errors import CodeModeError as CodeModeError
from .errors import EncodeError as EncodeError
from .errors import FramingError as FramingError
from .errors import HandshakeError as HandshakeError
from .errors import HandshakeRejected as HandshakeRejected
from .errors import HostProtocolViolation as HostProtocolViolation
from .errors import ProtocolViolation as ProtocolViolation
from .framing import MAX_FRAME_BYTES as MAX_FRAME_BYTES
from .framing import FrameDecoder as FrameDecoder
from .framing import encode_frame as encode_frame
from .handshake import ALL_CAPABILITIES as ALL_CAPABILITIES
from .handshake import HandshakeResult as HandshakeResult
from .handshake import build_hello as build_hello
from .handshake import evaluate_handshake as evaluate_handshake
from .host_events import *  # noqa: F403  (what HostProtocol tells its user)
from .host_events import __all__ as _host_events_all
from .host_protocol import HostProtocol as HostProtocol
from .ids import DelegateRequestId as DelegateRequestId
from .ids import RequestId as RequestId
from .messages import *  # noqa: F403  (the message catalogue is the protocol's public surface)
from .messages import __all__ as _messages_all

__all__ = [
    "ALL_CAPABILITIES",
    "MAX_FRAME_BYTES",
    "AudioItem",
    "CellLimits",
    "ClientProtocol",
    "ClientProtocolViolation",
    "CodeModeError",
    "ContentItem",
    "DelegateRequestId",
    "EncodeError",
    "FrameDecoder",
    "FramingError",
    "HandshakeError",
    "HandshakeRejected",
    "HandshakeResult",
    "HostProtocol",
    "HostProtocolViolation",
    "ImageItem",
    "Notification",
    "ProtocolViolation",
    "RequestId",
    "RuntimeResponse",
    "TextItem",
    "ToolCall",
    "ToolDefinition",
    "WaitOutcome",
    "build_hello",
    "decode_client_message",
    "decode_host_message",
    "encode_client_frame",
    "encode_client_message",
    "encode_frame",
    "encode_host_frame",
    "encode_host_message",
    "evaluate_handshake",
    "unknown_field_counts",
    *_client_events_all,
    *_host_events_all,
    *_messages_all,
]
