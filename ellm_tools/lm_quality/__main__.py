import sys

from ellm_tools.lm_quality import main

sys.exit(main())
