"""`python -m workbench ...`: see workbench.apps.cli."""
from .apps.cli import main

raise SystemExit(main())
