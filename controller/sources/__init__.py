"""Where counts come from: one module per queue kind behind the interface in `base`, chosen in one table.

The kinds' fields are parsed in `controller.model.sources`; this table maps each kind to its poller. Nothing
registers itself on import.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.model.sources import aws_sqs as aws_sqs_fields
from controller.model.sources import azure_queue as azure_queue_fields
from controller.model.sources import rabbitmq as rabbitmq_fields
from controller.model.sources import redis_list as redis_list_fields
from controller.model.sources import sql_table as sql_table_fields
from controller.model.sources.base import SourceSpec
from controller.sources import aws_sqs, azure_queue, rabbitmq, redis_list, sql_table
from controller.sources.base import Source, SourceContext

SourceFactory = Callable[[SourceSpec, SourceContext], Source]

POLLERS: dict[str, SourceFactory] = {
    azure_queue_fields.TYPE: azure_queue.build,
    aws_sqs_fields.TYPE: aws_sqs.build,
    rabbitmq_fields.TYPE: rabbitmq.build,
    redis_list_fields.TYPE: redis_list.build,
    sql_table_fields.TYPE: sql_table.build,
}


def build_source(spec: SourceSpec, context: SourceContext) -> Source:
    """A live source for `spec`; raises KeyError for a kind with no poller (a bug: the spec parser knew it)."""
    return POLLERS[spec.type](spec, context)
