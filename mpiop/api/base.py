"""What every model of the API shares: camelCase on the wire and metav1.Time's format."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainSerializer
from pydantic.alias_generators import to_camel


def format_time(value: dt.datetime) -> str:
    """metav1.Time's wire format: RFC 3339 in UTC, whole seconds."""
    if value.tzinfo is not None and value.utcoffset():
        value = value.astimezone(dt.UTC)
    # isoformat, not strftime: every status dump formats each condition's two times, twice a reconcile.
    return value.replace(microsecond=0, tzinfo=None).isoformat() + "Z"


Time = Annotated[dt.datetime, PlainSerializer(format_time, return_type=str, when_used="json-unless-none")]


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are ignored, as a pruning apiserver would."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
    )

    def to_json(self) -> dict[str, Any]:
        """The wire form: camelCase, unset optionals left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
