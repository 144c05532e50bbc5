"""Reading a file a user named (a request, a teams file, run history) without hanging or failing late:
only a regular file is read. A FIFO would block the reader until some other process writes to it, a
directory or a device is no input at all; each is refused up front, with what it is.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


class NotRegularFile(OSError):
    """The path names something other than a regular file; strerror says what it is."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def regular_file_problem(path) -> str | None:
    """None when `path` is a regular file (symlinks followed) or does not exist (the reader says so),
    else what it is instead: "is a FIFO (named pipe), not a regular file"."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    return None if stat.S_ISREG(mode) else f"is {_kind(mode)}, not a regular file"


def open_regular(path) -> BinaryIO:
    """`path` opened for binary reading when it is a regular file; NotRegularFile otherwise (decided on
    the opened file, so a FIFO put in its place after a check still cannot block), and the usual
    OSError (FileNotFoundError, PermissionError, ...) when it cannot be opened."""
    problem = regular_file_problem(path)
    if problem:
        raise NotRegularFile(errno.EINVAL, problem, str(path))
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(errno.EINVAL, f"is {_kind(mode)}, not a regular file", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
