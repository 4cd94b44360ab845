// Validates the manifests `motley export k8s` writes (a multi-document stream of JSON documents)
// against the Kubernetes API's OpenAPI schemas as the kubernetes-models package compiles them:
// the ConfigMap whole, every pod template, and a JobSet's job templates. PyTorchJob and JobSet
// are custom resources with no schema in that package: their own fields are checked here
// against the fields their CRDs define (Kubeflow training operator v1, JobSet v1alpha2).
// Usage: node validate.mjs FILE; exit 1 naming the first problem.
import { readFileSync } from "node:fs";
import { ConfigMap, PodTemplateSpec } from "kubernetes-models/v1";
import { JobTemplateSpec } from "kubernetes-models/batch/v1";

const text = readFileSync(process.argv[2], "utf8");
const docs = text.split(/^---\n/m).filter((d) => d.trim() !== "").map((d) => JSON.parse(d));

function fail(where, message) {
  console.error(`${process.argv[2]}: ${where}: ${message}`);
  process.exit(1);
}
function only(where, object, allowed) {
  for (const key of Object.keys(object)) {
    if (!allowed.includes(key)) fail(where, `unknown field '${key}'; allowed: ${allowed.join(", ")}`);
  }
}
function validate(where, model) {
  try {
    model.validate();
  } catch (e) {
    fail(where, e.message);
  }
}
const dns = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
function metadata(where, m) {
  if (!m || typeof m.name !== "string" || !dns.test(m.name) || m.name.length > 63) {
    fail(where, "metadata.name must be a DNS-1123 label");
  }
}

let checked = 0;
for (const [i, doc] of docs.entries()) {
  const where = `document ${i} (${doc.kind})`;
  if (doc.kind === "ConfigMap" && doc.apiVersion === "v1") {
    validate(where, new ConfigMap(doc));
  } else if (doc.kind === "PyTorchJob" && doc.apiVersion === "kubeflow.org/v1") {
    only(where, doc, ["apiVersion", "kind", "metadata", "spec"]);
    metadata(where, doc.metadata);
    only(`${where} spec`, doc.spec, ["pytorchReplicaSpecs", "runPolicy", "elasticPolicy", "nprocPerNode"]);
    const specs = doc.spec.pytorchReplicaSpecs;
    if (!specs || !specs.Master) fail(where, "spec.pytorchReplicaSpecs.Master is required");
    for (const [role, spec] of Object.entries(specs)) {
      const at = `${where} pytorchReplicaSpecs.${role}`;
      if (!["Master", "Worker"].includes(role)) fail(at, "replica types are Master and Worker");
      only(at, spec, ["replicas", "restartPolicy", "template"]);
      if (!Number.isInteger(spec.replicas) || spec.replicas < 0) fail(at, "replicas must be an integer >= 0");
      if (role === "Master" && spec.replicas !== 1) fail(at, "the Master has one replica");
      if (!["Always", "OnFailure", "Never", "ExitCode"].includes(spec.restartPolicy)) {
        fail(at, "restartPolicy must be Always, OnFailure, Never or ExitCode");
      }
      validate(`${at}.template`, new PodTemplateSpec(spec.template));
      if (!spec.template.spec.containers.some((c) => c.name === "pytorch")) {
        fail(at, "the training operator needs a container named 'pytorch'");
      }
    }
  } else if (doc.kind === "JobSet" && doc.apiVersion === "jobset.x-k8s.io/v1alpha2") {
    only(where, doc, ["apiVersion", "kind", "metadata", "spec"]);
    metadata(where, doc.metadata);
    only(`${where} spec`, doc.spec, ["replicatedJobs", "network", "successPolicy", "failurePolicy",
      "startupPolicy", "suspend", "coordinator", "managedBy", "ttlSecondsAfterFinished"]);
    if (doc.spec.network) only(`${where} spec.network`, doc.spec.network, ["enableDNSHostnames", "subdomain", "publishNotReadyAddresses"]);
    if (!Array.isArray(doc.spec.replicatedJobs) || doc.spec.replicatedJobs.length === 0) {
      fail(where, "spec.replicatedJobs must be a non-empty list");
    }
    for (const [j, job] of doc.spec.replicatedJobs.entries()) {
      const at = `${where} replicatedJobs[${j}]`;
      only(at, job, ["name", "replicas", "template", "groupName"]);
      if (typeof job.name !== "string" || !dns.test(job.name)) fail(at, "name must be a DNS-1123 label");
      if (!Number.isInteger(job.replicas) || job.replicas < 1) fail(at, "replicas must be an integer >= 1");
      validate(`${at}.template`, new JobTemplateSpec(job.template));
      validate(`${at}.template.spec.template`, new PodTemplateSpec(job.template.spec.template));
    }
  } else {
    fail(where, `unexpected ${doc.apiVersion} ${doc.kind}`);
  }
  ++checked;
}
console.log(`${process.argv[2]}: ${checked} objects valid`);
