"""``python -m hivemind_memory.worker.cli``: the ``hivemind`` command."""

import sys

from hivemind_memory.worker.cli.main import main

sys.exit(main())
