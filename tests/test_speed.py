"""The speed model (agentloop.model.speed) and the simulator's prompt cache that it paces."""

from __future__ import annotations

import time

import httpx
import pytest

from agentloop.config.tier_write import profile_line, write_profile
from agentloop.config.tiers import load_tiers, parse_tiers
from agentloop.model.speed import SpeedProfile, fit_decode, fit_prefill
from agentloop.sim import SimServer
from agentloop.sim.cache import PrefixCache


def test_decode_sum_matches_token_by_token():
    """decode_s is the closed form of summing tpot over each generated token's context."""
    p = SpeedProfile(0.1, 1000, 80, tpot_ms_per_1k=7.5)
    expected = sum(p.tpot_s(1800 + i) for i in range(250))
    assert expected == pytest.approx(p.decode_s(1800, 250), rel=1e-12)


def test_old_profile_keeps_its_formula():
    """A three-field profile times a call as base + input/prefill + output/output_tps."""
    p = SpeedProfile(0.3, 20000, 60)
    assert 0.3 + 5000 / 20000 + 120 / 60 == pytest.approx(p.call_seconds(5000, 120))


def test_cached_input_is_charged_at_its_own_rate():
    """Only uncached input pays prefill_tps; cached input is free unless a cached rate is set."""
    free = SpeedProfile(0.0, 1000, 50)
    priced = SpeedProfile(0.0, 1000, 50, cached_prefill_tps=100_000)
    assert (0.2, 0.2 + 0.008) == (
        pytest.approx(free.prefill_s(1000, 800)),
        pytest.approx(priced.prefill_s(1000, 800)),
    )


def test_fresh_prefill_slows_with_the_context_behind_it():
    """Fresh tokens after a cached prefix cost more per token the longer that prefix is."""
    p = SpeedProfile(0.0, 250, 100, prefill_ms_per_1k=4.0)
    # 400 fresh tokens at 4 ms each, plus 4 ms per 1k of their mean context (3000 + 200)
    assert (400 / 250 + 4.0 * 400 * 3200 / 1e6) == pytest.approx(p.prefill_s(3400, 3000))


def test_fit_prefill_recovers_base_rate_and_slope():
    """Waits of a short, a long and a behind-the-cache call give back all three prefill terms."""
    truth = SpeedProfile(0.05, 250, 100, prefill_ms_per_1k=3.0)
    calls = [(50, 0), (1500, 0), (500, 1500)]
    got = fit_prefill([(f, c, truth.first_token_s(f + c, c)) for f, c in calls])
    assert (0.05, 250, 3.0) == tuple(pytest.approx(x) for x in got)


def test_fit_prefill_never_fits_a_negative_term():
    """Noise that makes long prompts look cheap clamps the slope at 0 instead of going below."""
    base, tps, slope = fit_prefill([(50, 0, 0.30), (1500, 0, 0.50), (500, 1500, 0.32)])
    assert (True, True, True) == (base >= 0, tps > 0, slope >= 0)


def test_parts_split_reasoning_and_visible_decode_by_context():
    """Reasoning is the first R token times from the input on, decode the V - 1 after them."""
    p = SpeedProfile(0.0, 0, 100, tpot_ms_per_1k=10)
    parts = p.parts(input_tokens=1000, reasoning_tokens=10, visible_tokens=21)
    assert (p.decode_s(1000, 10), p.decode_s(1010, 20)) == (parts.reasoning_s, parts.decode_s)


def test_fit_decode_recovers_a_linear_slowdown():
    """Speeds measured at two contexts give back output_tps at 0 and the tpot slope."""
    truth = SpeedProfile(0.0, 0, 80, tpot_ms_per_1k=12)
    tps0, slope = fit_decode([(100, truth.tps_at(100)), (1900, truth.tps_at(1900))])
    assert (80, 12) == (pytest.approx(tps0), pytest.approx(slope))


def test_fit_decode_never_fits_a_speedup():
    """Noise that makes the long context look faster yields no slope, not a negative one."""
    assert 0.0 == fit_decode([(100, 50.0), (2000, 55.0)])[1]


def test_tier_file_profile_extras_round_trip():
    """The optional speed-model fields are read from a tier file and written back by --write."""
    text = (
        '[tiers.t]\nbase_url = "sim"\nmodel = "m"\nprofile = { base_latency_s = 0.2, '
        "prefill_tps = 900, output_tps = 78, cached_prefill_tps = 50000, "
        "tpot_ms_per_1k = 6.5, prefill_ms_per_1k = 1.25 }\n"
    )
    import tomllib

    tier = parse_tiers(tomllib.loads(text), "t.toml", text)["t"]
    again = parse_tiers(
        tomllib.loads(
            '[tiers.t]\nbase_url = "sim"\nmodel = "m"\n' + profile_line(tier.profile) + "\n"
        ),
        "t.toml",
    )["t"]
    assert SpeedProfile(0.2, 900, 78, 50000, 6.5, 1.25) == again.profile


