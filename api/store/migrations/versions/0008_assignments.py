"""Several assignments in one service: the assignment a submission, an extension and a golden
run belong to; a student's extension is per assignment.

Rows stored before name none (NULL); the service's default assignment adopts them when it
starts (:func:`api.store.crud.adopt_unnamed`).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("assignment", sa.String(100), nullable=True))
        batch.create_index("ix_submissions_assignment", ["assignment"])
    with op.batch_alter_table("golden_runs") as batch:
        batch.add_column(sa.Column("assignment", sa.String(100), nullable=True))
    op.drop_index("ix_extensions_user_id", table_name="extensions")
    with op.batch_alter_table("extensions") as batch:
        batch.add_column(sa.Column("assignment", sa.String(100), nullable=True))
        batch.create_index("ix_extensions_user_id", ["user_id"])
        batch.create_unique_constraint("uq_extensions_user_assignment", ["user_id", "assignment"])


def downgrade() -> None:
    with op.batch_alter_table("extensions") as batch:
        batch.drop_constraint("uq_extensions_user_assignment", type_="unique")
        batch.drop_index("ix_extensions_user_id")
        batch.drop_column("assignment")
    op.create_index("ix_extensions_user_id", "extensions", ["user_id"], unique=True)
    with op.batch_alter_table("golden_runs") as batch:
        batch.drop_column("assignment")
    with op.batch_alter_table("submissions") as batch:
        batch.drop_index("ix_submissions_assignment")
        batch.drop_column("assignment")
