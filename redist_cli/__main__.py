"""``python -m redist_cli``: the ``redist`` command without the console script."""

import sys

from redist_cli.main import main

sys.exit(main())
