"""report.html's Workload section (lengths, prompt cache, session turns) from summary scopes."""

from __future__ import annotations

from hopbench.report._section_workload import workload_section


def test_report_workload_section_shows_lengths_cache_and_turns() -> None:
    scopes = {
        "s": {"lengths": {"input": {"streams": 3, "requested_mean": 512.0, "reported_mean": 517.12, "ratio": 1.01},
                          "output": {"streams": 3, "requested_mean": 20.0, "reported_mean": 26.0, "ratio": 1.3,
                                     "over_max": 2}},
              "cache": {"streams": 3, "prompt_tokens": 1536, "cached_tokens": 512, "hit_ratio": 1 / 3,
                        "implied_tokens": 512, "implied_hit_ratio": 1 / 3},
              "turns": [{"turn": 1, "streams": 2, "completed": 2, "ttft_mean_ms": 40.5, "input_tokens_mean": 200.0,
                         "cached_ratio": None},
                        {"turn": 2, "streams": 1, "completed": 1, "ttft_mean_ms": 61.25, "input_tokens_mean": 480.0,
                         "cached_ratio": 0.5}]},
        "all": {"counters": {}},
    }
    text = "".join(workload_section([("", scopes)]))
    assert "<h2>Workload</h2>" in text
    assert "×1.010" in text and "517.1" in text                          # lengths and their ratio
    assert "over max_tokens" in text and '×1.300</td><td class="">2</td>' in text  # streams past the cap
    assert "33.3 %" in text and "implied by the trace" in text           # the cache, measured and implied
    assert 'id="fig-turns"' in text and "61.25" in text and "50.0 %" in text   # TTFT by turn
    # two runs are tagged; a run without workload figures has no section
    assert "A s" in "".join(workload_section([("A", scopes), ("B", {"all": {}})]))
    assert workload_section([("", {"x": {"counters": {"completed": 3}}, "all": {}})]) == []
