"""bubblewrap's command line for a run's jail: namespaces, the host's view, binds, the init's start.

:func:`argv` is the whole ``bwrap`` invocation for one jail, a pure function of its
:class:`~agentloop.sandbox.interface.JailSpec` (and of whether its commands drop to a run uid or
join another jail's network namespace); :func:`launcher` puts in front of it what must happen
before bwrap runs (join that network namespace with ``nsenter``, move into the run's cgroups
with a shell); :func:`describe` says, for the terminal and the trace header, what such a jail
confines and what it does not. The jail that runs it is :mod:`agentloop.sandbox.bwrapjail`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from agentloop.sandbox import view
from agentloop.sandbox.interface import JailSpec

# no capabilities inside (a root with CAP_SYS_ADMIN could remount the host writable); when
# commands drop to the run's uid (losing every capability on setuid), the init keeps what it
# needs to do that and to kill and inspect their processes
INIT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SYS_PTRACE")
# a private /tmp (also HOME) and /var/tmp, /proc, /dev and /dev/shm of the jail's own
PRIVATE = [
    *("--perms", "1777", "--tmpfs", "/tmp"),
    *("--perms", "1777", "--tmpfs", "/var/tmp"),
    *("--proc", "/proc", "--dev", "/dev"),
    *("--perms", "1777", "--tmpfs", "/dev/shm"),
]


def _namespaces(spec: JailSpec, *, drops_uid: bool, joins_netns: bool) -> list[str]:
    """New PID (the init as PID 1), IPC and UTS namespaces and session, capabilities dropped;
    a network namespace of its own unless the task shares the host's or one is joined."""
    caps = ["--cap-drop", "ALL"] + [a for c in INIT_CAPS for a in ("--cap-add", c) if drops_uid]
    args = [
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--as-pid-1",
        *caps,
        "--unshare-ipc",
        "--unshare-uts",
        "--hostname",
        "agentloop-jail",
    ]
    if not spec.allow_network and not joins_netns:
        args.append("--unshare-net")
    return args


def _binds(spec: JailSpec) -> list[str]:
    """The interpreter and the read-only folders, then the workspace and the writable ones; a
    folder on the private /tmp leading to one is made traversable (not listable)."""
    args: list[str] = []
    binds = [spec.workspace, *spec.writable]
    ro = [p for p in view.python_folders() if not any(p.is_relative_to(b) for b in binds)]
    ro += [p for p in spec.readonly if p not in ro]
    made: list[Path] = []  # folders on the private /tmp leading to a bind: traversable
    for target in [*binds, *ro]:
        for up in reversed(target.parents):
            if up.is_relative_to("/tmp") and up != Path("/tmp") and up not in made:
                made.append(up)
                args += ["--perms", "0711", "--dir", str(up)]
    for target in dict.fromkeys(ro):
        args += ["--ro-bind", str(target), str(target)]
    src = spec.workspace_src or spec.workspace
    args += ["--bind", str(src), str(spec.workspace)]
    for target in spec.writable:
        args += ["--bind", str(target), str(target)]
    return args


def argv(spec: JailSpec, bwrap: str, fd: int, *, drops_uid: bool, joins_netns: bool) -> list[str]:
    """The ``bwrap`` command line of one jail, its init speaking on descriptor ``fd``.

    ``drops_uid``: commands run as the run's own uid (no pids cgroup holds); ``joins_netns``:
    the jail joins another's network namespace (a verdict's joins its run's)."""
    ws = str(spec.workspace)  # the init starts there
    return [
        bwrap,
        *_namespaces(spec, drops_uid=drops_uid, joins_netns=joins_netns),
        *view.host_args(),  # the host's allow-list, read-only (agentloop.sandbox.view)
        *PRIVATE,
        *_binds(spec),
        "--clearenv",
        "--setenv",
        "PATH",
        os.defpath,
        "--chdir",
        ws,
        sys.executable,
        "-I",
        "-S",
        view.INIT_AT,
        str(fd),
    ]


def launcher(
    args: list[str], fd: int, *, netns_fd: int | None, cgroups: list[Path]
) -> tuple[list[str], list[int]]:
    """What to exec to start the jail, and the descriptors it must inherit: ``args`` behind an
    ``nsenter`` that joins ``netns_fd`` and a shell that moves itself into ``cgroups``."""
    keep = [fd]
    if netns_fd is not None:  # join the run's network namespace, then become bwrap
        args = ["nsenter", f"--net=/proc/self/fd/{netns_fd}", "--", *args]
        keep.append(netns_fd)
    if cgroups:  # the shell moves itself into the cgroups, then becomes bwrap
        joins = " && ".join(f'echo $$ > "${i + 1}/cgroup.procs"' for i in range(len(cgroups)))
        args = [
            "/bin/sh",
            "-c",
            f'{joins} && shift {len(cgroups)} && exec "$@"',
            "sh",
            *map(str, cgroups),
            *args,
        ]
    return args, keep


def _limits_held(spec: JailSpec, holds: dict[str, str], run_uid: int | None) -> list[str]:
    """What holds the run's processes, memory and files: cgroups, rlimits, the run uid."""
    limits = [holds[k] for k in ("pids", "memory") if k in holds]
    limits.append(
        f"rlimits fsize={spec.limits.file_bytes} cpu={spec.limits.cpu_s}s"
        + ("" if "memory" in holds else f" as={spec.limits.memory_bytes}")
    )
    if "pids" not in holds:
        limits.append(
            f"commands run as uid {run_uid} with RLIMIT_NPROC="
            f"{spec.limits.max_procs} (no writable cgroup with pids.max)"
        )
    return limits


def describe(spec: JailSpec, holds: dict[str, str], run_uid: int | None) -> dict[str, Any]:
    """A bubblewrap jail's confinement: what is and is not confined (terminal, trace header)."""
    limits = _limits_held(spec, holds, run_uid)
    not_confined = []
    if spec.allow_network:
        not_confined.append(
            "network (the task allows hosts: commands share the host's "
            "network; only the browser is held to allow_hosts)"
        )
    return {
        "kind": "bubblewrap",
        "jail": True,
        "confined": (
            "own PID namespace (agentloop invisible; everything dies with the run), "
            + ("own network namespace (loopback only), " if not spec.allow_network else "")
            + "of the host only the system folders, /etc less its root-only files and the "
            + "interpreter, read-only"
            + "".join(f", {p} read-only" for p in spec.readonly)
            + "; writable: the workspace"
            + "".join(f", {p}" for p in spec.writable)
            + " and a private /tmp; the success check and run_tests in a jail of their own; "
            + "; ".join(limits)
        ),
        "not_confined": "; ".join(not_confined),
        "limits": {
            "max_procs": spec.limits.max_procs,
            "memory_bytes": spec.limits.memory_bytes,
            "file_bytes": spec.limits.file_bytes,
            "cpu_s": spec.limits.cpu_s,
        },
        "network": "host" if spec.allow_network else "loopback only",
    }
