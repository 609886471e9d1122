# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The one exception base of the collection's shared code.

Every exception class under module_utils derives from :class:`FleetError` (beside its own base, such as
``ValueError`` or ``RuntimeError``, so that existing ``except ValueError`` callers still catch it), so a
module frame (``k8s/module.py``) can end a task for any of them in one place:
``fail_json(msg=exc.message, **exc.result)``.

Shapes: ``FleetError(message, result=None)``; ``exc.message`` is ``str(exc)`` (the task's ``msg``);
``exc.result`` is a dict of the partial result known when the error was raised (the keys a failed task
returns beside ``msg``), or None when there is none. Raised by the layers for input they refuse, for a
Kubernetes or host state they cannot go on from, and for a run that lost its lock; a subclass's own
docstring says when.

Imports nothing (any layer may import it).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional


class FleetError(Exception):
    """An error of the collection's own code: a message and, optionally, the partial result so far."""

    # Class default: subclasses whose first base is ValueError/RuntimeError run that base's __init__
    # (it comes first in the MRO), so the attribute must exist without FleetError.__init__.
    result: Optional[dict[str, Any]] = None

    def __init__(self, message: str = "", result: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message)
        self.result = dict(result) if result is not None else None

    @property
    def message(self) -> str:
        """The text a failed task reports as ``msg`` (``str(exc)``, so subclasses' own __str__ count)."""
        return str(self)
