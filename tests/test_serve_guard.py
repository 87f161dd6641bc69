"""`agentloop serve` against hostile requests: rebinding hosts, web pages, oversized and odd bodies,
floods, submitted tasks that reach for the host, and secrets in the answers. Real HTTP against a
started server without a token (loopback only: the mode a web page can attack)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from test_serve import QUICK, SLOW, Server, _start, _stop, _wait_for, client_of, serving

SECRET = "hunter2-b7c9e1f0a3d5c8e2"  # the value of a secret-named variable of the server's


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "quick.yaml").write_text(QUICK)
    (tmp_path / "tasks" / "slow.yaml").write_text(SLOW)
    return tmp_path


@pytest.fixture(scope="module")
def open_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server without a token, listening on 127.0.0.1, for the module's tests that need no
    flags of their own: each compares the runs listed before and after its own requests."""
    folder = tmp_path_factory.mktemp("open")
    (folder / "tasks").mkdir()
    (folder / "tasks" / "quick.yaml").write_text(QUICK)
    with serving(folder, "--concurrency", "1", token=None) as (s, output):
        s.client.headers.pop("Authorization")
        yield s
    assert "Traceback" not in "".join(output), output


@pytest.fixture
async def open_server(open_served: Server) -> AsyncIterator[Server]:
    async with client_of(open_served) as s:
        yield s


def _port(s: Server) -> int:
    return int(s.base.rsplit(":", 1)[1])


async def _runs(s: Server) -> list[dict[str, Any]]:
    return list((await s.client.get("/v1/runs")).json()["runs"])


@pytest.mark.slow
async def test_a_foreign_host_header_is_refused(open_server: Server) -> None:
    """A Host that is not a name the server listens on (DNS rebinding) gets 421 with a JSON
    reason; loopback's names pass."""
    before = await _runs(open_server)  # the shared server's, from earlier tests
    port = _port(open_server)
    r = await open_server.client.get("/v1/runs", headers={"Host": f"evil.test:{port}"})
    assert 421 == r.status_code
    assert "DNS rebinding" in r.json()["error"]["message"]
    r = await open_server.client.post(
        "/v1/runs", json={"task": "tasks/quick.yaml"}, headers={"Host": "rebind.evil.test"}
    )
    assert 421 == r.status_code
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost"):
        assert 200 == (await open_server.client.get("/v1/runs", headers={"Host": host})).status_code
    assert before == await _runs(open_server)


@pytest.mark.slow
async def test_a_foreign_origin_and_a_cross_site_fetch_are_refused(open_server: Server) -> None:
    """An Origin other than the server's own, and any browser request but a same-origin one (a
    redirect from another port carries no Origin), get 403; the server's own origin passes."""
    before = await _runs(open_server)  # the shared server's, from earlier tests
    port = _port(open_server)
    for origin in ("http://evil.test", "null", f"http://127.0.0.1:{port + 1}"):
        r = await open_server.client.post(
            "/v1/runs", json={"task": "tasks/quick.yaml"}, headers={"Origin": origin}
        )
        assert 403 == r.status_code, origin
        assert "Origin" in r.json()["error"]["message"]
    for site in ("cross-site", "same-site", "none"):
        r = await open_server.client.get("/v1/runs", headers={"Sec-Fetch-Site": site})
        assert 403 == r.status_code
    assert before == await _runs(open_server)
    own = await open_server.client.get(
        "/v1/runs", headers={"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"}
    )
    assert 200 == own.status_code


