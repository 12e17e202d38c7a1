"""pgmux's version, the one place it is written (setup.cfg and ``pgmux.__version__`` read it)."""

__version__ = "0.5.0.dev0"
