"""Running a course: the roster's fields on users, previews and due-date stamps and staff's
overrides on submissions, extensions, regrade requests and the audit trail.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_USER_COLUMNS = (("display_name", 200), ("email", 254), ("sis_id", 100), ("lms_id", 100), ("section", 100))


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        for name, size in _USER_COLUMNS:
            batch.add_column(sa.Column(name, sa.String(size), nullable=True))
        batch.add_column(sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("kind", sa.String(10), nullable=False, server_default="submission"))
        batch.add_column(sa.Column("timeliness", sa.String(10), nullable=True))
        batch.add_column(sa.Column("due_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("days_late", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("penalty", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("override_points", sa.Float(), nullable=True))
        batch.add_column(sa.Column("override_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("override_by", sa.String(100), nullable=True))
        batch.add_column(sa.Column("override_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_submissions_kind", ["kind"])
    op.create_table(
        "extensions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("due", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("granted_by", sa.String(100), nullable=False),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_extensions_user_id", "extensions", ["user_id"], unique=True)
    op.create_table(
        "regrade_requests",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("submission_id", sa.Integer(), sa.ForeignKey("submissions.id"), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("answered_by", sa.String(100), nullable=True),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_regrade_requests_submission_id", "regrade_requests", ["submission_id"])
    op.create_index("ix_regrade_requests_user_id", "regrade_requests", ["user_id"])
    op.create_index("ix_regrade_requests_state", "regrade_requests", ["state"])
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(100), nullable=False),
        sa.Column("action", sa.String(40), nullable=False),
        sa.Column("subject", sa.String(200), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"])


def downgrade() -> None:
    op.drop_table("audit_events")
    op.drop_table("regrade_requests")
    op.drop_table("extensions")
    with op.batch_alter_table("submissions") as batch:
        batch.drop_index("ix_submissions_kind")
        for name in ("kind", "timeliness", "due_at", "days_late", "penalty", "override_points", "override_reason",
                     "override_by", "override_at"):
            batch.drop_column(name)
    with op.batch_alter_table("users") as batch:
        for name, _size in _USER_COLUMNS:
            batch.drop_column(name)
        batch.drop_column("removed_at")
