"""`python -m workbench ...`: see workbench.cli."""
from .cli import main

raise SystemExit(main())
