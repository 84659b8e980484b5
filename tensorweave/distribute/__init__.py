"""Global tensors over placements and SBP layouts (issue 13): see ``docs/design/distribute.md``."""
