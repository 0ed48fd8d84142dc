"""``python -m sidecar`` is the same as the ``runaway-sidecar`` console script."""

from sidecar.cli import main

raise SystemExit(main())
