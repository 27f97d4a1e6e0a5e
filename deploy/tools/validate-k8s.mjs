// Validates Kubernetes manifests strictly: node validate-k8s.mjs FILE.yaml...
// 1. kubernetes-models: the validators generated from the Kubernetes OpenAPI schemas (and the
//    prometheus-operator CRD's) check types, required fields and enums.
// 2. ajv: a JSON schema generated from @kubernetes/client-node's models (also generated from
//    the Kubernetes OpenAPI spec) with additionalProperties: false everywhere, so an unknown or
//    misspelt field (`livenesProbe:`) fails, as `kubectl apply --validate=strict` would.
// Exits 1 on any finding.
import fs from "node:fs";
import yaml from "js-yaml";
import Ajv from "ajv";
import * as k8s from "@kubernetes/client-node";

const MODELS = {
  "v1/ConfigMap": ["kubernetes-models/v1/ConfigMap", "V1ConfigMap"],
  "v1/Service": ["kubernetes-models/v1/Service", "V1Service"],
  "v1/Pod": ["kubernetes-models/v1/Pod", "V1Pod"],
  "apps/v1/StatefulSet": ["kubernetes-models/apps/v1/StatefulSet", "V1StatefulSet"],
  "monitoring.coreos.com/v1/ServiceMonitor": [
    "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor", null],
};

// JSON schema for a client-node type name; model classes become strict object definitions.
function schemaFor(type, defs) {
  let m;
  if (type === "string" || type === "Date") return { type: "string" };
  if (type === "number") return { type: "number" };
  if (type === "boolean") return { type: "boolean" };
  if (type === "any" || type === "object") return {};
  if (type === "IntOrString") return { type: ["integer", "string"] };
  if ((m = /^Array<(.+)>$/.exec(type))) return { type: "array", items: schemaFor(m[1], defs) };
  if ((m = /^\{ \[key: string\]: (.+); \}$/.exec(type)))
    return { type: "object", additionalProperties: schemaFor(m[1], defs) };
  const cls = k8s[type];
  if (!cls || !cls.attributeTypeMap) throw new Error(`no model for type ${type}`);
  if (!defs[type]) {
    defs[type] = {};  // placeholder against recursion
    const properties = {};
    for (const a of cls.attributeTypeMap) properties[a.baseName] = schemaFor(a.type, defs);
    defs[type] = { type: "object", properties, additionalProperties: false };
  }
  return { $ref: `#/definitions/${type}` };
}

const ajv = new Ajv({ allErrors: true, strict: false });
let failures = 0;
for (const file of process.argv.slice(2)) {
  const docs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d);
  for (const doc of docs) {
    const where = `${file}: ${doc.kind}/${doc.metadata?.name}`;
    const entry = MODELS[`${doc.apiVersion}/${doc.kind}`];
    if (!entry) {
      console.error(`${where}: no schema for ${doc.apiVersion} ${doc.kind}`);
      failures++;
      continue;
    }
    const [modelPath, strictType] = entry;
    const mod = await import(modelPath);
    try {
      new mod[doc.kind](doc).validate();
    } catch (e) {
      console.error(`${where}: ${e.message}`);
      failures++;
    }
    if (strictType) {
      const defs = {};
      const root = schemaFor(strictType, defs);
      const validate = ajv.compile({ ...root, definitions: defs });
      if (!validate(doc)) {
        for (const e of validate.errors) {
          const extra = e.params?.additionalProperty ? ` '${e.params.additionalProperty}'` : "";
          console.error(`${where}: ${e.instancePath || "/"} ${e.message}${extra}`);
        }
        failures++;
      }
    }
    if (!failures) console.log(`ok ${where}`);
  }
}
process.exit(failures ? 1 : 0);
