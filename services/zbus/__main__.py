"""``python -m zbus``: the ``zbus`` command."""

from zbus.cli import main

raise SystemExit(main())
