"""The operator HTTP API (docs/guarantees.md#api) on AWS Lambda Powertools' `APIGatewayHttpResolver`.

    from cronledger.api import create_app, handle_event
    app = create_app(ledger, settings)
    response = handle_event(app, api_gateway_v2_event)

Routes live one subject per module (`channels`, `channel_runs`, `occurrences`, `status`,
`events`), the
wire shapes in `models`, their formatting in `views`, channel document validation in
`documents`, and the exception → HTTP mapping in `errors`, its only home.
"""

from cronledger.api.app import create_app, handle_event
from cronledger.api.models import PREFIX

__all__ = ["PREFIX", "create_app", "handle_event"]