@pytest.mark.slow
async def test_a_post_that_is_not_json_gets_415(open_server: Server) -> None:
    """The cross-site text/plain POST a web form can send needs no token to be refused: a body
    must be application/json (415), and nothing is queued."""
    before = await _runs(open_server)  # the shared server's, from earlier tests
    body = orjson.dumps({"task": "tasks/quick.yaml"})
    for media in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None):
        headers = {"Content-Type": media} if media else {}
        r = await open_server.client.post("/v1/runs", content=body, headers=headers)
        assert 415 == r.status_code, media
    assert before == await _runs(open_server)
    charset = {"Content-Type": "application/json; charset=utf-8"}
    assert (
        202
        == (await open_server.client.post("/v1/runs", content=body, headers=charset)).status_code
    )


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def _raw_post(port: int, head: bytes, chunks: int, chunk: bytes) -> bytes:
    """Send ``head`` then up to ``chunks`` chunks of ``chunk`` while reading the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        with contextlib.suppress(ConnectionError):
            writer.write(head)
            for _ in range(chunks):
                writer.write(chunk)
                await writer.drain()

    sender = asyncio.create_task(send())
    try:
        answer = await asyncio.wait_for(reader.read(65536), timeout=30)
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return answer


@pytest.mark.slow
async def test_a_body_past_the_limit_gets_413_without_echo_or_memory(open_server: Server) -> None:
    """A 100 MB body, declared or chunked, gets 413 without its bytes in the answer, and the
    server's memory does not grow with it (the body is read in chunks and dropped at 1 MiB)."""
    runs = await _runs(open_server)  # the shared server's, from earlier tests (imports done)
    port = _port(open_server)
    before = _rss_kb(open_server.proc.pid)
    marker = b'{"task": "' + b"Z" * 1000
    big = 100 * 1024 * 1024
    declared = await open_server.client.post(
        "/v1/runs",
        content=marker + b"Z" * (2 * 1024 * 1024),
        headers={"Content-Type": "application/json"},
    )
    assert 413 == declared.status_code
    assert "ZZZZ" not in declared.text
    head = (
        b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"Z" * 65536
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    answer = await _raw_post(
        port, head + b"%x\r\n" % len(marker) + marker + b"\r\n", big // 65536, chunk
    )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"ZZZZ" not in answer
    lied = await _raw_post(
        port,
        b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {big}\r\n\r\n".encode(),
        0,
        b"",
    )
    assert lied.startswith(b"HTTP/1.1 413"), lied[:200]
    grown_mb = (_rss_kb(open_server.proc.pid) - before) / 1024
    print(f"server RSS {before / 1024:.0f} MB before, grew {grown_mb:.1f} MB")
    assert grown_mb < 20
    assert runs == await _runs(open_server)


def _nested(depth: int) -> dict[str, Any]:
    inner: dict[str, Any] = {"thought": "deep"}
    for _ in range(depth):
        inner = {"a": inner}
    return inner


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"task": "tasks/quick\x00.yaml"}, "task", "NUL"),
        ({"task": "tasks/\x07quick.yaml"}, "task", "control characters"),
        ({"task": "tasks/" + "q" * 5000 + ".yaml"}, "task", "at most 1024"),
        ({"task": {**yaml.safe_load(QUICK), "prompt": "say \x00"}}, "task.prompt", "NUL"),
        ({"task": {**yaml.safe_load(QUICK), "workspace": "w\x1bx"}}, "task.workspace", "control"),
        ({"task": "quick", "tier": "t" * 300}, "tier", "at most 200"),
        (
            {"task": {**yaml.safe_load(QUICK), "description": _nested(400)}},
            "task.description" + ".a" * 62,
            "deeper than 64",
        ),
    ],
    ids=["nul-path", "bell-path", "long-path", "nul-prompt", "esc-workspace", "long-tier", "deep"],
)
async def test_odd_bodies_get_400_naming_the_field(
    open_server: Server, body: dict[str, Any], field: str, says: str
) -> None:
    """A NUL or control character in a path, a NUL anywhere, a path or tier too long and JSON
    nested 400 deep are each a 400 naming the field (never a 500, never a RecursionError), and
    the answer does not repeat the oversized value."""
    r = await open_server.client.post("/v1/runs", json=body)
    assert 400 == r.status_code, r.text
    assert (field, True) == (r.json()["error"]["field"], says in r.json()["error"]["message"])
    assert "q" * 100 not in r.text and "t" * 100 not in r.text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (
            {
                "tiers": {
                    "mine": {
                        "base_url": "http://evil.test/v1",
                        "api_key_env": "OPENAI_API_KEY",
                        "model": "m",
                    }
                },
                "tier": "mine",
            },
            "task.tiers",
        ),
        ({"allow_hosts": ["evil.test"]}, "task.allow_hosts"),
        ({"requirements": ["-r /etc/passwd"]}, "task.requirements[0]"),
        ({"requirements": ["--index-url=http://evil.test/simple", "x"]}, "task.requirements[0]"),
        ({"requirements": ["requests", "./trojan"]}, "task.requirements[1]"),
        ({"requirements": ["pkg @ https://evil.test/pkg.whl"]}, "task.requirements[0]"),
    ],
    ids=["own-tier", "allow-hosts", "dash-r", "index-url", "path", "url"],
)
async def test_an_inline_task_cannot_reach_for_the_host(
    open_server: Server, extra: dict[str, Any], field: str
) -> None:
    """An inline task may not define tiers (an endpoint of its own with the server's key),
    widen the network, or name requirements that are options, paths or URLs: 400 naming the
    field, no run, and no host file's content in the answer."""
    before = await _runs(open_server)  # the shared server's, from earlier tests
    task = {**yaml.safe_load(QUICK), **extra}
    r = await open_server.client.post("/v1/runs", json={"task": task})
    assert 400 == r.status_code, r.text
    assert field == r.json()["error"]["field"]
    assert "root:" not in r.text
    assert before == await _runs(open_server)


