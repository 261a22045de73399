"""Pod Security admission as the API server runs it, for the Kubernetes emulator.

Modelled on kubernetes/pod-security-admission (the staging copy of
kubernetes staging/src/k8s.io/pod-security-admission), read at commit 8f84a87c7f61:

- ``policy/check_*.go``: one function per check below, with the upstream check ID, reason and detail text;
- ``policy/registry.go`` (``populate``): checks run baseline IDs sorted, then restricted IDs sorted; the
  ``restricted`` level runs every restricted check plus the baseline checks no restricted check overrides;
- ``policy/checks.go`` (``AggregateCheckResult.ForbiddenDetail``): ``reason (detail), reason (detail)``;
- ``admission/admission.go`` (``EvaluatePod``) and ``admission/response.go`` (``forbiddenResponse``): an enforce
  failure is a 403 Forbidden whose message is ``pods "<name>" is forbidden: violates PodSecurity
  "<level>:<version>": <detail>`` (apimachinery's ``NewForbidden``);
- ``api/helpers.go`` (``PolicyToEvaluate``, ``ParseLevel``) and ``admission/api/v1/defaults.go``: a namespace
  without the enforce label is ``privileged`` (the admission configuration's default), a label that is not a
  level enforces ``restricted`` (fail closed), a missing version label is ``latest``.

Only the ``latest`` policy version is modelled (Microcosm never pins one); the pod is read as the raw JSON the
client sends. Exemptions (namespaces, users, runtime classes of the admission configuration) are not modelled:
a cluster that exempts a namespace admits everything there, which no test needs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import aiohttp.web

from tests.scheduler.kube_emulator import Cluster, GatewayEmulator, status_response

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"  # api/constants.go
ENFORCE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"
LEVELS = ("privileged", "baseline", "restricted")  # api/constants.go, least to most restrictive

Pod = Mapping[str, Any]
Violation = tuple[str, str]  # (ForbiddenReason, ForbiddenDetail)
Check = Callable[[Mapping[str, Any], Mapping[str, Any]], Violation | None]  # (metadata, spec)

_POD_CREATE = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/?$")


# -- helpers.go and visitor.go --------------------------------------------------------------------------------


def _join_quote(items: list[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """visitContainers: init containers, then containers, then ephemeral containers."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return container.get("securityContext") or {}


