"""The live test bed: a real LiteLLM proxy, a tiny real model and an echo upstream on 127.0.0.1.

``from testbed.bed import TestBed`` (a context manager) or ``python -m testbed run -- CMD``.
See testbed/README.md for what runs, the quirks it shows, and the figures measured.
"""

from .bed import GOOD_KEY, LIMITED_KEY, MODELS, BedInfo, TestBed, TestBedError

__all__ = ["GOOD_KEY", "LIMITED_KEY", "MODELS", "BedInfo", "TestBed", "TestBedError"]
