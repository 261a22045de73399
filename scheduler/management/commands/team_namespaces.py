"""``manage.py team_namespaces [--org FILE]``: each team's namespace and RoleBindings, for ``kubectl apply -f -``.

Team namespaces are the platform's to create (docs/deploy.md, RBAC): Microcosm's service accounts hold rights in
a team's namespace only through the RoleBindings there, and create none unless ``KUBE_NAMESPACE_CREATE`` allows
it. This renders, for every team of the database (or of an organisation file, ``--org``), its Namespace with the
team label and the Pod Security labels of its level (``KUBE_POD_SECURITY_LEVEL``, or the team's own from
``KUBE_POD_SECURITY_TEAM_LEVELS``; docs/deploy.md, Pod Security), then the two RoleBindings of
:mod:`scheduler.gateways.kube.namespaces`. It writes nothing itself::

    python manage.py team_namespaces | kubectl apply -f -
    python manage.py teams apply org.yaml && python manage.py team_namespaces --org org.yaml | kubectl apply -f -
"""

from __future__ import annotations

from typing import Any

import yaml
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.gateways.kube.namespaces import team_level, team_manifests
from teams.errors import OrgFileError, OrgValidationError
from teams.models import Team
from teams.orgfile import load_org_file, validate_org


class Command(BaseCommand):
    help = "Print each team's Namespace (team and Pod Security labels) and RoleBindings as YAML for kubectl apply."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--org", metavar="FILE", default="", help="The teams of this organisation file (default: the database's)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        kube = settings.KUBERNETES
        documents: list[dict[str, Any]] = []
        for slug, namespace in self._teams(options["org"]):
            level = team_level(slug, kube["pod_security_level"], kube["pod_security_team_levels"])
            documents += team_manifests(namespace, slug, level)
        if not documents:
            raise CommandError("no teams: create them first (python manage.py teams apply FILE)")
        self.stdout.write(yaml.safe_dump_all(documents, sort_keys=False), ending="")

    def _teams(self, path: str) -> list[tuple[str, str]]:
        """(slug, namespace) of each team, sorted by slug."""
        if not path:
            return list(Team.objects.order_by("slug").values_list("slug", "namespace"))
        try:
            spec = validate_org(load_org_file(path))
        except OrgFileError as exc:
            raise CommandError(str(exc)) from exc
        except OrgValidationError as exc:
            raise CommandError(f"{len(exc.errors)} error(s) in {path}: " + "; ".join(exc.errors)) from exc
        return sorted((team.slug, team.namespace) for team in spec.teams or ())
