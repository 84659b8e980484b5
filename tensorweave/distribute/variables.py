"""Global variables: placeholder (filled in below)."""


class GlobalVariable:
    pass
