"""OpInfo tables, one module per op family; each module defines ``OPS``."""
