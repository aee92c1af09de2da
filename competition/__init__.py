"""What the competition is: classes, data layout, record schema, metric, submission format."""

from competition.spec import CompetitionSpec, load_spec

__all__ = ["CompetitionSpec", "load_spec"]
