"""One V8 isolate of mini-racer's native library, driven without ever blocking Trio.

mini-racer (``py_mini_racer``) runs each context's isolate on a thread of its own and reports
every evaluation's result through one C callback. Its Python layer waits for those results on
an asyncio loop; this module talks to the same native library directly instead.

**Initialising V8.** V8 is initialised once per process (:func:`initialize_v8`). On CPUs with
memory protection keys (PKU), V8 tags its code and dispatch tables with a key that only the
thread that initialised it, and threads created after that, may read: an isolate created on an
older thread faults (``SEGV_PKUERR``). So an executable initialises V8 first thing, on its main
thread, while it is the only thread; a process that already has other threads (or calls from
another thread) gets V8's ``--no-memory-protection-keys`` instead, which any thread may use.
:func:`v8_initialization` tells how it was done.

**The bridge.** The prelude (``v8_prelude.js``) is an expression: a function that Python calls
once, at setup, with the native callback as ``this``, and that returns ``[dispatch, channel]``.
Nothing of it is bound in the global scope, so a cell can reach neither. Python keeps the
handles of both for the isolate's whole life:

* every evaluation Python asks for is ``dispatch`` called with a JSON text as ``this``
  (:meth:`Isolate.dispatch`), fire-and-forget on the Trio thread; only a failure is reported;
* the cell's script is evaluated to its wrapper function, which is handed to ``dispatch`` as
  ``this`` (:meth:`Isolate.run_cell`);
* JavaScript reaches Python through the argument-less callback. Reading a callback's
  arguments needs the isolate, which is busy running the very script that called (the
  measured deadlock), so messages travel through ``channel``, a ``SharedArrayBuffer`` whose
  memory Python reads directly, on the isolate's thread, while JavaScript waits in the
  callback. A shared buffer cannot be detached or resized, and the handle Python keeps keeps
  it alive, so the address stays valid until the context is freed. What Python reads there is
  still treated as untrusted: lengths are clamped to the buffer. The header's flags say what
  the call is:

  - a message, handed to Trio (``run_sync_soon``); the callback returns at once;
  - flagged *sync* (``load()``, ``notify()``), a request: the callback waits for Trio's answer
    (``trio.from_thread.run_sync``) and writes it into the same buffer;
* :meth:`Isolate.close` frees the context, which terminates any running script (even
  ``while (true) {}``), and is the only way the context ends: an open context keeps the
  interpreter from exiting.

The library's C ABI is that of mini-racer 0.14.1, the version pinned by the ``host`` extra.
Only its public ``init_mini_racer`` (which loads V8) is used from Python.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import attrs
import py_mini_racer  # the optional ``host`` extra: importing this module needs it
import trio

__all__ = [
    "NO_PKU_FLAG",
    "V8_FLAGS",
    "EngineError",
    "EvalFailure",
    "Isolate",
    "V8Initialization",
    "initialize_v8",
    "live_isolates",
    "v8_initialization",
]

# Value types of the native library (mini_racer.cc).
_INTEGER = 3
_STRING = 5
_FUNCTION = 100
_SHARED_ARRAY_BUFFER = 101
_FIRST_ERROR = 200
# The error types, numbered from _FIRST_ERROR in this order.
_ERROR_KINDS = dict(
    enumerate(("execute", "parse", "oom", "timeout", "terminated", "value", "key"), _FIRST_ERROR)
)

# Callback ids: the JavaScript entry point, setup evaluations, everything else.
_NATIVE_ID = 1
_SETUP_ID = 3
_SETUP_HANDLE_ID = 4  # a setup evaluation whose result handle is kept, not decoded
_POST_ID = 5
_CELL_ID = 6  # the cell's script, evaluated to its wrapper function

_HEADER = struct.Struct("<II")
_MORE = 1
_SYNC = 2


class EngineError(Exception):
    """The native V8 library could not be loaded or did not behave as expected."""


@attrs.frozen
class EvalFailure:
    """An evaluation ended in an exception the prelude did not catch, or was terminated."""

    kind: str
    message: str


# ---------------------------------------------------------------- initialising V8

#: V8 flags added to mini-racer's when this module is the first to load V8.
V8_FLAGS = ("--js-upsert", "--no-json-stringify-fast-path")

#: Added when V8 is initialised where other threads may already exist (see the module
#: docstring): V8 then uses no memory protection key, which threads created before it could
#: not read.
NO_PKU_FLAG = "--no-memory-protection-keys"


@attrs.frozen
class V8Initialization:
    """How V8 was initialised in this process (see :func:`initialize_v8`).

    ``by`` is ``"codemode-trio"``, or ``"mini-racer"`` when mini-racer had already been
    initialised (by ``MiniRacer()`` or ``init_mini_racer``), in which case nothing is known of
    its thread or flags: ``flags`` is then ``None``. ``os_threads`` is how many threads the
    process had at that moment (``None`` where ``/proc/self/task`` cannot be read).
    """

    by: str
    thread_name: str
    thread_id: int
    main_thread: bool
    os_threads: int | None
    flags: tuple[str, ...] | None


_init_lock = threading.Lock()
_initialization: V8Initialization | None = None


def _os_threads() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def initialize_v8() -> V8Initialization:
    """Initialise V8 for this process, once, and return how it was done.

    Called while the calling thread is the process's main thread and its only thread, V8 gets
    mini-racer's flags and :data:`V8_FLAGS`; otherwise also :data:`NO_PKU_FLAG`, so that
    isolates work on every thread. An executable calls this first thing, before any thread
    starts; an embedding process gets it done on first use. Idempotent.
    """
    global _initialization
    with _init_lock:
        if _initialization is not None:
            return _initialization
        current = threading.current_thread()
        main = current is threading.main_thread()
        os_threads = _os_threads()
        flags: tuple[str, ...] = (*py_mini_racer.DEFAULT_V8_FLAGS, *V8_FLAGS)
        if not (main and os_threads == 1):
            flags = (*flags, NO_PKU_FLAG)
        try:
            py_mini_racer.init_mini_racer(flags=flags)
        except py_mini_racer.LibAlreadyInitializedError:
            by, recorded_flags = "mini-racer", None
        else:
            by, recorded_flags = "codemode-trio", flags
        _initialization = V8Initialization(
            by, current.name, threading.get_native_id(), main, os_threads, recorded_flags
        )
        return _initialization


def v8_initialization() -> V8Initialization | None:
    """How :func:`initialize_v8` initialised V8, or ``None`` if it has not been called."""
    return _initialization


# ---------------------------------------------------------------- the native library


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

_library: ctypes.CDLL | None = None
_live = 0
_live_lock = threading.Lock()
# The first context of a process sets up a pool of V8's allocator, and two first contexts made
# at once race to do it: a fatal "Check failed: !IsConfigurablePoolInitialized()" for about
# one process in eight that starts 16 cells together. So the first one is made alone.
_first_context_lock = threading.Lock()
_first_context_made = False


def live_isolates() -> int:
    """How many isolates of this process are open (created and not yet closed)."""
    return _live


def _load_library() -> ctypes.CDLL:
    """Load V8 (once per process) and declare the native functions this module calls."""
    global _library
    if _library is not None:
        return _library
    initialize_v8()
    # A second CDLL object for the file mini-racer loaded shares its state (V8 is initialised
    # once) but lets this module declare its own signatures.
    path = Path(py_mini_racer.__file__).with_name("libmini_racer.so")
    if not path.is_file():
        raise EngineError(f"mini-racer's native library is missing: {path}")
    lib = ctypes.CDLL(str(path))
    u64, handle = ctypes.c_uint64, _RawHandle
    signatures: dict[str, tuple[list[Any], Any]] = {
        "mr_init_context": ([_CALLBACK], u64),
        "mr_free_context": ([u64], None),
        "mr_eval": ([u64, handle, u64], u64),
        "mr_alloc_string_val": ([u64, ctypes.c_char_p, u64, ctypes.c_uint8], handle),
        "mr_alloc_int_val": ([u64, ctypes.c_int64, ctypes.c_uint8], handle),
        "mr_free_value": ([u64, handle], None),
        "mr_make_js_callback": ([u64, u64], handle),
        "mr_get_object_item": ([u64, handle, handle], handle),
        "mr_call_function": ([u64, handle, handle, handle, u64], u64),
        "mr_set_hard_memory_limit": ([u64, ctypes.c_size_t], None),
        "mr_heap_stats": ([u64], handle),
        "mr_hard_memory_limit_reached": ([u64], ctypes.c_bool),
    }
    for name, (argtypes, restype) in signatures.items():
        native = getattr(lib, name)
        native.argtypes, native.restype = argtypes, restype
    _library = lib
    return lib


def _init_context(lib: ctypes.CDLL, callback: Any) -> int:
    global _first_context_made
    if not _first_context_made:
        with _first_context_lock:
            if not _first_context_made:
                context = int(lib.mr_init_context(callback))
                _first_context_made = True
                return context
    return int(lib.mr_init_context(callback))


def _kind(raw: Any) -> int:
    return int(raw.contents.type)


def _decode(raw: Any) -> object:
    """A primitive result as Python (``str``, ``None``, or an :class:`EvalFailure`)."""
    value = raw.contents
    kind = int(value.type)
    if kind == _STRING:
        return value.value.bytes_val[: value.len].decode("utf-8", "surrogatepass")
    if kind >= _FIRST_ERROR:
        text = value.value.bytes_val[: value.len].decode("utf-8", "replace")
        return EvalFailure(_ERROR_KINDS.get(kind, "execute"), text)
    return None


class Isolate:
    """A mini-racer context: one V8 isolate with its own thread.

    Build it with :meth:`open` and end it with :meth:`close`, both blocking (run them with
    ``trio.to_thread.run_sync``). In between, :meth:`dispatch` and :meth:`run_cell` queue
    evaluations. These run on the Trio thread, in the order the script caused them:
    ``on_message`` with each pushed message, ``on_failure`` with each evaluation that failed,
    and ``on_sync``, which answers a synchronous request while the script waits. None of them
    may raise.
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
        # Held while the Trio thread queues work and while close() marks the context closed,
        # so that nothing is queued into a context being freed on another thread.
        self._lock = threading.Lock()
        self._setup: queue.SimpleQueue[object] = queue.SimpleQueue()
        # Handles kept for the context's whole life (freed with it): the prelude's dispatch
        # function, the empty argument list of every call to it, and the channel, whose
        # handle keeps the buffer Python reads alive.
        self._dispatch: Any = None
        self._no_arguments: Any = None
        self._channel_handle: Any = None
        self._channel: Any = None  # ctypes view of the channel's memory
        self._request: list[bytes] = []
        self._answer = b""  # what is left to write of the answer to a sync request (UTF-16)
        #: The V8 heap cap applied (see :meth:`open`).
        self.heap_limit_bytes = 0
        #: How many calls of the prelude's dispatch were queued, and how many of them have ended:
        #: a caller posting many can keep the isolate's queue short.
        self.posted = 0
        self.finished = 0
        self._queue_waiter: tuple[int, Callable[[object], None]] | None = None
        # Kept referenced: the native library calls it until the context is freed.
        self._callback = _CALLBACK(self._on_native_callback)
        self._ctx = _init_context(self._lib, self._callback)
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
        """Create the isolate and set up the bridge with ``prelude``.

        The heap is capped at ``heap_limit_bytes``, or lower if V8's own limit requires it (see
        :attr:`heap_limit_bytes`). Blocking. ``prelude`` must evaluate to a function that,
        called with the native callback as ``this``, returns ``[dispatch, channel]``, the
        channel being a ``SharedArrayBuffer``.
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
        # Setup runs before any script of the cell, while the isolate is idle: waiting for its
        # thread (as mr_get_object_item does) is safe here, and only here.
        setup = self._setup_eval(prelude + "\n//# sourceURL=codemode_prelude.js", keep=True)
        if _kind(setup) != _FUNCTION:
            failure = _decode(setup)
            lib.mr_free_value(ctx, setup)
            message = failure.message if isinstance(failure, EvalFailure) else "no function"
            raise EngineError(f"the cell prelude failed: {message}")
        self._no_arguments = self._setup_eval("[]", keep=True)
        native = lib.mr_make_js_callback(ctx, _NATIVE_ID)
        lib.mr_call_function(ctx, setup, native, self._no_arguments, _SETUP_HANDLE_ID)
        lib.mr_free_value(ctx, native)
        lib.mr_free_value(ctx, setup)
        bridge = self._setup.get(timeout=30)
        try:
            if _kind(bridge) >= _FIRST_ERROR:
                failure = _decode(bridge)
                assert isinstance(failure, EvalFailure)
                raise EngineError(f"the cell prelude failed: {failure.message}")
            self._dispatch = self._item(bridge, 0)
            self._channel_handle = self._item(bridge, 1)
        finally:
            lib.mr_free_value(ctx, bridge)
        if _kind(self._dispatch) != _FUNCTION:
            raise EngineError("the cell prelude gave no dispatch function")
        channel = self._channel_handle.contents
        size = int(channel.len)
        address = int(channel.value.value_ptr or 0)
        if int(channel.type) != _SHARED_ARRAY_BUFFER or not address or size < 16:
            raise EngineError("the cell prelude gave no SharedArrayBuffer channel")
        self._channel = (ctypes.c_char * size).from_address(address)

    def _item(self, array: Any, index: int) -> Any:
        key = self._lib.mr_alloc_int_val(self._ctx, index, _INTEGER)
        try:
            return self._lib.mr_get_object_item(self._ctx, array, key)
        finally:
            self._lib.mr_free_value(self._ctx, key)

    def _string(self, text: str) -> Any:
        data = text.encode("utf-8", "surrogatepass")
        return self._lib.mr_alloc_string_val(self._ctx, data, len(data), _STRING)

    def _setup_eval(self, code: str, *, keep: bool = False) -> Any:
        handle = self._string(code)
        self._lib.mr_eval(self._ctx, handle, _SETUP_HANDLE_ID if keep else _SETUP_ID)
        self._lib.mr_free_value(self._ctx, handle)
        return self._setup.get(timeout=30)

    def dispatch(self, message: str) -> None:
        """Queue a call of the prelude's dispatch with ``message`` (JSON) as ``this``.

        Never blocks: the isolate runs it when free. A failure reaches ``on_failure``.
        """
        with self._lock:
            if not self._closed:
                self._call_dispatch(self._string(message))

    def run_cell(self, script: str) -> None:
        """Queue the evaluation of ``script``, then the call of dispatch with its value.

        ``script`` must evaluate to the cell's wrapper function (see ``v8.py``); a syntax
        error reaches ``on_failure`` as a ``"parse"`` failure. Never blocks.
        """
        with self._lock:
            if not self._closed:
                handle = self._string(script)
                self._lib.mr_eval(self._ctx, handle, _CELL_ID)
                self._lib.mr_free_value(self._ctx, handle)

    def _call_dispatch(self, this: Any) -> None:
        self.posted += 1  # counted before the call can end, on another thread
        self._lib.mr_call_function(self._ctx, self._dispatch, this, self._no_arguments, _POST_ID)
        # The native call holds its own reference to each value: freeing ours is safe.
        self._lib.mr_free_value(self._ctx, this)

    def _start_cell(self, wrapper: Any) -> None:
        # On the Trio thread: queued from the isolate's thread once the script compiled.
        with self._lock:
            if not self._closed:
                self._call_dispatch(wrapper)

    def when_queue_below(self, count: int, callback: Callable[[object], None]) -> None:
        """Have ``callback(None)`` run on the Trio thread once the queue is shorter.

        That is once fewer than ``count`` of the dispatched calls are still queued or
        running; at once if that is so already.
        """
        self._queue_waiter = (count, callback)
        if self.posted - self.finished < count:  # it may have ended meanwhile
            self._queue_waiter = None
            callback(None)

    def heap_limit_reached(self) -> bool:
        """Whether V8 stopped a script because the heap passed the hard limit."""
        with self._lock:  # never on a context another thread is freeing
            return not self._closed and bool(self._lib.mr_hard_memory_limit_reached(self._ctx))

    def close(self) -> None:
        """Free the context, terminating whatever runs in it. Blocking; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._lib.mr_free_context(self._ctx)
        # Only now, with the context (and the buffer whose handle it kept) gone, is the view
        # of the channel's memory dropped: no callback can read it any more.
        self._channel = None
        self._dispatch = self._no_arguments = self._channel_handle = None
        global _live
        with _live_lock:
            _live -= 1

    # ------------------------------------------------------------ the isolate's thread

    def _on_native_callback(self, callback_id: int, raw: Any) -> None:
        # Runs on the isolate's thread, which is blocked until this returns: never wait for
        # the isolate from here, only touch plain memory.
        if self._closed:
            # The context is being freed (its values with it): results of the terminated
            # evaluations are of no interest.
            return
        try:
            if callback_id == _SETUP_HANDLE_ID:
                self._setup.put(raw)  # a handle kept alive for _install
                return
            if callback_id == _CELL_ID and _kind(raw) == _FUNCTION:
                self._soon(self._start_cell, raw)  # the wrapper, kept until it is called
                return
            if callback_id == _CELL_ID and _kind(raw) < _FIRST_ERROR:
                # Only a body that closes the wrapper's braces itself gets here.
                self._lib.mr_free_value(self._ctx, raw)
                failure = EvalFailure("not-a-function", "the script's value is not a function")
                self._soon(self._on_failure, failure)
                return
            value = None if callback_id == _NATIVE_ID else _decode(raw)
            self._lib.mr_free_value(self._ctx, raw)
            if callback_id == _SETUP_ID:
                self._setup.put(value)
            elif callback_id == _NATIVE_ID:
                self._on_call()
            else:
                if callback_id == _POST_ID:
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

    def _on_call(self) -> None:
        # JavaScript called the native callback: a message, or a request flagged SYNC.
        channel = self._channel
        if channel is None:
            return
        if _HEADER.unpack_from(channel, 0)[1] & _SYNC:
            self._serve_sync(channel)
            return
        message = self._read_message(channel)
        if message is not None:
            self._soon(self._on_message, message)

    def _read_message(self, channel: Any) -> str | None:
        """The text in ``channel``, or ``None`` while more chunks of it are to come."""
        length, flags = _HEADER.unpack_from(channel, 0)
        # The header is JavaScript's to write: never trusted beyond the buffer.
        length = min(length, (len(channel) - _HEADER.size) // 2)
        self._request.append(bytes(channel[_HEADER.size : _HEADER.size + 2 * length]))
        if flags & _MORE:
            return None
        # Decoded whole: a chunk boundary may split a surrogate pair.
        message = b"".join(self._request).decode("utf-16-le", "surrogatepass")
        self._request = []
        return message

    def _serve_sync(self, channel: Any) -> None:
        if self._answer:
            self._write_answer_chunk(channel)
            return
        request = self._read_message(channel)
        if request is None:
            return
        try:
            answer = trio.from_thread.run_sync(self._on_sync, request, trio_token=self._token)
        except trio.RunFinishedError:
            answer = "ecode-mode host is shutting down"
        # Never empty (an empty rest means "no answer under way"): the prelude's answers all
        # start with a tag letter.
        self._answer = answer.encode("utf-16-le", "surrogatepass") or b"\0\0"
        self._write_answer_chunk(channel)

    def _write_answer_chunk(self, channel: Any) -> None:
        # In code units: JavaScript joins the chunks before reading them as text, so a chunk
        # may end inside a surrogate pair.
        room = (len(channel) - _HEADER.size) // 2 * 2
        chunk, self._answer = self._answer[:room], self._answer[room:]
        ctypes.memmove(ctypes.addressof(channel) + _HEADER.size, chunk, len(chunk))
        _HEADER.pack_into(channel, 0, len(chunk) // 2, _MORE if self._answer else 0)
