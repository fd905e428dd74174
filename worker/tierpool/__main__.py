import sys

from tierpool.cli.main import main

sys.exit(main())
