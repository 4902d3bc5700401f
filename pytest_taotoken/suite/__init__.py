"""The bundled contract suite, collected with ``pytest --taotoken-suite`` (or ``--pyargs pytest_taotoken.suite``).

Each check in :mod:`.checks` runs once per configured model; its test id reads
``suite/<check>[<model>]``.
"""

from __future__ import annotations

from pathlib import Path

SUITE_MODULE = Path(__file__).with_name("test_gateway.py")
NO_MODEL = "no-model"
PROPERTY = "taotoken"  # key of the item's user_properties entry that the report reads
