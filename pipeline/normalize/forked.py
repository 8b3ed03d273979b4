"""``fn(i)`` for ``i in range(count)`` in forked child processes, results yielded in order.

Used where the work is CPU-bound Python that holds the GIL (msgspec decoding a chrome trace's pieces), so
threads would not help.  The children inherit the parent's memory (a memory-mapped input, say) through
fork: nothing is pickled on the way in, only results on the way out.

Plain fork + one pipe per child instead of ``multiprocessing.Pool``: the Pool's three helper threads (task
feeding, result unpickling, worker watching) measured ~0.6 s of parent CPU on a 500 MB trace, taken from
the cores the children need.  Details that each measured on that trace:

* Children take the next index from a shared counter, so a child slowed by a costly piece (or by other
  processes) never leaves the rest waiting at the end; the parent puts the results back in order.
* Results are pickled with protocol 5 and their buffers (Arrow columns) sent out of band: the child writes
  them straight from the column memory and the parent reads them into one buffer per result that the
  unpickled columns then use, with no copy into or out of a pickle.
* Pipes get 1 MB buffers (the default 64 KB meant ~2000 reads and wake-ups where ~240 do now).
"""

from __future__ import annotations

import fcntl
import gc
import io
import multiprocessing
import os
import pickle
import selectors
import struct
from collections.abc import Callable, Iterator
from contextlib import suppress
from multiprocessing.sharedctypes import Synchronized
from typing import TypeVar

T = TypeVar("T")

#: Each out-of-band buffer starts at a multiple of this in the frame (Arrow's preferred alignment).
_ALIGN = 64
_U64 = struct.Struct("<Q")


def available() -> bool:
    """Whether children can be forked here (not on platforms without fork, not inside a daemon process)."""
    return "fork" in multiprocessing.get_all_start_methods() and not multiprocessing.current_process().daemon


def imap(fn: Callable[[int], T], count: int, children: int, init: Callable[[], None] | None = None) -> Iterator[T]:
    """``fn(0), fn(1), ...`` computed in ``children`` forked processes, yielded in index order.

    ``init`` runs once in each child before its first ``fn``.

    An exception raised by ``fn(i)`` is re-raised here when result ``i`` is due; a child that dies
    (killed for memory, say) raises RuntimeError once no live child can still deliver the missing result.
    """
    counter = multiprocessing.get_context("fork").Value("q", 0)  # the next index to take
    kids: list[tuple[int, int]] = []  # (pid, read fd)
    try:
        for _ in range(children):
            r, w = _pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns into the caller's code
                # No cyclic collection here: it would walk every object inherited from the parent, whose other
                # threads (execnet's under pytest-xdist, a library's) may have left some mid-change at the fork.
                # A child collecting segfaulted in a suite run; what it makes itself holds no cycles, and it ends
                # in os._exit.
                gc.disable()
                code = 0
                try:
                    os.close(r)
                    for _, other in kids:
                        os.close(other)
                    if init is not None:
                        init()
                    _serve(fn, count, counter, w)
                except BaseException:  # a broken pipe (parent gone) or worse: just exit
                    code = 1
                finally:
                    os._exit(code)
            os.close(w)
            kids.append((pid, r))
        yield from _in_order([r for _, r in kids], count)
    finally:
        for _, r in kids:
            os.close(r)  # a child still writing gets EPIPE and exits
        for pid, _ in kids:
            os.waitpid(pid, 0)


def _serve(fn: Callable[[int], object], count: int, counter: Synchronized, fd: int) -> None:
    with open(fd, "wb", buffering=0) as pipe:
        while True:
            with counter.get_lock():
                i = counter.value
                counter.value = i + 1
            if i >= count:
                return
            try:
                ok, value = True, fn(i)
            except Exception as e:  # re-raised in the parent
                ok, value = False, e
            _send(pipe, (i, ok, value))
            if not ok:
                return


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()
    with suppress(OSError):  # above /proc/sys/fs/pipe-max-size, or not Linux: the default size works too
        fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    return r, w


def _padded(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _send(pipe: io.FileIO, obj: object) -> None:
    """One frame: the number of parts, their sizes, then the pickle and each buffer, padded to ``_ALIGN``."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    parts = [memoryview(head), *(b.raw() for b in buffers)]
    sizes = [p.nbytes for p in parts]
    pipe.write(struct.pack(f"<{len(sizes) + 1}Q", len(sizes), *sizes))
    for part, size in zip(parts, sizes, strict=True):
        _write_all(pipe, part)
        if _padded(size) > size:
            pipe.write(bytes(_padded(size) - size))


def _write_all(pipe: io.FileIO, view: memoryview) -> None:
    view = view.cast("B")
    while view.nbytes:
        view = view[pipe.write(view) :]


class _Frames:
    """One child's stream, parsed as bytes arrive: reads go straight into the buffer the result will use."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._expect(8, "count")

    def _expect(self, n: int, stage: str) -> None:
        self.buf, self.got, self.stage = bytearray(n), 0, stage

    def read(self) -> tuple[int, bool, object] | None:
        """The result the bytes now in the pipe complete, if any; EOFError when the child has exited."""
        n = os.readv(self.fd, [memoryview(self.buf)[self.got :]])
        if n == 0:
            raise EOFError
        self.got += n
        if self.got < len(self.buf):
            return None
        if self.stage == "count":
            (parts,) = _U64.unpack(self.buf)
            self._expect(8 * parts, "sizes")
            return None
        if self.stage == "sizes":
            self.sizes = struct.unpack(f"<{len(self.buf) // 8}Q", self.buf)
            self._expect(sum(map(_padded, self.sizes)), "body")
            return None
        body, views, at = memoryview(self.buf), [], 0
        for size in self.sizes:
            views.append(body[at : at + size])
            at += _padded(size)
        obj = pickle.loads(views[0], buffers=views[1:])
        self._expect(8, "count")
        return obj


def _in_order(fds: list[int], count: int) -> Iterator[object]:
    """Read every pipe as data arrives (no child ever blocks on a full pipe while the parent waits for
    another) and yield results by index."""
    frames = {fd: _Frames(fd) for fd in fds}
    done: dict[int, tuple[bool, object]] = {}
    sel = selectors.DefaultSelector()
    for fd in fds:
        sel.register(fd, selectors.EVENT_READ)
    try:
        for i in range(count):
            while i not in done:
                if not sel.get_map():
                    raise RuntimeError("a forked worker died before sending its result (out of memory?)")
                for key, _ in sel.select():
                    try:
                        result = frames[key.fd].read()
                    except EOFError:
                        sel.unregister(key.fd)
                        continue
                    if result is not None:
                        j, ok, value = result
                        done[j] = (ok, value)
            ok, value = done.pop(i)
            if not ok:
                raise value  # type: ignore[misc]
            yield value
    finally:
        sel.close()
