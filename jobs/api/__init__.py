"""The REST API under /api/v1/: serializers, filters, permissions and views over the jobs services and
selectors."""
