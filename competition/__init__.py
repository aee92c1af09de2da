"""What the competition is: classes, data layout, record schema, metric, submission format."""

from competition.spec import CompetitionSpec, RecordSchema, load_spec

__all__ = ["CompetitionSpec", "RecordSchema", "load_spec"]
