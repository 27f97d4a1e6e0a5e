# Sourced by deploy/build-image.sh and deploy/test-image.sh: podman settings for machines without
# systemd or a Docker daemon (CI here). A containers.conf with runc, the cgroupfs manager and
# ulimits within the current hard limits, pointed at by CONTAINERS_CONF unless one is set.
if [ -z "${CONTAINERS_CONF:-}" ]; then
  _shoal_conf_dir=${XDG_RUNTIME_DIR:-/tmp}/shoal-podman-$(id -u)
  mkdir -p "$_shoal_conf_dir"
  _nofile=$(ulimit -Hn)
  [ "$_nofile" = unlimited ] && _nofile=1048576
  _nproc=$(ulimit -Hu)
  { [ "$_nproc" = unlimited ] || [ "$_nproc" -gt 32768 ]; } && _nproc=32768
  cat >"$_shoal_conf_dir/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$_nofile:$_nofile", "nproc=$_nproc:$_nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  export CONTAINERS_CONF="$_shoal_conf_dir/containers.conf"
fi
