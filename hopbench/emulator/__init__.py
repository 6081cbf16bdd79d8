"""The built-in HopBase-style gateway emulator (tracker issue 4).

Speaks Chat Completions, Responses and Anthropic Messages exactly as
docs/protocols.md describes, with seeded timing and faults, and writes
ground truth (one JSON line per request) that tests and benchmarks compare
hopbench's measurements against. Reference: docs/emulator.md.

Public surface::

    EmulatorConfig      validated config (from_table / from_mapping / to_mapping)
    EmbeddedEmulator    a child-process emulator for one run (context manager)
    serve_command       ``hopbench serve`` (and ``python -m hopbench.emulator``), arguments
                        parsed by ``hopbench.cli``
    serve               the async server (uvicorn), for use inside an asyncio program

The server is uvicorn (httptools, uvloop when installed) in its own process for
``hopbench serve`` and the embedded target; the app itself is anyio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and readers; at run time see __getattr__
    from ._app import EmulatorApp
    from ._behaviour import VOCABULARY, input_tokens_of
    from ._config import FAULT_NAMES, MIDSTREAM_CODES, Behaviour, EmulatorConfig, FaultConfig
    from ._embedded import EmbeddedEmulator, EmulatorStartError
    from ._record import GroundTruth, read_ground_truth
    from ._serve import serve, serve_command
    from ._wire import KEEPALIVE, STREAM_INTERRUPTED

# Public name -> the submodule that defines it. Imported on first use (PEP 562):
# validating a profile needs only ``_config``, and must not pay for uvicorn,
# anyio and httpx (about 0.2 s), which ``_serve``, ``_app`` and ``_embedded`` load.
_WHERE: dict[str, str] = {
    "EmulatorApp": "_app",
    "VOCABULARY": "_behaviour", "input_tokens_of": "_behaviour",
    "FAULT_NAMES": "_config", "MIDSTREAM_CODES": "_config", "Behaviour": "_config",
    "EmulatorConfig": "_config", "FaultConfig": "_config",
    "EmbeddedEmulator": "_embedded", "EmulatorStartError": "_embedded",
    "GroundTruth": "_record", "read_ground_truth": "_record",
    "serve": "_serve", "serve_command": "_serve",
    "KEEPALIVE": "_wire", "STREAM_INTERRUPTED": "_wire",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

__all__ = [
    "Behaviour",
    "EmbeddedEmulator",
    "EmulatorApp",
    "EmulatorConfig",
    "EmulatorStartError",
    "FAULT_NAMES",
    "FaultConfig",
    "GroundTruth",
    "KEEPALIVE",
    "MIDSTREAM_CODES",
    "STREAM_INTERRUPTED",
    "VOCABULARY",
    "input_tokens_of",
    "read_ground_truth",
    "serve",
    "serve_command",
]
