"""The migrations build the schema the models declare, on both databases: a column, index or
constraint added to a model without its migration (or the other way round) fails here, not on
a course's server at its first upgrade."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from api.store.db import Base, make_engine


def test_the_migrated_schema_is_the_models_schema(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        engine.dispose()
    assert differences == []
