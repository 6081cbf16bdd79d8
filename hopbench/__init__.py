"""hopbench: a streaming load tester for LLM gateways.

Public surface (implementation lives in underscore modules and subpackages)::

    hopbench.sse          SSEScanner, SSEEvent, SSEComment: the zero-copy SSE scanner
    hopbench.protocols    new_decoder, decode_stream, StreamResult, observation records
    hopbench.emulator     the built-in gateway emulator (EmulatorConfig, EmbeddedEmulator)

and, from this package: the error tree, ``load_profile`` and ``run_profile``.
"""

from ._errors import (
    HopbenchError,
    ProfileError,
    ResultsError,
    RunAborted,
    SSEError,
    UsageError,
)
from .config._profile import load_profile, parse_profile
from .config._records import Profile
from .protocols import StreamResult, decode_stream, new_decoder
from ._version import __version__
from .sse import SSEComment, SSEEvent, SSEScanner

__all__ = [
    "__version__",
    "HopbenchError",
    "Profile",
    "ProfileError",
    "ResultsError",
    "RunAborted",
    "SSEComment",
    "SSEError",
    "SSEEvent",
    "SSEScanner",
    "StreamResult",
    "UsageError",
    "decode_stream",
    "load_profile",
    "new_decoder",
    "parse_profile",
    "run_profile",
]


def __getattr__(name: str) -> object:
    # run_profile pulls in trio, httpx and the emulator: import it on first use
    # so that `import hopbench` (and the pure core) stays light.
    if name == "run_profile":
        from .driver._single import run_profile

        return run_profile
    raise AttributeError(f"module 'hopbench' has no attribute {name!r}")