async def test_the_queue_is_bounded(root: Path) -> None:
    """Past --max-queue waiting runs a submission gets 429 (and is not held)."""
    s = _start(root, "--concurrency", "1", "--max-queue", "2", token=None)
    s.client.headers.pop("Authorization")
    try:
        ids = [await s.submit({"task": "tasks/slow.yaml"})]
        await _wait_for(s, ids[0], "model_start")  # running: no longer waiting
        ids += [await s.submit({"task": "tasks/slow.yaml"}) for _ in range(2)]
        r = await s.client.post("/v1/runs", json={"task": "tasks/quick.yaml"})
        assert 429 == r.status_code
        assert "queue is full" in r.json()["error"]["message"]
        assert 1 <= int(r.headers["Retry-After"]) <= 600
        assert ids[::-1] == [x["id"] for x in await _runs(s)]  # newest first
    finally:  # stopping the server cancels the one running, the two queued stay queued
        await s.client.aclose()
        _stop(s)


async def test_followers_of_a_run_are_bounded(root: Path) -> None:
    """Past --max-followers open event streams of one run another gets 429 naming why; once one
    closes, a new one is taken."""
    s = _start(root, "--concurrency", "1", "--max-followers", "1", token=None)
    s.client.headers.pop("Authorization")
    try:
        slow = await s.submit({"task": "tasks/slow.yaml"})
        async with s.client.stream("GET", f"/v1/runs/{slow}/events") as first:
            assert 200 == first.status_code
            second = await s.client.get(f"/v1/runs/{slow}/events")
            assert 429 == second.status_code
            assert "event streams" in second.json()["error"]["message"]
        codes = []
        for _ in range(50):  # the first stream's end reaches the server a moment later
            async with s.client.stream("GET", f"/v1/runs/{slow}/events") as again:
                codes.append(again.status_code)
            if codes[-1] == 200:
                break
            await asyncio.sleep(0.1)
        assert 200 == codes[-1], codes
        await s.client.delete(f"/v1/runs/{slow}")
    finally:
        await s.client.aclose()
        _stop(s)


@pytest.mark.slow
async def test_only_the_last_ended_runs_are_held_in_memory(root: Path) -> None:
    """With --keep-ended 2, the third ended run pushes the first out of memory: it is still
    answered, from the run store, with the same summary and its trace."""
    s = _start(root, "--concurrency", "1", "--keep-ended", "2", token=None)
    s.client.headers.pop("Authorization")
    try:
        ids, summaries = [], []
        for _ in range(3):
            run_id = await s.submit({"task": "tasks/quick.yaml"})
            await s.all_events(run_id)
            ids.append(run_id)
            summaries.append(await s.status(run_id))
        assert ids[::-1] == [x["id"] for x in await _runs(s)]
        assert summaries[0] == await s.status(ids[0])
        assert 200 == (await s.client.get(f"/v1/runs/{ids[0]}/report")).status_code
        events = await s.all_events(ids[0])  # the end, as the store has it
        assert [("run_end", "ok")] == [(k, e["data"]["status"]) for k, e in events]
    finally:
        await s.client.aclose()
        _stop(s)


