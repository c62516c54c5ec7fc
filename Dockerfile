# wave: a static binary on an empty base image, holding only the binary and CA certificates.
# Runs as uid 65532 and writes nothing to disk, so it works with a read-only root filesystem.
#   docker build --build-arg WAVE_COMMIT=$(git rev-parse HEAD) -t wave .
#   docker buildx build --platform linux/amd64,linux/arm64 ...      (docs/release.md)
# The binary is glibc linked statically (crt-static), exactly what `make static` builds and tests. The
# build stage runs on the build machine's platform and cross-compiles for TARGETARCH, so an arm64 image
# needs no emulation.
#
# NOTE: the base images are named by tag here; the release workflow (.github/workflows/release.yaml)
# resolves and records their digests in the image's provenance. Pin them by digest with
# `docker buildx imagetools inspect rust:1.95-bookworm` when cutting a release (docs/release.md).

FROM --platform=$BUILDPLATFORM rust:1.95-bookworm AS build
ARG TARGETARCH
# The image has no .git: `--build-arg WAVE_COMMIT=$(git rev-parse HEAD)` names the commit in
# `wave --version` and `wave_build_info` (build.rs).
ARG WAVE_COMMIT=unknown
ARG SOURCE_DATE_EPOCH
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The cross toolchain for arm64 (a C compiler for ring, and glibc's static libraries).
RUN if [ "$TARGETARCH" = arm64 ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu=4:12.2.0-3 libc6-dev-arm64-cross=2.36-8cross1 \
      && rm -rf /var/lib/apt/lists/* \
      && rustup target add aarch64-unknown-linux-gnu; \
    fi
WORKDIR /src
COPY . .
# The registry and target directories are BuildKit cache mounts: a source change rebuilds wave's own
# crates, not every dependency.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,id=wave-target-${TARGETARCH} \
    case "$TARGETARCH" in \
      amd64) target=x86_64-unknown-linux-gnu ;; \
      arm64) target=aarch64-unknown-linux-gnu; \
             export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
                    CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc ;; \
      *) echo "unsupported TARGETARCH=$TARGETARCH" >&2; exit 1 ;; \
    esac \
 && RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --bin wave --target "$target" \
 && cp "target/$target/release/wave" /wave

FROM scratch
ARG WAVE_COMMIT=unknown
LABEL org.opencontainers.image.title="wave" \
      org.opencontainers.image.description="Rolls Kubernetes workloads when the ConfigMaps and Secrets they use change; a drop-in replacement for Wave" \
      org.opencontainers.image.source="https://github.com/wave-rs/wave" \
      org.opencontainers.image.url="https://github.com/wave-rs/wave" \
      org.opencontainers.image.documentation="https://github.com/wave-rs/wave/blob/main/README.md" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.revision="${WAVE_COMMIT}"
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /wave /wave
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/wave"]
CMD ["run"]
