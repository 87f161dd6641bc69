"""OTLP exports received by a real collector (Arize Phoenix) and queried back through its API."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agentloop.export.otlp import SpanMapper, otlp_json, trace_spans
from agentloop.trace.reader import load_trace
from tests._venvs import venv
from tests.conftest import instant_tiers_file, run_cli

ROOT = Path(__file__).resolve().parent.parent
STANDARD = ROOT / "traces/reference/checkout-timeouts-sim-standard.jsonl"
DEMO = ROOT / "tasks/incident/checkout-timeouts.yaml"
STEADY = ROOT / "tests/data/steady.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Phoenix server on a free loopback port (its own venv, a temp working dir)."""
    work = tmp_path_factory.mktemp("phoenix")
    port, grpc = free_port(), free_port()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(work),
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (work / "phoenix.log").open("wb")
    proc = subprocess.Popen(
        [str(venv("phoenix", "PHOENIX_VERSION") / "bin/phoenix"), "serve"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"phoenix exited: {(work / 'phoenix.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("phoenix did not come up within 120 s")
            time.sleep(0.3)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def phoenix_spans(base: str, trace_id: str) -> list[dict[str, Any]]:
    """The spans Phoenix holds for one trace id (its REST API, default project)."""
    r = httpx.get(f"{base}/v1/projects/default/spans", params={"limit": 1000}, timeout=10)
    r.raise_for_status()
    return [s for s in r.json()["data"] if s["context"]["trace_id"] == trace_id]


def wait_for_spans(
    base: str, trace_id: str, count: int, within_s: float = 30
) -> list[dict[str, Any]]:
    """Phoenix ingests asynchronously: poll until ``count`` spans of the trace are there."""
    deadline = time.monotonic() + within_s
    while True:
        got = phoenix_spans(base, trace_id)
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def trace_hex(path: Path) -> str:
    return format(SpanMapper(load_trace(path).run).trace_id, "032x")


@pytest.mark.external
def test_cli_export_reaches_phoenix_with_names_attributes_and_tree(phoenix: str) -> None:
    """``export --otlp``: Phoenix holds every span, GenAI names and attributes, the same tree."""
    r = run_cli("export", STANDARD, "--otlp", phoenix)
    trace = load_trace(STANDARD)
    got = wait_for_spans(phoenix, trace_hex(STANDARD), len(trace.spans))
    names = Counter(s["name"] for s in got)
    first_chat = min(
        (s for s in got if s["name"] == "chat sim-standard"), key=lambda s: s["start_time"]
    )
    by_id = {s["context"]["span_id"]: s for s in got}
    roots = [s["name"] for s in got if s["parent_id"] not in by_id]
    tool = next(s for s in got if s["name"] == "execute_tool run_tests")
    assert 0 == r.returncode, r.stderr
    assert Counter(s.name for s in trace.spans.values()) == names
    assert ["invoke_agent checkout-timeouts"] == roots
    assert ("chat", 124, 233, 180) == (
        first_chat["attributes"]["gen_ai.operation.name"],
        first_chat["attributes"]["gen_ai.usage.input_tokens"],
        first_chat["attributes"]["gen_ai.usage.output_tokens"],
        first_chat["attributes"]["gen_ai.usage.reasoning.output_tokens"],
    )
    assert ("execute_tool", "run_tests") == (
        tool["attributes"]["gen_ai.operation.name"],
        tool["attributes"]["gen_ai.tool.name"],
    )


@pytest.mark.external
def test_otlp_json_file_is_the_request_phoenix_accepts(phoenix: str, tmp_path: Path) -> None:
    """The otlp-json file, read by protobuf's JSON mapping, is a request Phoenix stores whole."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    out = tmp_path / "run.otlp.json"
    cut = tmp_path / "cut.jsonl"  # another trace id than the other tests': a cut-short run
    lines = STANDARD.read_bytes().splitlines()
    header = orjson.loads(lines[0])
    header["run_id"] = "cut-" + header["run_id"]
    cut.write_bytes(b"\n".join([orjson.dumps(header), *lines[1:40]]) + b"\n")
    r = run_cli("export", cut, "--format", "otlp-json", "-o", out)
    doc = orjson.loads(out.read_bytes())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for s in spans:  # OTLP/JSON spells ids in hex; protobuf's mapping reads base64
        for k in ("traceId", "spanId", "parentSpanId"):
            if k in s:
                s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
        for link in s.get("links", ()):
            link["traceId"] = base64.b64encode(bytes.fromhex(link["traceId"])).decode()
            link["spanId"] = base64.b64encode(bytes.fromhex(link["spanId"])).decode()
    body = ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()
    post = httpx.post(
        f"{phoenix}/v1/traces",
        content=body,
        timeout=10,
        headers={"Content-Type": "application/x-protobuf"},
    )
    trace = load_trace(cut)
    got = wait_for_spans(phoenix, trace_hex(cut), len(trace.spans))
    in_flight = {s["name"] for s in got if s["attributes"].get("agentloop.in_flight")}
    assert (0, 200) == (r.returncode, post.status_code)
    assert len(trace.spans) == len(got)
    assert {s.name for s in trace.in_flight} == in_flight


def test_after_edges_are_span_links_and_timings_events() -> None:
    """Each recorded ``after`` edge is a link; first chunk, last token and attempts are events."""
    trace = load_trace(STANDARD)
    spans = trace_spans(trace)
    links = sum(len(s.links) for s in spans)
    chat = next(s for s in spans if s.name == "chat sim-standard")
    events = [e.name for e in chat.events]
    doc = otlp_json(spans)
    res = {a["key"]: a["value"] for a in doc["resourceSpans"][0]["resource"]["attributes"]}
    assert sum(len(s.after) for s in trace.spans.values()) == links
    assert [
        "gen_ai.first_chunk",
        "agentloop.first_visible_token",
        "agentloop.last_token",
        "agentloop.attempt",
    ] == events
    assert (
        {"stringValue": "agentloop"},
        {"stringValue": "sim-standard"},
        {"doubleValue": 60.0},
    ) == (res["service.name"], res["agentloop.tier.name"], res["agentloop.tier.profile.output_tps"])


def test_no_secret_of_the_environment_leaves_in_an_export(tmp_path: Path) -> None:
    """A secret that reached a trace recorded elsewhere is redacted from the OTLP JSON."""
    secret = "s3cr3t-value-for-the-export-test"
    lines = STANDARD.read_bytes().splitlines()
    rec = orjson.loads(lines[-2])
    rec.setdefault("attrs", {})["output"] = f"token is {secret} and sk-abcdefghijklmnop1234"
    poisoned = tmp_path / "poisoned.jsonl"
    poisoned.write_bytes(b"\n".join([*lines[:-2], orjson.dumps(rec), lines[-1]]) + b"\n")
    out = tmp_path / "out.json"
    r = run_cli(
        "export", poisoned, "--format", "otlp-json", "-o", out, env={"EXPORT_TEST_API_KEY": secret}
    )
    text = out.read_text()
    assert (0, False, False) == (r.returncode, secret in text, "sk-abcdefghijklmnop1234" in text)


@pytest.mark.external
async def test_run_streams_spans_live_to_phoenix(phoenix: str, tmp_path: Path) -> None:
    """A fresh demo run with ``otlp=``: spans reach Phoenix while it runs (the exporter sends
    every 0.2 s; sim-ultrafast's run lasts seconds, its checks' pytest runs among them)."""
    import agentloop

    handle = await agentloop.start_run(DEMO, tier="sim-ultrafast", trace_dir=tmp_path, otlp=phoenix)
    trace_id: str | None = None
    seen_before_end = 0
    waiter = asyncio.ensure_future(handle)
    while not waiter.done():
        await asyncio.sleep(0.5)
        if trace_id is None and handle.trace_path.exists():
            trace_id = trace_hex(handle.trace_path)
        if trace_id is not None and not waiter.done():
            seen = len(await asyncio.to_thread(phoenix_spans, phoenix, trace_id))
            seen_before_end = seen if not waiter.done() else seen_before_end
    result = await waiter
    trace = load_trace(handle.trace_path)
    # every span of the file is streamed: the agent's and the set-up and check around it
    every = [*trace.spans.values(), *trace.outside.values()]
    got = await asyncio.to_thread(wait_for_spans, phoenix, trace_hex(handle.trace_path), len(every))
    assert ("ok", True) == (result.status, seen_before_end > 0)
    assert Counter(s.name for s in every) == Counter(s["name"] for s in got)


@pytest.mark.slow  # the exporter backs off ~1.5 s before it gives up on the dead port
def test_dead_collector_is_logged_once_and_the_run_ends_well(tmp_path: Path) -> None:
    """``run --otlp`` at a port nobody listens on: exit 0, a complete trace, one warning. A
    short task on sim-instant: the collector's absence is the subject, not the demo's pace."""
    r = run_cli(
        "run",
        STEADY,
        "--tiers",
        instant_tiers_file(tmp_path),
        "--tier",
        "sim-instant",
        "--trace-dir",
        tmp_path / "traces",
        "-q",
        "--otlp",
        f"http://127.0.0.1:{free_port()}",
    )
    [trace_file] = (tmp_path / "traces").glob("*.jsonl")
    warnings = [ln for ln in r.stderr.splitlines() if "OTLP collector" in ln]
    assert (0, True, 1) == (r.returncode, load_trace(trace_file).complete, len(warnings))
