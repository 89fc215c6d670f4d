import sys

from inductor_knobs.cli import main

sys.exit(main())
