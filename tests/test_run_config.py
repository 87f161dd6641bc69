"""The run configuration: one frozen RunConfig reaches the run through every front door."""

from __future__ import annotations

import contextlib
import dataclasses
import typing
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import agentloop
from agentloop import api
from agentloop.config.tiers import Tier
from agentloop.events import RunEvent
from agentloop.protocols import ModelClient
from agentloop.sandbox.closer import closing_behind
from agentloop.script import ScriptTurn
from agentloop.suite.run import run_suite
from agentloop.testing import ScriptedClient, run_and_trace
from agentloop.trace.reader import load_trace
from tests.conftest import instant_tier, instant_tiers_file

THREE_STEPS = """\
name: config-demo
prompt: Think three times.
tools: [think]
script:
  - tool_calls:
      - {name: think, arguments: {thought: one}}
  - tool_calls:
      - {name: think, arguments: {thought: two}}
  - text: Done.
"""


def _task(folder: Path, name: str = "task") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(THREE_STEPS)
    return path


def test_the_keyword_options_are_the_config_s_fields() -> None:
    """RunOptions (the keywords run_task takes) names every RunConfig field with its type."""
    config = typing.get_type_hints(api.RunConfig)
    options = typing.get_type_hints(api.RunOptions)
    assert config == options
    assert [f.name for f in dataclasses.fields(api.RunConfig)] == list(options)


def test_keywords_are_laid_over_the_config() -> None:
    """configure: the config's fields, each keyword replacing one; a config is never changed."""
    base = api.RunConfig(tier="sim-ultrafast", max_steps=5)
    over = api.configure(base, max_steps=1, keep_workspace=True)
    assert (over.tier, over.max_steps, over.keep_workspace) == ("sim-ultrafast", 1, True)
    assert (base.max_steps, base.keep_workspace) == (5, False)
    assert api.RunConfig() == api.configure()
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.max_steps = 2  # type: ignore[misc]


async def test_a_config_given_to_run_task_reaches_the_run(tmp_path: Path) -> None:
    """run_task(config=...): its tier, trace folder, step limit and event sink are the run's."""
    seen: list[RunEvent] = []
    config = agentloop.RunConfig(
        tier=instant_tier(), trace_dir=tmp_path / "here", max_steps=2, events=seen.append
    )
    result = await agentloop.run_task(_task(tmp_path), config=config)
    assert ("budget", 2) == (result.status, result.steps)
    trace = load_trace(result.trace_path or "")
    assert Path(result.trace_path or "").parent == tmp_path / "here"
    assert (2, "sim-instant") == (trace.header["limits"]["max_steps"], trace.run.tier.name)
    assert "run_end" == seen[-1].kind and result.run_id == seen[-1].run_id


async def test_a_keyword_wins_over_the_config_s_field(tmp_path: Path) -> None:
    """run_task(config=..., max_steps=...): the keyword is the run's limit, the rest the config's."""
    config = agentloop.RunConfig(tier=instant_tier(), trace_dir=tmp_path, max_steps=1)
    result = await agentloop.run_task(_task(tmp_path), config=config, max_steps=3)
    assert ("ok", 3) == (result.status, result.steps)


async def test_a_config_given_to_start_run_reaches_the_run(tmp_path: Path) -> None:
    """start_run(config=...): the handle's run has the config's limit, and the config's own
    sink sees the events the handle sees."""
    mine: list[str] = []
    config = agentloop.RunConfig(
        tier=instant_tier(),
        trace_dir=tmp_path,
        max_steps=1,
        events=lambda e: mine.append(e.kind),
    )
    handle = await agentloop.start_run(_task(tmp_path), config=config)
    kinds = [e.kind async for e in handle.events()]
    result = await handle
    assert ("budget", 1) == (result.status, result.steps)
    assert kinds == mine and "run_end" == kinds[-1]


async def test_run_and_trace_takes_a_config(tmp_path: Path) -> None:
    """agentloop.testing.run_and_trace(config=...) runs with it and writes where it says."""
    config = agentloop.RunConfig(tier=instant_tier(), trace_dir=tmp_path / "t", max_steps=2)
    result, trace = await run_and_trace(_task(tmp_path), config=config)
    assert (2, 2) == (result.steps, trace.header["limits"]["max_steps"])
    assert Path(result.trace_path or "").parent == tmp_path / "t"


