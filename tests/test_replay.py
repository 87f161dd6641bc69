"""Replay: recorded model turns served at a chosen tier, tools re-run (or fed), divergence found."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from agentloop import run_task
from agentloop.cli import main
from agentloop.replay import replay
from agentloop.trace.reader import Trace, load_trace
from tests.conftest import ROOT, instant_tier

STEADY = ROOT / "tests" / "data" / "steady.yaml"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    out = tmp_path_factory.mktemp("recorded")
    result = asyncio.run(run_task(STEADY, tier="sim-ultrafast", trace_dir=out))
    assert "ok" == result.status
    return Path(result.trace_path or "")


@pytest.mark.slow
async def test_live_replay_matches_the_recording(recorded: Path, tmp_path: Path) -> None:
    """Replaying at the recorded tier re-runs the tools and finds no divergence."""
    res = await replay(recorded, trace_dir=tmp_path)
    assert ("ok", 3, []) == (res.run.status, res.run.steps, res.divergences)
    new = load_trace(res.run.trace_path or "")
    assert "sim-ultrafast" == new.header["tier"]["name"]
    assert 5 == len(new.of_kind("tool"))


@pytest.mark.pacing
async def test_replay_at_a_slower_tier_takes_longer(recorded: Path, tmp_path: Path) -> None:
    """The same turns at sim-fast take longer than recorded at sim-ultrafast; tools re-run.
    Compared on the model calls' own time (the tools' 1.2 s of sleeps and the set-up, the same
    on both sides, diluted a whole-run comparison to 1.17x on a busy machine)."""
    res = await replay(recorded, tier="sim-fast", trace_dir=tmp_path)
    old, new = load_trace(recorded), load_trace(res.run.trace_path or "")
    assert "sim-fast" == new.header["tier"]["name"]
    assert 5 == len(new.of_kind("tool"))

    def model_ns(t: Trace) -> int:
        return sum(m.duration_ns or 0 for m in t.of_kind("model"))

    assert model_ns(new) > model_ns(old) * 1.5, (model_ns(new), model_ns(old))


async def test_offline_replay_feeds_recorded_outputs(recorded: Path, tmp_path: Path) -> None:
    """Offline, no tool runs: each result is the recorded one, so the sleeps cost nothing."""
    res = await replay(recorded, offline=True, tier=instant_tier(), trace_dir=tmp_path)
    assert "ok" == res.run.status
    old, new = load_trace(recorded), load_trace(res.run.trace_path or "")
    outputs = sorted(t.attrs["output"] for t in old.of_kind("tool"))
    assert outputs == sorted(t.attrs["output"] for t in new.of_kind("tool"))
    tool_ns = sum(t.duration_ns or 0 for t in new.of_kind("tool"))
    assert tool_ns < 0.1e9  # the recorded sleeps took 1.2 s of tool time


async def test_until_step_stops_there(recorded: Path, tmp_path: Path) -> None:
    """--until-step N replays the first N steps only."""
    res = await replay(recorded, until_step=2, tier=instant_tier(), trace_dir=tmp_path)
    assert 2 == res.run.steps
    assert 2 == len(load_trace(res.run.trace_path or "").of_kind("model"))


@pytest.mark.slow
async def test_divergence_is_reported_with_its_step(recorded: Path, tmp_path: Path) -> None:
    """A tool result that differs from the recording is reported with the step it happened in."""
    lines = recorded.read_bytes().splitlines()
    edited = []
    for raw in lines:
        rec = orjson.loads(raw)
        attrs = rec.get("attrs") or {}
        if rec["type"] == "span_end" and attrs.get("gen_ai.tool.name") == "read_file":
            attrs["output"] = "1\tgoodbye\n"
        edited.append(orjson.dumps(rec))
    doctored = tmp_path / "doctored.jsonl"
    doctored.write_bytes(b"\n".join(edited) + b"\n")
    res = await replay(doctored, trace_dir=tmp_path)
    assert [1] == [d.step for d in res.divergences]
    assert "read_file" in res.divergences[0].describe()
    assert "hello" in res.divergences[0].describe()


@pytest.mark.slow
def test_replay_cli(recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI replays and says whether the run diverged."""
    code = main(
        ["replay", str(recorded), "--tier", "sim-ultrafast", "--trace-dir", str(tmp_path), "-q"]
    )
    out = capsys.readouterr().out
    assert 0 == code
    assert "diverged  no" in out and "status   ok" in out


def test_replay_of_a_non_trace_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file that is not a trace gets exit code 2 and a message naming it."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    assert 2 == main(["replay", str(bad)])
    assert "bad.jsonl, line 1" in capsys.readouterr().err


class LoggingEndpoint:
    """A real HTTP server on loopback that records every request it gets (and answers 500)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.requests.append(head.split(b"\r\n")[0].decode())
            writer.write(b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.mark.parametrize("offline", [True, False])
async def test_replay_never_contacts_the_traced_endpoint(
    recorded: Path, tmp_path: Path, offline: bool
) -> None:
    """A trace whose tier names a real endpoint replays on the simulator: the endpoint gets
    no request, offline or not."""
    endpoint = LoggingEndpoint()
    async with endpoint as url:
        lines = recorded.read_bytes().splitlines()
        header = orjson.loads(lines[0])
        header["tier"].update(name="remote-logged", base_url=url, api_key_env="REMOTE_KEY")
        trace = tmp_path / "remote.jsonl"
        trace.write_bytes(b"\n".join([orjson.dumps(header), *lines[1:]]) + b"\n")
        tiers = tmp_path / "tiers.toml"
        tiers.write_text(
            f'[tiers.remote-logged]\nbase_url = "{url}"\nmodel = "m"\n'
            f'api = "responses"\napi_key_env = "REMOTE_KEY"\n'
            f"profile = {{ base_latency_s = 0.01, prefill_tps = 100000, "
            f"output_tps = 2000 }}\n"
        )
        res = await replay(trace, tiers_file=tiers, offline=offline, trace_dir=tmp_path / "out")
    assert ([], "ok") == (endpoint.requests, res.run.status)
    assert "sim" == load_trace(res.run.trace_path or "").header["tier"]["base_url"]
