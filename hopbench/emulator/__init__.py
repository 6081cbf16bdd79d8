"""The built-in HopBase-style gateway emulator (tracker issue 4).

Speaks Chat Completions, Responses and Anthropic Messages exactly as
docs/protocols.md describes, with seeded timing and faults, and writes
ground truth (one JSON line per request) that tests and benchmarks compare
hopbench's measurements against. Reference: docs/emulator.md.

Public surface::

    EmulatorConfig      validated config (from_table / from_mapping / to_mapping)
    EmbeddedEmulator    a child-process emulator for one run (context manager)
    serve_main          ``hopbench serve`` (and ``python -m hopbench.emulator``)
    serve               the async server (uvicorn), for use inside an asyncio program

The server is uvicorn (httptools, uvloop when installed) in its own process for
``hopbench serve`` and the embedded target; the app itself is anyio.
"""

from ._app import EmulatorApp
from ._behaviour import VOCABULARY, input_tokens_of
from ._config import FAULT_NAMES, MIDSTREAM_CODES, Behaviour, EmulatorConfig, FaultConfig
from ._embedded import EmbeddedEmulator, EmulatorStartError
from ._record import GroundTruth, read_ground_truth
from ._serve import serve, serve_main
from ._wire import KEEPALIVE, STREAM_INTERRUPTED

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
    "serve_main",
]
