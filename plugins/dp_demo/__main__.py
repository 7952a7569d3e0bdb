import sys

from dp_demo.cli import main

sys.exit(main())
