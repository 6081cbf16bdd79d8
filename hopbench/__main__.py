"""``python -m hopbench``: the same as the ``hopbench`` console script."""

from .cli import main

raise SystemExit(main())
