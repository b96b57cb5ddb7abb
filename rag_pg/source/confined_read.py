"""Opening and reading files so that a name swapped after it was checked cannot redirect the read.

The walk and the ``.aiignore`` loader both open through these flags and check the opened
descriptor, never the path: ``O_NOFOLLOW`` refuses a symlink put in a file's place,
``O_NONBLOCK`` keeps a FIFO from hanging the open, and the kernel's own record of the
descriptor (``/proc/self/fd``) says where it really points.
"""

from __future__ import annotations

import errno
import os

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = FILE_FLAGS | getattr(os, "O_DIRECTORY", 0)
_READ_BLOCK = 1024 * 1024


def inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies under it (both already resolved)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def descriptor_inside(fd: int, root: str) -> bool:
    """Where the kernel says the descriptor points; trusted over any path we computed."""
    try:
        return inside(os.readlink(f"/proc/self/fd/{fd}"), root)
    except OSError:
        return not os.path.isdir("/proc/self/fd")  # no /proc: the realpath check stands


def read_limited(fd: int, limit: int) -> bytes | None:
    """The file's bytes, or None once more than ``limit`` arrive (it may grow after fstat)."""
    blocks: list[bytes] = []
    total = 0
    while True:
        block = os.read(fd, min(_READ_BLOCK, limit + 1 - total))
        if not block:
            return b"".join(blocks)
        blocks.append(block)
        total += len(block)
        if total > limit:
            return None


def is_loop(error: OSError) -> bool:
    """ELOOP (EMLINK on some BSDs) is what O_NOFOLLOW answers for a symlink."""
    return error.errno in (errno.ELOOP, errno.EMLINK)
