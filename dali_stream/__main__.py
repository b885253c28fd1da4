"""`python -m dali_stream ...` is `dali-stream ...`."""

import sys

from .cli import main

sys.exit(main())
