"""What the competition is: classes, data layout, record schema, metric, submission format."""

from competition.layouts import RecordLayout, RecordSchema
from competition.spec import CompetitionSpec, load_spec

__all__ = ["CompetitionSpec", "RecordLayout", "RecordSchema", "load_spec"]
