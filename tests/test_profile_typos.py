"""Profile typos and empty secrets: the message names the key as written, its line and the fix.

docs/profiles.md, "Errors": an unknown key close to a valid one says "did you mean"; a required
key missing next to such a typo is reported at the typo's line; a secret's variable that is set
but empty is an error (never sent, never shown).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hopbench import ProfileError, _exit
from hopbench.config._gate_spec import did_you_mean
from hopbench.config._profile import parse_profile
from hopbench._toml import Table, closest_key, parse_toml
from hopbench.cli import main

GOOD = """[run]
duration_s = 1

[load]
concurrency = 2

[[scenario]]
protocol = "chat"
"""


def _error(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ProfileError) as info:
        parse_profile(text, "p.toml", env=env or {})
    return str(info.value)


def test_unknown_key_suggests_the_closest_valid_key() -> None:
    # breaker: "[run] duraton_s = 5" only listed every [run] key
    msg = _error(GOOD.replace("duration_s = 1", "duraton_s = 5"))
    assert msg.startswith("p.toml:2: run.duraton_s: unknown key; did you mean 'duration_s'? (expected one of: ")
    assert "warmup_s" in msg  # the list of valid keys is kept


def test_unknown_key_with_nothing_close_keeps_the_plain_message() -> None:
    msg = _error(GOOD.replace("duration_s = 1", "duration_s = 1\nzzzz = 5"))
    assert msg.startswith("p.toml:3: run.zzzz: unknown key (expected one of: ")
    assert "did you mean" not in msg


def test_unknown_key_case_only_difference_is_suggested() -> None:
    msg = _error(GOOD.replace("duration_s = 1", "duration_s = 1\nSeed = 3"))
    assert "p.toml:3: run.Seed: unknown key; did you mean 'seed'?" in msg


def test_unknown_key_does_not_suggest_a_key_already_written() -> None:
    # both written: "did you mean duration_s" would point at a key that is there
    t = Table({"duration_s": 1, "duraton_s": 2}, None, ("run",))
    t.number("duration_s", None)
    with pytest.raises(ProfileError) as info:
        t.done()
    assert "did you mean" not in str(info.value)


def test_unknown_table_suggests_the_closest_table() -> None:
    msg = _error(GOOD.replace("[load]", "[lod]"))
    assert msg.startswith("p.toml:4: lod: unknown table; did you mean 'load'? (expected one of: run, load,")


def test_missing_required_key_reports_the_typo_at_its_own_line() -> None:
    # breaker: "p.toml:5: load.concurrency: required key is missing", line 6 never named
    text = GOOD.replace("concurrency = 2", "mode = \"concurrency\"\nconcurency = 4")
    msg = _error(text)
    assert msg == ("p.toml:6: load.concurency: unknown key; did you mean 'concurrency'? "
                   "(load.concurrency is required and missing)")


def test_missing_required_key_in_an_array_table_names_the_typo() -> None:
    msg = _error(GOOD.replace('protocol = "chat"', 'protocl = "chat"'))
    assert msg == ("p.toml:8: scenario[0].protocl: unknown key; did you mean 'protocol'? "
                   "(scenario[0].protocol is required and missing)")


def test_missing_required_key_without_a_close_typo_is_unchanged() -> None:
    msg = _error(GOOD.replace("concurrency = 2", "mode = \"rate\"\narrival = \"constant\""))
    assert msg == "p.toml:4: load.rate_rps: required key is missing"


def test_closest_key_rules() -> None:
    assert closest_key("duraton_s", ["duration_s", "warmup_s"]) == "duration_s"
    assert closest_key("CONCURRENCY", ["concurrency"]) == "concurrency"
    assert closest_key("zzzz", ["duration_s"]) is None
    # the gate's hint keeps its own format and shares the rule
    assert did_you_mean("p9", ["p99", "p90"]) == ": did you mean 'p99'?"
    assert did_you_mean("zzz", ["p99"]) == ""


def test_table_done_hint_from_a_parsed_document() -> None:
    doc = parse_toml("[a]\nother = 1\nkepp = 2\n", "x.toml")
    t = doc.root().table("a")
    t.int("keep", 0)
    t.int("other", 0)
    with pytest.raises(ProfileError) as info:
        t.done()
    assert str(info.value).startswith("x.toml:3: a.kepp: unknown key; did you mean 'keep'?")


SECRET_TABLES = [
    ('header_env = { "x-tenant" = "KEY" }', "target.header_env.x-tenant: environment variable KEY is set but empty"),
    ('api_key_env = "KEY"', "target.api_key_env: environment variable KEY is set but empty"),
]


@pytest.mark.parametrize(("table", "expected"), SECRET_TABLES)
@pytest.mark.parametrize("value", ["", "  \t"])
def test_secret_variable_set_but_empty_is_an_error(table: str, expected: str, value: str) -> None:
    # breaker: KEY= hopbench validate p.toml passed, and the run sent an empty key
    msg = _error(GOOD + f"\n[target]\n{table}\n", env={"KEY": value})
    assert msg.startswith(f"p.toml:11: {expected}")


def test_secret_variable_unset_wording_is_matched() -> None:
    msg = _error(GOOD + '\n[target]\nheader_env = { "x-tenant" = "KEY" }\n')
    assert msg.startswith("p.toml:11: target.header_env.x-tenant: environment variable KEY is not set")


def test_arm_secret_variable_set_but_empty_is_an_error() -> None:
    text = GOOD + ('\n[[arm]]\nname = "a"\nurl = "http://127.0.0.1:9"\napi_key_env = "KEY"\n'
                   '[[arm]]\nname = "b"\nurl = "http://127.0.0.1:9"\n')
    msg = _error(text, env={"KEY": ""})
    assert "arm[0].api_key_env: environment variable KEY is set but empty" in msg


@pytest.mark.parametrize("command", ["validate", "run"])
def test_cli_empty_secret_variable_exits_2_naming_header_variable_and_line(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(GOOD + '\n[target]\nheader_env = { "X-Api-Key" = "HB_TYPO_KEY" }\n', encoding="utf-8")
    monkeypatch.setenv("HB_TYPO_KEY", "")
    monkeypatch.chdir(tmp_path)
    argv = [command, str(profile)] + (["--out", str(tmp_path / "results")] if command == "run" else [])
    assert main(argv) == _exit.EXIT_INPUT == 2
    err = capsys.readouterr().err
    assert (f"{profile}:11: target.header_env.X-Api-Key: environment variable HB_TYPO_KEY is set but empty"
            in err)
    assert not (tmp_path / "results").exists()


def test_scrape_header_variable_set_but_empty_is_an_error() -> None:
    text = GOOD + '\n[[scrape]]\nurl = "http://127.0.0.1:9/metrics"\n[scrape.header_env]\nx-key = "KEY"\n'
    msg = _error(text, env={"KEY": ""})
    assert msg.startswith("p.toml:13: scrape[0].header_env.x-key: environment variable KEY is set but empty")
