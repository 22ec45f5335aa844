"""``python -m bucketloader``: the ``bucketloader`` command (:mod:`bucketloader.cli`)."""

import sys

from bucketloader.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