def test_write_profile_fills_a_profile_sub_table(tmp_path):
    """--write into a [tiers.NAME.profile] sub-table writes every field, keeping other lines."""
    path = tmp_path / "tiers.toml"
    path.write_text(
        '[tiers.t]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n\n'
        "[tiers.t.profile]\nbase_latency_s = 0.1\nprefill_tps = 100\noutput_tps = 50\n"
        '# measured by hand\n\n[tiers.u]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
    )
    new = SpeedProfile(0.02, 250, 106.7, tpot_ms_per_1k=8.2, prefill_ms_per_1k=2.5)
    write_profile(path, "t", new)
    tiers = load_tiers(path)
    assert (new, True, True) == (
        tiers["t"].profile,
        "# measured by hand" in path.read_text(),
        "u" in tiers,
    )


def test_prefix_cache_counts_leading_items_seen_before():
    """A request repeating an earlier one's items and adding more gets the repeated ones cached."""
    cache = PrefixCache()
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    second = [*first, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"}]
    edited = [{"role": "system", "content": "s"}, {"role": "user", "content": "changed"}]
    got = [
        cache.lookup_and_store("m", first, [10, 20]),
        cache.lookup_and_store("m", second, [10, 20, 30, 40]),
        cache.lookup_and_store("other-model", second, [10, 20, 30, 40]),
        cache.lookup_and_store("m", edited, [10, 25]),
    ]
    assert [0, 30, 0, 10] == got


async def _chat(client: httpx.AsyncClient, url: str, messages: list[dict]) -> tuple[dict, float]:
    t0 = time.perf_counter()
    r = await client.post(
        f"{url}/chat/completions", json={"model": "m", "messages": messages, "stream": False}
    )
    return r.json()["usage"], time.perf_counter() - t0


async def test_sim_reports_and_paces_a_cached_prefix():
    """The simulator reports a repeated prefix as cached_tokens and does not prefill it again."""
    profile = SpeedProfile(base_latency_s=0.0, prefill_tps=2000, output_tps=5000)
    long_text = "word " * 1500
    first = [{"role": "user", "content": long_text}]
    second = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]
    async with SimServer(profile=profile, filler_tokens=4) as sim, httpx.AsyncClient() as c:
        u1, t1 = await _chat(c, sim.base_url, first)
        u2, t2 = await _chat(c, sim.base_url, second)
    assert (0, u1["prompt_tokens"]) == (
        u1["prompt_tokens_details"]["cached_tokens"],
        u2["prompt_tokens_details"]["cached_tokens"],
    )
    # the first pays 0.75 s of prefill; the second only its 12 fresh tokens (6 ms)
    assert (True, True) == (t1 >= u1["prompt_tokens"] / 2000, t1 - t2 > 0.6)


def test_trace_header_keeps_the_speed_model_fields(tmp_path):
    """A trace whose tier profile has slopes loads them, so what-if and compare use them."""
    import orjson

    from agentloop.trace.reader import load_trace
    from tests.conftest import ROOT

    lines = (ROOT / "traces/reference/checkout-timeouts-sim-standard.jsonl").read_bytes()
    head, rest = lines.split(b"\n", 1)
    rec = orjson.loads(head)
    rec["tier"]["profile"].update(tpot_ms_per_1k=8.5, prefill_ms_per_1k=1.5)
    path = tmp_path / "t.jsonl"
    path.write_bytes(orjson.dumps(rec) + b"\n" + rest)
    p = load_trace(path).run.tier.profile
    assert (8.5, 1.5, None) == (p.tpot_ms_per_1k, p.prefill_ms_per_1k, p.cached_prefill_tps)


def test_trace_header_names_a_bad_speed_model_field(tmp_path):
    """A negative slope in a trace header is refused with the field's name, not used."""
    import orjson

    from agentloop.errors import TraceFileError
    from agentloop.trace.reader import load_trace
    from tests.conftest import ROOT

    lines = (ROOT / "traces/reference/checkout-timeouts-sim-standard.jsonl").read_bytes()
    head, rest = lines.split(b"\n", 1)
    rec = orjson.loads(head)
    rec["tier"]["profile"]["prefill_ms_per_1k"] = -2
    path = tmp_path / "t.jsonl"
    path.write_bytes(orjson.dumps(rec) + b"\n" + rest)
    with pytest.raises(TraceFileError) as err:
        load_trace(path)
    assert "tier.profile.prefill_ms_per_1k" in str(err.value)