async def test_a_config_given_to_a_suite_reaches_every_run(tmp_path: Path) -> None:
    """run_suite(config=...): every run has the config's limit, and the config's sink sees
    each run's events (the suite's traces folder is still the suite's)."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    _task(tasks, "a")
    _task(tasks, "b")
    ends: list[str] = []
    config = agentloop.RunConfig(
        tier=instant_tier(),
        trace_dir=tmp_path / "ignored",
        max_steps=2,
        events=lambda e: ends.append(e.run_id) if e.kind == "run_end" else None,
    )
    suite = await run_suite([tasks], tmp_path / "out", config=config, repeat=2)
    assert [2] * 4 == [r.steps for r in suite.runs]
    limits = [
        load_trace(tmp_path / "out" / str(r.trace)).header["limits"]["max_steps"]
        for r in suite.runs
    ]
    assert [2] * 4 == limits
    assert 4 == len(set(ends))
    assert not (tmp_path / "ignored").exists()


async def test_a_suite_scope_s_model_opener_reaches_the_run_only_when_given(
    tmp_path: Path,
) -> None:
    """run_task with a SuiteScope opens its model client through the scope's opener (given the
    run's tier and turns); the same run without a scope never calls it."""
    opened: list[tuple[str, int]] = []

    @contextlib.asynccontextmanager
    async def models(tier: Tier, script: list[ScriptTurn] | None) -> AsyncIterator[ModelClient]:
        opened.append((tier.name, len(script or [])))
        yield ScriptedClient([ScriptTurn(text="from the suite")])

    scope = api.SuiteScope(models=models)
    config = agentloop.RunConfig(tier=instant_tier(), trace_dir=tmp_path)
    alone = await agentloop.run_task(_task(tmp_path), config=config)
    assert ([], "Done.") == (opened, alone.final_text)
    scoped = await agentloop.run_task(_task(tmp_path), config=config, suite=scope)
    assert [("sim-instant", 3)] == opened
    assert ("ok", "from the suite") == (scoped.status, scoped.final_text)


async def test_a_suite_scope_s_closer_gets_the_run_s_jail_only_when_given(tmp_path: Path) -> None:
    """A run given a scope with a closer leaves its emptied jail to it; a run without one
    closes its jail itself; the closer's end tears down what it was left."""
    config = agentloop.RunConfig(tier=instant_tier(), trace_dir=tmp_path)
    async with closing_behind(spacing_s=60.0) as closer:  # the first close waits 60 s after
        await agentloop.run_task(_task(tmp_path), config=config)
        assert (0, 0) == (closer.pending, closer.closed)
        scope = api.SuiteScope(closer=closer)
        for _ in range(2):
            await agentloop.run_task(_task(tmp_path), config=config, suite=scope)
        assert 1 == closer.pending  # the second waits behind the first
    assert (0, 2) == (closer.pending, closer.closed)


async def test_a_config_given_to_replay_reaches_the_replayed_run(tmp_path: Path) -> None:
    """replay(config=...): the config's trace folder and sink are the replay's; the client,
    script and step limit stay the replay's own (the simulator, the recorded turns, their
    number)."""
    from agentloop.replay import replay

    tiers = instant_tiers_file(tmp_path)  # the recorded tier's name is looked up there
    first = await agentloop.run_task(
        _task(tmp_path), tier="sim-instant", tiers_file=tiers, trace_dir=tmp_path / "rec"
    )
    seen: list[str] = []
    config = agentloop.RunConfig(
        tiers_file=tiers,
        trace_dir=tmp_path / "again",
        events=lambda e: seen.append(e.kind),
        max_steps=1,
        client=ScriptedClient([ScriptTurn(text="not the recording")]),
    )
    res = await replay(first.trace_path or "", config=config)
    assert ("ok", 3, "Done.") == (res.run.status, res.run.steps, res.run.final_text)
    assert Path(res.run.trace_path or "").parent == tmp_path / "again"
    assert ("run_end", []) == (seen[-1], res.divergences)


async def test_a_config_s_run_id_is_the_run_s_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    """RunConfig.run_id names the run (its result, its trace header, its trace file); one
    that could not name a file is refused before anything runs."""
    from agentloop.errors import ConfigError

    res = await agentloop.run_task(
        _task(tmp_path), tier=instant_tier(), trace_dir=tmp_path, run_id="deploy-4711"
    )
    assert "deploy-4711" == res.run_id
    assert "deploy-4711" == load_trace(res.trace_path or "").header["run_id"]
    with pytest.raises(ConfigError, match="run_id"):
        await agentloop.run_task(_task(tmp_path), trace_dir=tmp_path, run_id="../x")
