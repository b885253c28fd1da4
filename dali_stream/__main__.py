"""`python -m dali_stream ...` is `dali-stream ...`."""

import sys

from .tools.cli import main

sys.exit(main())