SECRET_TASK = f"""\
name: secretive
prompt: Read the notes, then finish.
workspace: secretive
tools: [read_file, think]
tier: sim-ultrafast
script:
  - text: "The key is {SECRET}, I will note it."
    tool_calls:
      - {{name: think, arguments: {{thought: "remember {SECRET}"}}}}
      - {{name: read_file, arguments: {{path: notes.txt}}}}
  - text: Done.
    tool_calls:
      - {{name: finish, arguments: {{summary: "finished with {SECRET}"}}}}
"""


@pytest.mark.slow
async def test_a_secret_never_reaches_an_answer(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret of the server's environment, said by the model, passed in a tool call and printed
    by a tool, appears in no server-sent event, summary, trace, report or error: each shows
    [REDACTED] where the secret was."""
    (root / "tasks" / "secretive").mkdir()
    (root / "tasks" / "secretive" / "notes.txt").write_text(f"password reminder: {SECRET}\n")
    (root / "tasks" / "secretive.yaml").write_text(SECRET_TASK)
    monkeypatch.setenv("SVC_TEST_SECRET", SECRET)
    s = _start(root, token=None)
    s.client.headers.pop("Authorization")
    try:
        run_id = await s.submit({"task": "tasks/secretive.yaml"})
        async with s.client.stream("GET", f"/v1/runs/{run_id}/events") as r:
            stream = b"".join([chunk async for chunk in r.aiter_bytes()]).decode()
        assert "event: run_end" in stream
        assert SECRET not in stream
        assert stream.count("[REDACTED]") >= 4  # model text, tool call, tool output, summary
        answers = [
            (await s.client.get(path)).text
            for path in (
                f"/v1/runs/{run_id}",
                "/v1/runs",
                f"/v1/runs/{run_id}/trace",
                f"/v1/runs/{run_id}/report",
            )
        ]
        bad = await s.client.post("/v1/runs", json={"task": f"tasks/{SECRET}.yaml"})
        answers.append(bad.text)
        assert [False] * len(answers) == [SECRET in a for a in answers]
        assert "[REDACTED]" in answers[-1]
    finally:
        await s.client.aclose()
        _, output = _stop(s)
    assert SECRET not in output


def test_host_names_follow_the_listening_address() -> None:
    """On loopback only loopback's names (and --allow-host ones) pass; on a wildcard address,
    which needs a token, IP literals and this machine's names pass too, other names never."""
    from agentloop.service.guard import HostNames

    loop = HostNames("127.0.0.1", extra=("proxy.internal",))
    assert [True, True, True, True, False, False] == [
        loop.allows(h)
        for h in ("localhost", "127.0.0.1", "::1", "proxy.internal", "10.0.0.7", "evil.test")
    ]
    wild = HostNames("0.0.0.0")
    assert [True, True, False] == [wild.allows(h) for h in ("10.0.0.7", "localhost", "evil.test")]


async def test_a_forgotten_run_is_freed(root: Path) -> None:
    """A run the book forgets (past keep_ended) is garbage: nothing else holds it or its handle
    with the run's events, so the memory of ended runs is bounded."""
    import gc
    import weakref

    from agentloop import start_run
    from agentloop.config.tasks import load_task
    from agentloop.service.runs import RunBook
    from agentloop.service.store import RunStore

    store = RunStore(root / "state")
    await store.open()
    book = RunBook(start_run, store=store, trace_dir=root / "traces", keep_ended=1)
    task = load_task(root / "tasks" / "quick.yaml")
    try:
        first, _ = await book.submit(task, None, {"task": "tasks/quick.yaml"})
        await first.ended.wait()
        run_ref, handle_ref = weakref.ref(first), weakref.ref(first.handle)
        del first
        second, _ = await book.submit(task, None, {"task": "tasks/quick.yaml"})
        await second.ended.wait()
        gc.collect()
        assert ([second.id], None, None) == (list(book.runs), run_ref(), handle_ref())
    finally:
        await book.close()
        await store.close()
