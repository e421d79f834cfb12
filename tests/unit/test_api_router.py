"""A route's OpenAPI summary is its docstring's first paragraph, or the one it is given."""

import pytest
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from cronledger.api.errors import Router


def test_summary_is_the_docstrings_first_paragraph() -> None:
    router = Router("things", "/things")

    @router.answers("GET", "/<thing_id>", 200, "the thing", 404)
    def get_thing(thing_id: str) -> dict[str, str]:
        """Read one
        thing.

        More that the summary leaves out."""
        return {}

    app = APIGatewayHttpResolver(enable_validation=True)
    app.include_router(router)
    operation = app.get_openapi_schema().paths["/things/{thing_id}"].get
    assert operation is not None
    assert operation.summary == "Read one thing."
    assert operation.tags == ["things"]
    assert set(operation.responses or {}) == {200, 400, 404, 413, 415, 422, 500, 503}


def test_a_route_without_a_docstring_or_summary_is_refused() -> None:
    router = Router("things", "/things")
    with pytest.raises(TypeError, match="needs a docstring"):

        @router.answers("GET", "/", 200, "the things")
        def list_things() -> list[str]:
            return []
