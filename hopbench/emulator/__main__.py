"""``python -m hopbench.emulator``: the same as ``hopbench serve``."""

from ._serve import serve_main

raise SystemExit(serve_main())
