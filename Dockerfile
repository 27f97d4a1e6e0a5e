# Shoal's container image: `make image` (podman/buildah, --format docker so HEALTHCHECK is kept),
# or a plain `podman build .` / `docker build .`. README.md "Docker" says how to run it.
#
# Build stage: Debian 12 with the packages of tools/packages.txt (the one list `make deps` uses;
# the test-only tools in it are skipped here) builds shoald and shoalctl in Release.
# Mount a ccache directory at /ccache (`make image` mounts the host's) and the build compiles
# only what the host has not compiled already; without the mount it builds from scratch.
FROM debian:bookworm AS build
ENV DEBIAN_FRONTEND=noninteractive
COPY tools/packages.txt /tmp/packages.txt
RUN grep -v '^\s*#' /tmp/packages.txt | grep -v '^\s*$' \
      | grep -vxE 'clang|clang-format|libclang-rt-14-dev|dataset-fashion-mnist|python3-.*|curl|prometheus|gcovr|fio|e2fsprogs|mount|gnuplot-nox' \
      > /tmp/build-packages.txt \
    && apt-get update \
    && apt-get install -y --no-install-recommends $(cat /tmp/build-packages.txt) \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . /src
# Same convention as the Makefile: ccache hashes paths relative to the source directory, so
# the host's tree (wherever it is) and /src share cache entries.
# The stats log counts this build's own hits (the cache's totals are the host's too).
ENV CCACHE_DIR=/ccache CCACHE_BASEDIR=/src CCACHE_NOHASHDIR=1 CCACHE_STATSLOG=/tmp/ccache.log
# ccache also hashes the locale (it sets the compiler's messages): deploy/build-image.sh passes
# the host's, without which not one entry is shared.
ARG LANG
ARG LC_ALL
ARG LC_CTYPE
ARG LC_MESSAGES
RUN cmake --preset release >/dev/null \
    && cmake --build --preset release -j"$(nproc)" --target shoald shoalctl \
    && mkdir -p /out/bin \
    && cp build/bin/shoald build/bin/shoalctl /out/bin/ \
    && strip /out/bin/shoald /out/bin/shoalctl \
    && echo "ccache in this build: $(grep -c '^cache_miss' /tmp/ccache.log || true) compiled," \
            "$(grep -c '_cache_hit$' /tmp/ccache.log || true) from the cache"
# The runtime stage installs exactly the packages that own the shared libraries the two
# binaries load (found here, where the -dev packages are, so the list never goes stale).
RUN for lib in $(ldd /out/bin/shoald /out/bin/shoalctl | awk '/=> \//{print $3}' | sort -u); do \
      dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null \
        || dpkg -S "/usr$lib" 2>/dev/null || echo "no package owns $lib" >&2; \
    done | cut -d: -f1 | sort -u | grep -vxE 'libc6|libgcc-s1|libstdc\+\+6' > /out/runtime-packages.txt \
    && cat /out/runtime-packages.txt

# Runtime stage: the runtime libraries, the two binaries and a non-root user; nothing else.
FROM debian:bookworm-slim
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
    && apt-get install -y --no-install-recommends $(cat /tmp/runtime-packages.txt) \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/runtime-packages.txt \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/shoal --shell /usr/sbin/nologin shoal \
    && mkdir -p /var/lib/shoal \
    && chown shoal:shoal /var/lib/shoal
COPY --from=build /out/bin/shoald /out/bin/shoalctl /usr/local/bin/

# Config by SHOAL_* environment variables (`shoald --print-config` lists them all). Inside the
# image shoald listens on every interface; it warns in its log when no SHOAL_API_KEY is set.
ENV SHOAL_DATA_DIR=/var/lib/shoal \
    SHOAL_GRPC_ADDR=0.0.0.0:7700 \
    SHOAL_HTTP_ADDR=0.0.0.0:7701
VOLUME ["/var/lib/shoal"]
EXPOSE 7700 7701
USER shoal
WORKDIR /var/lib/shoal
# gRPC health protocol (grpc.health.v1), on whatever port SHOAL_GRPC_ADDR names. With TLS, set
# SHOAL_TLS_CA for shoalctl (and SHOAL_TLS_SERVER_NAME when the certificate does not name
# 127.0.0.1; SHOAL_TLS_CLIENT_CERT / _KEY under mutual TLS). Health needs no API key.
HEALTHCHECK --interval=10s --timeout=5s --retries=6 \
  CMD ["/bin/sh", "-c", "exec shoalctl --addr \"127.0.0.1:${SHOAL_GRPC_ADDR##*:}\" health"]
# shoald is PID 1: SIGTERM starts the graceful drain (server.shutdown_grace_seconds, default
# 10 s); give `docker stop` / `podman stop` a longer timeout than that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/shoald"]
