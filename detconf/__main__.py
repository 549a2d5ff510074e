"""``python -m detconf``: the ``detconf`` command."""
from detconf.cli import main

raise SystemExit(main())
