"""``python -m skyrl_train`` = ``skyrl-train``."""

import sys

from skyrl_train.cli import main

sys.exit(main())
