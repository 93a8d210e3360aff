"""The one escape of text that a report writes into markdown: ``escape(text)``.

Text from records (a unit's deviations, a verification's status, a file name, an amendment's reason) is data, not
markup. Written raw, a newline ends the table row and lets the text start lines of its own (``## Verdict: ...``,
a forged section), a ``|`` ends the cell, and an unpaired surrogate (``"\\ud800"``, valid JSON) makes the UTF-8
write of the whole report fail half-way. ``escape`` keeps the text on one line and in one cell:

    line breaks (``\\n``, ``\\r``, and every other character ``str.splitlines`` breaks at)  -> one space each
    ``|``                                                                                   -> ``\\|``
    a leading ``#`` or ``>`` (a heading or a quote where the text opens a line)            -> ``\\#``, ``\\>``
    a character UTF-8 cannot hold (an unpaired surrogate)                                  -> its ``\\udxxx`` escape

Nothing else changes, so a report of plain text reads as before.
"""

from __future__ import annotations

import re
from typing import Any

# The characters str.splitlines() breaks at: markdown viewers differ on which of them end a line, so none stays.
_BREAKS = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def escape(text: Any) -> str:
    """``str(text)`` as one line of one markdown table cell (see the module's table)."""
    s = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    s = _BREAKS.sub(" ", s).replace("|", "\\|")
    return "\\" + s if s[:1] in ("#", ">") else s
