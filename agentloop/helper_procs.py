"""agentloop's own helper processes (the suite's simulator, the split reader's worker, llama-server): their environment, and death with their parent.

A helper runs agentloop's own code or a server for one parent, so it gets no more of the
parent's environment than it needs (:func:`helper_env`: no key can reach it) and, on Linux,
dies with that parent: killed with SIGKILL, a parent runs no clean-up, and its helper would
serve or read on for no one. With the parent-death signal (``PR_SET_PDEATHSIG``) the kernel
sends the helper SIGKILL as its parent's thread that started it exits: asked for in the child
between fork and exec (:func:`die_with_parent`, a ``preexec_fn``) or by the helper itself at
its start (:func:`die_with`, which also catches a parent already gone).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import site
from pathlib import PurePath

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def helper_env() -> dict[str, str]:
    """The environment of a helper running this agentloop in this interpreter: the default
    PATH, a UTF-8 locale, and a PYTHONPATH of the folder this agentloop imports from (when it
    is a checkout or an editable install, not site-packages) before the parent's own."""
    root = str(PurePath(__file__).parents[1])  # __file__ is absolute
    paths = [] if root in site.getsitepackages() else [root]
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {"PATH": os.defpath, "LANG": "C.UTF-8"}
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (a ``preexec_fn``, or a
    helper's first step); never raises: a libc without ``prctl`` leaves the process as it was."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def die_with(parent: int) -> None:
    """:func:`die_with_parent` for a helper at its start, and exit at once if ``parent`` (the
    pid that started it) is gone already: its death came before the signal was asked for."""
    die_with_parent()
    if os.getppid() != parent:
        os._exit(1)
