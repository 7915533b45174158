"""Entry point of `python -m worker` (the container's ENTRYPOINT): hands argv to worker.commands."""
import sys

from worker.commands import main

sys.exit(main())
