"""hopbench: a streaming load tester for LLM gateways.

Public surface (everything else lives in underscore modules or subpackages)::

    hopbench.sse          SSEScanner, SSEEvent, SSEComment
    hopbench.protocols    new_decoder, decode_stream, StreamResult, observations
    hopbench.emulator     the built-in gateway emulator
"""

from ._errors import (
    HopbenchError,
    ProfileError,
    ResultsError,
    RunAborted,
    SSEError,
    UsageError,
)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "HopbenchError",
    "ProfileError",
    "ResultsError",
    "RunAborted",
    "SSEError",
    "UsageError",
]
