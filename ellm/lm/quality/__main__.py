import sys

from ellm.lm.quality import main

sys.exit(main())
