"""``python -m sidecar`` is the same as the ``runaway-sidecar`` console script."""

from sidecar.service.cli import main

raise SystemExit(main())
