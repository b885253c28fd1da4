"""`python -m dali_stream ...` is `dali-stream ...`."""

import sys

from .tools.cli import main

if __name__ == "__main__":  # not when a spawned worker process imports this module (make-sample's encoders)
    sys.exit(main())
