import sys

from fastq.cli.main import main

sys.exit(main())
