# The Bridle gateway image.
#
# Two ways to build it, one runtime:
#   docker build -t bridle .                                   # full build: compiles `bridle`
#   docker build --target runtime-prebuilt \
#       --build-arg BRIDLE_BINARY=docker/bin/bridle -t bridle .  # copies a binary built on the host
#
# Base images are build arguments, defaulting to the public images users pull; a machine with
# no registry passes locally made ones (scripts/compose-test.sh does). The prebuilt target's
# stages come first so that a builder without BuildKit, which builds every stage up to the
# target, never needs the Rust image for it.

ARG RUNTIME_IMAGE=debian:bookworm-slim
ARG RUST_IMAGE=rust:1.88-bookworm

# ---- the runtime, shared by both targets ----
FROM ${RUNTIME_IMAGE} AS runtime-base
# A fixed non-root uid/gid, so secret files on the host can be made readable to it alone.
RUN groupadd --system --gid 10001 bridle \
 && useradd --system --uid 10001 --gid bridle --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin bridle \
 && mkdir -p /data \
 && chown bridle:bridle /data \
 && chmod 0700 /data
ENV BRIDLE_DATA_DIR=/data \
    BRIDLE_LISTEN=0.0.0.0:7878 \
    BRIDLE_ALLOWED_HOSTS=localhost:7878,127.0.0.1:7878 \
    BRIDLE_ALLOWED_ORIGINS=http://localhost:7878,http://127.0.0.1:7878 \
    BRIDLE_LOG=info \
    BRIDLE_LOG_FORMAT=json
VOLUME ["/data"]
EXPOSE 7878
USER bridle:bridle
WORKDIR /data
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["/usr/local/bin/bridle", "health"]
# First start lays out token files (never tokens on stdout, which is the container's log),
# then execs bridle, so bridle is PID 1 and receives SIGTERM itself.
COPY --chown=root:root docker/entrypoint.sh /usr/local/bin/bridle-entrypoint
# SIGTERM drains: in-flight calls get --shutdown-grace seconds (keep it below the stop timeout).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/bridle-entrypoint"]
CMD ["serve", "--shutdown-grace", "20"]

# ---- runtime-prebuilt: a binary built on the host (CI; no Rust image needed) ----
FROM runtime-base AS runtime-prebuilt
ARG BRIDLE_BINARY=docker/bin/bridle
COPY --chown=root:root ${BRIDLE_BINARY} /usr/local/bin/bridle

# ---- build: the full multi-stage build (users) ----
FROM ${RUST_IMAGE} AS build
ARG BRIDLE_FEATURES=local-embed,qdrant,rustls
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kberg-examples --bin bridle --features "${BRIDLE_FEATURES}" \
 && install -m 0755 target/release/bridle /bridle

# ---- runtime: the default target ----
FROM runtime-base AS runtime
COPY --from=build /bridle /usr/local/bin/bridle
