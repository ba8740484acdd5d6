"""Stand-in: the model subpackage needs an environment library the ES code does not."""
import gymnax  # noqa: F401  (absent on purpose: a driver must not import this package's __init__)
