"""The operator HTTP API (docs/guarantees.md#api) on Powertools' `APIGatewayHttpResolver`:
`create_app(ledger, settings)`, then `handle_event(app, event)` per request. One subject per
router module, wire shapes in `models`, formatting in `views`, errors mapped in `errors`.
"""

from cronledger.api.app import create_app, handle_event
from cronledger.api.models import PREFIX

__all__ = ["PREFIX", "create_app", "handle_event"]
