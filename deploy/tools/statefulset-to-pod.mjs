// podman 4.3's `kube play` has no StatefulSet: turn the StatefulSet's pod template into a Pod
// (plus the ConfigMap it mounts) for deploy/test-image.sh.
//   node statefulset-to-pod.mjs statefulset.yaml configmap.yaml POD_NAME GRPC_ADDR HTTP_ADDR
// What changes, and only that: the volumeClaimTemplate becomes a named podman volume
// (persistentVolumeClaim POD_NAME-data), named probe ports become numbers (podman wants them),
// the Secrets are left out (none exists here) and with them what needs them — the settings
// naming their files, SHOAL_METRICS_AUTH (it needs a key) and the probes' HTTPS — and the
// listen addresses move to free loopback ports since the pod shares the host's network (so
// its port list goes too).
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
const secretVolumes = new Set(spec.volumes.filter((v) => v.secret).map((v) => v.name));
spec.volumes = spec.volumes.filter((v) => !secretVolumes.has(v.name));
for (const c of spec.containers) {
  const secretPaths = (c.volumeMounts || []).filter((m) => secretVolumes.has(m.name))
      .map((m) => m.mountPath + "/");
  c.volumeMounts = (c.volumeMounts || []).filter((m) => !secretVolumes.has(m.name));
  c.env = (c.env || []).filter((e) => e.name !== "SHOAL_METRICS_AUTH" &&
      !secretPaths.some((p) => (e.value || "").startsWith(p)));
  const port = (p) => (typeof p === "string" ? Number(
      (p === "grpc" ? grpcAddr : httpAddr).split(":").pop()) : p);
  for (const probe of [c.readinessProbe, c.livenessProbe]) {
    if (probe?.httpGet) {
      probe.httpGet.port = port(probe.httpGet.port);
      delete probe.httpGet.scheme;  // no certificate without the Secret: plain HTTP
    }
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
