"""How many examples a property test asks of Hypothesis, under the profile the run loaded
(`tests/conftest.py`): `ci` and the default run the counts written in the tests, `dev` the
same fraction of each as of Hypothesis' own default, so a developer's loop stays short."""

from __future__ import annotations

from typing import Final

from hypothesis import settings

#: Hypothesis' default count, which the `ci` profile keeps: what each written count is.
FULL: Final = 100


def examples(full: int) -> int:
    """`full` under `ci` (and the default profile), fewer under `dev`, never none."""
    return max(1, full * settings.default.max_examples // FULL)
