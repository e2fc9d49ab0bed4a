"""One V8 isolate of mini-racer's native library, driven without ever blocking Trio.

mini-racer (``py_mini_racer``) runs each context's isolate on a thread of its own and reports
every evaluation's result through one C callback. Its Python layer waits for those results on
an asyncio loop; this module talks to the same native library directly instead, so that:

* an evaluation is a fire-and-forget :meth:`Isolate.post` on the Trio thread; only a failed
  one is reported back;
* JavaScript reaches Python through two argument-less callbacks. Reading a callback's
  arguments needs the isolate, which is busy running the very script that called (the
  measured deadlock), so messages travel through an ``ArrayBuffer`` whose memory Python reads
  directly, on the isolate's thread, while JavaScript waits in the callback:

  - *push* hands the message to Trio (``run_sync_soon``) and returns at once;
  - *sync* (for ``load()``) waits for Trio's answer (``trio.from_thread.run_sync``) and writes
    it into the same buffer;
* :meth:`Isolate.close` frees the context, which terminates any running script (even
  ``while (true) {}``), and is the only way the context ends: an open context keeps the
  interpreter from exiting.

The library's C ABI is that of mini-racer 0.14.1, the version pinned by the ``host`` extra.
Only its public ``init_mini_racer`` (which loads V8 once per process) is used from Python.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import queue
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import attrs
import py_mini_racer  # the optional ``host`` extra: importing this module needs it
import trio

__all__ = ["V8_FLAGS", "EngineError", "EvalFailure", "Isolate", "live_isolates"]

# Value types of the native library (mini_racer.cc).
_STRING = 5
_UNDEFINED = 11
_NULL = 1
_ARRAY_BUFFER = 102
_FIRST_ERROR = 200
_ERROR_KINDS = {
    200: "execute",
    201: "parse",
    202: "oom",
    203: "timeout",
    204: "terminated",
    205: "value",
    206: "key",
}

# Callback ids: the two JavaScript entry points, setup evaluations, everything else.
_PUSH_ID = 1
_SYNC_ID = 2
_SETUP_ID = 3
_SETUP_HANDLE_ID = 4  # a setup evaluation whose result handle is kept, not decoded
_POST_ID = 5

_HEADER = struct.Struct("<II")
_MORE = 1


class EngineError(Exception):
    """The native V8 library could not be loaded or did not behave as expected."""


@attrs.frozen
class EvalFailure:
    """An evaluation ended in an exception the prelude did not catch, or was terminated."""

    kind: str
    message: str


class _RawUnion(ctypes.Union):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        ("value_ptr", ctypes.c_void_p),
        ("bytes_val", ctypes.POINTER(ctypes.c_char)),
        ("char_p_val", ctypes.c_char_p),
        ("int_val", ctypes.c_int64),
        ("double_val", ctypes.c_double),
    ]


class _RawValue(ctypes.Structure):
    _pack_ = 1
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        ("value", _RawUnion),
        ("len", ctypes.c_size_t),
        ("type", ctypes.c_uint8),
    ]


_RawHandle = ctypes.POINTER(_RawValue)
_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_uint64, _RawHandle)

#: V8 flags added to mini-racer's when this module is the first to load V8.
V8_FLAGS = ("--js-upsert", "--no-json-stringify-fast-path")

_library: ctypes.CDLL | None = None
_live = 0
_live_lock = threading.Lock()


def live_isolates() -> int:
    """How many isolates of this process are open (created and not yet closed)."""
    return _live


def _load_library() -> ctypes.CDLL:
    """Load V8 (once per process) and declare the native functions this module calls."""
    global _library
    if _library is not None:
        return _library
    # V8 itself is initialised by mini-racer (flags, ICU data); a second CDLL object for the
    # same file shares that state but lets us declare our own signatures. The extra flag
    # turns on what the reference host's V8 ships and this one keeps behind a flag
    # (Map.prototype.getOrInsert...); if V8 was initialised before us, it is simply absent.
    py_mini_racer.init_mini_racer(
        flags=(*py_mini_racer.DEFAULT_V8_FLAGS, *V8_FLAGS), ignore_duplicate_init=True
    )
    path = Path(py_mini_racer.__file__).with_name("libmini_racer.so")
    if not path.is_file():
        raise EngineError(f"mini-racer's native library is missing: {path}")
    lib = ctypes.CDLL(str(path))
    u64, handle = ctypes.c_uint64, _RawHandle
    lib.mr_init_context.argtypes = [_CALLBACK]
    lib.mr_init_context.restype = u64
    lib.mr_free_context.argtypes = [u64]
    lib.mr_free_context.restype = None
    lib.mr_eval.argtypes = [u64, handle, u64]
    lib.mr_eval.restype = u64
    lib.mr_alloc_string_val.argtypes = [u64, ctypes.c_char_p, u64, ctypes.c_uint8]
    lib.mr_alloc_string_val.restype = handle
    lib.mr_free_value.argtypes = [u64, handle]
    lib.mr_free_value.restype = None
    lib.mr_make_js_callback.argtypes = [u64, u64]
    lib.mr_make_js_callback.restype = handle
    lib.mr_set_object_item.argtypes = [u64, handle, handle, handle]
    lib.mr_set_object_item.restype = handle
    lib.mr_set_hard_memory_limit.argtypes = [u64, ctypes.c_size_t]
    lib.mr_set_hard_memory_limit.restype = None
    lib.mr_heap_stats.argtypes = [u64]
    lib.mr_heap_stats.restype = handle
    lib.mr_hard_memory_limit_reached.argtypes = [u64]
    lib.mr_hard_memory_limit_reached.restype = ctypes.c_bool
    _library = lib
    return lib


def _decode(raw: Any) -> object:
    """A primitive result as Python (``str``, ``None``, ``int`` pointer pair or failure)."""
    value = raw.contents
    kind = int(value.type)
    if kind == _STRING:
        return value.value.bytes_val[: value.len].decode("utf-8", "surrogatepass")
    if kind >= _FIRST_ERROR:
        text = value.value.bytes_val[: value.len].decode("utf-8", "replace")
        return EvalFailure(_ERROR_KINDS.get(kind, "execute"), text)
    if kind == _ARRAY_BUFFER:
        return (int(value.value.value_ptr or 0), int(value.len))
    return None


class Isolate:
    """A mini-racer context: one V8 isolate with its own thread.

    Build it with :meth:`open` and end it with :meth:`close`, both blocking (run them with
    ``trio.to_thread.run_sync``). In between, :meth:`post` queues an evaluation. These run on
    the Trio thread, in the order the script caused them: ``on_message`` with each pushed
    message, ``on_failure`` with each evaluation that failed, and ``on_sync``, which answers a
    synchronous request while the script waits. None of them may raise.
    """

    def __init__(
        self,
        token: trio.lowlevel.TrioToken,
        on_message: Callable[[str], None],
        on_failure: Callable[[EvalFailure], None],
        on_sync: Callable[[str], str],
    ) -> None:
        self._lib = _load_library()
        self._token = token
        self._on_message = on_message
        self._on_failure = on_failure
        self._on_sync = on_sync
        self._closed = False
        self._setup: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._channel: Any = None  # ctypes view of the prelude's ArrayBuffer
        self._request: list[bytes] = []
        self._answer = ""
        #: The V8 heap cap applied (see :meth:`open`).
        self.heap_limit_bytes = 0
        #: How many :meth:`post` evaluations were queued, and how many of them have ended:
        #: a caller posting many can keep the isolate's queue short.
        self.posted = 0
        self.finished = 0
        self._queue_waiter: tuple[int, Callable[[object], None]] | None = None
        # Kept referenced: the native library calls it until the context is freed.
        self._callback = _CALLBACK(self._on_native_callback)
        self._ctx = int(self._lib.mr_init_context(self._callback))
        global _live
        with _live_lock:
            _live += 1

    @classmethod
    def open(
        cls,
        token: trio.lowlevel.TrioToken,
        on_message: Callable[[str], None],
        on_failure: Callable[[EvalFailure], None],
        on_sync: Callable[[str], str],
        *,
        prelude: str,
        heap_limit_bytes: int,
    ) -> Isolate:
        """Create the isolate, install the JavaScript entry points and run ``prelude``.

        The heap is capped at ``heap_limit_bytes``, or lower if V8's own limit requires it (see
        :attr:`heap_limit_bytes`). Blocking. The prelude must take ``__codemode_push`` and
        ``__codemode_sync`` off the global object, and ``__codemode.channel`` must be its
        channel ``ArrayBuffer``.
        """
        isolate = cls(token, on_message, on_failure, on_sync)
        try:
            isolate._install(prelude, heap_limit_bytes)
        except BaseException:
            isolate.close()
            raise
        return isolate

    def _install(self, prelude: str, heap_limit_bytes: int) -> None:
        lib, ctx = self._lib, self._ctx
        # The cap must stay below V8's own heap limit: reaching that one aborts the process.
        stats_handle = lib.mr_heap_stats(ctx)
        stats = _decode(stats_handle)
        lib.mr_free_value(ctx, stats_handle)
        if isinstance(stats, str):
            v8_limit = int(json.loads(stats).get("heap_size_limit", 0))
            if v8_limit > 0:
                heap_limit_bytes = min(heap_limit_bytes, v8_limit * 3 // 4)
        self.heap_limit_bytes = heap_limit_bytes
        lib.mr_set_hard_memory_limit(ctx, heap_limit_bytes)
        global_object = self._setup_eval("globalThis", keep=True)
        for name, callback_id in (("__codemode_push", _PUSH_ID), ("__codemode_sync", _SYNC_ID)):
            function = lib.mr_make_js_callback(ctx, callback_id)
            key = self._string(name)
            lib.mr_free_value(ctx, lib.mr_set_object_item(ctx, global_object, key, function))
            lib.mr_free_value(ctx, key)
            lib.mr_free_value(ctx, function)
        lib.mr_free_value(ctx, global_object)
        result = self._setup_eval(prelude + "\n//# sourceURL=codemode_prelude.js")
        if isinstance(result, EvalFailure):
            raise EngineError(f"the cell prelude failed: {result.message}")
        channel = self._setup_eval("__codemode.channel")
        if not isinstance(channel, tuple) or not channel[0]:
            raise EngineError("the cell prelude did not expose its channel buffer")
        address, size = channel
        self._channel = (ctypes.c_char * size).from_address(address)

    def _string(self, text: str) -> Any:
        data = text.encode("utf-8", "surrogatepass")
        return self._lib.mr_alloc_string_val(self._ctx, data, len(data), _STRING)

    def _setup_eval(self, code: str, *, keep: bool = False) -> Any:
        # Setup runs before any script, so waiting here for the isolate's thread is safe.
        handle = self._string(code)
        self._lib.mr_eval(self._ctx, handle, _SETUP_HANDLE_ID if keep else _SETUP_ID)
        self._lib.mr_free_value(self._ctx, handle)
        return self._setup.get(timeout=30)

    def post(self, code: str) -> None:
        """Queue ``code`` for evaluation; never blocks (the isolate runs it when free)."""
        if self._closed:
            return
        handle = self._string(code)
        self._lib.mr_eval(self._ctx, handle, _POST_ID)
        self._lib.mr_free_value(self._ctx, handle)
        self.posted += 1

    def when_queue_below(self, count: int, callback: Callable[[object], None]) -> None:
        """Have ``callback(None)`` run on the Trio thread once the queue is shorter.

        That is once fewer than ``count`` of the posted evaluations are still queued or
        running; at once if that is so already.
        """
        self._queue_waiter = (count, callback)
        if self.posted - self.finished < count:  # it may have ended meanwhile
            self._queue_waiter = None
            callback(None)

    def heap_limit_reached(self) -> bool:
        """Whether V8 stopped a script because the heap passed the hard limit."""
        return not self._closed and bool(self._lib.mr_hard_memory_limit_reached(self._ctx))

    def close(self) -> None:
        """Free the context, terminating whatever runs in it. Blocking; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._lib.mr_free_context(self._ctx)
        self._channel = None
        global _live
        with _live_lock:
            _live -= 1

    # ------------------------------------------------------------ the isolate's thread

    def _on_native_callback(self, callback_id: int, raw: Any) -> None:
        # Runs on the isolate's thread, which is blocked until this returns: never touch the
        # isolate from here, only plain memory.
        if self._closed:
            # The context is being freed (its values with it): results of the terminated
            # evaluations are of no interest.
            return
        try:
            if callback_id == _SETUP_HANDLE_ID:
                self._setup.put(raw)  # a handle kept alive for _install
                return
            value = None if callback_id in (_PUSH_ID, _SYNC_ID) else _decode(raw)
            self._lib.mr_free_value(self._ctx, raw)
            if callback_id == _SETUP_ID:
                self._setup.put(value)
            elif callback_id == _PUSH_ID:
                message = self._read_message()
                if message is not None:
                    self._soon(self._on_message, message)
            elif callback_id == _SYNC_ID:
                self._serve_sync()
            else:
                self.finished += 1  # an int store, atomic under the GIL
                waiter = self._queue_waiter
                if waiter is not None and self.posted - self.finished < waiter[0]:
                    self._queue_waiter = None
                    self._soon(waiter[1], None)
                if isinstance(value, EvalFailure):
                    self._soon(self._on_failure, value)
        except Exception as exc:  # pragma: no cover - a bug here must not kill the thread
            self._soon(self._on_failure, EvalFailure("bridge", f"V8 bridge failed: {exc!r}"))

    def _soon(self, function: Callable[[Any], None], argument: object) -> None:
        if self._closed:
            return
        with contextlib.suppress(trio.RunFinishedError):  # the Trio run already ended
            self._token.run_sync_soon(function, argument)

    def _read_message(self) -> str | None:
        """The text in the channel, or ``None`` while more chunks of it are to come."""
        channel = self._channel
        if channel is None:
            return None
        length, flags = _HEADER.unpack_from(channel, 0)
        self._request.append(bytes(channel[8 : 8 + 2 * length]))
        if flags & _MORE:
            return None
        # Decoded whole: a chunk boundary may split a surrogate pair.
        message = b"".join(self._request).decode("utf-16-le", "surrogatepass")
        self._request = []
        return message

    def _serve_sync(self) -> None:
        channel = self._channel
        if channel is None:
            return
        if self._answer:
            self._write_answer_chunk(channel)
            return
        request = self._read_message()
        if request is None:
            return
        try:
            self._answer = trio.from_thread.run_sync(self._on_sync, request, trio_token=self._token)
        except trio.RunFinishedError:
            self._answer = '{"error":"code-mode host is shutting down"}'
        self._write_answer_chunk(channel)

    def _write_answer_chunk(self, channel: Any) -> None:
        room = (len(channel) - 8) // 2
        chunk, self._answer = self._answer[:room], self._answer[room:]
        data = chunk.encode("utf-16-le", "surrogatepass")
        ctypes.memmove(ctypes.addressof(channel) + 8, data, len(data))
        _HEADER.pack_into(channel, 0, len(chunk), _MORE if self._answer else 0)
