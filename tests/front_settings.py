"""Production settings for the front's live test (tests/test_deploy_slow_clients.py): everything as deployed
except where static files' names come from. Production names them from the manifest that ``collectstatic``
writes into the image at build time (deploy/Dockerfile); the test has no image, so the sign-in page links the
unhashed names instead of failing on a missing manifest."""

from portal.settings import *  # noqa: F403
from portal.settings import STORAGES

STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
