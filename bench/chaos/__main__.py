"""``python -m hongbao.bench.chaos``: see hongbao.bench.chaos.run."""

import sys

from hongbao.bench.chaos.run import main

sys.exit(main())
