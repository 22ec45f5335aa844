"""``python -m bucketloader.cli``."""

import sys

from bucketloader.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
