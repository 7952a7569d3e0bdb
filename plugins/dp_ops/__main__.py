import sys

from dp_ops.cli import main

sys.exit(main())
