"""The service's store: database models, every query, migrations."""
