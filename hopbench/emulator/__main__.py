"""``python -m hopbench.emulator``: the same as ``hopbench serve`` (arguments parsed by hopbench.cli)."""

import ctypes
import os
import signal
import sys

from ..cli import main
from ._embedded import PARENT_PID_ENV

# EmbeddedEmulator starts us with SIGINT/SIGTERM blocked (so no signal can land
# between its fork and its bookkeeping): take them back before anything else.
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _stop_with_parent(parent: int) -> None:
    """Linux: SIGTERM us (a graceful stop) when the hopbench run that started us
    dies, even by SIGKILL, so no emulator outlives its run (prctl(2),
    PR_SET_PDEATHSIG). Elsewhere the run's own cleanup is all there is."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the prctl took effect
        raise SystemExit(0)


_parent = os.environ.pop(PARENT_PID_ENV, "")
if _parent.isdigit():
    _stop_with_parent(int(_parent))

raise SystemExit(main(["serve", *sys.argv[1:]]))
