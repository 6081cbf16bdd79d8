"""``hopbench compare A B`` on two check folders (hopbench.check._compare): the checks whose status
changed first, worse before better; --fail-on-worse; the formats; a check folder against a run's."""

from __future__ import annotations

import json
from pathlib import Path

from hopbench.check import CheckResult, CheckRun, write_outputs
from hopbench.check._compare import compare_checks
from hopbench.config._contract_spec import ContractSpec
from hopbench.config._profile import parse_profile

_PROFILE = parse_profile('[run]\nrequests = 1\n[load]\nconcurrency = 1\n[target]\nurl = "http://127.0.0.1:1"\n'
                         '[[scenario]]\nname = "c"\nprotocol = "chat"\nmodel = "m"\nprompts = ["x"]\n', env={})


def _folder(tmp: Path, name: str, statuses: dict[str, str]) -> Path:
    out = tmp / name
    out.mkdir()
    results = [CheckResult(i, s, "e", f"{i} {s} in {name}") for i, s in statuses.items()]  # type: ignore[arg-type]
    write_outputs(out, CheckRun(results, 0, ContractSpec(), _PROFILE, 1.0))
    return out


def test_compare_checks_changed_first_worse_before_better(tmp_path: Path) -> None:
    a = _folder(tmp_path, "a", {"events_unchanged": "pass", "no_buffering": "fail", "keepalive_cadence": "pass",
                                "sdk_parse": "skip", "retries": "pass"})
    b = _folder(tmp_path, "b", {"events_unchanged": "pass", "no_buffering": "pass", "keepalive_cadence": "fail",
                                "sdk_parse": "inconclusive", "retries": "pass"})
    c = compare_checks(a, b)
    assert [(r.id, r.change) for r in c.rows] == [
        ("keepalive_cadence", "worse"), ("no_buffering", "better"), ("sdk_parse", "changed"),
        ("events_unchanged", "same"), ("retries", "same")]
    assert c.any_worse and c.rows[0].observed == "keepalive_cadence fail in b"
    text = c.render("text")
    assert "3 of 5 checks changed" in text and "now: keepalive_cadence fail in b" in text
    assert "| `keepalive_cadence` | pass | fail | worse |" in c.render("markdown")
    assert json.loads(c.render("json"))["checks"][0] == {"id": "keepalive_cadence", "base": "pass",
                                                          "candidate": "fail", "change": "worse",
                                                          "observed": "keepalive_cadence fail in b"}


def test_compare_command_on_check_folders(tmp_path: Path, hopbench_cli) -> None:  # type: ignore[no-untyped-def]
    a = _folder(tmp_path, "a", {"events_unchanged": "pass", "no_buffering": "pass"})
    b = _folder(tmp_path, "b", {"events_unchanged": "pass", "no_buffering": "fail"})
    r = hopbench_cli(["compare", str(a), str(b), "--fail-on-worse"])
    assert r.returncode == 1 and r.stdout.splitlines()[1].split()[0] == "check", r.stdout + r.stderr
    assert r.stdout.splitlines()[2].split() == ["no_buffering", "pass", "fail", "worse"]
    assert hopbench_cli(["compare", str(b), str(a), "--fail-on-worse"]).returncode == 0  # better is no failure
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text("{}")
    r = hopbench_cli(["compare", str(a), str(run_dir)])
    assert r.returncode == 2 and "expected a check folder (contract.json) like the other one" in r.stderr


def test_report_html_of_a_check_folder(tmp_path: Path, hopbench_cli) -> None:  # type: ignore[no-untyped-def]
    """`hopbench report CHECK_DIR` (and `hopbench check` at its end): the streaming contract section,
    failures first, every text escaped."""
    a = _folder(tmp_path, "a", {"events_unchanged": "pass", "no_buffering": "fail", "sdk_parse": "skip"})
    doc = json.loads((a / "contract.json").read_text())
    doc["checks"][1]["observed"] = "<script>x</script> held 208.8 ms"
    (a / "contract.json").write_text(json.dumps(doc))
    r = hopbench_cli(["report", str(a)])
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith(" KB)") and "(0.0 MB)" not in r.stdout  # a small page in KB (issue 39)
    page = (a / "report.html").read_text()
    assert "<h2>Streaming contract</h2>" in page and "<script>x</script>" not in page
    assert "&lt;script&gt;x&lt;/script&gt; held 208.8 ms" in page
    assert page.index("no_buffering") < page.index("events_unchanged") < page.index("sdk_parse")  # failures first
    assert "1 passed, 1 failed, 0 inconclusive, 1 skipped" in page
