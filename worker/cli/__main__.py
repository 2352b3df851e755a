"""``python -m hivemind_memory.worker.cli``: the ``hivemind`` command."""

import sys

from hivemind_memory.worker.cli import run

sys.exit(run())
