"""``python -m mhalearn.cli``: the ``mhalearn`` command."""

import sys

from . import main

sys.exit(main())
