// podman 4.3's `kube play` has no StatefulSet: turn the StatefulSet's pod template into a Pod
// (plus the ConfigMap it mounts) for deploy/test-image.sh.
//   node statefulset-to-pod.mjs statefulset.yaml configmap.yaml POD_NAME GRPC_ADDR HTTP_ADDR
// What changes, and only that: the volumeClaimTemplate becomes a named podman volume
// (persistentVolumeClaim POD_NAME-data), named probe ports become numbers (podman wants them),
// the optional API-key Secret is left out (none exists here), and the listen addresses move to
// free loopback ports since the pod shares the host's network (so its port list goes too).
import fs from "node:fs";
import yaml from "js-yaml";

const [ssFile, cmFile, name, grpcAddr, httpAddr] = process.argv.slice(2);
const ss = yaml.load(fs.readFileSync(ssFile, "utf8"));
const cm = yaml.load(fs.readFileSync(cmFile, "utf8"));
const spec = structuredClone(ss.spec.template.spec);
for (const claim of ss.spec.volumeClaimTemplates) {
  spec.volumes.push({ name: claim.metadata.name,
                      persistentVolumeClaim: { claimName: `${name}-${claim.metadata.name}` } });
}
for (const c of spec.containers) {
  const port = (p) => (typeof p === "string" ? Number(
      (p === "grpc" ? grpcAddr : httpAddr).split(":").pop()) : p);
  for (const probe of [c.readinessProbe, c.livenessProbe]) {
    if (probe?.httpGet) probe.httpGet.port = port(probe.httpGet.port);
  }
  c.env = (c.env || []).filter((e) => !e.valueFrom?.secretKeyRef?.optional);
  c.env.push({ name: "SHOAL_GRPC_ADDR", value: grpcAddr }, { name: "SHOAL_HTTP_ADDR", value: httpAddr });
  delete c.ports;  // podman refuses port mappings on the host network; the env sets the ports
}
const pod = {
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name, labels: ss.spec.template.metadata.labels },
  spec,
};
process.stdout.write(yaml.dump(cm) + "---\n" + yaml.dump(pod));
