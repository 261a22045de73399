"""The scheduler app's part of the REST API (/api/v1/cluster/): the fleet as its reader may see it."""
