"""hopbench: a streaming load tester for LLM gateways.

Public surface (implementation lives in underscore modules and subpackages)::

    hopbench.sse          SSEScanner, SSEEvent, SSEComment: the zero-copy SSE scanner
    hopbench.protocols    new_decoder, decode_stream, StreamResult, observation records
    hopbench.emulator     the built-in gateway emulator (EmulatorConfig, EmbeddedEmulator)

and, from this package: the error tree, ``load_profile``, ``parse_profile`` and
``run_profile``. Everything but the error tree and the version loads on first use
(hopbench/_lazy.py), so ``import hopbench`` (the console script's first step) costs
milliseconds and a Ctrl-C during start-up meets the command line's own handler.
"""


from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._errors import (
    HopbenchError,
    ProfileError,
    ResultsError,
    RunAborted,
    SSEError,
    UsageError,
)
from ._lazy import lazy_exports as _lazy_exports
from ._version import __version__

if _TYPE_CHECKING:  # for type checkers and readers; at run time see __getattr__
    from .config._profile import load_profile, parse_profile
    from .config._records import Profile
    from .driver._single import run_profile
    from .protocols import StreamResult, decode_stream, new_decoder
    from .sse import SSEComment, SSEEvent, SSEScanner

#: public name -> the module that defines (or re-exports) it
_WHERE: dict[str, str] = {
    "load_profile": "config._profile",
    "parse_profile": "config._profile",
    "Profile": "config._records",
    "run_profile": "driver._single",
    "StreamResult": "protocols",
    "decode_stream": "protocols",
    "new_decoder": "protocols",
    "SSEComment": "sse",
    "SSEEvent": "sse",
    "SSEScanner": "sse",
}

__getattr__, __dir__ = _lazy_exports(__name__, _WHERE, globals())

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
