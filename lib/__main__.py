"""`python -m lib ...`: the queue's command line (see lib/cli/main.py)."""
import sys

from lib.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
