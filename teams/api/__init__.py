"""The teams' part of the REST API (/api/v1/teams/): a team, its dashboard and its utilization series."""