def _pod_sc(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return spec.get("securityContext") or {}


def _user_namespace(spec: Mapping[str, Any]) -> bool:
    """relaxPolicyForUserNamespacePod: hostUsers: false."""
    return spec.get("hostUsers") is False


def _windows(spec: Mapping[str, Any]) -> bool:
    return (spec.get("os") or {}).get("name") == "windows"


def _setters(pod_bad: bool, containers: list[str]) -> list[str]:
    setters = ["pod"] if pod_bad else []
    if containers:
        setters.append(f"{_plural('container', 'containers', len(containers))} {_join_quote(containers)}")
    return setters


# -- baseline checks ---------------------------------------------------------------------------------------------

# check_appArmorProfile.go
_APPARMOR_TYPES = {"RuntimeDefault", "Localhost"}
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def app_armor_profile(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    bad_values: set[str] = set()
    pod_profile = _pod_sc(spec).get("appArmorProfile")
    pod_bad = False
    if pod_profile is not None and pod_profile.get("type") not in _APPARMOR_TYPES:
        pod_bad = True
        bad_values.add(str(pod_profile.get("type", "")))
    containers = []
    for c in _containers(spec):
        profile = _sc(c).get("appArmorProfile")
        if profile is not None and profile.get("type") not in _APPARMOR_TYPES:
            containers.append(c["name"])
            bad_values.add(str(profile.get("type", "")))
    setters = _setters(pod_bad, containers)
    annotations = sorted(
        f'{k}="{v}"'
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(_APPARMOR_ANNOTATION) and not (v == "" or v == "runtime/default" or v.startswith("localhost/"))
    )
    values = sorted(bad_values) + annotations
    if annotations:
        setters.append(_plural("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    reason = _plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(values))
    return reason, f"{' and '.join(setters)} must not set AppArmor profile type to {_join_quote(values)}"


# check_capabilities_baseline.go: the container runtime's default set
BASELINE_CAPABILITIES = frozenset(
    [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ]
)


def capabilities_baseline(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    containers, added = [], set()
    for c in _containers(spec):
        bad = [cap for cap in (_sc(c).get("capabilities") or {}).get("add") or [] if cap not in BASELINE_CAPABILITIES]
        if bad:
            containers.append(c["name"])
            added.update(bad)
    if not containers:
        return None
    return "non-default capabilities", (
        f"{_plural('container', 'containers', len(containers))} {_join_quote(containers)} must not include "
        f"{_join_quote(sorted(added))} in securityContext.capabilities.add"
    )


def host_namespaces(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_hostNamespaces.go"""
    shared = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    return ("host namespaces", ", ".join(shared)) if shared else None


def host_path_volumes(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_hostPathVolumes.go"""
    names = [v["name"] for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    if not names:
        return None
    return "hostPath volumes", f"{_plural('volume', 'volumes', len(names))} {_join_quote(names)}"


def host_ports(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_hostPorts.go"""
    containers, ports = [], set()
    for c in _containers(spec):
        used = [str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")]
        if used:
            containers.append(c["name"])
            ports.update(used)
    if not containers:
        return None
    return "hostPort", (
        f"{_plural('container', 'containers', len(containers))} {_join_quote(containers)} "
        f"{_plural('uses', 'use', len(containers))} {_plural('hostPort', 'hostPorts', len(ports))} "
        f"{', '.join(sorted(ports))}"
    )


def host_probes_and_host_lifecycle(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_hostProbesAndhostLifecycle.go (1.34+): no ``host`` in probes' or lifecycle handlers' httpGet/tcpSocket."""
    containers, hosts = set(), set()
    for c in _containers(spec):
        handlers = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(c.get("lifecycle") or {}).get(h) for h in ("postStart", "preStop")]
        for handler in handlers:
            for kind in ("httpGet", "tcpSocket"):
                host = ((handler or {}).get(kind) or {}).get("host")
                if host:
                    containers.add(c["name"])
                    hosts.add(host)
    if not containers:
        return None
    return "probe or lifecycle host", (
        f"{_plural('container', 'containers', len(containers))} {_join_quote(sorted(containers))} "
        f"{_plural('uses', 'use', len(containers))} "
        f"{_plural('probe or lifecycle host', 'probe or lifecycle hosts', len(hosts))} {_join_quote(sorted(hosts))}"
    )


def privileged(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_privileged.go"""
    names = [c["name"] for c in _containers(spec) if _sc(c).get("privileged") is True]
    if not names:
        return None
    return "privileged", (
        f"{_plural('container', 'containers', len(names))} {_join_quote(names)} "
        "must not set securityContext.privileged=true"
    )


def _proc_mount(spec: Mapping[str, Any]) -> Violation | None:
    """check_procMount_baseline.go, procMount_1_0: any procMount but Default."""
    containers, types = [], set()
    for c in _containers(spec):
        mount = _sc(c).get("procMount")
        if mount is not None and mount != "Default":
            containers.append(c["name"])
            types.add(mount)
    if not containers:
        return None
    return "procMount", (
        f"{_plural('container', 'containers', len(containers))} {_join_quote(containers)} must not set "
        f"securityContext.procMount to {_join_quote(sorted(types))}"
    )


def proc_mount(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_procMount_baseline.go, 1.35+: relaxed for a pod in a user namespace."""
    return None if _user_namespace(spec) else _proc_mount(spec)


# check_seLinuxOptions.go, 1.31+
_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def se_linux_options(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    bad_types: set[str] = set()
    user = role = False

    def valid(options: Mapping[str, Any]) -> bool:
        nonlocal user, role
        ok = True
        if options.get("type", "") not in _SELINUX_TYPES:
            ok = False
            bad_types.add(options.get("type", ""))
        if options.get("user"):
            ok, user = False, True
        if options.get("role"):
            ok, role = False, True
        return ok

    pod_options = _pod_sc(spec).get("seLinuxOptions")
    pod_bad = pod_options is not None and not valid(pod_options)
    containers = [
        c["name"]
        for c in _containers(spec)
        if _sc(c).get("seLinuxOptions") is not None and not valid(_sc(c)["seLinuxOptions"])
    ]
    setters = _setters(pod_bad, containers)
    if not setters:
        return None
    data = [f"{_plural('type', 'types', len(bad_types))} {_join_quote(sorted(bad_types))}"] if bad_types else []
    data += ["user may not be set"] if user else []
    data += ["role may not be set"] if role else []
    return "seLinuxOptions", f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}"


_SECCOMP_TYPES = {"RuntimeDefault", "Localhost"}  # check_seccompProfile_baseline.go, validSeccomp


def seccomp_profile_baseline(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_seccompProfile_baseline.go, 1.19+: an explicit profile must be RuntimeDefault or Localhost."""
    bad_values: set[str] = set()
    pod_profile = _pod_sc(spec).get("seccompProfile")
    pod_bad = False
    if pod_profile is not None and pod_profile.get("type") not in _SECCOMP_TYPES:
        pod_bad = True
        bad_values.add(str(pod_profile.get("type", "")))
    containers = []
    for c in _containers(spec):
        profile = _sc(c).get("seccompProfile")
        if profile is not None and profile.get("type") not in _SECCOMP_TYPES:
            containers.append(c["name"])
            bad_values.add(str(profile.get("type", "")))
    setters = _setters(pod_bad, containers)
    if not setters:
        return None
    return "seccompProfile", (
        f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to {_join_quote(sorted(bad_values))}"
    )


# check_sysctls.go, 1.37+ (the newest set: the policy version is ``latest``)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
        "net.ipv4.tcp_slow_start_after_idle",
        "net.ipv4.tcp_notsent_lowat",
    }
)


def sysctls(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    forbidden = [s["name"] for s in _pod_sc(spec).get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(forbidden)) if forbidden else None


def windows_host_process(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_windowsHostProcess.go"""
    containers = [
        c["name"] for c in _containers(spec) if (_sc(c).get("windowsOptions") or {}).get("hostProcess") is True
    ]
    pod_bad = (_pod_sc(spec).get("windowsOptions") or {}).get("hostProcess") is True
    setters = _setters(pod_bad, containers)
    if not setters:
        return None
    return "hostProcess", f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true"


# -- restricted checks -------------------------------------------------------------------------------------------


def allow_privilege_escalation(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_allowPrivilegeEscalation.go, 1.25+: every container must say false (Windows pods exempt)."""
    if _windows(spec):
        return None
    names = [c["name"] for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    if not names:
        return None
    return "allowPrivilegeEscalation != false", (
        f"{_plural('container', 'containers', len(names))} {_join_quote(names)} must set "
        "securityContext.allowPrivilegeEscalation=false"
    )


def capabilities_restricted(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_capabilities_restricted.go, 1.25+: drop ALL, add nothing but NET_BIND_SERVICE."""
    if _windows(spec):
        return None
    missing, adding, added = [], [], set()
    for c in _containers(spec):
        capabilities = _sc(c).get("capabilities")
        if capabilities is None:
            missing.append(c["name"])
            continue
        if "ALL" not in (capabilities.get("drop") or []):
            missing.append(c["name"])
        bad = [cap for cap in capabilities.get("add") or [] if cap != "NET_BIND_SERVICE"]
        if bad:
            adding.append(c["name"])
            added.update(bad)
    details = []
    if missing:
        details.append(
            f"{_plural('container', 'containers', len(missing))} {_join_quote(missing)} must set "
            'securityContext.capabilities.drop=["ALL"]'
        )
    if adding:
        details.append(
            f"{_plural('container', 'containers', len(adding))} {_join_quote(adding)} must not include "
            f"{_join_quote(sorted(added))} in securityContext.capabilities.add"
        )
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def proc_mount_restricted(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_procMount_restricted.go (1.35+): procMount_1_0 unconditionally."""
    return _proc_mount(spec)


# check_restrictedVolumes.go: the volume types restricted pods may use, and the name of each other type
_RESTRICTED_OK = (
    *("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim"),
    *("projected", "secret"),
)
_RESTRICTED_NAMED = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
]


def restricted_volumes(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    names, types = [], set()
    for volume in spec.get("volumes") or []:
        if any(volume.get(kind) is not None for kind in _RESTRICTED_OK):
            continue
        names.append(volume["name"])
        types.add(next((kind for kind in _RESTRICTED_NAMED if volume.get(kind) is not None), "unknown"))
    if not names:
        return None
    return "restricted volume types", (
        f"{_plural('volume', 'volumes', len(names))} {_join_quote(names)} {_plural('uses', 'use', len(names))} "
        f"{_plural('restricted volume type', 'restricted volume types', len(types))} {_join_quote(sorted(types))}"
    )


def run_as_non_root(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_runAsNonRoot.go, 1.35+ (relaxed in a user namespace)."""
    if _user_namespace(spec):
        return None
    pod_value = _pod_sc(spec).get("runAsNonRoot")
    explicit, implicit = [], []
    for c in _containers(spec):
        value = _sc(c).get("runAsNonRoot")
        if value is False:
            explicit.append(c["name"])
        elif value is None and pod_value is not True:
            implicit.append(c["name"])
    setters = _setters(pod_value is False, explicit)
    if setters:
        return "runAsNonRoot != true", f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
    if implicit:
        return "runAsNonRoot != true", (
            f"pod or {_plural('container', 'containers', len(implicit))} {_join_quote(implicit)} must set "
            "securityContext.runAsNonRoot=true"
        )
    return None


def run_as_user(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_runAsUser.go, 1.35+ (relaxed in a user namespace)."""
    if _user_namespace(spec):
        return None
    containers = [c["name"] for c in _containers(spec) if _sc(c).get("runAsUser") == 0]
    setters = _setters(_pod_sc(spec).get("runAsUser") == 0, containers)
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def seccomp_profile_restricted(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    """check_seccompProfile_restricted.go, 1.25+: RuntimeDefault or Localhost, on the pod or on every container."""
    if _windows(spec):
        return None
    bad_values: set[str] = set()
    pod_profile = _pod_sc(spec).get("seccompProfile")
    pod_bad = pod_set = False
    if pod_profile is not None:
        pod_bad, pod_set = (True, False) if pod_profile.get("type") not in _SECCOMP_TYPES else (False, True)
        if pod_bad:
            bad_values.add(str(pod_profile.get("type", "")))
    explicit, implicit = [], []
    for c in _containers(spec):
        profile = _sc(c).get("seccompProfile")
        if profile is not None:
            if profile.get("type") not in _SECCOMP_TYPES:
                explicit.append(c["name"])
                bad_values.add(str(profile.get("type", "")))
        elif not pod_set:
            implicit.append(c["name"])
    setters = _setters(pod_bad, explicit)
    if setters:
        return "seccompProfile", (
            f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to "
            f"{_join_quote(sorted(bad_values))}"
        )
    if implicit:
        return "seccompProfile", (
            f"pod or {_plural('container', 'containers', len(implicit))} {_join_quote(implicit)} must set "
            'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
        )
    return None


# -- the registry (policy/registry.go) ---------------------------------------------------------------------------

BASELINE: dict[str, Check] = {
    "appArmorProfile": app_armor_profile,
    "capabilities_baseline": capabilities_baseline,
    "hostNamespaces": host_namespaces,
    "hostPathVolumes": host_path_volumes,
    "hostPorts": host_ports,
    "hostProbesAndHostLifecycle": host_probes_and_host_lifecycle,
    "privileged": privileged,
    "procMount": proc_mount,
    "seLinuxOptions": se_linux_options,
    "seccompProfile_baseline": seccomp_profile_baseline,
    "sysctls": sysctls,
    "windowsHostProcess": windows_host_process,
}
RESTRICTED: dict[str, Check] = {
    "allowPrivilegeEscalation": allow_privilege_escalation,
    "capabilities_restricted": capabilities_restricted,
    "procMount_restricted": proc_mount_restricted,
    "restrictedVolumes": restricted_volumes,
    "runAsNonRoot": run_as_non_root,
    "runAsUser": run_as_user,
    "seccompProfile_restricted": seccomp_profile_restricted,
}
# OverrideCheckIDs of the restricted checks: the baseline check each replaces at the restricted level.
OVERRIDES = {"capabilities_baseline", "seccompProfile_baseline", "hostPathVolumes", "procMount"}


def checks(level: str) -> list[Check]:
    """The checks of ``level`` in upstream order: baseline IDs sorted, then restricted IDs sorted."""
    if level == "privileged":
        return []
    baseline = [(i, c) for i, c in sorted(BASELINE.items()) if level == "baseline" or i not in OVERRIDES]
    restricted = sorted(RESTRICTED.items()) if level == "restricted" else []
    return [check for _id, check in baseline + restricted]


def violations(pod: Pod, level: str) -> list[Violation]:
    """What ``level`` refuses in ``pod`` (raw JSON), each as (reason, detail), in the API server's order."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return [found for check in checks(level) if (found := check(meta, spec)) is not None]


def forbidden_detail(found: list[Violation]) -> str:
    """AggregateCheckResult.ForbiddenDetail: ``reason (detail), reason (detail)``."""
    return ", ".join(f"{reason} ({detail})" if detail else reason for reason, detail in found)


def enforced(labels: Mapping[str, str]) -> tuple[str, str]:
    """The (level, version) a namespace's labels enforce (PolicyToEvaluate with the default configuration)."""
    level = labels.get(ENFORCE_LABEL, "privileged")
    if level not in LEVELS:
        level = "restricted"  # ParseLevel fails closed
    return level, labels.get(ENFORCE_VERSION_LABEL, "latest")


def refusal(pod: Pod, labels: Mapping[str, str]) -> str | None:
    """The API server's message refusing ``pod`` in a namespace with ``labels``; None when it is admitted."""
    level, version = enforced(labels)
    found = violations(pod, level)
    if not found:
        return None
    name = (pod.get("metadata") or {}).get("name", "")
    return f'pods "{name}" is forbidden: violates PodSecurity "{level}:{version}": {forbidden_detail(found)}'


async def admit(emulator: GatewayEmulator, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse | None:
    """The emulator interceptor: a pod create in a namespace whose enforce level refuses it is a 403."""
    match = _POD_CREATE.match(raw.path)
    if raw.method != "POST" or not match:
        return None
    namespace = emulator.namespaces.get(match.group(1))
    if namespace is None:
        return None  # the store answers (the namespace lifecycle plugin refuses; not modelled here)
    pod = await raw.json()
    message = refusal(pod, (namespace.get("metadata") or {}).get("labels") or {})
    if message is None:
        return None
    return status_response(403, "Forbidden", message, name=(pod.get("metadata") or {}).get("name", ""), kind="pods")


def install(cluster: Cluster) -> None:
    """Run Pod Security admission on ``cluster``'s pod creates."""
    assert cluster.handler is not None
    cluster.handler.interceptors.append(admit)
