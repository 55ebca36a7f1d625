import sys

from mpiop.cli import main

sys.exit(main())
