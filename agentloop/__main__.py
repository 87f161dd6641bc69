"""``python -m agentloop``: the same command line as the ``agentloop`` script."""

from __future__ import annotations

import sys

from agentloop.cli import main

if __name__ == "__main__":
    sys.exit(main())
