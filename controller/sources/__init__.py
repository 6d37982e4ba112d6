"""Where counts come from: one module per queue kind behind the interface in `base`.

Importing this package registers every built-in kind with the spec parser and the source registry.
"""

from controller.sources import aws_sqs, azure_queue, rabbitmq, redis_list, sql_table
from controller.sources.base import (
    SecretResolver,
    SecretUnavailable,
    Source,
    SourceContext,
    build_source,
)

__all__ = [
    "SecretResolver", "SecretUnavailable", "Source", "SourceContext", "aws_sqs", "azure_queue", "build_source",
    "rabbitmq", "redis_list", "sql_table",
]
