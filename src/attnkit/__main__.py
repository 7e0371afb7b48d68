"""``python -m attnkit ...`` is the ``attnkit`` command."""
from attnkit.cli.main import main

raise SystemExit(main())
