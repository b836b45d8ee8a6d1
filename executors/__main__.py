"""``python -m executors`` runs the ``executors`` command."""

from __future__ import annotations

import sys

from ._cli import main

sys.exit(main())
