"""``agentloop sim serve`` serves a task's script over HTTP until stopped, and reports bad input."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import httpx

from agentloop.trace.tracer import Tracer
from agentloop.trace.writer import JsonlSink
from tests.conftest import sigint_default, terminate

ROOT = Path(__file__).resolve().parents[1]
TASK = """\
name: cli-sim
prompt: say hi
script:
  - text: "Hello from the script."
    reasoning_tokens: 3
"""


async def start(*args: str, sigint: bool = False) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentloop.cli",
        "sim",
        "serve",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=sigint_default if sigint else None,
    )


async def test_serve_script_until_terminated(tmp_path):
    """The command prints its base URL, answers from the task's script, and on SIGTERM says
    what it served and exits 143."""
    task = tmp_path / "task.yaml"
    task.write_text(TASK)
    proc = await start("--port", "0", "--tier", "sim-ultrafast", "--script", str(task))
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        base_url = line.split("serving ", 1)[1].split(" ", 1)[0]
        async with httpx.AsyncClient(base_url=base_url) as http:
            resp = await http.post(
                "/chat/completions",
                json={"model": "sim-ultrafast", "messages": [{"role": "user", "content": "hi"}]},
            )
            models = (await http.get("/models")).json()
    finally:
        _, err = await terminate(proc)
    assert "output 750 tok/s" in line
    assert resp.json()["choices"][0]["message"]["content"] == "Hello from the script."
    assert resp.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] == 3
    assert "sim-ultrafast" in [m["id"] for m in models["data"]]
    assert (143, ["agentloop sim: stopped after 1 requests"]) == (
        proc.returncode,
        err.decode().splitlines(),
    )


async def test_ctrl_c_stops_it_the_same_way(tmp_path):
    """Ctrl-C (SIGINT, where the child has it at its default) stops it cleanly too: the same
    line, then "interrupted", exit 130, no traceback."""
    proc = await start("--port", "0", "--tier", "sim-ultrafast", "--filler", "3", sigint=True)
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        await terminate(proc)
    assert "serving http://127.0.0.1:" in line
    assert (130, ["agentloop sim: stopped after 0 requests", "agentloop: interrupted"]) == (
        proc.returncode,
        err.decode().splitlines(),
    )


async def test_serve_a_recorded_trace(tmp_path):
    """--trace serves the model turns recorded in a trace, tool calls included."""
    path = tmp_path / "run.jsonl"
    sink = JsonlSink(path)
    tracer = Tracer(sink)
    tracer.header(run_id="r", task={"name": "t"})
    async with (
        tracer.span("run", "invoke_agent t"),
        tracer.span("step", "step 1"),
        tracer.span("model", "chat sim") as span,
    ):
        span.set(
            step=1,
            output={
                "text": "",
                "reasoning_tokens": 0,
                "tool_calls": [{"id": "x", "name": "read_file", "arguments": '{"path": "a.py"}'}],
            },
        )
    tracer.end("ok")
    sink.close()
    proc = await start("--port", "0", "--tier", "sim-ultrafast", "--trace", str(path))
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        base_url = line.split("serving ", 1)[1].split(" ", 1)[0]
        async with httpx.AsyncClient(base_url=base_url) as http:
            resp = await http.post("/responses", json={"model": "m", "input": "hi"})
    finally:
        await terminate(proc)
    call = resp.json()["output"][0]
    assert (call["type"], call["name"], call["arguments"]) == (
        "function_call",
        "read_file",
        '{"path": "a.py"}',
    )
    assert "1 scripted turn)" in line


async def test_unknown_tier_is_a_user_error():
    """An unknown tier exits with code 2 and a message listing the known tiers, no traceback."""
    proc = await start("--port", "0", "--tier", "no-such-tier", "--filler", "3")
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        await terminate(proc)
    assert proc.returncode == 2
    assert b"unknown tier 'no-such-tier'" in err and b"sim-standard" in err
    assert b"Traceback" not in err


async def test_task_without_script_is_a_user_error(tmp_path):
    """A task file with no script is refused with a message naming the file."""
    task = tmp_path / "task.yaml"
    task.write_text("name: t\nprompt: p\n")
    proc = await start("--port", "0", "--script", str(task))
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        await terminate(proc)
    assert proc.returncode == 2
    assert b"has no 'script'" in err and str(task).encode() in err
