"""Entry point of `python -m worker` (the container's ENTRYPOINT): hands argv to worker.cli."""
import sys

from worker.cli import main

sys.exit(main())
