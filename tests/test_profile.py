"""Profiles: every example runs as-is, and bad input names file, line and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hopbench import ProfileError
from hopbench.config._profile import load_profile, parse_profile
from hopbench.config._scenario_spec import request_headers

ROOT = Path(__file__).resolve().parent.parent
MINIMAL = """
[run]
duration_s = 1
[load]
concurrency = 2
[[scenario]]
protocol = "chat"
"""
MODEL = '\nmodel = "gpt-x"\n'


@pytest.mark.parametrize("path", sorted((ROOT / "profiles").glob("*.toml")), ids=lambda p: p.name)
def test_profile_examples_validate(path: Path) -> None:
    profile = load_profile(path)
    assert profile.scenarios
    # every example runs as-is on the emulator: as the target, or behind a gateway ([upstream])
    assert profile.target.embedded or profile.upstream is not None
    assert profile.emulator_config is not None


def test_profile_defaults_and_bodies() -> None:
    p = parse_profile(MINIMAL, "m.toml")
    assert p.run.duration_ns == 1_000_000_000
    assert p.run.timeouts.idle_ns == 30_000_000_000
    assert p.target.embedded
    body = json.loads(p.scenarios[0].bodies[0])
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert p.scenarios[0].name == "chat-hopbench-fast"


def test_profile_max_event_bytes_default_and_set() -> None:
    assert parse_profile(MINIMAL, "m.toml").run.max_event_bytes == 4 * 1024 * 1024
    p = parse_profile(MINIMAL.replace("duration_s = 1", "duration_s = 1\nmax_event_bytes = 16777216"), "m.toml")
    assert p.run.max_event_bytes == 16 * 1024 * 1024


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (MINIMAL.replace("concurrency = 2", "concurrency = -4"),
         "m.toml:5: load.concurrency: expected a positive integer"),
        (MINIMAL.replace("duration_s = 1", "duration_s = 1\nfoo = 2"),
         "m.toml:4: run.foo: unknown key"),
        (MINIMAL.replace('"chat"', '"chatty"'),
         "m.toml:7: scenario[0].protocol: expected one of 'chat', 'responses', 'messages', got 'chatty'"),
        (MINIMAL.replace("duration_s = 1", ""), "m.toml:2: run: expected run.duration_s or run.requests"),
        (MINIMAL + '[target]\nheaders = { Authorization = "Bearer sk-x" }\n',
         "m.toml:9: target.headers.Authorization: secret headers may not be written"),
        (MINIMAL + '[target]\napi_key_env = "HOPBENCH_TEST_UNSET_VAR"\n',
         "target.api_key_env: environment variable HOPBENCH_TEST_UNSET_VAR is not set"),
        (MINIMAL + '[target]\nurl = "ftp://x"\n', "target.url: expected an http:// or https:// base URL"),
        # breaker: port 0 was accepted, then every connection went to port 80
        (MINIMAL + '[target]\nurl = "http://127.0.0.1:0"\n', "target.url: invalid port in 'http://127.0.0.1:0': "
         "expected 1 to 65535, got 0"),
        (MINIMAL + '[[scenario]]\nprotocol = "chat"\n', "scenario[1].name: expected a unique scenario name"),
        (MINIMAL.replace("concurrency = 2", 'concurrency = "2"'),
         "load.concurrency: expected a positive integer (at most 1000000), got '2' (a string)"),
        (MINIMAL.replace("concurrency = 2", "concurrency = 2\nrate_rps = 3"),
         'load.rate_rps: only valid with load.mode = "rate"'),
        ("[run\n", "m.toml:1: invalid TOML"),
        # breaker: "m.toml:4: invalid TOML: Cannot overwrite a value" named neither the key nor its first line
        (MINIMAL.replace("duration_s = 1", "duration_s = 1\nseed = 1\nduration_s = 2"),
         "m.toml:5: run.duration_s: given twice (first at line 3): TOML allows a key once per table; keep one"),
        (MINIMAL + "[load]\nrate_rps = 1\n", "m.toml:8: load: table declared twice (first at line 4): TOML allows a "
         "table once; merge the two"),
        (MINIMAL + '[[scenario]]\nname = "b"\nname = "c"\n',
         "m.toml:10: scenario[1].name: given twice (first at line 9)"),
        (MINIMAL + '[target]\nheaders = { X-A = "1", X-A = "2" }\n',
         "m.toml:9: target.headers.X-A: given twice in one inline table"),
        (MINIMAL.replace("duration_s = 1", "duration_s = 1\nwarmup_s = 2"),
         "run.warmup_s: expected less than run.duration_s"),
        (MINIMAL.replace("duration_s = 1", "duration_s = 1\ngrace_s = 1e300"),
         "m.toml:4: run.grace_s: expected a number from 0 to 1e+09, got 1e+300"),
        # breaker: "expected a positive number, got 1000000000000.0" (the bound went unsaid)
        (MINIMAL.replace("duration_s = 1", "duration_s = 1e12"),
         "m.toml:3: run.duration_s: expected a positive number (at most 1e+09), got 1000000000000.0"),
        # breaker: 1e-300 passed validation, then the schedule's gap overflowed (exit 3, a traceback)
        (MINIMAL.replace("concurrency = 2", 'mode = "rate"\nrate_rps = 1e-300'),
         "load.rate_rps: expected a number from 1e-06 to 1e+09, got 1e-300"),
        # breaker: "stage[0]: expected a load: ... got none" did not name the misspelt key
        (MINIMAL.replace("duration_s = 1", "duration_s = 1\n[[stage]]\nrate_rsp = 5\nduration_s = 1"),
         "m.toml:5: stage[0].rate_rsp: unknown key; did you mean 'rate_rps'?"),
        (MINIMAL.replace("duration_s = 1", "duration_s = 1\n[[stage]]\nrate_rps = 1e-7\nduration_s = 1"),
         "stage[0].rate_rps: expected a number from 1e-06 to 1e+09, got 1e-07"),
        (MINIMAL.replace("duration_s = 1", "duration_s = 1\nmax_event_bytes = 0"),
         "m.toml:4: run.max_event_bytes: expected a positive integer (at most 1073741824), got 0"),
        (MINIMAL.replace("duration_s = 1", "duration_s = 1\nmax_event_bytes = 1.5"),
         "m.toml:4: run.max_event_bytes: expected a positive integer (at most 1073741824), got 1.5"),
    ],
)
def test_profile_bad_input_names_file_line_and_key(text: str, expected: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(text, "m.toml", env={})
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ('{ "X-A" = "a\\nb" }', "m.toml:9: target.headers.X-A: the value holds a control character"),
        ('{ "X-A" = "a\\r\\nX-B: 1" }', "target.headers.X-A: the value holds a control character"),
        ('{ "X A" = "1" }', 'target.headers."X A": \'X A\' is not a valid header name'),
        ('{ "X-A" = "caf\u00e9 \u4f60" }', "outside ASCII"),
        # breaker: Latin-1 passed validation, then httpx (ASCII only) crashed the run (exit 3)
        ('{ "X-A" = "caf\u00e9" }', "target.headers.X-A: the value holds characters outside ASCII"),
    ],
)
def test_profile_headers_must_be_sendable(headers: str, expected: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(MINIMAL + f"[target]\nheaders = {headers}\n", "m.toml", env={})
    assert expected in str(info.value)


_SECRET_NAMES = ["Authorization", "proxy-authorization", "Cookie", "set-cookie", "x-api-key", "api-key",
                 "X-Goog-Api-Key", "X-Auth-Token", "Ocp-Apim-Subscription-Key", "X-Session-Token",
                 "x-portkey-virtual-key", "X-Amz-Security-Token", "X-Client-Secret", "X-Session-Id",
                 "X-Hub-Signature", "X-Amz-Credential", "Helicone-Auth", "X-Db-Password", "apikey",
                 "x-litellm-api-key", "WWW-Authenticate"]
_PLAIN_NAMES = ["X-Request-Id", "Content-Type", "Accept", "User-Agent", "anthropic-version", "anthropic-beta",
                "openai-beta", "OpenAI-Organization", "OpenAI-Project", "X-Stainless-Retry-Count",
                "X-Stainless-Arch", "x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-remaining",
                "x-litellm-key-spend", "x-litellm-attempted-retries", "x-portkey-provider", "Idempotency-Key",
                "Keep-Alive", "x-cache"]


def test_profile_is_secret_header_names() -> None:
    from hopbench.config._fields import is_secret_header

    assert [n for n in _SECRET_NAMES if not is_secret_header(n)] == []
    assert [n for n in _SECRET_NAMES if not is_secret_header(n.upper())] == []
    assert [n for n in _PLAIN_NAMES if is_secret_header(n)] == []


@pytest.mark.parametrize("name", ["X-Goog-Api-Key", "X-Auth-Token", "Ocp-Apim-Subscription-Key",
                                  "X-Session-Token", "x-portkey-virtual-key"])
def test_profile_secret_header_written_out_is_refused(name: str) -> None:
    # breaker: these literal values were accepted, then recorded in summary.json
    # (the profile copy) and report.html
    with pytest.raises(ProfileError) as info:
        parse_profile(MINIMAL + f'[target]\nheaders = {{ "{name}" = "AIzaSy-literal-key-42" }}\n', "m.toml",
                      env={})
    msg = str(info.value)
    assert f"m.toml:9: target.headers.{name}: secret headers may not be written in a profile" in msg
    assert f'header_env = {{ "{name}" = "MY_VAR" }}' in msg and "AIzaSy" not in msg
    # the environment form is the way
    p = parse_profile(MINIMAL + f'[target]\nheader_env = {{ "{name}" = "HB_H" }}\n', "m.toml",
                      env={"HB_H": "AIzaSy-literal-key-42"})
    assert request_headers(p.target, "chat", env={"HB_H": "AIzaSy-literal-key-42"})[name.lower()] \
        == "AIzaSy-literal-key-42"


def test_profile_plain_headers_may_be_written() -> None:
    table = ", ".join(f'"{n}" = "v1"' for n in _PLAIN_NAMES)
    p = parse_profile(MINIMAL + f"[target]\nheaders = {{ {table} }}\n", "m.toml", env={})
    assert set(p.target.headers) == set(_PLAIN_NAMES)


@pytest.mark.parametrize("name", ["X-Auth-Token", "Ocp-Apim-Subscription-Key", "X-Csrf-Token", "X-Goog-Api-Key",
                                  "Set-Cookie", "X-Session-Id", "Proxy-Authenticate"])
def test_profile_record_headers_refuses_secret_names(name: str) -> None:
    # breaker: record_headers had its own list, which let X-Auth-Token and
    # Ocp-Apim-Subscription-Key through (recorded per stream in streams.jsonl)
    text = MINIMAL.replace("duration_s = 1", f'duration_s = 1\nrecord_headers = ["{name}"]')
    with pytest.raises(ProfileError) as info:
        parse_profile(text, "m.toml", env={})
    assert f"run.record_headers: {name!r} may carry a secret and is never recorded" in str(info.value)


def test_profile_record_headers_takes_rate_limit_headers() -> None:
    names = ["x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-remaining", "x-litellm-key-spend"]
    p = parse_profile(MINIMAL.replace("duration_s = 1", f"duration_s = 1\nrecord_headers = {json.dumps(names)}"),
                      "m.toml", env={})
    assert p.run.record_headers == tuple(names)


def test_profile_sanitized_redacts_secret_header_values() -> None:
    from dataclasses import replace

    from hopbench.config._profile import sanitized

    p = parse_profile(MINIMAL + '[target]\nheaders = { "X-Team" = "blue" }\nheader_env = { "X-Auth-Token" = "HB_T" }\n',
                      "m.toml", env={"HB_T": "tok-from-env-123"})
    out = sanitized(p)
    assert out["target"]["headers"] == {"X-Team": "blue"}
    assert out["target"]["header_env"] == {"X-Auth-Token": "HB_T"}  # the variable's name, never its value
    assert "tok-from-env-123" not in json.dumps(out)
    # a profile not built by parse_profile (or by a future key) is redacted too
    raw = {**p.raw, "target": {"headers": {"X-Team": "blue", "X-Goog-Api-Key": "AIza-leak"}},
           "arm": [{"name": "a", "headers": {"Cookie": "sid=leak"}}], "scrape": [{"headers": {"X-Api-Key": "leak"}}]}
    out = sanitized(replace(p, raw=raw))
    assert "leak" not in json.dumps(out)
    assert out["target"]["headers"] == {"X-Team": "blue", "X-Goog-Api-Key": "<redacted>"}


def test_profile_secret_outside_ascii_is_refused_without_showing_it() -> None:
    # breaker: HB_KEY="\u00e9-key" validated, then every request crashed in httpx (exit 3)
    with pytest.raises(ProfileError) as info:
        parse_profile(MINIMAL + '[target]\napi_key_env = "HB_KEY"\n', "m.toml", env={"HB_KEY": "\u00e9-key"})
    assert "target.api_key_env: environment variable HB_KEY: its value holds characters outside ASCII" \
        in str(info.value)
    assert "\u00e9-key" not in str(info.value) and "newline" not in str(info.value)


def test_profile_secret_with_a_line_break_is_refused_without_showing_it() -> None:
    secret = "sk-" + "q" * 24 + "\n"  # e.g. KEY=$(cat key.txt) with its trailing newline
    for table in ('api_key_env = "K"', 'header_env = { "x-tenant" = "K" }'):
        with pytest.raises(ProfileError) as info:
            parse_profile(MINIMAL + f"[target]\n{table}\n", "m.toml", env={"K": secret})
        text = str(info.value)
        assert "environment variable K: its value holds a control character" in text
        assert secret.strip() not in text


def test_profile_missing_file() -> None:
    with pytest.raises(ProfileError, match="nope.toml: file not found"):
        load_profile("nope.toml")


def test_profile_prompts_file_jsonl(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text('"one"\n{"prompt": "two"}\n\n{"messages": [{"role": "user", "content": "3"}]}\n')
    prof = tmp_path / "x.toml"
    prof.write_text(MINIMAL + 'prompts_file = "p.jsonl"\n')
    p = load_profile(prof)
    assert len(p.scenarios[0].bodies) == 3
    (tmp_path / "p.jsonl").write_text('"one"\n{"nope": 1}\n')
    with pytest.raises(ProfileError, match=r"p.jsonl:2: expected an object"):
        load_profile(prof)


def test_profile_secrets_only_from_env() -> None:
    text = MINIMAL + MODEL + '[target]\nurl = "http://127.0.0.1:9"\napi_key_env = "K"\n' \
        '[[scenario]]\nname = "m"\nprotocol = "messages"\nmodel = "c"\n'
    p = parse_profile(text, "m.toml", env={"K": "sk-secret"})
    assert "sk-secret" not in json.dumps(p.raw)
    assert request_headers(p.target, "chat", {"K": "sk-secret"})["authorization"] == "Bearer sk-secret"
    h = request_headers(p.target, "messages", {"K": "sk-secret"})
    assert h["x-api-key"] == "sk-secret" and h["anthropic-version"]
    assert "authorization" not in h


def test_profile_emulator_table_errors_have_lines() -> None:
    with pytest.raises(ProfileError, match=r"m.toml:9: emulator.faults.http_429: expected a number from 0 to 1"):
        parse_profile(MINIMAL + "[emulator.faults]\nhttp_429 = 2\n", "m.toml")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ('[gate]\n"ttftt.p99" = "<= 1s"\n', "m.toml:9: gate.\"ttftt.p99\": unknown metric 'ttftt'"),
        ('[gate]\n"e2e.p50" = "<= 5"\n', 'm.toml:9: gate."e2e.p50"'),
        ('[gate.scenario.nope]\n"ttft.p50" = "<= 1s"\n', "gate.scenario.nope: no scenario named 'nope'"),
        ('[lod]\nconcurrency = 3\n', "m.toml:8: lod: unknown table (expected one of: run, load"),
        ('[[scenarios]]\nprotocol = "chat"\n', "tables are [[scenario]], singular"),
        ('[target]\nurl = "http://u:pw@127.0.0.1:1"\n', "target.url: credentials in the URL are not allowed"),
        ('[target]\nurl = "http://127.0.0.1:1/?api-key=sk-x"\n', "target.url: a query string or fragment is not allowed"),
    ],
)
def test_profile_gate_urls_and_tables_checked_before_load(extra: str, expected: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(MINIMAL + extra, "m.toml", env={})
    assert expected in str(info.value)


def test_profile_unknown_scenario_key_hint_names_the_workload_keys() -> None:
    # breaker: the hint left out input_tokens, dataset and replacement, which work there
    with pytest.raises(ProfileError) as e:
        parse_profile(MINIMAL + MODEL + "scrape = 5\n", "m.toml")
    msg = str(e.value)
    assert "scenario[0].scrape: unknown key" in msg
    for key in ("input_tokens", "dataset", "replacement", "prompts", "max_tokens"):
        assert key in msg, key


_NO_SCENARIO = '[run]\nduration_s = 1\n[load]\nconcurrency = 1\n[target]\nembedded = true\n'


@pytest.mark.parametrize(("text", "want"), [
    # no [[scenario]] at all: the file and the key, what to write
    (_NO_SCENARIO, r"^s\.toml: scenario: expected at least one \[\[scenario\]\] table, found none; "
                   r"write \[\[scenario\]\] followed by its keys, e\.g\. protocol = \"chat\"$"),
    # an empty array at the top level
    ("scenario = []\n" + _NO_SCENARIO, r"^s\.toml:1: scenario: expected at least one \[\[scenario\]\] table, "
                                       r"got an empty array \(scenario = \[\]\); write \[\[scenario\]\]"),
    # an empty array written below [target]: TOML makes it target.scenario
    (_NO_SCENARIO + "scenario = []\n", r"^s\.toml:7: target\.scenario: expected scenarios as top-level "
                                       r"\[\[scenario\]\] tables, got a key \"scenario\" inside \[target\] "
                                       r"\(in TOML a key written below a \[target\] header belongs to that table\)"),
    # a [scenario] table instead of an array of tables
    (_NO_SCENARIO + '[scenario]\nprotocol = "chat"\n',
     r"^s\.toml:7: scenario: expected an array of tables, got a table: write \[\[scenario\]\] \(double brackets\)"),
    # below an array of tables
    (_NO_SCENARIO + '[[scrape]]\nurl = "embedded"\nscenario = [1]\n',
     r"^s\.toml:9: scrape\[0\]\.scenario: expected scenarios as top-level \[\[scenario\]\] tables, got a key "
     r"\"scenario\" inside \[\[scrape\]\]"),
])
def test_profile_missing_or_misshapen_scenarios_say_what_is_expected(text: str, want: str) -> None:
    with pytest.raises(ProfileError, match=want):
        parse_profile(text, "s.toml", env={})


def test_profile_missing_scenario_is_exit_2_naming_the_file(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from hopbench.cli import main

    for i, text in enumerate((_NO_SCENARIO, "scenario = []\n" + _NO_SCENARIO, _NO_SCENARIO + "scenario = []\n",
                              _NO_SCENARIO + '[scenario]\nprotocol = "chat"\n')):
        path = tmp_path / f"p{i}.toml"
        path.write_text(text, encoding="utf-8")
        assert main(["validate", str(path)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and "scenario" in err and "[[scenario]]" in err, err


@pytest.mark.parametrize("key, value", [
    ("input_tokens", "100"),
    ("max_tokens", "{ dist = \"uniform\", min = 1, max = 9 }"),
    ("session", "{ turns = 2 }"),
])
def test_profile_trace_scenario_lengths_blame_the_scenario_key(tmp_path: Path, key: str, value: str) -> None:
    # breaker: a scenario's input_tokens in a trace replay was blamed on [load].mode (line 4):
    # "p.toml:4: load.mode: scenario 'chat-m' has its own lengths ..."
    (tmp_path / "t.jsonl").write_text('{"timestamp_ms": 0, "input_tokens": 4, "output_tokens": 4}\n')
    path = tmp_path / "p.toml"
    path.write_text('[run]\nduration_s = 1\n[load]\nmode = "trace"\ntrace = "t.jsonl"\n'
                    '[target]\nurl = "http://127.0.0.1:9"\n'
                    '[[scenario]]\nname = "a"\nprotocol = "chat"\nmodel = "m"\n'
                    '[[scenario]]\nname = "b"\nprotocol = "chat"\nmodel = "m"\n'
                    f'{key} = {value}\nprompts = ["p"]\n')
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(info.value).startswith(
        f"{path}:16: scenario[1].{key}: not used with load.mode = \"trace\" (line 4) (scenario 'b'): "
        "the trace gives every request's input and output tokens; expected a scenario without lengths of its own")
