"""`python -m lib ...`: the queue's command line (see lib/cli.py)."""
import sys

from lib.cli import main

if __name__ == "__main__":
    sys.exit(main())
