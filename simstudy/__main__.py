"""`python -m simstudy` runs the command line."""

import sys

from simstudy.cli import main

sys.exit(main())
