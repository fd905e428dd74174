import sys

from tierpool.cli import main

sys.exit(main())
