"""``python -m pipeline.jobs <export|rebuild|audit|stats> ...``."""

import sys

from pipeline.jobs.cli import main

sys.exit(main())
