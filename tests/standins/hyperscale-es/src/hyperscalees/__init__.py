"""Stand-in package root: imports the model stack, as the real package does (docs/hyperscale.md)."""
from . import models  # noqa: F401
from . import noiser  # noqa: F401
