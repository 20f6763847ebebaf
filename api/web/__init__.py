"""The service's web side: routes, pages, templates, request checks."""
