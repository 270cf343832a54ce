import sys

from servelab.tui.cli import main

sys.exit(main())
