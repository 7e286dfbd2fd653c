import sys

from invfold.cli import main

sys.exit(main())
