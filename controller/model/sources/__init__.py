"""The queue kinds a rule may name in `spec.sources`: one module per kind, each with its fields and parser.

One explicit table (as KEDA's scalers_builder has one switch): adding a kind is adding a row here and a poller row
in `controller.sources`; nothing registers itself on import.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.model.fields import Fields
from controller.model.sources import aws_sqs, azure_queue, rabbitmq, redis_list, sql_table
from controller.model.sources.base import SourceSpec

SourceParser = Callable[[Fields, float], SourceSpec]

SOURCE_KINDS: dict[str, SourceParser] = {
    azure_queue.TYPE: azure_queue.parse,
    aws_sqs.TYPE: aws_sqs.parse,
    rabbitmq.TYPE: rabbitmq.parse,
    redis_list.TYPE: redis_list.parse,
    sql_table.TYPE: sql_table.parse,
}


def source_kinds() -> tuple[str, ...]:
    return tuple(sorted(SOURCE_KINDS))
