"""Small helpers with no workbench dependencies: atomic file writes and the provenance
(git state) of the running code."""
