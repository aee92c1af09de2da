"""What the competition is: classes, data layout, record schema, metric, submission format."""

from competition.spec import CompetitionSpec, load_spec
from pipeline.formats.records import RecordLayout, RecordSchema

__all__ = ["CompetitionSpec", "RecordLayout", "RecordSchema", "load_spec"]
