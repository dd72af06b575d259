# SPDX-License-Identifier: MIT
"""How the vram package opens a file it writes (a trace from
`python -m vram.import_torch -o`, `vram plan --trace`): the rule of the C
tools (src/base/outfile.h), for Python.

The path is often one another user can influence (a name in the current
directory, a directory everybody may write such as /tmp). So a file is
written only when it is certainly the caller's: created anew (O_EXCL, which
never follows a link), or already there as a regular file of the caller's
effective uid with one link, opened without following a symbolic link and
emptied only after those checks, on the descriptor that was checked. A
link, another user's file, a file with other hard links and anything that
is not a regular file are refused with OSError, whose strerror says why.
"""

import errno
import gzip
import io
import os
import stat

__all__ = ["open_output", "open_trace"]

_TRIES = 4


def _refuse(path, why, code=errno.EPERM):
    return OSError(code, why, path)


def open_output(path):
    """PATH opened for writing, binary, as the module's text says; raises
    OSError (strerror: the reason) when it cannot or must not be written."""
    flags = os.O_WRONLY | os.O_CLOEXEC | os.O_NOCTTY
    for _ in range(_TRIES):
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            return os.fdopen(fd, "wb")
        except FileExistsError:
            pass
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            continue  # removed since: create it
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _refuse(path, "a symbolic link: not followed (vram writes only a file "
                                    "itself; remove the link or give another path)") from None
            if e.errno == errno.ENXIO:
                raise _refuse(path, "not a regular file: not written") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _refuse(path, "not a regular file: not written")
            if st.st_uid != os.geteuid():
                raise _refuse(path, "owned by uid %d, not by you (uid %d): not written over"
                              % (st.st_uid, os.geteuid()))
            if st.st_nlink > 1:
                raise _refuse(path, "has %d hard links: not written over (another of its "
                                    "names may be a file you must not change)" % st.st_nlink)
            os.set_blocking(fd, True)
            os.ftruncate(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        return os.fdopen(fd, "wb")
    raise _refuse(path, "removed and made again while being opened: not written")


class _TraceText(io.TextIOWrapper):
    """Text over a gzip stream over the file: closing it closes the file
    too (GzipFile leaves a file it was given open)."""

    _file = None

    def close(self):
        try:
            super().close()
        finally:
            if self._file is not None:
                self._file.close()


def open_trace(path):
    """A text file object for writing the trace at PATH (gzip-compressed
    when the name ends in .gz), opened by open_output."""
    raw = open_output(path)
    if not path.endswith(".gz"):
        return io.TextIOWrapper(raw, encoding="utf-8", newline="")
    try:
        f = _TraceText(gzip.GzipFile(fileobj=raw, mode="wb"), encoding="utf-8", newline="")
    except BaseException:
        raw.close()
        raise
    f._file = raw
    return f
