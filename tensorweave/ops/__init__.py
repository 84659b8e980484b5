"""Op definitions, one module per family. A primitive's shape rule, gradient and (later)
SBP rule sit next to it; composite ops are plain functions of primitives."""
