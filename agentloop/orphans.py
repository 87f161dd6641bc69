"""Helper processes that die with their parent: Linux's ``PR_SET_PDEATHSIG``, nothing elsewhere.

A process agentloop starts for its own use (the local tier's llama-server, the cold builder's
second reader) works for one parent; killed with SIGKILL, that parent runs no clean-up, and the
helper would serve or read on for no one. With the parent-death signal set the kernel sends it
SIGKILL as its parent's thread that started it exits. Set in the child between fork and exec
(:func:`die_with_parent`, a ``preexec_fn``) or by the helper itself at its start
(:func:`die_with`, which also catches a parent already gone).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (a ``preexec_fn``: async-signal
    work only, no error raised: a libc without ``prctl`` leaves the child as it was)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def die_with(parent: int) -> None:
    """:func:`die_with_parent` for a helper at its start, and exit at once if ``parent`` (the
    pid that started it) is gone already: its death came before the signal was asked for."""
    die_with_parent()
    if os.getppid() != parent:
        os._exit(1)
