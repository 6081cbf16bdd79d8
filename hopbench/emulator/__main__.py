"""``python -m hopbench.emulator``: the same as ``hopbench serve``."""

import signal

from ._serve import serve_main

# EmbeddedEmulator starts us with SIGINT/SIGTERM blocked (so no signal can land
# between its fork and its bookkeeping): take them back before anything else.
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

raise SystemExit(serve_main())
