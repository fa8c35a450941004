"""deploy/kubernetes/jobset.yaml against the real Kubernetes schemas (kubernetes-validate, which
bundles the OpenAPI schemas of every Kubernetes release), strictly: an unknown or misspelled
field is an error, not ignored.

The JobSet kind itself is a custom resource whose schema ships with the JobSet controller (its
CRD), which neither PyPI nor Debian carries: its top-level fields are not checked against a
schema here. Every replicated job's template is a plain batch/v1 Job template, and those (the
pods, containers, GPUs, volumes, pod failure policy: nearly all of the file) are.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

MANIFEST = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "jobset.yaml"
# The header says Kubernetes >= 1.29; the newest release the checker knows is checked too.
VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d is not None]


def as_jobs(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    """Each replicated job's template as the batch/v1 Job the JobSet controller creates."""
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": rj["name"]},
            **rj["template"],
        }
        for rj in jobset["spec"]["replicatedJobs"]
    ]


def test_the_manifest_holds_the_claim_and_the_jobset() -> None:
    kinds = [(d["apiVersion"], d["kind"]) for d in documents()]
    assert kinds == [("v1", "PersistentVolumeClaim"), ("jobset.x-k8s.io/v1alpha2", "JobSet")]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_built_in_object_is_valid_against_the_kubernetes_schema(version: str) -> None:
    claim, jobset = documents()
    for document in (claim, *as_jobs(jobset)):
        kubernetes_validate.validate(document, version, strict=True)


def test_the_checker_catches_a_misspelled_field() -> None:
    job = copy.deepcopy(as_jobs(documents()[1])[0])
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError, match="imagePullPolcy"):
        kubernetes_validate.validate(job, VERSIONS[0], strict=True)
