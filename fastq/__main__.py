import sys

from fastq.cli import main

sys.exit(main())
