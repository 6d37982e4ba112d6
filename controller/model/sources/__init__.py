"""The queue kinds a rule may name in `spec.sources`: one module per kind, each with its fields and parser.

One explicit table (as KEDA's scalers_builder has one switch): adding a kind is adding a row here and a poller row
in `controller.sources`; nothing registers itself on import. The table's order is the CRD's.
"""

from __future__ import annotations

from controller.model.schema import Choice, OneOfKinds
from controller.model.sources import aws_sqs, azure_queue, rabbitmq, redis_list, sql_table
from controller.model.sources.base import SOURCE_WEIGHT, SourceKind

SOURCE_KINDS: dict[str, SourceKind] = {
    kind.type: kind for kind in (azure_queue.KIND, redis_list.KIND, sql_table.KIND, rabbitmq.KIND, aws_sqs.KIND)
}

SOURCE_TYPE: Choice[str] = Choice("type", choices=tuple(SOURCE_KINDS), required=True,
                                  description="The queue kind.", doc="the queue kind")

SOURCE = OneOfKinds("", common=(SOURCE_TYPE, SOURCE_WEIGHT),
                    kinds=tuple(kind.declared for kind in SOURCE_KINDS.values()))
"""One element of `spec.sources`: a type, a weight and the fields of that type's kind."""


def source_kinds() -> tuple[str, ...]:
    return tuple(sorted(SOURCE_KINDS))
