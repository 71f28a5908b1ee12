"""Small helpers with no workbench dependencies: atomic file writes, the provenance
(git state) of the running code, and where a progress bar may be drawn."""
