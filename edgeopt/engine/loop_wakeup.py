"""Waking an event loop from the engine thread without giving the GIL away.

``loop.call_soon_threadsafe`` wakes the loop with a socket send, which releases the GIL: the loop's
thread, woken by that very send, takes the GIL and runs the server's work on the delivered outputs (SSE
framing and writes: ~0.1 ms per token on a 2-core CPU) while the engine thread waits to get it back,
before it can start the next forward pass. A :class:`LoopWakeup` writes its wake-up byte with libc's
``write`` called through ``ctypes.PyDLL``, which keeps the GIL, so the engine goes on into the forward
pass (whose C call releases the GIL) and the server's work overlaps the computation. Measured on a ~200M
GGUF, `edgeopt serve`, 16 streams x 128 tokens, 2 threads, three A/B runs of 4-5 alternating rounds on a
noisy 2-core AMD EPYC (the first two with an equivalent prototype): server CPU per token 0.90-0.96x that
of call_soon_threadsafe, aggregate decode rate +1% to +12% (medians); one stream unchanged within
noise. (Waking the loop only right before the next forward pass was measured too and was no better:
the server's work then contends with the forward pass's own threads from its first operation.)

A request's first output is the exception (``post(..., hand_over_s=...)``): kept to the GIL, the engine
would go on into the next forward pass and the loop could only send the first token once that pass's C
call released the GIL, ~0.4-1.2 ms later (schedule, batch fill, then the woken thread's turn), all of it
added to the request's time to first token. So the engine posts the first token and waits, the GIL
released, until the loop has run the delivery and the work it woke (the stream's frames and their write:
one more turn of the loop), at most ``hand_over_s``; the next forward pass starts that much later, once per
request.

The loop's side is a plain reader callback on a non-blocking pipe (``loop.add_reader``, POSIX selector
loops); where either half is missing (Windows' proactor loop), :func:`wakeup_for` returns None and the
caller falls back to ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable


def _libc_write() -> Callable[[int, bytes, int], int] | None:
    try:
        write = ctypes.PyDLL(None).write  # PyDLL: the GIL is held during the call
    except (OSError, AttributeError):
        return None
    write.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
    write.restype = ctypes.c_ssize_t
    return write


_WRITE = _libc_write()
_WAKEUPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWakeup] = weakref.WeakKeyDictionary()


class LoopWakeup:
    """Runs callbacks posted from other threads on one event loop, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)  # a full pipe already holds a wake-up: dropping the byte is fine
        self._calls: deque[Callable[[], None]] = deque()  # append and popleft are atomic
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made on the loop's thread (wakeup_for)
        loop.add_reader(self._read_fd, self._run_posted)
        weakref.finalize(loop, _close, self._read_fd, self._write_fd)

    def post(self, call: Callable[[], None], hand_over_s: float = 0.0) -> None:
        """From any thread: run ``call`` on the loop soon. ``hand_over_s`` > 0: then wait, the GIL released,
        until the loop has run ``call`` and what it woke (its next turn), at most that long (see the module
        docstring); never on the loop's own thread, which would wait for itself."""
        assert _WRITE is not None
        self._calls.append(call)
        if hand_over_s <= 0 or threading.get_ident() == self._loop_thread:
            _WRITE(self._write_fd, b"\0", 1)
            return
        taken = threading.Event()
        # scheduled from inside the turn that runs ``call``: it runs in the next turn, after the tasks ``call`` woke
        self._calls.append(lambda: self._loop.call_soon(taken.set))
        _WRITE(self._write_fd, b"\0", 1)
        taken.wait(hand_over_s)

    def _run_posted(self) -> None:
        try:  # one read: bytes left over (more than 4096 posts) make the reader fire again
            os.read(self._read_fd, 4096)
        except BlockingIOError:  # woken with nothing to read
            pass
        while self._calls:
            self._calls.popleft()()


def wakeup_for(loop: asyncio.AbstractEventLoop) -> LoopWakeup | None:
    """The loop's wake-up, made on first use; call it on the loop's own thread (add_reader is not
    thread-safe). None where the loop or the platform cannot have one."""
    if _WRITE is None:
        return None
    wakeup = _WAKEUPS.get(loop)
    if wakeup is None:
        try:
            wakeup = _WAKEUPS[loop] = LoopWakeup(loop)
        except (NotImplementedError, OSError):
            return None
    return wakeup


def _close(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
