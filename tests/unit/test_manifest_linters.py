"""kube-score and checkov, tools the project did not write, on every chart rendering and on the
operator's golden manifests (tests/data/kubernetes/output): every finding is either fixed or in
an allowlist with its reason (hack/kube-score/allowlist.yaml, hack/checkov/allowlist.yaml), and
an allowlist entry that no longer matches anything fails too (it would hide a regression).

kube-score is built by hack/kube-score/build, checkov installed by hack/checkov/build
(hack/test runs both); SENDGROUP_KUBE_SCORE / SENDGROUP_CHECKOV name other binaries.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import golden
from tests.support.helm import helm, values_args
from tests.support.tools import cached_tool

pytestmark = pytest.mark.helm

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "sendgroup-operator"

#: The chart renderings checked: the defaults and each optional part switched on.
RENDERINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "all-namespaces": {"watchNamespaces": "*"},
    "two-namespaces": {"watchNamespaces": ["mail", "campaigns"]},
    "network-policy": {
        "networkPolicy.enabled": True,
        "networkPolicy.redis.cidrs": ["10.1.2.0/24"],
        "networkPolicy.smtp.cidrs": ["192.0.2.10/32"],
    },
    "monitoring": {"serviceMonitor.enabled": True, "podMonitor.enabled": True},
    "ha": {"replicas": 2},
}


@dataclass(frozen=True)
class Finding:
    tool: str
    source: str  # rendering or golden case
    check: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.tool} {self.check} on {self.kind}/{self.name} ({self.source})"


@dataclass(frozen=True)
class Allowed:
    check: str
    objects: tuple[str, ...]  # kind/name globs
    reason: str

    def covers(self, f: Finding) -> bool:
        return f.check == self.check and any(
            fnmatch.fnmatchcase(f"{f.kind}/{f.name}", o) for o in self.objects
        )


def allowlist(tool: str) -> list[Allowed]:
    entries = yaml.safe_load((REPO / "hack" / tool / "allowlist.yaml").read_text())
    out = []
    for e in entries:
        assert set(e) == {"check", "objects", "reason"}, e
        assert len(e["reason"]) > 20, f"{e['check']}: say why"
        out.append(Allowed(e["check"], tuple(e["objects"]), e["reason"]))
    return out


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{source: file}``: each chart rendering and each golden output."""
    out_dir = tmp_path_factory.mktemp("manifests")
    files: dict[str, Path] = {}
    for name, values in RENDERINGS.items():
        text = helm(
            "template", "sg", str(CHART), "--namespace", "mail", *values_args(values)
        ).stdout
        path = out_dir / f"chart-{name}.yaml"
        path.write_text(text)
        files[f"chart:{name}"] = path
    for case in golden.cases():
        files[f"golden:{case}"] = golden.OUTPUT / f"{case}.yaml"
    return files


def kube_score(files: dict[str, Path]) -> list[Finding]:
    binary = cached_tool(
        "kube-score",
        "SENDGROUP_KUBE_SCORE",
        REPO / "hack" / "kube-score" / "build",
        "kube-score is not built: run hack/kube-score/build (hack/test does it)",
    )
    findings = []
    for source, path in files.items():
        proc = subprocess.run(
            [str(binary), "score", "--output-format", "json", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.stdout.strip(), f"kube-score gave no output on {source}: {proc.stderr}"
        for obj in json.loads(proc.stdout):
            meta = obj["object_meta"]
            kind = obj["type_meta"]["kind"]
            for check in obj["checks"]:
                if check["skipped"] or check["grade"] >= 10:
                    continue
                findings.append(
                    Finding("kube-score", source, check["check"]["id"], kind, meta["name"])
                )
    return findings


#: Offline (no download from the vendor's API), Kubernetes checks only, JSON out.
CHECKOV_ARGS = (
    "--quiet",
    "--compact",
    "--skip-download",
    "--framework",
    "kubernetes",
    "-o",
    "json",
)


def checkov(files: dict[str, Path], tmp: Path) -> list[Finding]:
    """checkov once over a directory holding every file (its start-up costs ~30 s on 2 busy
    cores), offline (``--skip-download``: no call to its vendor's API)."""
    binary = cached_tool(
        "checkov",
        "SENDGROUP_CHECKOV",
        REPO / "hack" / "checkov" / "build",
        "checkov is not installed: run hack/checkov/build (hack/test does it)",
    )
    folder = tmp / "checkov"
    folder.mkdir()
    sources = {}
    for source, path in files.items():
        name = source.replace(":", "-") + ".yaml"
        (folder / name).write_text(path.read_text())
        sources[f"/{name}"] = source
    proc = subprocess.run(
        [str(binary), *CHECKOV_ARGS, "-d", str(folder)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )
    assert proc.returncode in (0, 1), f"checkov failed ({proc.returncode}): {proc.stderr[-2000:]}"
    report = json.loads(proc.stdout)
    findings = []
    for r in report if isinstance(report, list) else [report]:
        for failed in r.get("results", {}).get("failed_checks", []):
            # resource: Kind.namespace.name (a Pod of CKV2 checks: then its labels, dot-joined)
            kind, _, name = failed["resource"].split(".", 2)
            source = sources[failed["file_path"]]
            findings.append(Finding("checkov", source, failed["check_id"], kind, name))
    return findings


def judge(tool: str, findings: list[Finding]) -> None:
    allowed = allowlist(tool)
    unexplained = sorted({str(f) for f in findings if not any(a.covers(f) for a in allowed)})
    unused = [a.check for a in allowed if not any(a.covers(f) for f in findings)]
    assert not unexplained, (
        f"{len(unexplained)} {tool} finding(s) neither fixed nor in hack/{tool}/allowlist.yaml:\n"
        + "\n".join(unexplained)
    )
    assert not unused, f"hack/{tool}/allowlist.yaml entries that match nothing any more: {unused}"


def test_kube_score_findings_are_fixed_or_explained(manifests: dict[str, Path]) -> None:
    judge("kube-score", kube_score(manifests))


def test_checkov_findings_are_fixed_or_explained(
    manifests: dict[str, Path], tmp_path: Path
) -> None:
    judge("checkov", checkov(manifests, tmp_path))
