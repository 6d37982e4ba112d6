"""`python -m controller` is the `queuescale` command."""

from controller.cli import main

raise SystemExit(main())
