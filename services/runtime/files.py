"""File helpers the services share.

``reserve_blocks``: a file written through ``mmap`` must own its blocks before the write. A store
into a hole of a sparse mapped file makes the kernel allocate a page or a block on the spot; when
the filesystem is full it cannot, and the process gets SIGBUS, which Python cannot catch (the
process dies, exit -7). ``posix_fallocate`` asks for the blocks first and fails cleanly with
ENOSPC, which the caller turns into a refused write (and retries later). The CommitLog and the
ConsumeQueue reserve a whole file at creation, the IndexFile its header and slots at creation and
its entries a chunk ahead, the timer wheel its whole file.
"""

from __future__ import annotations

import errno
import os

# fallocate not offered by this filesystem (glibc emulates it on most; these are what is left).
_NOT_SUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL)


def reserve_blocks(fd: int, offset: int, length: int) -> bool:
    """Give ``fd``'s bytes [offset, offset + length) blocks of their own (already-allocated ones
    cost nothing). True when they have them now; False when the filesystem cannot reserve
    (writes there may still fault on a full disk). OSError (ENOSPC) when the disk has no room."""
    if length <= 0:
        return True
    if not hasattr(os, "posix_fallocate"):
        return False
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno in _NOT_SUPPORTED:
            return False
        raise
    return True
