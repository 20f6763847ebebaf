"""A user's token can be revoked: ``users.token_hash`` is NULL once it is.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.alter_column("token_hash", existing_type=sa.String(64), nullable=True)


def downgrade() -> None:
    # A revoked user gets a value no SHA-256 digest can equal (not hexadecimal), unique by id.
    op.execute("UPDATE users SET token_hash = 'revoked-' || id WHERE token_hash IS NULL")
    with op.batch_alter_table("users") as batch:
        batch.alter_column("token_hash", existing_type=sa.String(64), nullable=False)
