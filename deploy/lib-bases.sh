# Sourced by deploy/test-image.sh: local debian:bookworm and debian:bookworm-slim images made
# with debootstrap (no image registry is reachable here). Both are tagged under docker.io/library/
# so the Dockerfile's FROM lines resolve without a pull. The rootfs tarballs are kept in
# $SHOAL_IMAGE_CACHE so a machine whose podman storage was wiped re-imports instead of
# re-bootstrapping.
SHOAL_IMAGE_CACHE=${SHOAL_IMAGE_CACHE:-/var/cache/shoal-image}
# The host's own Debian mirrors (from its apt sources), so the bases use the same ones.
_apt_uri() {  # _apt_uri PATH-SUFFIX: the first source URI ending in it
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2>/dev/null | grep -v '^\s*#' | grep -oE 'https?://[^ ]+' | sed 's:/*$::' |
    awk -v s="$1" 'substr($0, length($0) - length(s) + 1) == s && !n++' || true
}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-$(_apt_uri /debian)}
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-$(_apt_uri /debian-security)}

make_base() {  # make_base TAG slim|full
  local tag=$1 flavour=$2 tarball="$SHOAL_IMAGE_CACHE/debian-bookworm-$2.tar"
  if podman image exists "docker.io/library/debian:$tag"; then return 0; fi
  mkdir -p "$SHOAL_IMAGE_CACHE"
  if [ ! -s "$tarball" ]; then
    local root
    root=$(mktemp -d /var/tmp/shoal-debootstrap.XXXXXX)
    echo "test-image: debootstrap bookworm ($flavour) into $root"
    debootstrap --variant=minbase bookworm "$root" "$DEBIAN_MIRROR" >"$root.log" 2>&1 ||
      { tail -20 "$root.log"; return 1; }
    # The same suites as the host, so the build stage's compiler and headers match the host's
    # (ccache hits across the two).
    cat >"$root/etc/apt/sources.list" <<SOURCES
deb $DEBIAN_MIRROR bookworm main
deb $DEBIAN_MIRROR bookworm-updates main
SOURCES
    [ -z "$DEBIAN_SECURITY_MIRROR" ] ||
      echo "deb $DEBIAN_SECURITY_MIRROR bookworm-security main" >>"$root/etc/apt/sources.list"
    if [ "$flavour" = slim ]; then
      # What the official -slim images do: no manuals, docs or translations.
      cat >"$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
SLIM
      find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete || true
      rm -rf "$root/usr/share/man"/* "$root/usr/share/info"/* "$root/usr/share/locale"/*
    fi
    rm -rf "$root/var/cache/apt/archives"/*.deb "$root/var/lib/apt/lists"/*
    tar -C "$root" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$root" "$root.log"
  fi
  podman import --change 'CMD ["bash"]' "$tarball" "docker.io/library/debian:$tag" >/dev/null
}

make_bases() {
  make_base bookworm full
  make_base bookworm-slim slim
}
