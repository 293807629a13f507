"""specplan simulator: open-loop LLM serving with speculative decoding, clocked by SimPy."""

__version__ = "0.1.0"
